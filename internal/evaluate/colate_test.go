package evaluate

import (
	"errors"
	"os"
	"testing"

	"github.com/owl-latency/owl/internal/synopsis/colate"
)

// TestColateTriangle runs the paper's triangle at the parameters its
// solver picks: where the solver promises (α, β), the flows' means must
// keep the promise, with the paper's estimator and the robust one; where
// no parameters fit the RAM, it must say so. At the (0.95, 0.05)
// parameters the robust estimator must also meet (0.99, 0.01), and at
// smaller vectors (given shapes) beat the paper's estimator.
func TestColateTriangle(t *testing.T) {
	cfg := DefaultColateConfig()
	cfg.Shapes = [][2]int{{65536, 8}, {16384, 8}}
	if testing.Verbose() {
		cfg.Output = os.Stdout
	}
	rows, err := RunColate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		switch {
		case r.Err != nil && !errors.Is(r.Err, colate.ErrInfeasible):
			t.Errorf("(%.2f, %.2f): %v", r.Alpha, r.Beta, r.Err)
		case r.Err != nil:
			t.Logf("(%.2f, %.2f): infeasible in %.0f bits", r.Alpha, r.Beta, cfg.RAMBits)
		case r.Flows < 100:
			t.Errorf("(%.2f, %.2f): only %d flows evaluated", r.Alpha, r.Beta, r.Flows)
		case r.Fixed:
			if r.WithinRobust <= r.Within {
				t.Errorf("n %d m %d: robust %.1f%% within 5%%, not above the paper's %.1f%%", r.Params.Counters, r.Params.Subvector, 100*r.WithinRobust, 100*r.Within)
			}
		case r.Within < r.Alpha || r.WithinRobust < r.Alpha:
			t.Errorf("(%.2f, %.2f): %.1f%% (paper) and %.1f%% (robust) of %d flows within β, below α", r.Alpha, r.Beta, 100*r.Within, 100*r.WithinRobust, r.Flows)
		}
	}
	if rows[0].Err != nil {
		t.Fatalf("the paper's medium requirement is infeasible in 1 MB: %v", rows[0].Err)
	}
	if rows[0].Within1 < 0.99 {
		t.Errorf("at the (0.95, 0.05) parameters, %.1f%% of flows within 1%% with the robust estimator, below 99%%", 100*rows[0].Within1)
	}
}
