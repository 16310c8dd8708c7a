package colate

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"
	"time"
)

// TestLossStrategies compares, under random loss, the paper's way of
// handling it (§1.4: several vectors, each fed a hash-sampled share of the
// packets; a flow's estimate from the most-sampled vector whose counts of
// the flow agree at both points) with owl's robust estimate on one vector
// (a counter that lost a packet is off the flow's line and is read from
// its downstream side). Same memory: the sampled vectors split the n
// counters. The truth is the mean delay of the delivered packets.
func TestLossStrategies(t *testing.T) {
	const flows, pkts, n = 300, 500, 1 << 20
	for _, loss := range []float64{0.005, 0.02} {
		cfg := testConfig()
		cfg.Counters = n
		rng := rand.New(rand.NewPCG(uint64(loss*1e4), 3))
		s, _ := New(cfg, 0)
		r, _ := New(cfg, 0)
		// Sampled banks: shares 15/16, 15/256, 1/256 (LDA's exponents 0, 4, 8).
		exps := []int{0, 4, 8}
		bankCfg := cfg
		bankCfg.Counters = n / len(exps)
		var bs, br [3]*Vector
		for i := range exps {
			bs[i], _ = New(bankCfg, 0)
			br[i], _ = New(bankCfg, 0)
		}
		bank := func(id uint64) int {
			// The bank of a packet: by the leading zeros of its hash, so
			// that bank i gets 2^-e_i − 2^-e_{i+1} of them.
			z := bits.LeadingZeros64(id * 0x9e3779b97f4a7c15)
			b := 0
			for i, e := range exps {
				if z >= e {
					b = i
				}
			}
			return b
		}
		type tr struct{ sum, n float64 }
		truth := map[uint64]*tr{}
		span := int64(cfg.Span) - int64(10*time.Millisecond)
		for range flows {
			fh := rng.Uint64()
			base := 100e3 + rng.Float64()*2e6
			x := &tr{}
			truth[fh] = x
			for range pkts {
				ts := rng.Int64N(span)
				d := int64(base * (0.5 + rng.ExpFloat64()*0.5))
				id := rng.Uint64()
				k := bank(id)
				s.Insert(fh, id, ts)
				bs[k].Insert(fh, id, ts)
				if rng.Float64() < loss {
					continue
				}
				r.Insert(fh, id, ts+d)
				br[k].Insert(fh, id, ts+d)
				x.sum += float64(d)
				x.n++
			}
		}
		var paper1, robust, banks [2]int // within 5%, within 1%
		noBank := 0
		score := func(c *[2]int, est, mu float64) {
			e := math.Abs(est-mu) / mu
			if e <= 0.05 {
				c[0]++
			}
			if e <= 0.01 {
				c[1]++
			}
		}
		st := NewPairStats(s, r)
		for fh, x := range truth {
			mu := x.sum / x.n
			p, _ := Mean([]*Vector{s}, []*Vector{r}, fh)
			score(&paper1, p.MeanNS, mu)
			q := NewQuery(fh, -1, nil).Robust()
			_ = q.AddPair(s, r, st)
			e, _ := q.Estimate()
			score(&robust, e.MeanNS, mu)
			found := false
			for k := range exps {
				if ps, pr := bs[k].FlowPackets(fh), br[k].FlowPackets(fh); ps > 0 && ps == pr {
					b, _ := Mean([]*Vector{bs[k]}, []*Vector{br[k]}, fh)
					score(&banks, b.MeanNS, mu)
					found = true
					break
				}
			}
			if !found {
				noBank++
			}
		}
		pct := func(c [2]int) string {
			return fmt.Sprintf("%.1f%% / %.1f%%", 100*float64(c[0])/flows, 100*float64(c[1])/flows)
		}
		t.Logf("loss %.1f%%, %d flows of %d packets, n = 2^20 in all: within 5%% / 1%%: paper, one vector %s; paper, sampled vectors (§1.4) %s (%d flows with no clean vector); robust, one vector %s",
			100*loss, flows, pkts, pct(paper1), pct(banks), noBank, pct(robust))
		if robust[0] <= banks[0] || loss <= 0.005 && robust[0] < flows*9/10 {
			t.Errorf("loss %.1f%%: robust %s within 5%% / 1%%, sampled vectors %s", 100*loss, pct(robust), pct(banks))
		}
	}
}

