package evaluate

import (
	"cmp"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/reorder"
)

// ReorderCaptureConfig evaluates the reordering tracker on a capture sent
// across a simulated path that reorders some senders' packets
// (sim.Impairment.PrefixReorder): the tracker and the exact tracker see
// the downstream capture.
type ReorderCaptureConfig struct {
	// Path is the capture; Identity decodes it.
	Path     string
	Identity capture.IdentityConfig
	// Impairment is the path; its Seed takes Seed, Seed+1, … for the
	// Seeds runs, whose counts are summed.
	Impairment sim.Impairment
	Seeds      int
	Seed       uint64
	// EpochLength, Threshold and MinPackets are as in ReorderConfig.
	EpochLength time.Duration
	Threshold   float64
	MinPackets  int
	// Tracker is the tracker's configuration; MemoryBytes takes each of
	// Budgets in turn. Its prefix lengths group the exact tracker too.
	Tracker reorder.Config
	Budgets []int
	// ReportMax, CutBudget, ReportSizes and Rules are as in
	// ReorderConfig: the reports cut on their way to the collector.
	ReportMax   int
	CutBudget   int
	ReportSizes []int
	Rules       []ReorderRule
}

// DefaultReorderCaptureConfig is the bundled trace (testdata/trace.pcap,
// from the repository's root) across a path of a constant 100 µs (a FIFO
// path: only held-back packets are reordered) that holds back, by up to
// 1 ms, 2% of the packets from the IPv6 server (fd99::2, 1,279 segments)
// and 0.2% of those from the IPv4 server (10.99.0.2, 15,671 segments).
// The clients (10.99.0.1, fd99::1) send requests too far apart for a
// held-back one to be overtaken, and are left alone. 1% of all packets
// arrive twice, up to 50 µs apart: retransmissions to the point, which
// must not count as reordering. The trace has these
// four hosts only, so flows are grouped by host (/32, /128). Threshold
// 0.5% on prefixes of at least 100 packets; budgets 1, 4, 16 and
// 256 KiB; 4 seeds. Reports are cut to the default 64 prefixes (which
// cuts nothing here) and, at 256 KiB, to 1 and 2 by each rule.
func DefaultReorderCaptureConfig() ReorderCaptureConfig {
	t := reorderTrackerConfig()
	t.Prefixes.V4Bits, t.Prefixes.V6Bits = 32, 128
	return ReorderCaptureConfig{Path: "testdata/trace.pcap", Identity: capture.DefaultIdentityConfig(),
		Impairment: sim.Impairment{Delay: sim.Constant{Delay: 100 * time.Microsecond}, ReorderExtra: time.Millisecond,
			Duplicate: 0.01, DuplicateGap: 50 * time.Microsecond, PrefixReorder: []sim.PrefixReorder{
				{Prefix: netip.MustParsePrefix("fd99::2/128"), Reorder: 0.02},
				{Prefix: netip.MustParsePrefix("10.99.0.2/32"), Reorder: 0.002},
			}},
		Seeds: 4, Seed: 1, EpochLength: time.Second, Threshold: 0.005, MinPackets: 100, Tracker: t,
		Budgets: []int{reorder.MinMemoryBytes, 4 << 10, 16 << 10, 256 << 10}, ReportMax: reorder.DefaultPrefixConfig().Max,
		CutBudget: reorder.DefaultConfig().MemoryBytes, ReportSizes: []int{1, 2}, Rules: []ReorderRule{RuleWatch, RulePackets, RuleEpoch}}
}

// Validate reports parameters out of range.
func (c ReorderCaptureConfig) Validate() error {
	if c.Seeds < 1 || len(c.Budgets) == 0 || c.EpochLength <= 0 {
		return fmt.Errorf("reorder evaluation of %s: %d seeds, %d budgets, epochs of %v", c.Path, c.Seeds, len(c.Budgets), c.EpochLength)
	}
	if c.ReportMax < 1 || slices.ContainsFunc(c.ReportSizes, func(n int) bool { return n < 1 }) {
		return fmt.Errorf("reorder evaluation of %s: reports of %d prefixes, sizes %v: want at least 1", c.Path, c.ReportMax, c.ReportSizes)
	}
	if err := c.Impairment.Validate(); err != nil {
		return fmt.Errorf("reorder evaluation of %s: %w", c.Path, err)
	}
	for _, b := range c.Budgets {
		t := c.Tracker
		t.MemoryBytes = b
		if err := t.Validate(); err != nil {
			return fmt.Errorf("reorder evaluation of %s: budget %d: %w", c.Path, b, err)
		}
	}
	return nil
}

// ReorderCapturePrefix is one prefix's counts, summed over the seeds:
// the exact tracker's, and the tracker's at each budget.
type ReorderCapturePrefix struct {
	Prefix netip.Prefix
	// HeldBack is the probability its packets were held back.
	HeldBack float64
	Exact    reorder.Stats
	Tracker  []reorder.Stats // by budget
}

// ReorderCaptureResult is the evaluation's outcome.
type ReorderCaptureResult struct {
	// Packets counts the downstream capture's packets of one seed.
	Packets  int
	Rows     []ReorderRow
	Cuts     []ReorderCutRow
	Prefixes []ReorderCapturePrefix
}

// capturePackets is a decoded capture (reorderSource).
type capturePackets []capture.Packet

func (cp capturePackets) replay(add func(*capture.Packet), epochNS int64, epoch func()) {
	var e epochs
	for i := range cp {
		e.advance(cp[i].TimeNS, epochNS, epoch)
		p := cp[i]
		add(&p)
	}
	epoch()
}

