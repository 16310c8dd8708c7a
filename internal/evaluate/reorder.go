package evaluate

import (
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/synopsis/reorder"
)

// ReorderConfig is a synthetic trace of TCP flows from many source
// prefixes, a few of which reorder, and the evaluation of the reordering
// tracker on it: which prefixes' reordering rate exceeds Threshold, by
// the tracker at each memory budget against the exact tracker.
type ReorderConfig struct {
	Flows    int
	Prefixes int
	// IPv6Share is the share of prefixes that are IPv6 /48s (the rest are
	// IPv4 /24s).
	IPv6Share float64
	// PrefixSkew is the Zipf exponent of the prefixes' popularity: the
	// k-th prefix sources flows in proportion to k^-PrefixSkew.
	PrefixSkew float64
	// ReorderingShare of the prefixes reorder a share of their packets
	// drawn uniformly from [RateMin, RateMax]; the others BackgroundRate.
	// Each flow's rate is its prefix's times an exponential draw of mean
	// 1 (flows of one path differ), at most 0.5.
	ReorderingShare  float64
	RateMin, RateMax float64
	BackgroundRate   float64
	// MaxDisplacement: a reordered packet swaps places with one 1 to
	// MaxDisplacement packets later in its flow.
	MaxDisplacement int
	// RetransRate is the share of data packets sent again 3 to 8 packets
	// later.
	RetransRate float64
	// Flow sizes in data packets are Pareto(ParetoShape) from
	// MinFlowPackets, at most MaxFlowPackets; flows start uniformly in
	// Duration and send at a rate log-uniform in [MinPPS, MaxPPS].
	ParetoShape    float64
	MinFlowPackets int
	MaxFlowPackets int
	Duration       time.Duration
	MinPPS, MaxPPS float64
	// EpochLength cuts the trace into epochs, as a probe does: the
	// tracker reports at the end of each and the reports are summed, as
	// the collector sums a prefix's epochs for a query.
	EpochLength time.Duration
	// Threshold is the reordering rate above which a prefix is flagged.
	// MinPackets is the exact packets a prefix needs to count among the
	// prefixes to find (recall); any prefix the tracker flags counts for
	// precision.
	Threshold  float64
	MinPackets int
	// Tracker is the tracker's configuration; MemoryBytes takes each of
	// Budgets in turn. Variants are run at every budget too. The tracker
	// reports every prefix it holds (Tracker.Prefixes.Max); the reports
	// are then cut as a probe cuts them on their way to the collector.
	Tracker  reorder.Config
	Budgets  []int
	Variants []ReorderVariant
	// ReportMax is the prefixes a report lists on its way to the
	// collector (the probe's reorder.prefixes.max): every row is also
	// scored on the reports cut to it by the watch list, summed over the
	// run as the collector sums them.
	ReportMax int
	// CutBudget is the budget at which the configuration as given is
	// also scored on reports cut to each of ReportSizes by each of Rules
	// (none when Budgets leaves it out).
	CutBudget   int
	ReportSizes []int
	Rules       []ReorderRule
	Seeds       int
	Seed        uint64
}

// ReorderVariant is a change to the tracker's configuration, evaluated
// beside the configuration as given.
type ReorderVariant struct {
	Name string
	Edit func(*reorder.Config)
}

