package evaluate

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"text/tabwriter"

	"google.golang.org/protobuf/proto"

	"github.com/owl-latency/owl/internal/synopsis/reorder"
)

// ReorderRule is a way to choose the prefixes an epoch's report lists
// when the tracker measured more than it may list: what the collector
// then sums for a query.
type ReorderRule int

// The rules compared.
const (
	// RuleWatch is reorder.Selector, what a probe does: the prefixes that
	// showed reordering in earlier epochs first, by the lower bound of
	// their rate, then the most packets.
	RuleWatch ReorderRule = iota
	// RulePackets lists the prefixes with the most packets measured in
	// the epoch (reorder.Merge): the rule before the watch list.
	RulePackets
	// RuleEpoch lists first the prefixes that reordered in the epoch
	// itself, most reordered packets first, then the most packets: it
	// lists a prefix in the epochs where it happened to reorder, which
	// biases its sum upwards.
	RuleEpoch
)

func (r ReorderRule) String() string {
	switch r {
	case RuleWatch:
		return "watch list"
	case RulePackets:
		return "packets"
	case RuleEpoch:
		return "epoch's reordering"
	}
	return fmt.Sprintf("rule %d", int(r))
}

// reportCut cuts each epoch's report of a tracker by one rule and sums
// the cut reports per prefix, as the collector sums a range.
type reportCut struct {
	rule ReorderRule
	max  int
	sel  *reorder.Selector // RuleWatch
	sum  map[netip.Prefix]*reorder.Stats
	// bytes and maxBytes are the cut reports' size on the wire (without
	// the clock status), summed and at most, over reports.
	bytes, maxBytes, reports int
	// watched is the longest watch list.
	watched int
}

func newReportCut(rule ReorderRule, maxPrefixes int) *reportCut {
	c := &reportCut{rule: rule, max: maxPrefixes, sum: map[netip.Prefix]*reorder.Stats{}}
	if rule == RuleWatch {
		c.sel = reorder.NewSelector(maxPrefixes)
	}
	return c
}

// take cuts a copy of the epoch's full report r and adds it to the sum.
func (c *reportCut) take(r *reorder.Report, epoch int64) {
	cut := *r
	cut.Prefixes = slices.Clone(r.Prefixes)
	switch c.rule {
	case RuleWatch:
		c.sel.Cut(&cut)
		c.watched = max(c.watched, c.sel.Watched())
	case RulePackets:
		cut = *reorder.Merge(c.max, &cut)
	case RuleEpoch:
		cutByEpochReordering(&cut, c.max)
	}
	for _, p := range cut.Prefixes {
		s := c.sum[p.Prefix]
		if s == nil {
			s = &reorder.Stats{}
			c.sum[p.Prefix] = s
		}
		s.Add(p.Stats)
	}
	n := proto.Size(cut.Proto(epoch))
	c.bytes += n
	c.maxBytes = max(c.maxBytes, n)
	c.reports++
}

// report is the sum as a report.
func (c *reportCut) report() *reorder.Report {
	out := &reorder.Report{Prefixes: make([]reorder.PrefixStats, 0, len(c.sum))}
	for p, s := range c.sum {
		out.Prefixes = append(out.Prefixes, reorder.PrefixStats{Prefix: p, Stats: *s})
	}
	return out
}

// cutByEpochReordering keeps the maxPrefixes prefixes of r with the most
// reordered packets in the epoch (ties: the most packets), the rest in
// Other (RuleEpoch).
func cutByEpochReordering(r *reorder.Report, maxPrefixes int) {
	slices.SortFunc(r.Prefixes, func(a, b reorder.PrefixStats) int {
		return cmp.Or(cmp.Compare(b.Reordered, a.Reordered), cmp.Compare(b.Packets, a.Packets), a.Prefix.Addr().Compare(b.Prefix.Addr()))
	})
	if len(r.Prefixes) <= maxPrefixes {
		return
	}
	for _, p := range r.Prefixes[maxPrefixes:] {
		r.Other.Add(p.Stats)
	}
	r.PrefixesFolded += len(r.Prefixes) - maxPrefixes
	r.Prefixes = r.Prefixes[:maxPrefixes]
}

// ReorderCutRow is how the collector's sums of reports cut by a rule to
// a size score, at one budget, averaged over the seeds.
type ReorderCutRow struct {
	Rule ReorderRule
	Max  int
	ReorderScore
	// BytesPerEpoch is a cut report's mean size on the wire (without the
	// clock status); MaxBytes the largest.
	BytesPerEpoch, MaxBytes float64
	// Watched is the longest watch list (RuleWatch).
	Watched float64
}

// add adds one seed's run of the cut.
func (row *ReorderCutRow) add(sc reorderScoring, exact map[netip.Prefix]reorder.Stats, c *reportCut) {
	row.ReorderScore.add(scoreReorder(sc, exact, c.report()))
	row.BytesPerEpoch += float64(c.bytes) / float64(max(c.reports, 1))
	row.MaxBytes += float64(c.maxBytes)
	row.Watched += float64(c.watched)
}

// average turns the sums over seeds into means and scores.
func (row *ReorderCutRow) average(seeds int) {
	n := float64(seeds)
	row.ReorderScore.average(seeds)
	row.BytesPerEpoch, row.MaxBytes, row.Watched = row.BytesPerEpoch/n, row.MaxBytes/n, row.Watched/n
}

// writeReorderCutRows prints the rows of report sizes and rules.
func writeReorderCutRows(w io.Writer, budget int, rows []ReorderCutRow) error {
	if len(rows) == 0 {
		return nil
	}
	if _, err := fmt.Fprintf(w, "reports cut on their way to the collector, at %d bytes; the collector sums them over the run:\n", budget); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rule\tmax\tflagged\tfound\tprecision\trecall\twithin 2 SE\tbytes/epoch\tlargest\twatched\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%v\t%d\t%.1f\t%.1f\t%.3f\t%.3f\t%.3f\t%.0f\t%.0f\t%.0f\t\n", r.Rule, r.Max, r.Flagged, r.Found,
			r.Precision, r.Recall, r.Covered, r.BytesPerEpoch, r.MaxBytes, r.Watched)
	}
	return tw.Flush()
}
