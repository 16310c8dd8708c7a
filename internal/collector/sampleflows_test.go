package collector

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// TestTopFlowsFromTheSample sends an epoch's two sides as probes do
// without an LDS: an LDA, a sample at 1/8 whose top flows name their
// entries. Each top flow's result must hold exactly its own sampled
// delivered packets' delays (count, mean and quantiles against the ground
// truth's), with intervals that hold the flow's true median and 99th
// percentile; a flow with fewer than flows.sample_min_delays sampled
// delays gets a mean but no quantiles. Positions past the sample are
// refused. The upstream side's keys are full, or narrowed to 35 bits
// (sample wire version 3) while the downstream's stay full.
func TestTopFlowsFromTheSample(t *testing.T) {
	for _, width := range []int{sample.KeyBits, 35} {
		t.Run(fmt.Sprintf("keys=%d", width), func(t *testing.T) { topFlowsFromTheSample(t, width) })
	}
}

func topFlowsFromTheSample(t *testing.T, width int) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	conn := serve(t, c)
	q := owlv1.NewQueryServiceClient(conn)
	scfg, _ := sample.ForShift(cfg.Params.Sample.Seed, 3)
	ups, _ := sample.New(scfg)
	downs, _ := sample.New(scfg)
	upA, _ := lda.New(cfg.Params.LDA)
	downA, _ := lda.New(cfg.Params.LDA)
	r := rand.New(rand.NewPCG(17, 18))
	key := func(i int) capture.FlowKey {
		return capture.FlowKey{Src: netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), Dst: netip.MustParseAddr("10.1.0.1"), SrcPort: uint16(1000 + i), DstPort: 80, Proto: 6}
	}
	type flow struct {
		k       capture.FlowKey
		n       int
		delay   func() int64
		all     []int64 // every delivered packet's delay
		sampled []int64 // the sampled delivered ones'
	}
	flows := []*flow{
		{k: key(1), n: 9000, delay: func() int64 { return 100_000 + int64(r.ExpFloat64()*200_000) }},
		{k: key(2), n: 7000, delay: func() int64 {
			if r.Float64() < 0.02 {
				return 5_000_000 + r.Int64N(1_000_000)
			}
			return 50_000 + r.Int64N(10_000)
		}},
		{k: key(3), n: 60, delay: func() int64 { return 300_000 }}, // about 7 sampled: a mean, no quantiles
	}
	var top []*owlv1.TopFlow
	var hashes []uint64
	for _, f := range flows {
		h := f.k.Hash(cfg.Params.LDS.Seed)
		hashes = append(hashes, h)
		top = append(top, &owlv1.TopFlow{Flow: netpath.FlowToProto(f.k), Packets: uint64(f.n)})
		for i := 0; i < f.n; i++ {
			id, at, d := r.Uint64(), r.Int64N(900_000_000), f.delay()
			upA.Insert(id, at)
			ups.InsertFlow(id, h, at)
			if r.Float64() < 0.02 { // lost
				continue
			}
			downA.Insert(id, at+d)
			downs.Insert(id, at+d)
			f.all = append(f.all, d)
			if scfg.Keeps(id) {
				f.sampled = append(f.sampled, d)
			}
		}
	}
	for i := 0; i < 5000; i++ { // flows no top list names
		id, at, d := r.Uint64(), r.Int64N(900_000_000), int64(1_000_000)
		upA.Insert(id, at)
		ups.InsertFlow(id, r.Uint64(), at)
		downA.Insert(id, at+d)
		downs.Insert(id, at+d)
	}
	if err := ups.SetKeyBits(width); err != nil {
		t.Fatal(err)
	}
	for k, pos := range ups.FlowPositions(hashes) {
		top[k].SamplePositions = pos
	}
	ub, _ := upA.MarshalBinary()
	db, _ := downA.MarshalBinary()
	usb, _ := ups.MarshalBinary()
	dsb, _ := downs.MarshalBinary()
	ru := report("p", 4, owlv1.Role_ROLE_UPSTREAM, ub)
	ru.Sample, ru.TopFlows = usb, top
	rd := report("p", 4, owlv1.Role_ROLE_DOWNSTREAM, db)
	rd.Sample = dsb

	bad := report("p", 5, owlv1.Role_ROLE_UPSTREAM, ub)
	bad.Sample = usb
	bad.TopFlows = []*owlv1.TopFlow{{Flow: top[0].Flow, SamplePositions: []uint32{uint32(ups.Len())}}}
	if err := c.report("a", bad); err == nil {
		t.Error("top flow positions past the sample accepted")
	}

	if err := c.report("a", ru); err != nil {
		t.Fatal(err)
	}
	if err := c.report("b", rd); err != nil {
		t.Fatal(err)
	}
	waitResult(t, c, "p", 4, anyResult)
	ctx := context.Background()
	for _, f := range flows {
		var got *owlv1.FlowStats
		for deadline := time.Now().Add(5 * time.Second); got == nil && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			fs, err := q.GetFlowStats(ctx, &owlv1.GetFlowStatsRequest{Path: "p", Flow: netpath.FlowToProto(f.k)})
			if err != nil {
				t.Fatal(err)
			}
			if len(fs.GetStats()) == 1 {
				got = fs.GetStats()[0]
			}
		}
		if got == nil {
			t.Fatalf("flow %v: no result", f.k)
		}
		slices.Sort(f.sampled)
		slices.Sort(f.all)
		mean, _ := meanStddev(f.sampled)
		if got.GetEstimator() != "sample" || !got.GetTop() || got.GetSampleDelays() != uint64(len(f.sampled)) || math.Abs(got.GetMeanNs()-mean) > 1e-9*mean {
			t.Fatalf("flow %v: estimator %q top %t, %d sampled delays (truth %d), mean %.3f (truth %.3f)",
				f.k, got.GetEstimator(), got.GetTop(), got.GetSampleDelays(), len(f.sampled), got.GetMeanNs(), mean)
		}
		if len(f.sampled) < cfg.Flows.SampleMinDelays {
			if len(got.GetQuantiles()) != 0 {
				t.Errorf("flow %v: quantiles from %d delays", f.k, len(f.sampled))
			}
			continue
		}
		want, _ := sample.Quantiles(f.sampled, quantilesAsked, quantileConfidence, false)
		if len(got.GetQuantiles()) != len(want) {
			t.Fatalf("flow %v: %d quantiles, want %d", f.k, len(got.GetQuantiles()), len(want))
		}
		for i, gq := range got.GetQuantiles() {
			w := want[i]
			if gq.GetValueNs() != float64(w.Value) || gq.GetLoNs() != float64(w.Lo) || gq.GetHiNs() != float64(w.Hi) {
				t.Errorf("flow %v q %v: %v [%v, %v], the truth's sampled delays give %v [%v, %v]", f.k, gq.GetQ(), gq.GetValueNs(), gq.GetLoNs(), gq.GetHiNs(), w.Value, w.Lo, w.Hi)
			}
			if gq.GetQ() == 0.5 || gq.GetQ() == 0.99 {
				truth := float64(f.all[int(math.Ceil(gq.GetQ()*float64(len(f.all))))-1])
				if truth < gq.GetLoNs() || truth > gq.GetHiNs() {
					t.Errorf("flow %v: true q%v %.0f ns outside [%.0f, %.0f]", f.k, gq.GetQ(), truth, gq.GetLoNs(), gq.GetHiNs())
				}
			}
		}
		t.Logf("flow %d: %d of %d delays sampled; p50 %.0f [%.0f, %.0f], p99 %.0f [%.0f, %.0f]", f.k.SrcPort, len(f.sampled), len(f.all),
			got.GetQuantiles()[0].GetValueNs(), got.GetQuantiles()[0].GetLoNs(), got.GetQuantiles()[0].GetHiNs(),
			got.GetQuantiles()[2].GetValueNs(), got.GetQuantiles()[2].GetLoNs(), got.GetQuantiles()[2].GetHiNs())
	}
}