// DefaultReorderConfig is the setting: 10⁵ flows over 10³
// prefixes (10% IPv6, popularity Zipf 0.8), Pareto(1.2) sizes from 4 data
// packets, 5% of the prefixes reordering 1–5% of their packets, the rest
// 0.01%, 1% of the packets retransmitted; flows of 20–2,000 packets/s
// starting within 2 s (about 7,000 at once by the end of it; the largest
// go on for minutes); epochs of 1 s; threshold 0.5% on prefixes of at
// least 500 packets; budgets 16 KiB to 1 MiB; 4 seeds. The variants:
// windows only, no prefix quota, the shares the tracker had before they
// were measured (25% prefixes, 25% long flows). Reports are cut to the
// default 64 prefixes on their way to the collector; at the default
// budget also to 16, 32, 64, 128 and 256, by each rule.
func DefaultReorderConfig() ReorderConfig {
	return ReorderConfig{Flows: 100_000, Prefixes: 1000, IPv6Share: 0.1, PrefixSkew: 0.8,
		ReorderingShare: 0.05, RateMin: 0.01, RateMax: 0.05, BackgroundRate: 0.0001, MaxDisplacement: 3, RetransRate: 0.01,
		ParetoShape: 1.2, MinFlowPackets: 4, MaxFlowPackets: 20_000, Duration: 2 * time.Second, MinPPS: 20, MaxPPS: 2000,
		EpochLength: time.Second, Threshold: 0.005, MinPackets: 500, Tracker: reorderTrackerConfig(),
		Budgets: []int{16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20},
		Variants: []ReorderVariant{
			{Name: "windows only", Edit: func(c *reorder.Config) { c.LongShare = 0 }},
			{Name: "no prefix quota", Edit: func(c *reorder.Config) { c.PrefixPackets = 0 }},
			{Name: "shares 25/25", Edit: func(c *reorder.Config) { c.PrefixShare, c.LongShare = 0.25, 0.25 }},
		},
		ReportMax: reorder.DefaultPrefixConfig().Max, CutBudget: reorder.DefaultConfig().MemoryBytes,
		ReportSizes: []int{16, 32, 64, 128, 256}, Rules: []ReorderRule{RuleWatch, RulePackets, RuleEpoch},
		Seeds: 4, Seed: 1}
}

// reorderTrackerConfig is the default tracker reporting every prefix it
// holds.
func reorderTrackerConfig() reorder.Config {
	c := reorder.DefaultConfig()
	c.Prefixes.Max = reorder.MaxPrefixes
	return c
}

// Validate reports parameters out of range.
func (c ReorderConfig) Validate() error {
	switch {
	case c.Flows < 1 || c.Prefixes < 1 || c.Seeds < 1 || len(c.Budgets) == 0:
		return fmt.Errorf("reorder evaluation: %d flows, %d prefixes, %d seeds, %d budgets: want at least 1 of each", c.Flows, c.Prefixes, c.Seeds, len(c.Budgets))
	case c.Prefixes > 1<<16:
		return fmt.Errorf("reorder evaluation: %d prefixes, at most %d", c.Prefixes, 1<<16)
	case !(c.RateMin >= 0 && c.RateMin <= c.RateMax && c.RateMax <= 0.5 && c.BackgroundRate >= 0 && c.BackgroundRate <= 0.5):
		return fmt.Errorf("reorder evaluation: rates [%v, %v] and background %v: want 0 ≤ min ≤ max ≤ 0.5", c.RateMin, c.RateMax, c.BackgroundRate)
	case !(c.ReorderingShare >= 0 && c.ReorderingShare <= 1 && c.IPv6Share >= 0 && c.IPv6Share <= 1 && c.RetransRate >= 0 && c.RetransRate < 1):
		return fmt.Errorf("reorder evaluation: shares (reordering %v, IPv6 %v, retransmitted %v) out of [0, 1]", c.ReorderingShare, c.IPv6Share, c.RetransRate)
	case c.MaxDisplacement < 1 || !(c.ParetoShape > 0) || c.MinFlowPackets < 1 || c.MaxFlowPackets < c.MinFlowPackets:
		return fmt.Errorf("reorder evaluation: displacement %d, Pareto shape %v, flow sizes [%d, %d]", c.MaxDisplacement, c.ParetoShape, c.MinFlowPackets, c.MaxFlowPackets)
	case c.Duration <= 0 || c.EpochLength <= 0 || !(c.MinPPS > 0 && c.MinPPS <= c.MaxPPS) || c.PrefixSkew < 0:
		return fmt.Errorf("reorder evaluation: duration %v, epochs of %v, rates [%v, %v] packets/s, skew %v", c.Duration, c.EpochLength, c.MinPPS, c.MaxPPS, c.PrefixSkew)
	case c.ReportMax < 1 || slices.ContainsFunc(c.ReportSizes, func(n int) bool { return n < 1 }):
		return fmt.Errorf("reorder evaluation: reports of %d prefixes, sizes %v: want at least 1", c.ReportMax, c.ReportSizes)
	}
	for _, b := range c.Budgets {
		t := c.Tracker
		t.MemoryBytes = b
		if err := t.Validate(); err != nil {
			return fmt.Errorf("reorder evaluation: budget %d: %w", b, err)
		}
	}
	return nil
}

