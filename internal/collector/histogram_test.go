package collector

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/DataDog/sketches-go/ddsketch"
	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/synopsis/delays"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// TestWeightedHistogram checks that a value with a weight gives what
// client_golang's histogram gives after as many observations of it:
// count, sum, classic buckets, and native buckets of both signs and the
// zero bucket.
func TestWeightedHistogram(t *testing.T) {
	bounds := prometheus.ExponentialBuckets(1e-6, 2, 24)
	w := newWeightedHistogramVec("d", "h", bounds, 7, "path")
	ref := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "d", Help: "h", Buckets: bounds, NativeHistogramBucketFactor: 1.01}, []string{"path"})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		path := []string{"a", "b", "c"}[i%3]
		var v float64
		switch rng.IntN(10) {
		case 0:
			v = -rng.ExpFloat64() * 1e-4 // clocks apart: a negative delay
		case 1:
			v = 0
		case 2:
			v = bounds[rng.IntN(len(bounds))] // on a classic bound
		case 3:
			v = math.Exp2(float64(rng.IntN(40) - 30)) // on a native bound
		default:
			v = rng.ExpFloat64() * 1e-3
		}
		n := uint64(rng.IntN(5))
		w.Observe(v, n, path)
		for range n {
			ref.WithLabelValues(path).Observe(v)
		}
	}
	w.Observe(math.NaN(), 3, "a")
	w.Observe(math.Inf(1), 3, "a")
	got, want := collectHistograms(t, w), collectHistograms(t, ref)
	if len(got) != 3 || len(want) != 3 {
		t.Fatalf("%d series, want %d (3)", len(got), len(want))
	}
	for path, g := range got {
		r := want[path]
		if g.GetSampleCount() != r.GetSampleCount() || math.Abs(g.GetSampleSum()-r.GetSampleSum()) > 1e-9*math.Abs(r.GetSampleSum()) {
			t.Errorf("%s: count %d sum %g, want %d %g", path, g.GetSampleCount(), g.GetSampleSum(), r.GetSampleCount(), r.GetSampleSum())
		}
		if len(g.GetBucket()) != len(bounds) {
			t.Fatalf("%s: %d classic buckets", path, len(g.GetBucket()))
		}
		for i, b := range g.GetBucket() {
			if rb := r.GetBucket()[i]; b.GetUpperBound() != rb.GetUpperBound() || b.GetCumulativeCount() != rb.GetCumulativeCount() {
				t.Errorf("%s: classic bucket %d: %v, want %v", path, i, b, rb)
			}
		}
		if g.GetSchema() != r.GetSchema() || g.GetZeroThreshold() != r.GetZeroThreshold() || g.GetZeroCount() != r.GetZeroCount() {
			t.Errorf("%s: schema %d zero %g×%d, want %d %g×%d", path, g.GetSchema(), g.GetZeroThreshold(), g.GetZeroCount(), r.GetSchema(), r.GetZeroThreshold(), r.GetZeroCount())
		}
		for _, sign := range []struct {
			name   string
			g, r   []*dto.BucketSpan
			gd, rd []int64
		}{{"positive", g.GetPositiveSpan(), r.GetPositiveSpan(), g.GetPositiveDelta(), r.GetPositiveDelta()},
			{"negative", g.GetNegativeSpan(), r.GetNegativeSpan(), g.GetNegativeDelta(), r.GetNegativeDelta()}} {
			gb, rb := nativeBuckets(sign.g, sign.gd), nativeBuckets(sign.r, sign.rd)
			if len(rb) < 10 || len(gb) != len(rb) {
				t.Errorf("%s: %d %s native buckets, want %d", path, len(gb), sign.name, len(rb))
			}
			for k, n := range rb {
				if gb[k] != n {
					t.Errorf("%s: %s native bucket %d holds %d, want %d", path, sign.name, k, gb[k], n)
				}
			}
		}
	}
}

// collectHistograms is each series' histogram by its first label.
func collectHistograms(t *testing.T, c prometheus.Collector) map[string]*dto.Histogram {
	t.Helper()
	ch := make(chan prometheus.Metric, 10)
	go func() { c.Collect(ch); close(ch) }()
	out := map[string]*dto.Histogram{}
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		out[d.GetLabel()[0].GetValue()] = d.GetHistogram()
	}
	return out
}

// nativeBuckets is the non-empty buckets that spans and deltas encode.
func nativeBuckets(spans []*dto.BucketSpan, deltas []int64) map[int]int64 {
	out := map[int]int64{}
	k, i := 0, 0
	var n int64
	for _, s := range spans {
		k += int(s.GetOffset())
		for range s.GetLength() {
			n += deltas[i]
			if n != 0 {
				out[k] = n
			}
			i, k = i+1, k+1
		}
	}
	return out
}