// TestRobustCrossers: packets in flight at an epoch's end are in the
// upstream vector of that epoch and the downstream vector of the next.
// With delays of 20–50 ms and 2,000 packets/s per flow, 40–100 of each
// flow's packets cross every boundary and every counter holds several:
// past what folding can undo (each counter holds seconds of delay), the
// robust query must fall back to the paper's absolute-time estimate,
// exact for the flow's own crossers (the truth: all packets).
func TestRobustCrossers(t *testing.T) {
	cfg := testConfig()
	cfg.Counters = 1 << 18
	const epochs, flows, rate = 4, 50, 2000
	second := int64(time.Second)
	var sv, rv []*Vector
	for e := range int64(epochs + 1) {
		s, _ := New(cfg, e*second)
		r, _ := New(cfg, e*second)
		sv, rv = append(sv, s), append(rv, r)
	}
	rng := rand.New(rand.NewPCG(8, 8))
	type tr struct{ sum, n float64 }
	truth := map[uint64]*tr{}
	for range flows {
		fh := rng.Uint64()
		base := 20e6 + rng.Float64()*30e6
		x := &tr{}
		truth[fh] = x
		for range epochs * rate {
			ts := rng.Int64N(epochs * second)
			d := int64(base * (0.8 + 0.4*rng.Float64()))
			id := rng.Uint64()
			sv[ts/second].Insert(fh, id, ts)
			rv[(ts+d)/second].Insert(fh, id, ts+d)
			x.sum += float64(d)
			x.n++
		}
	}
	stats := make([]*PairStats, epochs+1)
	for e := range stats {
		stats[e] = NewPairStats(sv[e], rv[e])
	}
	within, paperWithin := 0, 0
	for fh, x := range truth {
		mu := x.sum / x.n
		q := NewQuery(fh, -1, nil).Robust()
		p := NewQuery(fh, -1, nil)
		for e := range stats {
			_ = q.AddPair(sv[e], rv[e], stats[e])
			_ = p.AddPair(sv[e], rv[e], stats[e])
		}
		est, err := q.Estimate()
		if err != nil {
			t.Fatal(err)
		}
		pe, _ := p.Estimate()
		if math.Abs(est.MeanNS-mu) <= 0.01*mu {
			within++
		}
		if math.Abs(pe.MeanNS-mu) <= 0.01*mu {
			paperWithin++
		}
	}
	t.Logf("%d flows, 40–100 crossers per flow and boundary: %d within 1%% (robust), %d (paper's estimator, which converts each vector to absolute time)", flows, within, paperWithin)
	if within < flows*9/10 {
		t.Errorf("robust: %d of %d flows within 1%%", within, flows)
	}
}

// TestRobustReverseFlowSharingACounter: a flow going the other way (its
// packets reach the second point first) shares one of the flow's
// counters. That counter's D falls below the line and its R is heavy:
// it has no clean side, and must be left out, not recovered from R.
// (Real-link runs had a download 1.8–2.7% high this way, the other
// direction's UDP flow sharing a counter; here +2.3% before the fix.)
func TestRobustReverseFlowSharingACounter(t *testing.T) {
	cfg := testConfig()
	cfg.Counters = 1 << 16
	second := int64(time.Second)
	s, _ := New(cfg, 0)
	r, _ := New(cfg, 0)
	const f = uint64(0x9e3779b97f4a7c15)
	mine := map[int]bool{}
	for j := range uint64(cfg.Subvector) {
		mine[s.index(f, j)] = true
	}
	// A reverse flow with exactly one counter in common.
	var rev uint64
	for h := uint64(1); rev == 0; h++ {
		common := 0
		for j := range uint64(cfg.Subvector) {
			if mine[s.index(h*0x2545f4914f6cdd1d, j)] {
				common++
			}
		}
		if common == 1 {
			rev = h * 0x2545f4914f6cdd1d
		}
	}
	rng := rand.New(rand.NewPCG(10, 10))
	var sum, n float64
	for range 900 {
		ts := rng.Int64N(second - 20_000_000)
		d := int64(5e6 + rng.Float64()*1e6)
		id := rng.Uint64()
		s.Insert(f, id, ts)
		r.Insert(f, id, ts+d)
		sum += float64(d)
		n++
	}
	for range 450 {
		ts := rng.Int64N(second - 20_000_000)
		d := int64(5e6 + rng.Float64()*1e6)
		id := rng.Uint64()
		r.Insert(rev, id, ts)
		s.Insert(rev, id, ts+d)
	}
	q := NewQuery(f, -1, nil).Robust()
	if err := q.AddPair(s, r, NewPairStats(s, r)); err != nil {
		t.Fatal(err)
	}
	est, err := q.Estimate()
	if err != nil {
		t.Fatal(err)
	}
	mu := sum / n
	if rel := math.Abs(est.MeanNS-mu) / mu; rel > 0.01 {
		t.Errorf("mean %.1f µs, truth %.1f µs (%.2f%%)", est.MeanNS/1e3, mu/1e3, 100*rel)
	}
}

