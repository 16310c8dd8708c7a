package colate

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// openingTruth is what a light flow's opening epoch and whole run hold,
// three ways: the packets delivered within the epoch they were sent in
// (TestRealLink's truth), the delays' parts that fall in each epoch over
// the epoch's downstream count (what one epoch's estimate measures: a
// packet that crosses the epoch's end leaves its delay up to the end in
// this epoch, the rest in the next), and every delivered packet.
type openingTruth struct {
	within, parts     [2]float64 // opening epoch: sum (ns), packets
	runWithin, runAll [2]float64
	opening           int64
	est, run          FlowEstimate
}

func mean(a [2]float64) float64 { return a[0] / a[1] }

// stalledOpening sends 30 epochs of traffic like TestRealLink's reverse
// direction: three downloads (880 packets an epoch, ~5.3 ms) and 300
// light flows an epoch, and a download's ACKs (80 a second, 3–10 ms) whose
// connection opens in epoch 1 so that 16 of them reach the downstream
// point within it. Every packet due downstream in [B − stall, B + 10 ms)
// around the epoch's end B arrives at B + 10 ms instead: the link stalls
// across the boundary (a userspace relay starved of CPU).
func stalledOpening(seed uint64, stall time.Duration) openingTruth {
	const epochs = 30
	second := int64(time.Second)
	rng := rand.New(rand.NewPCG(seed, 31))
	cfg := testConfig()
	cfg.Counters = 1 << 16
	var sv, rv []*Vector
	for e := range int64(epochs + 1) {
		s, _ := New(cfg, e*second)
		r, _ := New(cfg, e*second)
		sv, rv = append(sv, s), append(rv, r)
	}
	var tr openingTruth
	tr.opening = 1
	end := (tr.opening + 1) * second
	from, to := end-int64(stall), end+10_000_000
	f := rng.Uint64()
	put := func(g uint64, ts, d int64) {
		id := rng.Uint64()
		at := ts + d
		if stall > 0 && at >= from && at < to {
			at = to + rng.Int64N(200_000)
		}
		sv[ts/second].Insert(g, id, ts)
		rv[at/second].Insert(g, id, at)
		if g != f {
			return
		}
		e, de, dd := ts/second, at/second, float64(at-ts)
		tr.runAll[0] += dd
		tr.runAll[1]++
		if de == e {
			tr.runWithin[0] += dd
			tr.runWithin[1]++
		}
		switch {
		case e == tr.opening && de == e:
			tr.within[0] += dd
			tr.within[1]++
			tr.parts[0] += dd
			tr.parts[1]++
		case e == tr.opening:
			tr.parts[0] += float64(end - ts)
		case de == tr.opening:
			tr.parts[0] += float64(at - tr.opening*second)
			tr.parts[1]++
		}
	}
	const gap = 12_500_000 // 80 a second
	for ts := from - 16*gap; ts < epochs*second-second/2; ts += gap + rng.Int64N(gap/6) - gap/12 {
		put(f, ts, int64(3e6+rng.ExpFloat64()*2e6))
	}
	downloads := []uint64{rng.Uint64(), rng.Uint64(), rng.Uint64()}
	for e := range int64(epochs) {
		for _, g := range downloads {
			for range 880 {
				put(g, e*second+rng.Int64N(second), int64(5.3e6+rng.NormFloat64()*0.5e6))
			}
		}
		for range 300 {
			g := rng.Uint64()
			for range 1 + rng.IntN(3) {
				put(g, e*second+rng.Int64N(second), int64(5e6+rng.Float64()*5e6))
			}
		}
	}
	one := NewQuery(f, -1, nil).Robust()
	one.AddPair(sv[tr.opening], rv[tr.opening], NewPairStats(sv[tr.opening], rv[tr.opening]))
	tr.est, _ = one.Estimate()
	whole := NewQuery(f, -1, nil).Robust()
	for e := range sv {
		whole.AddPair(sv[e], rv[e], NewPairStats(sv[e], rv[e]))
	}
	tr.run, _ = whole.Estimate()
	return tr
}

// TestRobustLightEpochOfAnOpeningConnection: a connection's ACKs open an
// epoch with 16 packets among heavy flows, and the link stalls for 0, 50
// or 100 ms across that epoch's end. One epoch's estimate counts the
// delays of its packets that cross the end up to the end (the rest goes
// to the next epoch, so that a run counts each delay once): with a stall
// those parts are most of the epoch's delay, and the estimate lies far
// above the mean of the packets delivered within the epoch (+93% to +819%
// over 200 seeds), no counter left out; over the run, the mean of every
// packet, which lies 0.3% to 5.6% above the mean of the packets that did
// not cross an epoch's end. (The real-link run of 2026-11-29 had
// 10.77.0.2:59374→10.77.0.1:8080's opening epoch of 16 packets at 27,774
// µs against 6,934 µs, 0 counters left out, and the flow 3.21% high over
// the run against the packets that did not cross.) Where a counter holds
// more of the stall than the light flow's floor (16 times its typical
// counter) it is taken for a one-sided packet and recovered through the
// ratio, which drops the stall's parts: 23 counters in 200 seeds at 100 ms
// (seed 2 here), the epoch then low against its parts and the run up to
// 3.6% below every packet's mean. Those are logged, not checked.
func TestRobustLightEpochOfAnOpeningConnection(t *testing.T) {
	for _, stall := range []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond} {
		for seed := range uint64(6) {
			tr := stalledOpening(seed, stall)
			est, run := tr.est.MeanNS, tr.run.MeanNS
			rel := func(x, truth float64) float64 { return 100 * (x - truth) / truth }
			z := (est - mean(tr.parts)) / tr.est.MeanErrNS
			t.Logf("stall %v seed %d: opening epoch %.1f µs (± %.1f, %d left out): %+.1f%% against the %v packets delivered within it, %+.1f%% (z %+.1f) against its parts; run %+.2f%% against the packets that did not cross, %+.2f%% against all",
				stall, seed, est/1e3, tr.est.MeanErrNS/1e3, tr.est.LeftOut, rel(est, mean(tr.within)), tr.within[1], rel(est, mean(tr.parts)), z,
				rel(run, mean(tr.runWithin)), rel(run, mean(tr.runAll)))
			if tr.est.LeftOut > 0 {
				continue
			}
			if math.Abs(z) > 6 {
				t.Errorf("stall %v seed %d: the opening epoch %+.1f standard errors from its parts", stall, seed, z)
			}
			if r := rel(run, mean(tr.runAll)); math.Abs(r) > 1 {
				t.Errorf("stall %v seed %d: the run %+.2f%% from every packet's mean", stall, seed, r)
			}
		}
	}
}