// TestObserveDelays: a result's sampled delays go into the path's
// histogram once each (the sketch's weights taken back to sampled
// packets), the same from the sketch at hand as from the result's bytes.
func TestObserveDelays(t *testing.T) {
	res, ds := sampledResult()
	fromBytes, atHand := newMetrics(), newMetrics()
	fromBytes.observe(res, nil)
	atHand.observe(res, delays.Sketch(ds, 4))
	a, b := collectHistograms(t, fromBytes.delay)["p"], collectHistograms(t, atHand.delay)["p"]
	if a.GetSampleCount() != uint64(len(ds)) || b.GetSampleCount() != uint64(len(ds)) {
		t.Fatalf("%d and %d delays in the histograms, want %d", a.GetSampleCount(), b.GetSampleCount(), len(ds))
	}
	a.CreatedTimestamp, b.CreatedTimestamp = nil, nil
	if !proto.Equal(a, b) {
		t.Errorf("from the bytes %v\nfrom the sketch at hand %v", a, b)
	}
	// The median delay is 5 ms × (1 + ln 2) = 8.47 ms.
	if b8, b16 := a.GetBucket()[13], a.GetBucket()[14]; b8.GetUpperBound() != 0.008192 || b8.GetCumulativeCount() < 550 || b8.GetCumulativeCount() > 625 || b16.GetCumulativeCount() < 1100 {
		t.Errorf("buckets about the median: %v, %v", b8, b16)
	}
}

// BenchmarkObserveDelays puts an epoch's 1,250 sampled delays into the
// path's histogram from the result's sketch, as each result does.
func BenchmarkObserveDelays(b *testing.B) {
	res, ds := sampledResult()
	m, s := newMetrics(), delays.Sketch(ds, 4)
	for b.Loop() {
		m.observeDelays(res, s)
	}
}

// sampledResult is a result of path p whose sample (rate 1/4) holds
// 1,250 delays of 5 ms and more, exponentially spread, and the delays.
func sampledResult() (*owlv1.PathStats, []int64) {
	rng := rand.New(rand.NewPCG(5, 6))
	ds := make([]int64, 1250)
	for i := range ds {
		ds[i] = int64(5e6 * (1 + rng.ExpFloat64()))
	}
	slices.Sort(ds)
	return &owlv1.PathStats{Path: "p", Status: owlv1.ResultStatus_RESULT_STATUS_OK, SampleRate: 0.25, DelaySketch: delays.Of(ds, 4)}, ds
}

// TestObserveSketchAgrees: ObserveSketch (bins' buckets kept by index)
// gives the histogram that ObserveAll of every bin gives, over sketches
// of delays at two accuracies (the kept slots dropped at the change,
// delays of 1 ns to 10 s filling most of them),
// each observed twice (the second time from the kept slots), with zero
// and negative delays, delays past the kept indices, and weights that
// round some bins to nothing.
func TestObserveSketchAgrees(t *testing.T) {
	bounds := prometheus.ExponentialBuckets(1e-6, 2, 20)
	rng := rand.New(rand.NewPCG(7, 8))
	fast := newWeightedHistogramVec("fast", "h", bounds, 3, "path")
	slow := newWeightedHistogramVec("slow", "h", bounds, 3, "path")
	for round, c := range []struct {
		accuracy, weight float64
	}{{0.01, 0.25}, {0.01, 1}, {0.05, 0.25}, {0.01, 0.1}} {
		sk, err := ddsketch.NewDefaultDDSketch(c.accuracy)
		if err != nil {
			t.Fatal(err)
		}
		for range 3000 {
			sk.Add(float64(int64(5e6 * (1 + rng.ExpFloat64()))))
			sk.Add(math.Exp(23 * rng.Float64())) // 1 ns to 10 s: bins at most indices kept
		}
		for _, v := range []float64{0, 0, -2e5, -7e6, 1e250, 3} {
			if err := sk.Add(v); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			fast.ObserveSketch(sk, 1e9, c.weight, "p")
			slow.ObserveAll(func(add func(float64, uint64)) {
				sk.ForEach(func(value, count float64) bool {
					add(value/1e9, uint64(math.Round(count*c.weight)))
					return false
				})
			}, "p")
		}
		a, b := collectHistograms(t, fast)["p"], collectHistograms(t, slow)["p"]
		a.CreatedTimestamp, b.CreatedTimestamp = nil, nil
		if !proto.Equal(a, b) {
			t.Fatalf("round %d: from kept slots %v\nbin by bin %v", round, a, b)
		}
	}
}
