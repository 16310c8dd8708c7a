package evaluate

import (
	"errors"
	"math"
	"math/rand/v2"
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

// TestOracleStddev checks the bound's estimator: exact when every packet
// is its own group, unbiased for σ² over random assignments, and refused
// with fewer than two groups.
func TestOracleStddev(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	delays := make([]int64, 50)
	var sum, sq float64
	for i := range delays {
		delays[i] = int64(1000 + rng.ExpFloat64()*500)
		sum += float64(delays[i])
		sq += float64(delays[i]) * float64(delays[i])
	}
	p := float64(len(delays))
	truth := sq/p - (sum/p)*(sum/p)
	// Packet i to counter i: ids in the middle of each counter's share.
	m := len(delays)
	ids := make([]uint64, m)
	for i := range ids {
		share := math.MaxUint64 / uint64(m)
		ids[i] = uint64(i)*share + share/2
	}
	got, ok := oracleStddev(delays, ids, m)
	if !ok || math.Abs(got*got-truth) > 1e-6*truth {
		t.Errorf("one packet per group: σ² %.1f, want %.1f (ok %t)", got*got, truth, ok)
	}
	// Random assignments to 4 groups: the mean of σ̂² is σ².
	var mean float64
	const trials = 20000
	for range trials {
		for i := range ids {
			ids[i] = rng.Uint64()
		}
		s, ok := oracleStddev(delays, ids, 4)
		if !ok {
			t.Fatal("4 groups of 50 packets: fewer than two non-empty")
		}
		mean += s * s / trials
	}
	if math.Abs(mean-truth) > 0.03*truth {
		t.Errorf("mean σ̂² over random assignments %.1f, want %.1f", mean, truth)
	}
	if _, ok := oracleStddev(delays, make([]uint64, m), 4); ok {
		t.Error("one group: want no estimate")
	}
}
