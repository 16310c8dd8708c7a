package evaluate

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/owl-latency/owl/internal/synopsis/reorder"
)

// TestReorderFindsPrefixes plays four synthetic traces of the issue's
// setting (10⁵ flows over 10³ prefixes, 5% of them reordering 1–5%) into
// the tracker at its default budget and at 32 KiB: at the default it finds
// the prefixes above 0.5% with precision and recall of at least 90% and
// its standard errors hold the exact rate; at 32 KiB, where its prefix
// table holds a tenth of the prefixes, recall falls below a half (so that
// the bar can fail). Its reports cut to the default 64 prefixes by the
// watch list, summed as the collector sums them, reach 90% too (0.994 and
// 0.939; one seed alone can fall short: 0.878 on the first). The flows
// start within 2 s, so the epoch in which a prefix first shows
// reordering, which the watch list cannot list, holds about half of its
// traffic: at 256 KiB the collector's recall is 0.80, the reason for the
// default of 512. Reports of the most packets, the rule before the watch
// list, find less than a third; listing by the epoch's own reordering
// loses precision. About 20 s.
func TestReorderFindsPrefixes(t *testing.T) {
	c := DefaultReorderConfig()
	def := reorder.DefaultConfig().MemoryBytes
	c.Seeds, c.Budgets, c.Variants, c.ReportSizes = 4, []int{32 << 10, def}, nil, []int{c.ReportMax}
	res, err := RunReorder(c)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteReorderTable(&b, c, res); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	if tr := res.Traces[0]; tr.Truth < 30 || tr.Eligible < 500 || tr.BusiestPrefixes < 10*c.ReportMax {
		t.Fatalf("trace: %d prefixes above the threshold of %d eligible, at most %d in an epoch; want ≥ 30 of ≥ 500, ≥ %d",
			tr.Truth, tr.Eligible, tr.BusiestPrefixes, 10*c.ReportMax)
	}
	small, full := res.Rows[0], res.Rows[1]
	if full.Precision < ReorderGoal || full.Recall < ReorderGoal {
		t.Errorf("default budget (%d bytes): precision %.3f, recall %.3f; want ≥ %.2f", def, full.Precision, full.Recall, ReorderGoal)
	}
	if full.Covered < 0.95 {
		t.Errorf("default budget: %.3f of the prefixes within 2 SE of the exact rate, want ≥ 0.95", full.Covered)
	}
	if small.Recall > 0.5 {
		t.Errorf("32 KiB: recall %.3f, want it to fall below 0.5", small.Recall)
	}
	if res.GoalBytes != def {
		t.Errorf("goal reached at %d bytes, want the default %d", res.GoalBytes, def)
	}
	watch, packets, epoch := cutsByRule(t, res.Cuts)
	if col := full.Collector; col.Precision < ReorderGoal || col.Recall < ReorderGoal || col != watch.ReorderScore {
		t.Errorf("collector at the default budget: precision %.3f, recall %.3f (cut table %+v); want ≥ %.2f", col.Precision, col.Recall, watch, ReorderGoal)
	}
	if packets.Recall > 0.33 {
		t.Errorf("reports of the most packets: recall %.3f, want it below a third", packets.Recall)
	}
	if epoch.Precision >= watch.Precision-0.1 {
		t.Errorf("reports of the epoch's reordering: precision %.3f, want the bias that takes it 0.1 below the watch list's %.3f", epoch.Precision, watch.Precision)
	}
}

// TestReorderCollectorFindsPrefixes is the setting with the
// flows starting over 20 s instead of 2 (some 900 at once, up to ~940
// prefixes in an epoch): the reports cut to the default 64 prefixes by the
// watch list, summed over the run as the collector sums them, find the
// prefixes above 0.5% with precision and recall of at least 90% at the
// default budget, where reports of the 64 prefixes with the most packets
// find less than half. About 5 s.
func TestReorderCollectorFindsPrefixes(t *testing.T) {
	c := DefaultReorderConfig()
	def := reorder.DefaultConfig().MemoryBytes
	c.Duration = 20 * time.Second
	c.Seeds, c.Budgets, c.Variants, c.ReportSizes = 1, []int{def}, nil, []int{c.ReportMax}
	c.Rules = []ReorderRule{RuleWatch, RulePackets, RuleEpoch}
	res, err := RunReorder(c)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteReorderTable(&b, c, res); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	if tr := res.Traces[0]; tr.Truth < 30 || tr.BusiestPrefixes < 10*c.ReportMax {
		t.Fatalf("trace: %d prefixes above the threshold, at most %d in an epoch; want ≥ 30 and ≥ %d", tr.Truth, tr.BusiestPrefixes, 10*c.ReportMax)
	}
	watch, packets, _ := cutsByRule(t, res.Cuts)
	if watch.Precision < ReorderGoal || watch.Recall < ReorderGoal || res.CollectorGoalBytes != def {
		t.Errorf("collector: precision %.3f, recall %.3f, goal at %d bytes; want ≥ %.2f at the default %d", watch.Precision, watch.Recall,
			res.CollectorGoalBytes, ReorderGoal, def)
	}
	if packets.Recall > 0.5 {
		t.Errorf("reports of the most packets: recall %.3f, want it below a half", packets.Recall)
	}
}