// TestRobustTrafficStartingAtAnEpochEnd: the flows begin 3 ms before an
// epoch ends, with delays of 5–6 ms, so every packet of that first epoch
// crosses into the next: each of the flow's counters that holds anything
// in the first epoch holds only crossers, and their raw ratios agree
// (all near −1, R empty) better than their folded ones. Folding must
// still happen there: a delay is never minus the packet's own time.
// (A real-link run had three flows 8% low this way.)
func TestRobustTrafficStartingAtAnEpochEnd(t *testing.T) {
	cfg := testConfig()
	cfg.Counters = 1 << 18
	const epochs, flows, rate = 3, 20, 2000
	second := int64(time.Second)
	var sv, rv []*Vector
	for e := range int64(epochs + 1) {
		s, _ := New(cfg, e*second)
		r, _ := New(cfg, e*second)
		sv, rv = append(sv, s), append(rv, r)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	type tr struct{ sum, n float64 }
	truth := map[uint64]*tr{}
	start := second - 7_000_000
	for range flows {
		fh := rng.Uint64()
		x := &tr{}
		truth[fh] = x
		for ts := start; ts < (epochs-1)*second; ts += second / rate {
			d := int64(5e6 + rng.Float64()*1e6)
			id := rng.Uint64()
			sv[ts/second].Insert(fh, id, ts)
			rv[(ts+d)/second].Insert(fh, id, ts+d)
			x.sum += float64(d)
			x.n++
		}
	}
	within := 0
	for fh, x := range truth {
		mu := x.sum / x.n
		q := NewQuery(fh, -1, nil).Robust()
		for e := range sv {
			_ = q.AddPair(sv[e], rv[e], NewPairStats(sv[e], rv[e]))
		}
		est, err := q.Estimate()
		if err != nil {
			t.Fatal(err)
		}
		if rel := math.Abs(est.MeanNS-mu) / mu; rel <= 0.01 {
			within++
		} else {
			t.Logf("flow %x: %.1f µs, truth %.1f µs (%.1f%%)", fh, est.MeanNS/1e3, mu/1e3, 100*rel)
		}
	}
	if within < flows {
		t.Errorf("%d of %d flows within 1%%", within, flows)
	}
}

// sharingOne returns a flow hash, other than f, whose subvector has exactly
// one counter in common with f's, searching from the hash start.
func sharingOne(v *Vector, f, start uint64) uint64 {
	mine := map[int]bool{}
	for j := range uint64(v.cfg.Subvector) {
		mine[v.index(f, j)] = true
	}
	for h := start; ; h++ {
		g := h * 0x2545f4914f6cdd1d
		common := 0
		for j := range uint64(v.cfg.Subvector) {
			if mine[v.index(g, j)] {
				common++
			}
		}
		if common == 1 && g != f {
			return g
		}
	}
}

// TestRobustSameWayFlowSharingACounter: a flow going the same way shares
// one of the flow's counters, its rate changing from epoch to epoch. The
// shared counter lies on a line of its own: where the other flow is heavy
// it stands out by its mass, where it is light it does not, and what it
// adds goes into the flow's sum. Whether a counter is left out must not
// depend on the flow's own packets, or the scaling up to m counters is
// biased. (Real-link runs had downloads 0.8–1.03% high this way, against
// ± 13.7 µs claimed, two downloads sharing a counter.) The light case is
// a download's ACKs (about 95 packets an epoch, under 5 per counter)
// sharing a counter with another download (880 an epoch): its delays lie
// on the ACKs' line, and real-link runs had the ACKs 3% and 45% high
// (every epoch 35–60%) until the flow tables told that counter apart for
// light flows too. Over seeds, the error must stay within 4 standard
// errors as the estimate states them.
func TestRobustSameWayFlowSharingACounter(t *testing.T) {
	for _, c := range []struct {
		name              string
		rate, other, many int
	}{
		{"heavy", 850, 2 * 850, 0},
		{"light", 95, 880, 0},
		{"light among small flows", 95, 880, 300},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := 0
			for seed := range uint64(8) {
				if z := robustSharingRun(t, seed, c.rate, c.other, c.many); math.Abs(z) > 4 {
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%d of 8 runs more than 4 standard errors off", bad)
			}
		})
	}
}