// zipfJoin is a joined sample of n sorted delays over flows of Zipf
// sizes, a third of them with no flow named.
func zipfJoin(n int) sample.Joined {
	rng := rand.New(rand.NewPCG(9, 9))
	zipf := rand.NewZipf(rng, 1.2, 1, 99)
	j := sample.Joined{Delays: make([]int64, n), Flows: make([]uint64, n)}
	for i := range n {
		j.Delays[i] = 1_000_000 + int64(i)*37
		if rng.IntN(3) > 0 {
			j.Flows[i] = 0x9e3779b97f4a7c15 * (zipf.Uint64() + 1)
		}
	}
	return j
}

// TestFlowDelays checks each flow's delays against those picked out one
// by one: the same delays, in order, and no flow for the unnamed ones.
func TestFlowDelays(t *testing.T) {
	for _, n := range []int{0, 1, 2000} {
		j := zipfJoin(n)
		cfg, _ := sample.ForShift(3, 2)
		fs := flowDelays(j, &sampleJoin{cfg: cfg})
		want := map[uint64][]int64{}
		for i, h := range j.Flows {
			if h != 0 {
				want[h] = append(want[h], j.Delays[i])
			}
		}
		if len(fs.delays) != len(want) {
			t.Errorf("%d delays: %d flows, want %d", n, len(fs.delays), len(want))
		}
		for h, d := range want {
			if !slices.Equal(fs.delays[h], d) {
				t.Errorf("%d delays: flow %x has %v, want %v", n, h, fs.delays[h], d)
			}
		}
		if fs.rate != cfg.Rate() || fs.rate == 1 || fs.exact {
			t.Errorf("rate %v exact %t, want %v (below 1) and not exact", fs.rate, fs.exact, cfg.Rate())
		}
	}
}

// BenchmarkFlowDelays splits 2,000 joined delays by flow.
func BenchmarkFlowDelays(b *testing.B) {
	j := zipfJoin(2000)
	cfg, _ := sample.ForShift(3, 0)
	sj := &sampleJoin{cfg: cfg}
	b.ReportAllocs()
	for b.Loop() {
		flowDelays(j, sj)
	}
}
