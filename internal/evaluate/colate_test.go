package evaluate

import (
	"errors"
	"os"
	"testing"

	"github.com/owl-latency/owl/internal/synopsis/colate"
)

// TestColateTriangle runs the paper's triangle at the parameters its
// solver picks: where the solver promises (α, β), the flows' means must
// keep the promise; where no parameters fit the RAM, it must say so.
func TestColateTriangle(t *testing.T) {
	cfg := DefaultColateConfig()
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
		case r.Within < r.Alpha:
			t.Errorf("(%.2f, %.2f): %.1f%% of %d flows within β, below α", r.Alpha, r.Beta, 100*r.Within, r.Flows)
		}
	}
	if rows[0].Err != nil {
		t.Errorf("the paper's medium requirement is infeasible in 1 MB: %v", rows[0].Err)
	}
}
