package collector

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/store"
	"github.com/owl-latency/owl/internal/synopsis/delays"
	"github.com/owl-latency/owl/internal/synopsis/synopsistest"
)

// TestDelayDistributionOverARange: three epochs' sketches, one at rate 1
// and two sampled (each delay standing for 4 and 16 packets), from three
// delay distributions, merge into the distribution of every packet they
// stand for: each quantile's interval holds the value of that rank in the
// weighted delays, the packet count is their weight, and the CDF points
// agree with the weighted delays to within the sketch's accuracy.
func TestDelayDistributionOverARange(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	rng := rand.New(rand.NewPCG(4, 2))
	last, _ := cfg.Params.Epoch.Of(time.Now().UnixNano())
	var all []int64 // every packet the sketches stand for
	w := store.Write{}
	for i, ep := range []struct {
		n, weight int
		base      float64
	}{{4000, 1, 100e3}, {1000, 4, 300e3}, {250, 16, 2e6}} {
		ds := make([]int64, ep.n)
		for k := range ds {
			ds[k] = int64(ep.base * (1 + rng.ExpFloat64()))
			for range ep.weight {
				all = append(all, ds[k])
			}
		}
		slices.Sort(ds)
		e := last - 3 + int64(i)
		w.Results = append(w.Results, &owlv1.PathStats{Path: "p", Epoch: e, Status: owlv1.ResultStatus_RESULT_STATUS_OK,
			DelaySketch: delays.Of(ds, float64(ep.weight))})
	}
	w.Results = append(w.Results, &owlv1.PathStats{Path: "p", Epoch: last, Status: owlv1.ResultStatus_RESULT_STATUS_OK}) // no sample
	if err := c.store.Apply(w); err != nil {
		t.Fatal(err)
	}
	slices.Sort(all)
	q := queryService{c: c}
	points := []float64{150e3, 400e3, 3e6}
	r, err := q.GetPathDelayDistribution(context.Background(), &owlv1.GetPathDelayDistributionRequest{Path: "p", CdfAtNs: points})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetEpochs() != 4 || r.GetSketchedEpochs() != 3 || math.Abs(r.GetPackets()-float64(len(all))) > 1e-6 {
		t.Errorf("%d epochs, %d sketched, %.1f packets; want 4, 3, %d", r.GetEpochs(), r.GetSketchedEpochs(), r.GetPackets(), len(all))
	}
	for _, dq := range r.GetQuantiles() {
		want := float64(all[int(dq.GetQ()*float64(len(all)-1))])
		if want < dq.GetLoNs() || want > dq.GetHiNs() {
			t.Errorf("p%g: %.0f ns [%.0f, %.0f], the weighted delays' %.0f ns", 100*dq.GetQ(), dq.GetValueNs(), dq.GetLoNs(), dq.GetHiNs(), want)
		}
	}
	for _, p := range r.GetCdf() {
		// The share at or below the point lies between the shares
		// below it and below it widened by the accuracy.
		lo := float64(countBelow(all, p.GetAtNs()*(1-2*delays.Accuracy))) / float64(len(all))
		hi := float64(countBelow(all, p.GetAtNs()*(1+2*delays.Accuracy))) / float64(len(all))
		if p.GetFraction() < lo || p.GetFraction() > hi {
			t.Errorf("CDF at %.0f ns: %.4f, the weighted delays' between %.4f and %.4f", p.GetAtNs(), p.GetFraction(), lo, hi)
		}
	}
	stats, err := q.GetPathStats(context.Background(), &owlv1.GetPathStatsRequest{Path: "p"})
	if err != nil || len(stats.GetStats()) != 4 || len(stats.GetStats()[0].GetDelaySketch()) != 0 {
		t.Errorf("GetPathStats without include_sketch: %v, sketch of %d bytes", err, len(stats.GetStats()[0].GetDelaySketch()))
	}
	for _, bad := range []*owlv1.GetPathDelayDistributionRequest{
		{Path: "p", Quantiles: []float64{1}}, {Path: "p", CdfAtNs: []float64{math.NaN()}}, {Path: "nope"},
	} {
		if _, err := q.GetPathDelayDistribution(context.Background(), bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func countBelow(sorted []int64, x float64) int {
	i, _ := slices.BinarySearchFunc(sorted, x, func(v int64, x float64) int {
		if float64(v) <= x {
			return -1
		}
		return 1
	})
	return i
}

// FuzzDelaySketch: a delay sketch from a peer or the store decodes or is
// refused, within memory bounded by the bins a sketch may hold.
func FuzzDelaySketch(f *testing.F) {
	f.Add(delays.Of([]int64{1, 1000, 5e6}, 4))
	f.Add(delays.Of([]int64{-5, 0, 7}, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		const limit = 512 << 10
		if n := synopsistest.Allocated(limit, func() {
			s, err := decodeDelaySketch(b)
			if err == nil {
				_, _ = s.GetValueAtQuantile(0.5)
				_ = delays.New().MergeWith(s)
			}
		}); n > limit {
			t.Fatalf("%d bytes allocated for a sketch of %d bytes", n, len(b))
		}
	})
}