// ReorderRow is one configuration's result at one budget, averaged over
// the seeds.
type ReorderRow struct {
	Variant     string // "" for the configuration as given
	MemoryBytes int
	Sizes       reorder.Sizes
	// Measured is the share of the trace's segments the tracker judged.
	Measured float64
	// ReorderScore scores every prefix the tracker held, every epoch:
	// the tracker's own accuracy.
	ReorderScore
	// Collector scores the reports cut to ReorderConfig.ReportMax by the
	// watch list, as the collector sums them; CollectorBytes is their
	// mean size on the wire.
	Collector      ReorderScore
	CollectorBytes float64
	// NSPerPacket is the tracker's time per packet of the trace, its
	// epochs' reports included (their cuts not).
	NSPerPacket float64
}

// ReorderScore is a report's comparison with the truth, averaged over
// the seeds.
type ReorderScore struct {
	// Truth counts the prefixes of at least MinPackets whose exact rate
	// exceeds the threshold; Flagged those the report says do; Correct
	// the flagged ones whose exact rate does; Found the truth flagged.
	Truth, Flagged, Correct, Found float64
	Precision, Recall              float64
	// Covered is the share of the prefixes of at least MinPackets the
	// report lists whose exact rate is within two standard errors
	// (RateSE) of the estimate.
	Covered float64
}

// ReorderTraceStats describe one seed's trace as the exact tracker saw it.
type ReorderTraceStats struct {
	Packets, Flows, Epochs int
	// Concurrent is the mean number of flows between their first and
	// last packet while flows start (ReorderConfig.Duration).
	Concurrent float64
	// Eligible counts the prefixes of at least MinPackets; Truth those
	// above the threshold; Made those the generator made reorder.
	Eligible, Truth, Made int
	// Rate is the reordered share of all packets.
	Rate float64
	// BusiestPrefixes is the most prefixes with packets in one epoch.
	BusiestPrefixes int
}

// ReorderResult is the evaluation's outcome.
type ReorderResult struct {
	Traces []ReorderTraceStats
	Rows   []ReorderRow
	// Cuts are the configuration as given at CutBudget, its reports cut
	// to each size by each rule.
	Cuts []ReorderCutRow
	// GoalBytes is the smallest budget at which the configuration as
	// given reaches 90% precision and 90% recall on every prefix it
	// holds; CollectorGoalBytes the same on the reports of ReportMax
	// prefixes the collector sums. 0 if none does.
	GoalBytes, CollectorGoalBytes int
}

// ReorderGoal is the precision and recall the issue asks for.
const ReorderGoal = 0.9

// reorderSource is a trace to play into the trackers.
type reorderSource interface {
	// replay plays the packets into add in time order, calling epoch at
	// the end of each epoch of epochNS (aligned on multiples of it) they
	// span, the last included.
	replay(add func(*capture.Packet), epochNS int64, epoch func())
	// packets is how many packets replay plays.
	packets() int
}

// reorderScoring says which prefixes are to be found: those whose exact
// reordering rate exceeds threshold, among those of at least minPackets.
type reorderScoring struct {
	threshold  float64
	minPackets int
}

