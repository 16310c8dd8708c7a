package evaluate

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/owl-latency/owl/internal/synopsis/reorder"
)

// TestReorderFindsPrefixes plays one synthetic trace of the issue's
// setting (10⁵ flows over 10³ prefixes, 5% of them reordering 1–5%) into
// the tracker at its default budget and at 32 KiB: at the default it finds
// the prefixes above 0.5% with precision and recall of at least 90% and
// its standard errors hold the exact rate; at 32 KiB, where its prefix
// table holds a tenth of the prefixes, recall falls below a half (so that
// the bar can fail). About 5 s.
func TestReorderFindsPrefixes(t *testing.T) {
	c := DefaultReorderConfig()
	def := reorder.DefaultConfig().MemoryBytes
	c.Seeds, c.Budgets, c.Variants = 1, []int{32 << 10, def}, nil
	res, err := RunReorder(c)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteReorderTable(&b, c, res); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	if tr := res.Traces[0]; tr.Truth < 30 || tr.Eligible < 500 {
		t.Fatalf("trace: %d prefixes above the threshold of %d eligible, want ≥ 30 of ≥ 500", tr.Truth, tr.Eligible)
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
}

// TestReorderOnTheBundledTrace injects reordering into the bundled
// trace's IPv6 server (2% held back: about 1.5% reordered), a little into
// its IPv4 server (0.2%: below the 0.5% threshold) and duplicates 1% of
// all packets. At the default budget the tracker measures every segment
// and counts exactly what the exact tracker counts; at the smallest
// budget (1 KiB: 12 windows, 4 prefixes) every host's rate is within two
// standard errors; at both, the IPv6 server alone is flagged.
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
		if r.Truth != 1 || r.Precision != 1 || r.Recall != 1 {
			t.Errorf("%d bytes: truth %.1f, precision %.3f, recall %.3f; want 1 prefix found alone", r.MemoryBytes, r.Truth, r.Precision, r.Recall)
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