// cutsByRule are the cut rows of the watch list, the most packets and the
// epoch's reordering, in that order and of one size.
func cutsByRule(t *testing.T, rows []ReorderCutRow) (watch, packets, epoch ReorderCutRow) {
	t.Helper()
	if len(rows) != 3 || rows[0].Rule != RuleWatch || rows[1].Rule != RulePackets || rows[2].Rule != RuleEpoch || rows[0].Max != rows[2].Max {
		t.Fatalf("cut rows %+v", rows)
	}
	return rows[0], rows[1], rows[2]
}

// TestReorderOnTheBundledTrace injects reordering into the bundled
// trace's IPv6 server (2% held back: about 1.5% reordered), a little into
// its IPv4 server (0.2%: below the 0.5% threshold) and duplicates 1% of
// all packets. At the default budget the tracker measures every segment
// and counts exactly what the exact tracker counts; at the smallest
// budget (1 KiB: 12 windows, 4 prefixes) every host's rate is within two
// standard errors; at both, the IPv6 server alone is flagged. With
// reports of one prefix, the watch list lists the IPv6 server from its
// second epoch on and finds it; the most packets list the IPv4 server
// and do not.
func TestReorderOnTheBundledTrace(t *testing.T) {
	c := DefaultReorderCaptureConfig()
	c.Path = "../../testdata/" + strings.TrimPrefix(c.Path, "testdata/")
	c.Seeds = 2
	c.Budgets = []int{reorder.MinMemoryBytes, reorder.DefaultConfig().MemoryBytes}
	res, err := RunReorderCapture(c)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteReorderCaptureTable(&b, c, res); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	if len(res.Prefixes) != 4 {
		t.Fatalf("%d prefixes, want the trace's 4 hosts", len(res.Prefixes))
	}
	for _, r := range res.Rows {
		if r.Truth != 1 || r.Precision != 1 || r.Recall != 1 || r.Collector != r.ReorderScore {
			t.Errorf("%d bytes: truth %.1f, precision %.3f, recall %.3f, collector %+v; want 1 prefix found alone, reports of 64 cutting nothing",
				r.MemoryBytes, r.Truth, r.Precision, r.Recall, r.Collector)
		}
	}
	for _, r := range res.Cuts {
		if r.Max != 1 || r.Rule == RuleEpoch {
			continue
		}
		if want := r.Rule == RuleWatch; (r.Recall == 1 && r.Precision == 1) != want {
			t.Errorf("reports of 1 prefix by %v: precision %.3f, recall %.3f; want found %v", r.Rule, r.Precision, r.Recall, want)
		}
	}
	reordering := netip.MustParsePrefix("fd99::2/128")
	for _, p := range res.Prefixes {
		x, small, full := p.Exact, p.Tracker[0], p.Tracker[1]
		if x.Retransmitted == 0 {
			t.Errorf("%v: no duplicate counted as retransmitted", p.Prefix)
		}
		if full.Packets != x.Packets || full.Reordered != x.Reordered || full.Retransmitted != x.Retransmitted {
			t.Errorf("%v at the default budget: %+v, exact %+v", p.Prefix, full, x)
		}
		if d := small.Rate() - x.Rate(); d > 2*small.RateSE() || -d > 2*small.RateSE() {
			t.Errorf("%v at 1 KiB: rate %.4f ± %.4f, exact %.4f", p.Prefix, small.Rate(), small.RateSE(), x.Rate())
		}
		if above := x.Rate() > c.Threshold; above != (p.Prefix == reordering) {
			t.Errorf("%v: exact rate %.4f, held back %g: the injection did not do what it should", p.Prefix, x.Rate(), p.HeldBack)
		}
	}
}

func TestReorderConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*ReorderConfig)
		want string
	}{
		{"default", func(*ReorderConfig) {}, ""},
		{"no flows", func(c *ReorderConfig) { c.Flows = 0 }, "want at least 1 of each"},
		{"rates", func(c *ReorderConfig) { c.RateMin = 0.1 }, "rates [0.1, 0.05]"},
		{"epochs", func(c *ReorderConfig) { c.EpochLength = 0 }, "epochs of 0s"},
		{"budget", func(c *ReorderConfig) { c.Budgets = []int{100} }, "budget 100"},
		{"report size", func(c *ReorderConfig) { c.ReportSizes = []int{64, 0} }, "sizes [64 0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultReorderConfig()
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	c := DefaultReorderCaptureConfig()
	c.Impairment.ReorderExtra = 0
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "reorder extra") {
		t.Errorf("capture evaluation without an extra delay: %v", err)
	}
}