// RunReorder draws the traces and evaluates every budget and variant.
func RunReorder(c ReorderConfig) (*ReorderResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	variants := append([]ReorderVariant{{Name: ""}}, c.Variants...)
	rows := make([]ReorderRow, 0, len(variants)*len(c.Budgets))
	for _, v := range variants {
		for _, b := range c.Budgets {
			rows = append(rows, ReorderRow{Variant: v.Name, MemoryBytes: b})
		}
	}
	res := &ReorderResult{}
	if slices.Contains(c.Budgets, c.CutBudget) {
		res.Cuts = cutRows(c.Rules, c.ReportSizes)
	}
	sc := reorderScoring{threshold: c.Threshold, minPackets: c.MinPackets}
	epochNS := int64(c.EpochLength)
	for s := range c.Seeds {
		tr := newReorderTrace(c, c.Seed+uint64(s))
		x := playExact(tr, epochNS, reorder.PrefixConfig{V4Bits: 24, V6Bits: 48})
		exact := statsByPrefix(x.report)
		res.Traces = append(res.Traces, tr.stats(c, sc, exact, x))
		for i := range rows {
			v := variants[i/len(c.Budgets)]
			cfg := c.Tracker
			cfg.MemoryBytes = rows[i].MemoryBytes
			if v.Edit != nil {
				v.Edit(&cfg)
			}
			sweep := v.Name == "" && cfg.MemoryBytes == c.CutBudget
			run, err := playTracker(tr, epochNS, cfg, rowCuts(c.ReportMax, sweep, res.Cuts)...)
			if err != nil {
				return nil, fmt.Errorf("reorder evaluation: %q at %d bytes: %w", v.Name, rows[i].MemoryBytes, err)
			}
			rows[i].add(sc, exact, run)
			if sweep {
				addCutRows(res.Cuts, sc, exact, run)
			}
		}
	}
	res.Rows = rows
	res.GoalBytes, res.CollectorGoalBytes = finishRows(rows, c.Seeds)
	for i := range res.Cuts {
		res.Cuts[i].average(c.Seeds)
	}
	return res, nil
}

// cutRows are the rows of report sizes by rules, by rule first.
func cutRows(rules []ReorderRule, sizes []int) []ReorderCutRow {
	var out []ReorderCutRow
	for _, r := range rules {
		for _, n := range sizes {
			out = append(out, ReorderCutRow{Rule: r, Max: n})
		}
	}
	return out
}

// rowCuts are the cuts a run feeds: the watch list at reportMax, and
// with sweep one for each of rows.
func rowCuts(reportMax int, sweep bool, rows []ReorderCutRow) []*reportCut {
	cuts := []*reportCut{newReportCut(RuleWatch, reportMax)}
	if sweep {
		for _, r := range rows {
			cuts = append(cuts, newReportCut(r.Rule, r.Max))
		}
	}
	return cuts
}

// addCutRows adds the run's cuts past the first (rowCuts with sweep) to
// rows.
func addCutRows(rows []ReorderCutRow, sc reorderScoring, exact map[netip.Prefix]reorder.Stats, run trackerRun) {
	for j := range rows {
		rows[j].add(sc, exact, run.cuts[j+1])
	}
}

// finishRows averages the rows over the seeds and returns the smallest
// budgets at which the configuration as given reaches the goal, on every
// prefix and on the collector's sums, or 0.
func finishRows(rows []ReorderRow, seeds int) (all, collector int) {
	for i := range rows {
		rows[i].average(seeds)
		r := rows[i]
		if r.Variant != "" {
			continue
		}
		if all == 0 && r.Precision >= ReorderGoal && r.Recall >= ReorderGoal {
			all = r.MemoryBytes
		}
		if collector == 0 && r.Collector.Precision >= ReorderGoal && r.Collector.Recall >= ReorderGoal {
			collector = r.MemoryBytes
		}
	}
	return all, collector
}

// exactRun is what the exact tracker made of a trace: its epochs'
// reports summed, the flows it held, the epochs and the most prefixes
// with packets in one epoch.
type exactRun struct {
	report                   *reorder.Report
	flows, epochs, busiestPf int
}

// playExact plays src into an exact tracker reporting every epoch.
func playExact(src reorderSource, epochNS int64, pc reorder.PrefixConfig) exactRun {
	pc.Max = math.MaxInt
	x := reorder.NewExact(pc)
	var reps []*reorder.Report
	busiest := 0
	src.replay(x.Add, epochNS, func() {
		r := x.Report()
		reps = append(reps, r)
		busiest = max(busiest, len(r.Prefixes))
	})
	return exactRun{report: reorder.Merge(math.MaxInt, reps...), flows: x.Flows(), epochs: len(reps), busiestPf: busiest}
}

// statsByPrefix indexes a report's prefixes.
func statsByPrefix(r *reorder.Report) map[netip.Prefix]reorder.Stats {
	out := make(map[netip.Prefix]reorder.Stats, len(r.Prefixes))
	for _, p := range r.Prefixes {
		out[p.Prefix] = p.Stats
	}
	return out
}

// trackerRun is what one tracker made of a trace: its epochs' reports
// summed (as the collector sums a prefix's epochs), its tables, its time
// per packet and its reports cut.
type trackerRun struct {
	report      *reorder.Report
	sizes       reorder.Sizes
	nsPerPacket float64
	cuts        []*reportCut
}