func (cp capturePackets) packets() int { return len(cp) }

// RunReorderCapture impairs the capture once per seed and evaluates
// every budget on the downstream side.
func RunReorderCapture(c ReorderCaptureConfig) (*ReorderCaptureResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	link, frames, err := sim.ReadCapture(c.Path)
	if err != nil {
		return nil, fmt.Errorf("reorder evaluation: %w", err)
	}
	res := &ReorderCaptureResult{Rows: make([]ReorderRow, len(c.Budgets))}
	if slices.Contains(c.Budgets, c.CutBudget) {
		res.Cuts = cutRows(c.Rules, c.ReportSizes)
	}
	byPrefix := map[netip.Prefix]*ReorderCapturePrefix{}
	sc := reorderScoring{threshold: c.Threshold, minPackets: c.MinPackets}
	epochNS := int64(c.EpochLength)
	for s := range c.Seeds {
		m := c.Impairment
		m.Seed = c.Seed + uint64(s)
		down, err := downstreamPackets(link, frames, c.Identity, m)
		if err != nil {
			return nil, fmt.Errorf("reorder evaluation of %s: %w", c.Path, err)
		}
		res.Packets = len(down)
		exact := statsByPrefix(playExact(down, epochNS, c.Tracker.Prefixes).report)
		for p, st := range exact {
			capturePrefix(byPrefix, p, c).Exact.Add(st)
		}
		for i, b := range c.Budgets {
			cfg := c.Tracker
			cfg.MemoryBytes = b
			run, err := playTracker(down, epochNS, cfg, rowCuts(c.ReportMax, b == c.CutBudget, res.Cuts)...)
			if err != nil {
				return nil, fmt.Errorf("reorder evaluation of %s at %d bytes: %w", c.Path, b, err)
			}
			res.Rows[i].MemoryBytes = b
			res.Rows[i].add(sc, exact, run)
			if b == c.CutBudget {
				addCutRows(res.Cuts, sc, exact, run)
			}
			for _, p := range run.report.Prefixes {
				capturePrefix(byPrefix, p.Prefix, c).Tracker[i].Add(p.Stats)
			}
		}
	}
	finishRows(res.Rows, c.Seeds)
	for i := range res.Cuts {
		res.Cuts[i].average(c.Seeds)
	}
	for _, p := range byPrefix {
		res.Prefixes = append(res.Prefixes, *p)
	}
	slices.SortFunc(res.Prefixes, func(a, b ReorderCapturePrefix) int { return cmp.Compare(b.Exact.Packets, a.Exact.Packets) })
	return res, nil
}

// capturePrefix is p's entry, made on first use.
func capturePrefix(m map[netip.Prefix]*ReorderCapturePrefix, p netip.Prefix, c ReorderCaptureConfig) *ReorderCapturePrefix {
	e := m[p]
	if e == nil {
		e = &ReorderCapturePrefix{Prefix: p, HeldBack: c.Impairment.Reorder, Tracker: make([]reorder.Stats, len(c.Budgets))}
		for _, r := range c.Impairment.PrefixReorder {
			if r.Prefix.Contains(p.Addr()) && r.Prefix.Bits() <= p.Bits() {
				e.HeldBack = r.Reorder
			}
		}
		m[p] = e
	}
	return e
}

// downstreamPackets sends frames across the path m and decodes what the
// downstream point captured (its IP packets, in time order).
func downstreamPackets(link layers.LinkType, frames []sim.Frame, id capture.IdentityConfig, m sim.Impairment) (capturePackets, error) {
	tr, err := sim.Impair(link, frames, id, m)
	if err != nil {
		return nil, err
	}
	dec, err := capture.NewDecoder(link, id)
	if err != nil {
		return nil, err
	}
	out := make(capturePackets, 0, len(tr.Down))
	for _, f := range tr.Down {
		var p capture.Packet
		if dec.Decode(f.Data, f.TimeNS, &p) == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// WriteReorderCaptureTable prints the rows and the prefixes.
func WriteReorderCaptureTable(w io.Writer, c ReorderCaptureConfig, res *ReorderCaptureResult) error {
	if _, err := fmt.Fprintf(w, "%s across %v, held back by up to %v: %v (others %g), %g duplicated; %d packets downstream; epochs of %v; %d seeds; "+
		"flag rate > %.3g%%; truth: prefixes of ≥ %d packets above it\n", c.Path, c.Impairment.Delay, c.Impairment.ReorderExtra,
		sim.PrefixReorders{P: &c.Impairment.PrefixReorder}, c.Impairment.Reorder, c.Impairment.Duplicate, res.Packets, c.EpochLength, c.Seeds,
		100*c.Threshold, c.MinPackets); err != nil {
		return err
	}
	if err := writeReorderRows(w, res.Rows); err != nil {
		return err
	}
	if err := writeReorderCutRows(w, c.CutBudget, res.Cuts); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "prefix\theld back\texact packets\texact rate\tretransmitted\t")
	for _, b := range c.Budgets {
		fmt.Fprintf(tw, "%d B: packets\trate ± SE\t", b)
	}
	fmt.Fprintln(tw)
	for _, p := range res.Prefixes {
		fmt.Fprintf(tw, "%v\t%g\t%d\t%.3f%%\t%d\t", p.Prefix, p.HeldBack, p.Exact.Packets, 100*p.Exact.Rate(), p.Exact.Retransmitted)
		for _, s := range p.Tracker {
			fmt.Fprintf(tw, "%d\t%.3f ± %.3f%%\t", s.Packets, 100*s.Rate(), 100*s.RateSE())
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}
