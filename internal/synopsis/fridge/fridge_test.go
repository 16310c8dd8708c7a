package fridge

import (
	"cmp"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// event is a request or a response of a synthetic trace.
type event struct {
	tNS  int64
	key  uint64
	resp bool
}

// trace is requests every gapNS ns, a share answered after a delay
// log-uniform in [lo, hi] ns, in time order, and the true delays. With
// fill, unanswered requests go on until the last response, so that no
// response comes after the traffic stopped.
func trace(seed uint64, requests int, gapNS int64, answered float64, lo, hi float64, fill bool) ([]event, []int64) {
	r := rand.New(rand.NewPCG(seed, 0xf1d6e))
	var evs []event
	var delays []int64
	var lastNS int64
	for i := range requests {
		key := r.Uint64()
		t := int64(i) * gapNS
		evs = append(evs, event{tNS: t, key: key})
		if r.Float64() < answered {
			d := int64(lo * math.Exp(r.Float64()*math.Log(hi/lo)))
			delays = append(delays, d)
			evs = append(evs, event{tNS: t + d, key: key, resp: true})
			lastNS = max(lastNS, t+d)
		}
	}
	for t := int64(requests) * gapNS; fill && t <= lastNS; t += gapNS {
		evs = append(evs, event{tNS: t, key: r.Uint64()})
	}
	slices.SortStableFunc(evs, func(a, b event) int { return cmp.Compare(a.tNS, b.tNS) })
	return evs, delays
}

// matcher is what Fridge, Set and Simple share.
type matcher interface {
	Request(key uint64, tNS int64)
	Response(key uint64, tNS int64) (Sample, bool)
}

var (
	_ matcher = (*Fridge)(nil)
	_ matcher = (*Set)(nil)
	_ matcher = (*Simple)(nil)
)

func replay(m matcher, evs []event) []Sample {
	var out []Sample
	for _, e := range evs {
		if !e.resp {
			m.Request(e.key, e.tNS)
			continue
		}
		if s, ok := m.Response(e.key, e.tNS); ok {
			out = append(out, s)
		}
	}
	return out
}

// octaves sums weights, variances and true counts by octave of delay.
type octaves struct{ est, variance, truth map[int]float64 }

func byOctave(ws []Weighted, samples []Sample, truth []int64, combinedVar bool, bins *combined) octaves {
	o := octaves{est: map[int]float64{}, variance: map[int]float64{}, truth: map[int]float64{}}
	for _, w := range ws {
		o.est[binOf(w.DelayNS, 1)] += w.Weight
	}
	if combinedVar {
		for b := range bins.stats {
			_, v := bins.estimate(b)
			o.variance[int(math.Floor(float64(b)/float64(bins.binsPerOctave)))] += v
		}
	} else {
		for _, s := range samples {
			o.variance[binOf(s.DelayNS, 1)] += s.Corr2
		}
	}
	for _, d := range truth {
		o.truth[binOf(d, 1)]++
	}
	return o
}

// checkUnbiased fails unless every octave with at least minTruth pairs is
// estimated within 4 standard errors, and z² averages below 3.
func checkUnbiased(t *testing.T, o octaves, minTruth float64) {
	t.Helper()
	var sumZ, sumZ2 float64
	var n int
	for b, f := range o.truth {
		if f < minTruth {
			continue
		}
		se := math.Sqrt(o.variance[b])
		if se == 0 {
			t.Errorf("octave 2^%d ns: %v pairs, no sample", b, f)
			continue
		}
		z := (o.est[b] - f) / se
		sumZ += z
		sumZ2 += z * z
		n++
		if math.Abs(z) > 4 {
			t.Errorf("octave 2^%d ns: estimate %.0f ± %.0f, truth %.0f (z = %.1f)", b, o.est[b], se, f, z)
		}
	}
	t.Logf("%d octaves: mean z %.2f, mean z² %.2f", n, sumZ/float64(n), sumZ2/float64(n))
	if n == 0 || sumZ2/float64(n) > 3 {
		t.Errorf("mean z² %.2f over %d octaves, want ≤ 3", sumZ2/float64(n), n)
	}
}

// TestFridgeUnbiased plays 400,000 requests at 1/µs, half answered after
// 1 µs to 10 ms (1 to 10⁴ requests later), through a fridge of 256
// entries tuned for 3 ms: every octave's count is estimated within a few
// standard errors, while the simple array of the same memory sees the top
// octaves far below their share.
func TestFridgeUnbiased(t *testing.T) {
	evs, truth := trace(1, 400_000, 1000, 0.5, 1e3, 1e7, false)
	p, err := TuneEntryProb(256, 1e6, 3*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(Config{Entries: 256, EntryProb: p, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	samples := replay(f, evs)
	ws, err := Combine(samples, DefaultBinsPerOctave)
	if err != nil {
		t.Fatal(err)
	}
	o := byOctave(ws, samples, truth, false, nil)
	t.Logf("%d samples of %d pairs", len(samples), len(truth))
	checkUnbiased(t, o, 1000)

	s, err := NewSimple(SimpleEntries(256), 7)
	if err != nil {
		t.Fatal(err)
	}
	simple := replay(s, evs)
	top := binOf(int64(1e7)-1, 1)
	var simpleTop, total float64
	for _, smp := range simple {
		total++
		if binOf(smp.DelayNS, 1) == top {
			simpleTop++
		}
	}
	trueShare := o.truth[top] / float64(len(truth))
	if share := simpleTop / total; share > trueShare/4 {
		t.Errorf("simple array: top octave %.4f of samples, truth %.4f: want it biased low", share, trueShare)
	}
	if share := o.est[top] / sum(o.est); math.Abs(share/trueShare-1) > 0.3 {
		t.Errorf("fridge: top octave %.4f of the estimate, truth %.4f", share, trueShare)
	}
}

func sum(m map[int]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}

// TestSetUnbiased plays the same kind of trace through a Set sized for
// 1 µs to 10 ms in 1,024 entries, at the rate it was sized for and at four
// times that rate (lifetimes then last a quarter as long in seconds), with
// the responses after the last request or with traffic going on until the
// last response. Pooled counts stay within a few standard errors of the
// truth in all four; Combine's only where traffic goes on.
func TestSetUnbiased(t *testing.T) {
	z := Sizing{MemoryBytes: 1024 * EntryBytes, Fridges: 4, MinDelay: time.Microsecond, MaxDelay: 10 * time.Millisecond, Seed: 3}
	for _, tc := range []struct {
		name  string
		gapNS int64
		fill  bool
	}{{"sized rate", 1000, false}, {"4× the rate", 250, false}, {"sized rate, filled", 1000, true}, {"4× the rate, filled", 250, true}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSized(z, 1e6)
			if err != nil {
				t.Fatal(err)
			}
			evs, truth := trace(2, 400_000, tc.gapNS, 0.5, 1e3, 1e7, tc.fill)
			samples := replay(s, evs)
			t.Logf("%d samples of %d pairs", len(samples), len(truth))
			pooled := s.Pooled(samples)
			o := byOctave(pooled, nil, truth, false, nil)
			for _, w := range pooled {
				o.variance[binOf(w.DelayNS, 1)] += w.Weight * w.Weight
			}
			t.Run("pooled", func(t *testing.T) { checkUnbiased(t, o, 1000) })
			if !tc.fill {
				return
			}
			bins, err := combineBins(samples, DefaultBinsPerOctave)
			if err != nil {
				t.Fatal(err)
			}
			ws, err := Combine(samples, DefaultBinsPerOctave)
			if err != nil {
				t.Fatal(err)
			}
			t.Run("combined", func(t *testing.T) { checkUnbiased(t, byOctave(ws, samples, truth, true, bins), 1000) })
		})
	}
}

// TestCombineWeights checks the weights of §2.3.2 on a hand-made batch.
func TestCombineWeights(t *testing.T) {
	// One bin: fridge 0 with corrections 2 and 2 (f̂ 4, V̂ 8), fridge 1 with
	// 4 (f̂ 4, V̂ 16): weights 2/3 and 1/3. Another bin holds fridge 1 only.
	in := []Sample{
		{DelayNS: 1000, Corr: 2, Corr2: 4, Fridge: 0},
		{DelayNS: 1001, Corr: 2, Corr2: 4, Fridge: 0},
		{DelayNS: 1002, Corr: 4, Corr2: 16, Fridge: 1},
		{DelayNS: 100_000, Corr: 5, Corr2: 25, Fridge: 1},
	}
	ws, err := Combine(in, DefaultBinsPerOctave)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{4.0 / 3, 4.0 / 3, 4.0 / 3, 5}
	for i, w := range ws {
		if math.Abs(w.Weight-want[i]) > 1e-12 || w.DelayNS != in[i].DelayNS {
			t.Errorf("sample %d: %+v, want weight %v", i, w, want[i])
		}
	}
}

func TestCDF(t *testing.T) {
	c, err := NewCDF([]Weighted{{30, 1}, {10, 1}, {20, 2}, {20, 0}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ q, want float64 }{
		{0, 10}, {0.25, 10}, {0.5, 15}, {0.75, 20}, {0.875, 25}, {1, 30}, {2, 30},
	} {
		if got := c.Quantile(tc.q); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	for _, tc := range []struct{ d, want float64 }{{5, 0}, {10, 0.25}, {15, 0.5}, {20, 0.75}, {40, 1}} {
		if got := c.At(tc.d); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("At(%v) = %v, want %v", tc.d, got, tc.want)
		}
	}
	if c.Total() != 4 {
		t.Errorf("Total() = %v, want 4", c.Total())
	}
}

func TestMatching(t *testing.T) {
	f, err := New(Config{Entries: 64, EntryProb: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	f.Request(42, 1000)
	f.Request(43, 1500)
	if _, ok := f.Response(44, 2000); ok {
		t.Error("a response without request matched")
	}
	s, ok := f.Response(42, 3000)
	if !ok || s.DelayNS != 2000 || s.Insertions != 1 {
		t.Fatalf("Response(42) = %+v, %v, want delay 2000 after 1 insertion", s, ok)
	}
	if want := math.Pow(1-1.0/64, -1); math.Abs(s.Corr-want) > 1e-12 || math.Abs(s.Corr2-want*want) > 1e-12 {
		t.Errorf("correction %v (square %v), want %v", s.Corr, s.Corr2, want)
	}
	if _, ok := f.Response(42, 4000); ok {
		t.Error("a second response matched the same request")
	}
	if _, ok := f.Response(43, 1000); ok {
		t.Error("a response before its request gave a sample")
	}
	if f.MemoryBytes() != 64*EntryBytes || f.Insertions() != 2 {
		t.Errorf("memory %d, insertions %d", f.MemoryBytes(), f.Insertions())
	}
	f.Reset()
	if f.Insertions() != 0 {
		t.Error("Reset kept the counter")
	}
}

func TestEntryProbability(t *testing.T) {
	f, err := New(Config{Entries: 1024, EntryProb: 0.1, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	entered := 0
	for k := range uint64(100_000) {
		f.Request(k, 0)
		if _, ok := f.Response(k, 1); ok {
			entered++
		}
	}
	if got := float64(entered) / 1e5; math.Abs(got-0.1) > 0.005 {
		t.Errorf("%.4f of requests entered, want 0.1", got)
	}
}

func TestValidate(t *testing.T) {
	good := DefaultSizing()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"default", DefaultConfig().Validate(), ""},
		{"one entry", Config{Entries: 1, EntryProb: 1}.Validate(), "entries 1 out of range"},
		{"p 0", Config{Entries: 8, EntryProb: 0}.Validate(), "probability 0 out of range"},
		{"p NaN", Config{Entries: 8, EntryProb: math.NaN()}.Validate(), "probability NaN"},
		{"p > 1", Config{Entries: 8, EntryProb: 1.5}.Validate(), "probability 1.5"},
		{"new", errOf(New(Config{})), "invalid fridge configuration: fridge entries 0"},
		{"no parts", SetConfig{}.Validate(), "set of 0 fridges"},
		{"shares > 1", SetConfig{Parts: []Part{{8, 0.6}, {8, 0.6}}}.Validate(), "add up to 1.2"},
		{"bad part", SetConfig{Parts: []Part{{8, 0.5}, {0, 0.1}}}.Validate(), "fridge 1 of the set"},
		{"new set", errOf(NewSet(SetConfig{Parts: []Part{{2, -1}}})), "invalid fridge configuration"},
		{"sizing default", good.Validate(), ""},
		{"sizing no fridges", Sizing{MemoryBytes: 1 << 20, MinDelay: 1, MaxDelay: 2}.Validate(), "0 fridges"},
		{"sizing memory", Sizing{MemoryBytes: 100, Fridges: 4, MinDelay: 1, MaxDelay: 2}.Validate(), "100 bytes give 1 entries"},
		{"sizing delays", Sizing{MemoryBytes: 1 << 20, Fridges: 4, MinDelay: 2, MaxDelay: 1}.Validate(), "delay range"},
		{"sizing NaN rate", errOf(good.Config(math.NaN())), "request rate of NaN"},
		{"tune", errOf(TuneEntryProb(256, 0, time.Second)), "positive delay and rate"},
		{"simple", errOf(NewSimple(0, 1)), "simple array of 0 entries"},
		{"bins", errOf(Combine(nil, 0)), "0 bins per octave"},
		{"fridge index", errOf(Combine([]Sample{{Corr: 1, Corr2: 1, Fridge: -1}}, 8)), "from fridge -1"},
		{"correction", errOf(Combine([]Sample{{Corr: math.NaN(), Corr2: 1}}, 8)), "correction NaN"},
		{"empty cdf", errOf(NewCDF(nil)), "no positive weight"},
		{"negative weight", errOf(NewCDF([]Weighted{{1, -1}})), "weight 0 is -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch {
			case tc.want == "" && tc.err != nil:
				t.Errorf("unexpected error %v", tc.err)
			case tc.want != "" && (tc.err == nil || !strings.Contains(tc.err.Error(), tc.want)):
				t.Errorf("error %v, want one containing %q", tc.err, tc.want)
			}
		})
	}
	if err := errOf(New(Config{})); !errors.Is(err, ErrConfig) {
		t.Errorf("New error %v does not wrap ErrConfig", err)
	}
}

func errOf[T any](_ T, err error) error { return err }

// TestSizing checks Sizing.Config's rule at rates where the lifetimes are
// met, where the short end is raised, and where the memory outlasts all.
func TestSizing(t *testing.T) {
	z := Sizing{MemoryBytes: 1024 * EntryBytes, Fridges: 4, MinDelay: 10 * time.Microsecond, MaxDelay: 10 * time.Second}
	for _, tc := range []struct {
		name                 string
		rate                 float64
		wantShortest         float64 // lifetime of fridge 0, 0 to skip
		wantLongest, wantSum float64 // 0 to skip the sum
	}{
		{"all met", 1e9, 1e4, 1e10, 0},
		{"short end raised", 1e6, 0, 1e7, 1},
		{"memory outlasts", 50, 1024, 1024, 1},
		{"no traffic", 0, 1024, 1024, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := z.Config(tc.rate)
			if err != nil {
				t.Fatal(err)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			var s float64
			prev := 0.0
			for k, p := range cfg.Parts {
				s += p.EntryProb
				if p.Entries != 256 || p.Lifetime() < prev*(1-1e-9) {
					t.Errorf("part %d %+v: want 256 entries and lifetimes rising", k, p)
				}
				prev = p.Lifetime()
			}
			near := func(a, b float64) bool { return math.Abs(a/b-1) < 1e-6 }
			if tc.wantShortest > 0 && !near(cfg.Parts[0].Lifetime(), tc.wantShortest) {
				t.Errorf("shortest lifetime %v, want %v", cfg.Parts[0].Lifetime(), tc.wantShortest)
			}
			if !near(cfg.Parts[3].Lifetime(), tc.wantLongest) {
				t.Errorf("longest lifetime %v, want %v", cfg.Parts[3].Lifetime(), tc.wantLongest)
			}
			if tc.wantSum > 0 && !near(s, tc.wantSum) {
				t.Errorf("shares add up to %v, want %v", s, tc.wantSum)
			}
			if _, err := NewSet(cfg); err != nil {
				t.Error(err)
			}
		})
	}
}

// keys is a power-of-two table of keys for the benchmarks.
func benchKeys() []uint64 {
	r := rand.New(rand.NewPCG(1, 2))
	keys := make([]uint64, 1<<16)
	for i := range keys {
		keys[i] = r.Uint64()
	}
	return keys
}

// benchMatcher measures requests alone, and a request with the response
// to the request made 512 before it (the response's cost is the
// difference).
func benchMatcher(b *testing.B, newM func() matcher) {
	keys := benchKeys()
	mask := len(keys) - 1
	b.Run("request", func(b *testing.B) {
		m := newM()
		b.ReportAllocs()
		for i := range b.N {
			m.Request(keys[i&mask], int64(i))
		}
	})
	b.Run("request+response", func(b *testing.B) {
		m := newM()
		b.ReportAllocs()
		var n int
		for i := range b.N {
			m.Request(keys[i&mask], int64(i))
			if _, ok := m.Response(keys[(i-512)&mask], int64(i)); ok {
				n++
			}
		}
		b.ReportMetric(float64(n)/float64(b.N), "matched/op")
	})
}

// must panics on a constructor's error: only for the benchmarks' fixed,
// valid configurations.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// BenchmarkFridge is a fridge of 4,096 entries, half the requests
// entering.
func BenchmarkFridge(b *testing.B) {
	benchMatcher(b, func() matcher { return must(New(Config{Entries: 4096, EntryProb: 0.5, Seed: 1})) })
}

// BenchmarkSet is DefaultSizing at 10⁶ requests/s (4 fridges).
func BenchmarkSet(b *testing.B) {
	benchMatcher(b, func() matcher { return must(NewSized(DefaultSizing(), 1e6)) })
}

// BenchmarkSimple is the simple array of the same memory.
func BenchmarkSimple(b *testing.B) {
	benchMatcher(b, func() matcher { return must(NewSimple(SimpleEntries(4096), 1)) })
}

func BenchmarkCombine(b *testing.B) {
	evs, _ := trace(1, 100_000, 1000, 0.5, 1e3, 1e7, false)
	s, err := NewSized(Sizing{MemoryBytes: 1024 * EntryBytes, Fridges: 4, MinDelay: time.Microsecond,
		MaxDelay: 10 * time.Millisecond, Seed: 1}, 1e6)
	if err != nil {
		b.Fatal(err)
	}
	samples := replay(s, evs)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := Combine(samples, DefaultBinsPerOctave); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(samples)), "samples")
}

// TestOfferTakesRetransmissionsOut: a request offered twice before its
// response gives no sample, and the counter counts both offers; one
// offered once is answered as with Request.
func TestOfferTakesRetransmissionsOut(t *testing.T) {
	s, err := NewSet(SetConfig{Parts: []Part{{Entries: 64, EntryProb: 1}}, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if s.Offer(7, 100) || !s.Offer(7, 200) {
		t.Fatal("the second offer of a key was not seen as a retransmission")
	}
	if _, ok := s.Response(7, 300); ok {
		t.Error("a retransmitted request was answered")
	}
	if s.Offer(8, 400) {
		t.Fatal("a new key seen as a retransmission")
	}
	if smp, ok := s.Response(8, 450); !ok || smp.DelayNS != 50 || smp.Insertions != 0 {
		t.Errorf("sample %+v (%v), want 50 ns after 0 insertions", smp, ok)
	}
	if s.Insertions() != 3 {
		t.Errorf("%d insertions counted, want 3", s.Insertions())
	}
}

// TestTakeIsResponse: Take finds what Response finds, with the same delay
// and insertions, in a Set of several fridges where most requests are
// evicted; PooledCorr reads the same values from its table as it computes
// past it.
func TestTakeIsResponse(t *testing.T) {
	evs, _ := trace(5, 20_000, 1000, 0.5, 1e3, 1e7, false)
	a, b := must(NewSized(DefaultSizing(), 1e6)), must(NewSized(DefaultSizing(), 1e6))
	matched, responses := 0, 0
	for i, ev := range evs {
		if !ev.resp {
			if a.Offer(ev.key, ev.tNS) != b.Offer(ev.key, ev.tNS) {
				t.Fatalf("event %d: the sets' offers differ", i)
			}
			continue
		}
		responses++
		s, ok := a.Response(ev.key, ev.tNS)
		d, x, ok2 := b.Take(ev.key, ev.tNS)
		if ok != ok2 || ok && (d != s.DelayNS || x != s.Insertions) {
			t.Fatalf("event %d: Response %+v %v, Take %d %d %v", i, s, ok, d, x, ok2)
		}
		if ok {
			matched++
		}
	}
	if matched < 1000 || matched == responses {
		t.Errorf("%d of %d responses matched: the trace does not test evictions", matched, responses)
	}
	for x := range uint64(2 * pooledSmall) {
		if got, want := a.PooledCorr(x), a.pooledCorr(x); got != want {
			t.Errorf("PooledCorr(%d) = %v, computed %v", x, got, want)
		}
	}
}

// TestExchangeIsTakeThenOffer: Exchange does what Take then Offer do, in
// a small Set where keys often share a slot, come again (retransmissions)
// or go to no fridge.
func TestExchangeIsTakeThenOffer(t *testing.T) {
	cfg := SetConfig{Parts: []Part{{Entries: 8, EntryProb: 0.3}, {Entries: 4, EntryProb: 0.5}}, Seed: 9}
	a, b := must(NewSet(cfg)), must(NewSet(cfg))
	r := rand.New(rand.NewPCG(3, 4))
	matched, again := 0, 0
	for i := range 100_000 {
		resp, req, tNS := r.Uint64N(40), r.Uint64N(40), int64(i)
		d1, x1, ok1 := a.Take(resp, tNS)
		again1 := a.Offer(req, tNS)
		d2, x2, ok2, again2 := b.Exchange(resp, req, tNS)
		if d1 != d2 || x1 != x2 || ok1 != ok2 || again1 != again2 {
			t.Fatalf("step %d: Take, Offer gave %d %d %v %v; Exchange %d %d %v %v", i, d1, x1, ok1, again1, d2, x2, ok2, again2)
		}
		if ok1 {
			matched++
		}
		if again1 {
			again++
		}
	}
	if matched < 1000 || again < 1000 || a.Insertions() != b.Insertions() {
		t.Errorf("%d matched, %d again, insertions %d and %d", matched, again, a.Insertions(), b.Insertions())
	}
}