// playTracker plays src into a tracker of cfg reporting every epoch, and
// each report into the cuts.
func playTracker(src reorderSource, epochNS int64, cfg reorder.Config, cuts ...*reportCut) (trackerRun, error) {
	t, err := reorder.New(cfg)
	if err != nil {
		return trackerRun{}, err
	}
	var reps []*reorder.Report
	var cutNS int64
	start := time.Now()
	src.replay(t.Add, epochNS, func() {
		r := t.Report()
		reps = append(reps, r)
		at := time.Now()
		for _, c := range cuts {
			c.take(r, int64(len(reps)-1))
		}
		cutNS += time.Since(at).Nanoseconds()
	})
	ns := float64(time.Since(start).Nanoseconds()-cutNS) / float64(max(src.packets(), 1))
	return trackerRun{report: reorder.Merge(math.MaxInt, reps...), sizes: t.Sizes(), nsPerPacket: ns, cuts: cuts}, nil
}

// stats describes the trace.
func (tr *reorderTrace) stats(c ReorderConfig, sc reorderScoring, exact map[netip.Prefix]reorder.Stats, x exactRun) ReorderTraceStats {
	st := ReorderTraceStats{Packets: len(tr.pkts), Flows: x.flows, Epochs: x.epochs, Made: len(tr.reordering), Rate: x.report.Total().Rate(),
		BusiestPrefixes: x.busiestPf}
	first := make([]int64, len(tr.flows))
	last := make([]int64, len(tr.flows))
	for i := range first {
		first[i] = math.MaxInt64
	}
	for _, p := range tr.pkts {
		first[p.flow], last[p.flow] = min(first[p.flow], p.tNS), max(last[p.flow], p.tNS)
	}
	var busyNS float64
	for i := range first {
		busyNS += float64(max(min(last[i], int64(c.Duration))-first[i], 0))
	}
	st.Concurrent = busyNS / float64(c.Duration)
	for _, s := range exact {
		if s.Packets >= uint64(sc.minPackets) {
			st.Eligible++
			if s.Rate() > sc.threshold {
				st.Truth++
			}
		}
	}
	return st
}

// add adds a run's scores.
func (row *ReorderRow) add(sc reorderScoring, exact map[netip.Prefix]reorder.Stats, run trackerRun) {
	row.Sizes = run.sizes
	row.NSPerPacket += run.nsPerPacket
	got := run.report
	row.Measured += float64(got.Total().Packets) / float64(max(got.Counters.Segments, 1))
	row.ReorderScore.add(scoreReorder(sc, exact, got))
	if len(run.cuts) > 0 {
		c := run.cuts[0]
		row.Collector.add(scoreReorder(sc, exact, c.report()))
		row.CollectorBytes += float64(c.bytes) / float64(max(c.reports, 1))
	}
}

// add adds one run's comparison.
func (row *ReorderScore) add(s reorderScore) {
	row.Truth += float64(s.truth)
	row.Flagged += float64(s.flagged)
	row.Correct += float64(s.correct)
	row.Found += float64(s.found)
	row.Covered += s.covered
}

// reorderScore is one run's comparison with the truth.
type reorderScore struct {
	truth, flagged, correct, found int
	covered                        float64
}

// scoreReorder compares a report with the exact counts.
func scoreReorder(sc reorderScoring, exact map[netip.Prefix]reorder.Stats, got *reorder.Report) reorderScore {
	var s reorderScore
	eligible := func(x reorder.Stats) bool { return x.Packets >= uint64(sc.minPackets) }
	for _, x := range exact {
		if eligible(x) && x.Rate() > sc.threshold {
			s.truth++
		}
	}
	var reported, within int
	for _, p := range got.Prefixes {
		x := exact[p.Prefix]
		if eligible(x) {
			reported++
			if math.Abs(p.Rate()-x.Rate()) <= 2*p.RateSE() {
				within++
			}
		}
		if p.Rate() <= sc.threshold {
			continue
		}
		s.flagged++
		if x.Rate() > sc.threshold {
			s.correct++
			if eligible(x) {
				s.found++
			}
		}
	}
	if reported > 0 {
		s.covered = float64(within) / float64(reported)
	}
	return s
}

