package evaluate

import (
	"fmt"
	"io"
	"time"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/lds"
)

// LDSRunConfig is a per-flow accuracy run on synthetic traffic with Pareto
// flow sizes and per-flow delays (every packet a Weibull delay, every flow
// an extra 50 µs or 400 µs).
type LDSRunConfig struct {
	Flows  int
	Shape  float64
	LDS    lds.Config
	Loss   float64
	Seed   uint64
	Opts   lds.Options
	Output io.Writer
}

// RunLDS impairs the traffic, builds both sides' sketches and prints the
// per-flow relative errors by flow-size bin.
func RunLDS(c LDSRunConfig) ([]BinStats, error) {
	start := time.Unix(1_800_000_000, 0)
	link, frames, err := sim.Synthesize(sim.SynthConfig{Flows: c.Flows, ParetoShape: c.Shape, MaxPackets: 50_000,
		Start: start.Add(100 * time.Millisecond), Span: 9 * time.Second, Seed: c.Seed})
	if err != nil {
		return nil, err
	}
	ep := epoch.Config{Start: start, Length: 10 * time.Second, Grace: time.Second}
	m := sim.Impairment{Delay: sim.Weibull{Shape: 0.65, Scale: 50 * time.Microsecond, Base: 20 * time.Microsecond},
		FlowDelay: sim.Bimodal{P: 0.5, Low: 50 * time.Microsecond, High: 400 * time.Microsecond}, Loss: c.Loss, Seed: c.Seed + 1}
	id := capture.DefaultIdentityConfig()
	tr, err := sim.Impair(link, frames, id, m)
	if err != nil {
		return nil, err
	}
	up, err := BuildFlows(link, tr.Up, id, ep, c.LDS, 64)
	if err != nil {
		return nil, err
	}
	down, err := BuildFlows(link, tr.Down, id, ep, c.LDS, 64)
	if err != nil {
		return nil, err
	}
	bins := Bin(CompareFlows(up, down, sim.FlowTruths(tr.Truth, ep, 0), c.LDS.Seed, c.Opts, 100), DefaultBins)
	if c.Output != nil {
		title := fmt.Sprintf("LDS %d×%d (%d counters), k=%d, row sampling %v, α=%g; %d flows (Pareto %g), %d packets, loss %g",
			c.LDS.Rows, c.LDS.Cols, c.LDS.Rows*c.LDS.Cols, c.LDS.K, c.LDS.RowSampleLog2, c.Opts.Alpha, c.Flows, c.Shape, len(frames), c.Loss)
		if err := WriteBins(c.Output, title, bins); err != nil {
			return nil, err
		}
	}
	return bins, nil
}
