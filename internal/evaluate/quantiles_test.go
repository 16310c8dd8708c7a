package evaluate

import (
	"cmp"
	"fmt"
	"maps"
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

// TestFlowQuantilesOnTraces is TestSampleQuantilesOnTraces per flow, as
// the collector gives a top flow its sampled delays: the upstream sample
// names the entries of each of the epoch's 20 largest flows
// (FlowPositions), which are read back from its wire form (Positions)
// and joined with the downstream sample. 40 epochs of about 36,000
// packets at 1/8, each flow with at least 16 sampled delays
// (flows.sample_min_delays): the intervals that state a confidence of
// 95% or more hold the flow's true quantile in at least 93% of flow-epochs,
// and those that state less (p99 of fewer than about 370 delays) hold it
// at least about as often as they state. At rate 1 every flow's
// quantiles are exact.
func TestFlowQuantilesOnTraces(t *testing.T) {
	const epochs, top, minDelays = 40, 20, 16
	ep := epoch.Config{Start: time.Unix(1_800_000_000, 0), Length: time.Second, Grace: 50 * time.Millisecond}
	link, frames, err := sim.Synthesize(sim.SynthConfig{Flows: 220_000, ParetoShape: 1.1, MaxPackets: 20_000,
		Start: ep.Start, Span: epochs * ep.Length, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	id := capture.DefaultIdentityConfig()
	var table strings.Builder
	fmt.Fprintf(&table, "%-44s %5s %11s %7s %22s %22s %22s\n", "delay", "rate", "flow-epochs", "exact", "p50 held (≥95%)", "p90 held (≥95%)", "p99 held/stated (<95%)")
	for _, model := range []sim.DelayModel{
		sim.Weibull{Shape: 0.65, Scale: 50 * time.Microsecond, Base: 20 * time.Microsecond},
		sim.Bimodal{P: 0.01, Low: 100 * time.Microsecond, High: 2 * time.Millisecond},
	} {
		tr, up, down := impairedPackets(t, link, frames, id, ep, sim.Impairment{Delay: model, Loss: 0.01, Reorder: 0.01, ReorderExtra: time.Millisecond, Seed: 7})
		truth := flowDeliveredWithin(tr.Truth, ep)
		for _, shift := range []int{0, 3} {
			c := flowCoverage(t, up, down, truth, shift, top, minDelays)
			fmt.Fprintf(&table, "%-44v %5s %11d %7d %22s %22s %22s\n", model, fmt.Sprintf("1/%d", 1<<shift), c.n, c.exact,
				c.held[0].String(), c.held[1].String(), c.held[2].String())
			if c.n < epochs*top/2 {
				t.Errorf("%v rate 1/%d: %d flow-epochs of ≥ %d sampled delays", model, 1<<shift, c.n, minDelays)
			}
			if shift == 0 && c.exact != c.n {
				t.Errorf("%v rate 1: %d of %d flow-epochs exact", model, c.exact, c.n)
			}
			for i, h := range c.held {
				if h.sure > 0 && float64(h.sureHeld) < 0.93*float64(h.sure) {
					t.Errorf("%v rate 1/%d quantile %d: %d of %d intervals stating ≥ 95%% held", model, 1<<shift, i, h.sureHeld, h.sure)
				}
				// Those stating less: held at least about as often as
				// stated (4 standard deviations of the sum of Bernoullis;
				// a flow's packets are a finite population, so they
				// hold somewhat more often than the binomial says).
				if h.unsure > 0 && float64(h.unsureHeld) < h.stated-4*math.Sqrt(h.variance)-1 {
					t.Errorf("%v rate 1/%d quantile %d: %d of %d intervals held, %.1f stated", model, 1<<shift, i, h.unsureHeld, h.unsure, h.stated)
				}
			}
		}
	}
	t.Logf("\n%s", table.String())
}

// held counts intervals that held the truth: those stating a confidence
// of 95% or more, and those stating less with the sum of what they stated
// (and its variance, as a sum of Bernoullis).
type held struct {
	sure, sureHeld, unsure, unsureHeld int
	stated, variance                   float64
}

func (h held) String() string {
	s := "-"
	if h.sure > 0 {
		s = fmt.Sprintf("%.1f%% of %d", 100*float64(h.sureHeld)/float64(h.sure), h.sure)
	}
	if h.unsure > 0 {
		s += fmt.Sprintf("; %d/%.0f of %d", h.unsureHeld, h.stated, h.unsure)
	}
	return s
}

// coverage is what flowCoverage found: flow-epochs, those exact, and per
// quantile (p50, p90, p99) the intervals that held.
type coverage struct {
	n, exact int
	held     [3]held
}

// flowCoverage samples both sides at 2^-shift, names each epoch's top
// flows' entries in the upstream sample as a probe does, joins, and checks
// each flow's quantiles against its truth.
func flowCoverage(t *testing.T, up, down Packets, truth map[int64]map[uint64][]int64, shift, top, minDelays int) coverage {
	t.Helper()
	cfg, _ := sample.ForShift(0x5eed, shift)
	qs := []float64{0.5, 0.9, 0.99}
	var c coverage
	for e, flows := range truth {
		su, _ := sample.New(cfg)
		sd, _ := sample.New(cfg)
		count := map[uint64]int{}
		for _, p := range up[e] {
			su.InsertFlow(p.ID, p.Flow, p.OffsetNS)
			count[p.Flow]++
		}
		for _, p := range down[e] {
			sd.Insert(p.ID, p.OffsetNS)
		}
		hashes := slices.SortedFunc(maps.Keys(count), func(a, b uint64) int { return cmp.Compare(count[b], count[a]) })
		hashes = hashes[:min(top, len(hashes))]
		gaps := su.FlowPositions(hashes)
		b, _ := su.MarshalBinary()
		wire, err := sample.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		flowOf := map[uint64]uint64{}
		for i, h := range hashes {
			pos, err := sample.Positions(gaps[i], wire.Len())
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pos {
				flowOf[wire.Entries()[p].Key] = h
			}
		}
		j, err := sample.Join(wire, sd, 0)
		if err != nil {
			t.Fatal(err)
		}
		byFlow := map[uint64][]int64{}
		for i, k := range j.Keys {
			if h, ok := flowOf[k]; ok {
				byFlow[h] = append(byFlow[h], j.Delays[i])
			}
		}
		for h, ds := range byFlow {
			if len(ds) < minDelays || len(flows[h]) == 0 {
				continue
			}
			c.n++
			est, err := sample.Quantiles(ds, qs, 0.95, shift == 0 && j.Ambiguous == 0)
			if err != nil {
				t.Fatal(err)
			}
			want := flows[h]
			for i, q := range est {
				w := want[max(0, int(math.Ceil(q.Q*float64(len(want))))-1)]
				ok := q.Lo <= w && w <= q.Hi
				switch {
				case q.Exact:
					if q.Value != w {
						t.Errorf("epoch %d flow %x: exact p%g %d ns, truth %d", e, h, 100*q.Q, q.Value, w)
					}
					if i == 0 {
						c.exact++
					}
				case q.Confidence >= 0.95:
					c.held[i].sure++
					c.held[i].sureHeld += b2i(ok)
				default:
					c.held[i].unsure++
					c.held[i].unsureHeld += b2i(ok)
					c.held[i].stated += q.Confidence
					c.held[i].variance += q.Confidence * (1 - q.Confidence)
				}
			}
		}
	}
	return c
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// flowDeliveredWithin is deliveredWithin per flow (hashed as BuildPackets
// hashes them).
func flowDeliveredWithin(recs []sim.Record, ep epoch.Config) map[int64]map[uint64][]int64 {
	out := map[int64]map[uint64][]int64{}
	for _, r := range recs {
		if r.Lost || r.Copies != 1 {
			continue
		}
		e, _ := ep.Of(r.UpNS)
		if de, _ := ep.Of(r.DownNS); de != e {
			continue
		}
		if out[e] == nil {
			out[e] = map[uint64][]int64{}
		}
		h := r.Flow.Hash(FlowSeed)
		out[e][h] = append(out[e][h], r.DelayNS())
	}
	for _, fs := range out {
		for _, d := range fs {
			slices.Sort(d)
		}
	}
	return out
}
