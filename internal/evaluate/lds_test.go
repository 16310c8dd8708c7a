package evaluate

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/lds"
)

// flowTrace is synthetic traffic with Pareto flow sizes: 30,000 flows,
// about half a million packets in one 10 s epoch.
func flowTrace(t *testing.T) (layers.LinkType, []sim.Frame, epoch.Config) {
	t.Helper()
	start := time.Unix(1_800_000_000, 0)
	link, frames, err := sim.Synthesize(sim.SynthConfig{Flows: 30_000, ParetoShape: 0.9, MaxPackets: 20_000,
		Start: start.Add(100 * time.Millisecond), Span: 9 * time.Second, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return link, frames, epoch.Config{Start: start, Length: 10 * time.Second, Grace: time.Second}
}

// flowDelays gives flows different delays: every packet a Weibull delay,
// every flow an extra 50 µs or 400 µs (two routes).
func flowDelays(loss, dup float64, seed uint64) sim.Impairment {
	return sim.Impairment{Delay: sim.Weibull{Shape: 0.65, Scale: 50 * time.Microsecond, Base: 20 * time.Microsecond},
		FlowDelay: sim.Bimodal{P: 0.5, Low: 50 * time.Microsecond, High: 400 * time.Microsecond},
		Loss:      loss, Duplicate: dup, DuplicateGap: 20 * time.Microsecond, Seed: seed}
}

func runLDS(t *testing.T, link layers.LinkType, frames []sim.Frame, ep epoch.Config, m sim.Impairment, cfg lds.Config, opts lds.Options) []BinStats {
	t.Helper()
	id := capture.DefaultIdentityConfig()
	tr, err := sim.Impair(link, frames, id, m)
	if err != nil {
		t.Fatal(err)
	}
	up, err := BuildFlows(link, tr.Up, id, ep, cfg, 64)
	if err != nil {
		t.Fatal(err)
	}
	down, err := BuildFlows(link, tr.Down, id, ep, cfg, 64)
	if err != nil {
		t.Fatal(err)
	}
	return Bin(CompareFlows(up, down, sim.FlowTruths(tr.Truth, ep, 0), cfg.Seed, opts, 100), DefaultBins)
}

func logBins(t *testing.T, title string, bins []BinStats) {
	var b strings.Builder
	_ = WriteBins(&b, title, bins)
	t.Logf("\n%s", b.String())
}

// TestLDSAccuracy: no loss, 4 rows × 3,600 cells (the paper's ratio of
// counters to flows, 0.48), k = 1, as §5.1. The α rule matters: without it
// cells shared with larger flows enter the estimate.
func TestLDSAccuracy(t *testing.T) {
	link, frames, ep := flowTrace(t)
	cfg := lds.Config{Rows: 4, Cols: 3600, K: 1, Seed: 1}
	bins := runLDS(t, link, frames, ep, flowDelays(0, 0, 2), cfg, lds.DefaultOptions())
	logBins(t, "LDS 4×3600, k=1, no loss (paper, 70,000 counters for 146,000 flows: 1.2% for 500–999, 0.4% and 0.06% above)", bins)
	for i, want := range []float64{0.15, 0.05, 0.025, 0.01} {
		if bins[i].Median > want || bins[i].Flows < 10 {
			t.Errorf("bin %v: %d flows, median relative error %.2f%%, want ≤ %.1f%%", bins[i].Bin, bins[i].Flows, 100*bins[i].Median, 100*want)
		}
	}
	noAlpha := runLDS(t, link, frames, ep, flowDelays(0, 0, 2), cfg, lds.Options{Alpha: 1e9})
	logBins(t, "same, α rule off (every usable cell)", noAlpha)
	for i := 0; i < 2; i++ {
		if noAlpha[i].Median <= 1.3*bins[i].Median {
			t.Errorf("bin %v: α rule off gives %.2f%%, with it %.2f%%: the rule should matter", bins[i].Bin, 100*noAlpha[i].Median, 100*bins[i].Median)
		}
	}
}

// TestLDSUnderLoss: uniform loss 0.1%, 0.5%, 1% (and duplicates, which the
// digest must catch), with the multi-bank LDS of §5.2: 4 rows sampling
// 1/128, 1/8, 1/2, 1 and k = 5, rows k times longer.
func TestLDSUnderLoss(t *testing.T) {
	link, frames, ep := flowTrace(t)
	cfg := lds.Config{Rows: 4, Cols: 5 * 3600, K: 5, RowSampleLog2: []uint8{7, 3, 1, 0}, Seed: 1}
	for _, loss := range []float64{0.001, 0.005, 0.01} {
		t.Run(fmt.Sprintf("loss=%g", loss), func(t *testing.T) {
			bins := runLDS(t, link, frames, ep, flowDelays(loss, 0.001, 3), cfg, lds.DefaultOptions())
			logBins(t, fmt.Sprintf("multi-bank LDS 4×%d, k=5, loss %g, 0.1%% duplicates", cfg.Cols, loss), bins)
			for i, want := range []float64{0.2, 0.1, 0.06, 0.05} {
				if bins[i].Median > want || bins[i].NoEstimate*20 > bins[i].Flows {
					t.Errorf("bin %v: median relative error %.2f%% (want ≤ %.0f%%), %d of %d flows without estimate",
						bins[i].Bin, 100*bins[i].Median, 100*want, bins[i].NoEstimate, bins[i].Flows)
				}
			}
		})
	}
}