// robustSharingRun sends 30 epochs of a flow of rate packets an epoch,
// another flow sharing one of its counters with up to other packets an
// epoch (a random count, the other flow's delays twice the flow's), and
// many flows of 1–3 packets each, and returns the robust estimate's error
// in its standard errors.
func robustSharingRun(t *testing.T, seed uint64, rate, other, many int) float64 {
	t.Helper()
	const epochs = 30
	rng := rand.New(rand.NewPCG(seed, 11))
	sv, rv, send := epochVectors(epochs, rng)
	f := rng.Uint64()
	sharer := sharingOne(sv[0], f, rng.Uint64N(1<<40))
	var sum, n float64
	for e := range int64(epochs) {
		for range rate {
			sum += send(f, e, int64(5e6+rng.Float64()*1e6))
			n++
		}
		for range rng.IntN(other) + other/2 {
			send(sharer, e, int64(9e6+rng.Float64()*2e6))
		}
		for range many {
			g := rng.Uint64()
			for range 1 + rng.IntN(3) {
				send(g, e, int64(5e6+rng.Float64()*5e6))
			}
		}
	}
	return robustZ(t, seed, sv, rv, f, sum/n)
}

// epochVectors makes the vectors of two points for epochs 1 s epochs and
// one more (n = 2^16), and send, which puts a packet of flow fh sent at a
// random time of epoch e into them, seen d nanoseconds later downstream,
// and returns d.
func epochVectors(epochs int, rng *rand.Rand) (sv, rv []*Vector, send func(fh uint64, e, d int64) float64) {
	cfg := testConfig()
	cfg.Counters = 1 << 16
	second := int64(time.Second)
	for e := range int64(epochs + 1) {
		s, _ := New(cfg, e*second)
		r, _ := New(cfg, e*second)
		sv, rv = append(sv, s), append(rv, r)
	}
	send = func(fh uint64, e, d int64) float64 {
		ts := e*second + rng.Int64N(second)
		id := rng.Uint64()
		sv[ts/second].Insert(fh, id, ts)
		rv[(ts+d)/second].Insert(fh, id, ts+d)
		return float64(d)
	}
	return sv, rv, send
}

// robustZ estimates flow f robustly over the pairs of sv and rv and
// returns its error from the true mean mu in its standard errors.
func robustZ(t *testing.T, seed uint64, sv, rv []*Vector, f uint64, mu float64) float64 {
	t.Helper()
	q := NewQuery(f, -1, nil).Robust()
	for e := range sv {
		if err := q.AddPair(sv[e], rv[e], NewPairStats(sv[e], rv[e])); err != nil {
			t.Fatal(err)
		}
	}
	est, err := q.Estimate()
	if err != nil {
		t.Fatal(err)
	}
	z := (est.MeanNS - mu) / est.MeanErrNS
	t.Logf("seed %d: %.2f µs, truth %.2f µs (%+.3f%%), ± %.2f µs (z %+.1f), %d counters left out",
		seed, est.MeanNS/1e3, mu/1e3, 100*(est.MeanNS-mu)/mu, est.MeanErrNS/1e3, z, est.LeftOut)
	return z
}

// TestRobustLightFlowHeavyTailedDelays: a light flow (a download's ACKs,
// about 90 packets an epoch, 4 or 5 per counter) whose delays have a heavy
// tail, and no packet seen at one point only. A counter holding one of
// the tail's packets lies far off the flow's line (a few packets'
// delays against their times into the epoch), but it holds nothing to
// leave out: taking it for a one-sided packet and recovering it through
// the ratio drops the tail. (Real-link runs under load had such a flow
// 5–30% low in the epochs where counters were left out, 3.5% over the
// run.) Over seeds, the error must stay within 4 standard errors as the
// estimate states them.
func TestRobustLightFlowHeavyTailedDelays(t *testing.T) {
	const epochs, rate = 30, 90
	bad := 0
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 12))
		sv, rv, send := epochVectors(epochs, rng)
		// A delay of 1 ms and more: exponential with a 1.5 ms mean, and
		// one packet in 20 queued 10–40 ms more.
		delay := func() int64 {
			d := 1e6 + rng.ExpFloat64()*1.5e6
			if rng.IntN(20) == 0 {
				d += 10e6 + rng.Float64()*30e6
			}
			return int64(d)
		}
		f, heavy := rng.Uint64(), rng.Uint64()
		var sum, n float64
		for e := range int64(epochs) {
			for range rate {
				sum += send(f, e, delay())
				n++
			}
			for range 900 {
				send(heavy, e, delay())
			}
			for range 300 {
				g := rng.Uint64()
				for range 1 + rng.IntN(3) {
					send(g, e, delay())
				}
			}
		}
		if z := robustZ(t, seed, sv, rv, f, sum/n); math.Abs(z) > 4 {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of 8 runs more than 4 standard errors off", bad)
	}
}
