package evaluate

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// TestSampleQuantilesOnTraces joins consistent samples of both points of
// simulated paths (Weibull delays, and a bimodal path whose 1% slow mode
// is 20 times the fast one; 1% loss and 1% reordering each), 400 epochs
// of about 3,600 packets, and compares the delay quantiles with the
// ground truth: at rate 1 exact, at 1/4 (about 900 sampled packets per
// epoch) the true p50 and p99 inside the 95% intervals in at least 93% of
// epochs. The truth is the epoch's packets delivered within it once (a
// duplicated packet is left out of the join, as RDA's policy leaves it).
func TestSampleQuantilesOnTraces(t *testing.T) {
	const epochs = 400
	ep := epoch.Config{Start: time.Unix(1_800_000_000, 0), Length: 100 * time.Millisecond, Grace: 50 * time.Millisecond}
	link, frames, err := sim.Synthesize(sim.SynthConfig{Flows: 220_000, ParetoShape: 1.1, MaxPackets: 20_000,
		Start: ep.Start, Span: epochs * ep.Length, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	id := capture.DefaultIdentityConfig()
	var table strings.Builder
	fmt.Fprintf(&table, "%-44s %6s %8s %7s %14s %14s\n", "delay", "rate", "epochs", "exact", "p50 covered", "p99 covered")
	for _, model := range []sim.DelayModel{
		sim.Weibull{Shape: 0.65, Scale: 50 * time.Microsecond, Base: 20 * time.Microsecond},
		sim.Bimodal{P: 0.01, Low: 100 * time.Microsecond, High: 2 * time.Millisecond},
	} {
		tr, up, down := impairedPackets(t, link, frames, id, ep, sim.Impairment{Delay: model, Loss: 0.01, Reorder: 0.01, ReorderExtra: time.Millisecond, Seed: 7})
		truth := deliveredWithin(tr.Truth, ep)
		for _, shift := range []int{0, 2} {
			cfg, _ := sample.ForShift(0x5eed, shift)
			var n, exact, p50, p99 int
			for e, delays := range truth {
				if len(delays) < 2000 {
					continue
				}
				n++
				su, _ := sample.New(cfg)
				sd, _ := sample.New(cfg)
				for _, p := range up[e] {
					su.Insert(p.ID, p.OffsetNS)
				}
				for _, p := range down[e] {
					sd.Insert(p.ID, p.OffsetNS)
				}
				j, err := sample.Join(su, sd, 0)
				if err != nil {
					t.Fatal(err)
				}
				qs, err := sample.Quantiles(j.Delays, []float64{0.5, 0.99}, 0.95, shift == 0 && j.Ambiguous == 0)
				if err != nil {
					t.Fatal(err)
				}
				for i, q := range qs {
					want := delays[max(0, int(math.Ceil(q.Q*float64(len(delays))))-1)]
					switch {
					case q.Exact && q.Value != want:
						t.Errorf("%v epoch %d: exact p%g %d ns, truth %d ns", model, e, 100*q.Q, q.Value, want)
					case q.Exact && i == 0:
						exact++
					case !q.Exact && q.Lo <= want && want <= q.Hi && i == 0:
						p50++
					case !q.Exact && q.Lo <= want && want <= q.Hi:
						p99++
					}
				}
			}
			fmt.Fprintf(&table, "%-44v %6s %8d %7d %13.1f%% %13.1f%%\n", model, fmt.Sprintf("1/%d", 1<<shift), n, exact,
				100*float64(p50)/float64(n), 100*float64(p99)/float64(n))
			if n < epochs*9/10 {
				t.Errorf("%v: %d epochs of ≥ 2,000 packets", model, n)
			}
			if shift == 0 && exact != n {
				t.Errorf("%v rate 1: %d of %d epochs exact", model, exact, n)
			}
			if shift > 0 && (float64(p50) < 0.93*float64(n) || float64(p99) < 0.93*float64(n)) {
				t.Errorf("%v rate 1/%d: p50 in %d, p99 in %d of %d intervals (93%% wanted)", model, 1<<shift, p50, p99, n)
			}
		}
	}
	t.Logf("\n%s", table.String())
}

// deliveredWithin is each epoch's sorted delays of the packets sent in it
// and delivered, once, within it.
func deliveredWithin(recs []sim.Record, ep epoch.Config) map[int64][]int64 {
	out := map[int64][]int64{}
	for _, r := range recs {
		if r.Lost || r.Copies != 1 {
			continue
		}
		e, _ := ep.Of(r.UpNS)
		if de, _ := ep.Of(r.DownNS); de != e {
			continue
		}
		out[e] = append(out[e], r.DelayNS())
	}
	for _, d := range out {
		slices.Sort(d)
	}
	return out
}