// average turns the rows' sums over seeds into means and scores.
func (row *ReorderRow) average(seeds int) {
	n := float64(seeds)
	row.Measured, row.NSPerPacket, row.CollectorBytes = row.Measured/n, row.NSPerPacket/n, row.CollectorBytes/n
	row.ReorderScore.average(seeds)
	row.Collector.average(seeds)
}

// average turns the sums over seeds into means and scores.
func (row *ReorderScore) average(seeds int) {
	n := float64(seeds)
	row.Covered = row.Covered / n
	row.Truth, row.Flagged, row.Correct, row.Found = row.Truth/n, row.Flagged/n, row.Correct/n, row.Found/n
	row.Precision, row.Recall = 1, 0
	if row.Flagged > 0 {
		row.Precision = row.Correct / row.Flagged
	}
	if row.Truth > 0 {
		row.Recall = row.Found / row.Truth
	}
}

// WriteReorderTable prints the traces, the rows and the cuts.
func WriteReorderTable(w io.Writer, c ReorderConfig, res *ReorderResult) error {
	if _, err := fmt.Fprintf(w, "%d flows over %d prefixes (Zipf %.2g, %.0f%% IPv6); %.0f%% of prefixes reorder %.3g–%.3g of packets, the rest %.3g; "+
		"%.3g%% retransmitted; epochs of %v; flag rate > %.3g%%; truth: prefixes of ≥ %d packets above it\n",
		c.Flows, c.Prefixes, c.PrefixSkew, 100*c.IPv6Share, 100*c.ReorderingShare, c.RateMin, c.RateMax, c.BackgroundRate,
		100*c.RetransRate, c.EpochLength, 100*c.Threshold, c.MinPackets); err != nil {
		return err
	}
	for i, t := range res.Traces {
		fmt.Fprintf(w, "seed %d: %d packets, %d flows, %.0f concurrent, %d epochs (up to %d prefixes in one); %d prefixes of ≥ %d packets, "+
			"%d above the threshold (%d made to reorder); %.3g%% reordered\n",
			c.Seed+uint64(i), t.Packets, t.Flows, t.Concurrent, t.Epochs, t.BusiestPrefixes, t.Eligible, c.MinPackets, t.Truth, t.Made, 100*t.Rate)
	}
	fmt.Fprintf(w, "every prefix the tracker holds, every epoch; and (collector) the reports cut to %d prefixes by the watch list, summed over the run:\n", c.ReportMax)
	if err := writeReorderRows(w, res.Rows); err != nil {
		return err
	}
	if err := writeReorderCutRows(w, c.CutBudget, res.Cuts); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "smallest budget with precision and recall ≥ %.0f%%: %s; on the collector's sums of reports of %d: %s\n",
		100*ReorderGoal, goalText(res.GoalBytes), c.ReportMax, goalText(res.CollectorGoalBytes))
	return err
}

// goalText is a goal's budget, or that it was not reached.
func goalText(bytes int) string {
	if bytes == 0 {
		return "not reached"
	}
	return fmt.Sprintf("%d bytes", bytes)
}

// writeReorderRows prints the rows as a table.
func writeReorderRows(w io.Writer, rows []ReorderRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tbytes\twindows\tprefixes\tlong flows\tmeasured\ttruth\tflagged\tfound\tprecision\trecall\twithin 2 SE\t"+
		"collector: flagged\tfound\tprecision\trecall\tB/report\tns/packet\t")
	for _, r := range rows {
		name := r.Variant
		if name == "" {
			name = "default"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.1f%%\t%.1f\t%.1f\t%.1f\t%.3f\t%.3f\t%.3f\t%.1f\t%.1f\t%.3f\t%.3f\t%.0f\t%.0f\t\n", name,
			r.MemoryBytes, r.Sizes.Windows, r.Sizes.Prefixes, r.Sizes.LongFlows, 100*r.Measured, r.Truth, r.Flagged, r.Found, r.Precision,
			r.Recall, r.Covered, r.Collector.Flagged, r.Collector.Found, r.Collector.Precision, r.Collector.Recall, r.CollectorBytes, r.NSPerPacket)
	}
	return tw.Flush()
}
