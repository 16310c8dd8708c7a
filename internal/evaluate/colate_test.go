package evaluate

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/owl-latency/owl/internal/synopsis/colate"
)

// TestColateTriangle runs the paper's triangle (§6.2.1) at the parameters
// the solver picks for 1 MB per point, one vector per span: for (0.95,
// 0.05) and (0.99, 0.01) the robust estimator must put at least α of the
// flows within β of their true mean; at smaller vectors (given shapes) it
// must beat the paper's estimator. The paper's own solver (vectors dumped
// at T) finds no parameters for (0.99, 0.01) in 1 MB.
func TestColateTriangle(t *testing.T) {
	cfg := DefaultColateConfig()
	cfg.Duration = 30 * time.Second
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
		case r.Err != nil:
			t.Errorf("(%.2f, %.2f): %v", r.Alpha, r.Beta, r.Err)
		case r.Flows < 500:
			t.Errorf("(%.2f, %.2f): only %d flows evaluated", r.Alpha, r.Beta, r.Flows)
		case r.Fixed:
			if r.WithinRobust <= r.Within {
				t.Errorf("n %d m %d: robust %.1f%% within 5%%, not above the paper's %.1f%%", r.Params.Counters, r.Params.Subvector, 100*r.WithinRobust, 100*r.Within)
			}
		case r.WithinRobust < r.Alpha:
			t.Errorf("(%.2f, %.2f): %.1f%% of %d flows within β with the robust estimator (the paper's: %.1f%%), below α", r.Alpha, r.Beta, 100*r.WithinRobust, r.Flows, 100*r.Within)
		}
	}
	cfg.PaperThreshold, cfg.Shapes, cfg.Output = true, nil, nil
	rows, err = RunColate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || !errors.Is(rows[1].Err, colate.ErrInfeasible) {
		t.Errorf("the paper's solver for (0.99, 0.01) in 1 MB: %v", rows[1].Err)
	}
}
