package sample

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/owl-latency/owl/internal/synopsis"
)

// TestKeepsRate: the share kept is the rate (within 4 binomial standard
// deviations), and two samples with one configuration keep the same IDs.
func TestKeepsRate(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, rate := range []float64{0.001, 0.01, 0.1, 0.5, 1} {
		cfg, err := ForRate(0x5a, rate)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Rate(); math.Abs(got-rate) > 1e-12 {
			t.Errorf("rate %v: Config.Rate %v", rate, got)
		}
		a, _ := New(cfg)
		b, _ := New(cfg)
		const n = 200_000
		for range n {
			id := r.Uint64()
			if a.Insert(id, 1) != b.Insert(id, 2) {
				t.Fatalf("rate %v: the two sides disagree on %x", rate, id)
			}
		}
		want, sd := rate*n, math.Sqrt(n*rate*(1-rate))
		if math.Abs(float64(a.Len())-want) > 4*sd+1e-9 {
			t.Errorf("rate %v: kept %d of %d, want %.0f ± %.0f", rate, a.Len(), n, want, 4*sd)
		}
	}
	for _, bad := range []float64{0, -1, 1.5, math.NaN()} {
		if _, err := ForRate(1, bad); err == nil {
			t.Errorf("rate %v accepted", bad)
		}
	}
	// Another seed keeps other packets.
	c1, _ := ForRate(1, 0.5)
	c2, _ := ForRate(2, 0.5)
	same := 0
	for i := range 10_000 {
		if c1.Keeps(uint64(i)*0x9e3779b97f4a7c15) == c2.Keeps(uint64(i)*0x9e3779b97f4a7c15) {
			same++
		}
	}
	if same < 4_500 || same > 5_500 {
		t.Errorf("seeds 1 and 2 agree on %d of 10,000 packets, want about half", same)
	}
}

// TestShiftsNest: samples at shifts 0–12 of one seed are nested, Halve
// and Narrowed give what a sample taken at the lower rate would hold, and
// Merge of two workers' shares at two rates is the union at the lower.
func TestShiftsNest(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ids := make([]uint64, 50_000)
	for i := range ids {
		ids[i] = r.Uint64()
	}
	at := func(shift int, part func(i int) bool) *Sample {
		cfg, err := ForShift(0x77, shift)
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Shift(); got != shift {
			t.Fatalf("ForShift(%d).Shift() = %d", shift, got)
		}
		s, _ := New(cfg)
		for i, id := range ids {
			if part(i) {
				s.Insert(id, int64(i))
			}
		}
		return s
	}
	all := func(int) bool { return true }
	prev := at(0, all)
	if prev.Len() != len(ids) {
		t.Fatalf("shift 0 kept %d of %d", prev.Len(), len(ids))
	}
	for shift := 1; shift <= 12; shift++ {
		want := at(shift, all)
		halved := at(shift-1, all)
		halved.Halve()
		narrowed, err := prev.Narrowed(want.Config())
		if err != nil {
			t.Fatal(err)
		}
		for name, got := range map[string]*Sample{"Halve": halved, "Narrowed": narrowed} {
			if got.Config() != want.Config() || !slices.Equal(got.Entries(), want.Entries()) {
				t.Errorf("shift %d: %s gives %d entries (threshold %x), a sample at that rate %d (%x)",
					shift, name, got.Len(), got.Config().Threshold, want.Len(), want.Config().Threshold)
			}
		}
		low := at(shift, func(i int) bool { return i%2 == 0 })
		high := at(shift-1, func(i int) bool { return i%2 == 1 })
		if err := high.Merge(low); err != nil {
			t.Fatal(err)
		}
		if high.Config() != want.Config() || !slices.Equal(high.Entries(), want.Entries()) {
			t.Errorf("shift %d: merging shares at shifts %d and %d gives %d entries, want %d", shift, shift-1, shift, high.Len(), want.Len())
		}
		prev = want
	}
	if _, err := prev.Narrowed(Config{Seed: 0x77, Threshold: math.MaxUint64}); !errors.Is(err, synopsis.ErrMismatch) {
		t.Errorf("narrowing to a higher rate: %v, want a mismatch", err)
	}
	other, _ := ForShift(0x78, 1)
	o, _ := New(other)
	if err := prev.Merge(o); !errors.Is(err, synopsis.ErrMismatch) {
		t.Errorf("merging another seed: %v, want a mismatch", err)
	}
	if _, err := ForShift(1, MaxShift+1); err == nil {
		t.Error("shift 64 accepted")
	}
}

func TestWireRoundTrip(t *testing.T) {
	cfg, _ := ForRate(7, 0.3)
	s, _ := New(cfg)
	r := rand.New(rand.NewPCG(3, 4))
	for s.Len() < 1000 {
		s.Insert(r.Uint64(), r.Int64N(1e9))
	}
	// Copies of one ID, in time order.
	key := s.Entries()[10].Key
	s.entries = append(s.entries, Entry{Key: key, OffsetNS: 2e9}, Entry{Key: key, OffsetNS: 3e9})
	s.sorted = false
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Config() != cfg || !slices.Equal(got.Entries(), s.Entries()) {
		t.Fatal("round trip differs")
	}
	t.Logf("%d entries in %d bytes (%.1f bytes each)", s.Len(), len(b), float64(len(b))/float64(s.Len()))
	for name, bad := range map[string][]byte{
		"truncated": b[:len(b)-1],
		"trailing":  append(slices.Clone(b), 0),
		"empty":     nil,
		"other kind": func() []byte {
			c := slices.Clone(b)
			c[3] = byte(synopsis.KindLDA)
			return c
		}(),
		"huge count": func() []byte {
			c := slices.Clone(b[:21])
			return append(c, 0xff, 0xff, 0xff, 0xff, 0x0f)
		}(),
	} {
		if _, err := Decode(bad); !errors.Is(err, synopsis.ErrFormat) {
			t.Errorf("%s: %v, want a format error", name, err)
		}
	}

	// Decoded again into one sample: a smaller one in its storage, a
	// failure leaving it empty, then the first again.
	small, _ := New(cfg)
	small.entries = append(small.entries, s.Entries()[:100]...)
	sb, _ := small.MarshalBinary()
	into := &Sample{}
	for i, w := range []struct {
		b    []byte
		want *Sample
	}{{b, s}, {sb, small}, {b[:len(b)-1], nil}, {b, s}} {
		at := unsafe.SliceData(into.entries)
		err := into.UnmarshalBinary(w.b)
		switch {
		case w.want == nil && (err == nil || into.Len() != 0):
			t.Errorf("into %d: %v, %d entries left, want a format error and none", i, err, into.Len())
		case w.want != nil && (err != nil || into.Config() != cfg || !slices.Equal(into.Entries(), w.want.Entries())):
			t.Errorf("into %d: %v, or entries differ", i, err)
		case i > 0 && unsafe.SliceData(into.entries) != at:
			t.Errorf("into %d: decoded into new storage", i)
		}
	}
}

// TestJoinExact: the join gives every delivered sampled packet's delay,
// crossers through the next epoch's sample, copies in order, and leaves
// out copies that cannot be told apart.
func TestJoinExact(t *testing.T) {
	cfg, _ := ForRate(9, 0.2)
	const epoch = int64(1e9)
	up, _ := New(cfg)
	down, _ := New(cfg)
	next, _ := New(cfg)
	r := rand.New(rand.NewPCG(5, 6))
	var want []int64
	lost, crossed := 0, 0
	for len(want) < 3000 {
		id, at := r.Uint64(), r.Int64N(epoch)
		if !up.Insert(id, at) {
			continue
		}
		delay := 20_000 + r.Int64N(200_000)
		switch {
		case r.Float64() < 0.01:
			lost++
			continue
		case at+delay >= epoch:
			next.Insert(id, at+delay-epoch)
			crossed++
		default:
			down.Insert(id, at+delay)
		}
		want = append(want, delay)
	}
	// A packet sent twice, each copy arriving before the next was sent:
	// two delays. One whose copies both arrived after the second sending
	// may have overtaken each other: left out, as is one whose second copy
	// arrived before it was sent.
	kept := func() uint64 {
		for {
			if id := r.Uint64(); cfg.Keeps(id) {
				return id
			}
		}
	}
	dup := kept()
	up.Insert(dup, 100)
	up.Insert(dup, 5000)
	down.Insert(dup, 1100)
	down.Insert(dup, 5500)
	want = append(want, 1000, 500)
	late := kept()
	up.Insert(late, 100)
	up.Insert(late, 200)
	down.Insert(late, 300)
	down.Insert(late, 400)
	tangled := kept()
	up.Insert(tangled, 100)
	up.Insert(tangled, 200)
	down.Insert(tangled, 150)
	down.Insert(tangled, 160)
	// Sent three times, 10 µs apart, the third copy lost: only its loss
	// leaves each arrival after its sending (RDA's rule).
	thrice := kept()
	for _, at := range []int64{10_000, 20_000, 30_000} {
		up.Insert(thrice, at)
	}
	down.Insert(thrice, 12_000)
	down.Insert(thrice, 22_000)
	want = append(want, 2000, 2000)
	// Sent once, arriving twice: the earlier copy's delay, one duplicate.
	twice := kept()
	up.Insert(twice, 40_000)
	down.Insert(twice, 43_000)
	down.Insert(twice, 43_500)
	want = append(want, 3000)
	// Sent twice, one arriving between the two sendings and after both:
	// either copy may be the lost one, so none is guessed.
	either := kept()
	up.Insert(either, 50_000)
	up.Insert(either, 60_000)
	down.Insert(either, 65_000)
	// Sent once and seen once, before its sending: no delay to give.
	early := kept()
	up.Insert(early, 70_000)
	down.Insert(early, 69_000)

	j, err := Join(up, down, 0)
	if err != nil {
		t.Fatal(err)
	}
	if j.Ambiguous != 4+4+3+2 || j.Duplicates != 1 {
		t.Errorf("ambiguous %d, duplicates %d; want 4 late and 4 tangled copies, 3 of the packet that may have lost either copy, 2 of the one seen before it was sent, one duplicate", j.Ambiguous, j.Duplicates)
	}
	if len(j.UpLeft) != crossed+lost+1 {
		t.Errorf("%d upstream left over, want %d crossed + %d lost + the lost copy", len(j.UpLeft), crossed, lost)
	}
	jn, err := Join(Remainder(cfg, j, j.UpLeft), next, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if len(jn.UpLeft) != lost+1 || len(jn.DownLeft) != 0 {
		t.Errorf("after the next epoch: %d up left (want %d lost and the lost copy), %d down left", len(jn.UpLeft), lost, len(jn.DownLeft))
	}
	got := append(slices.Clone(j.Delays), jn.Delays...)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%d delays, want %d; not the true ones", len(got), len(want))
	}
	other, _ := ForRate(10, 0.2)
	o, _ := New(other)
	if _, err := Join(up, o, 0); !errors.Is(err, synopsis.ErrMismatch) {
		t.Errorf("join of two configurations: %v", err)
	}
}

// TestQuantileCoverage: over many epochs of Weibull delays with a 1% slow
// mode, sampled at 5%, the 95% intervals hold the epoch's true p50, p90
// and p99 in about 95% of epochs (at least 93%), and at rate 1 the
// quantiles are exact.
func TestQuantileCoverage(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	qs := []float64{0.5, 0.9, 0.99}
	const epochs, packets, rate = 400, 20_000, 0.05
	cfg, _ := ForRate(13, rate)
	held := make([]int, len(qs))
	for range epochs {
		pop := make([]int64, 0, packets)
		var kept []int64
		for range packets {
			d := int64(20_000 + 50_000*math.Pow(-math.Log(1-r.Float64()), 1/0.65))
			if r.Float64() < 0.01 {
				d += 5_000_000 // the slow mode
			}
			pop = append(pop, d)
			if cfg.Keeps(r.Uint64()) {
				kept = append(kept, d)
			}
		}
		slices.Sort(pop)
		slices.Sort(kept)
		est, err := Quantiles(kept, qs, 0.95, false)
		if err != nil {
			t.Fatal(err)
		}
		truth, _ := Quantiles(pop, qs, 0.95, true)
		for i := range qs {
			if est[i].Lo <= truth[i].Value && truth[i].Value <= est[i].Hi {
				held[i]++
			}
		}
	}
	for i, q := range qs {
		share := float64(held[i]) / epochs
		t.Logf("p%g: true quantile inside the 95%% interval in %.1f%% of %d epochs", 100*q, 100*share, epochs)
		if share < 0.93 {
			t.Errorf("p%g: coverage %.1f%% < 93%%", 100*q, 100*share)
		}
	}
	// Rate 1: the sample is the population.
	pop := []int64{5, 1, 4, 2, 3}
	slices.Sort(pop)
	ex, _ := Quantiles(pop, []float64{0.5, 0.99}, 0.95, true)
	if ex[0].Value != 3 || ex[1].Value != 5 || !ex[0].Exact || ex[0].Lo != 3 || ex[0].Hi != 3 {
		t.Errorf("exact quantiles %+v", ex)
	}
	if _, err := Quantiles(nil, []float64{0.5}, 0.95, false); err == nil {
		t.Error("quantile of nothing")
	}
}

// TestQuantileConfidence: an interval's stated confidence is the share
// of samples whose interval holds the population quantile, also where
// too few delays put an end at the sample's extreme (p99 of 100 delays,
// p99.9 of 1,000: about 63%, not 95%): within 3 points over 3,000 samples
// of each size, and at least 0.95 where the sample is large enough.
func TestQuantileConfidence(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, c := range []struct {
		n     int
		q     float64
		under bool // too few for 95%
	}{{20, 0.5, false}, {20, 0.9, true}, {50, 0.9, false}, {100, 0.99, true}, {400, 0.99, false}, {1000, 0.999, true}} {
		const trials = 3000
		xi := -math.Log(1 - c.q) // the exponential distribution's quantile
		held, stated := 0, 0.0
		for range trials {
			d := make([]int64, c.n)
			for i := range d {
				d[i] = int64(1e6 * r.ExpFloat64())
			}
			slices.Sort(d)
			qs, err := Quantiles(d, []float64{c.q}, 0.95, false)
			if err != nil {
				t.Fatal(err)
			}
			if float64(qs[0].Lo) <= 1e6*xi && 1e6*xi <= float64(qs[0].Hi) {
				held++
			}
			stated = qs[0].Confidence
		}
		got := float64(held) / trials
		t.Logf("p%g of %d delays: stated %.3f, held in %.3f", 100*c.q, c.n, stated, got)
		if math.Abs(got-stated) > 0.03 || c.under != (stated < 0.95) {
			t.Errorf("p%g of %d delays: stated confidence %.3f, held in %.3f of %d samples", 100*c.q, c.n, stated, got, trials)
		}
	}
}

func FuzzDecode(f *testing.F) {
	cfg, _ := ForRate(7, 0.5)
	s, _ := New(cfg)
	for i := range 50 {
		s.Insert(uint64(i)*0x9e3779b97f4a7c15, int64(i)*1000)
	}
	b, _ := s.MarshalBinary()
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add(marshalIDs(cfg, []uint64{0x9e3779b97f4a7c15, 0x3c6ef372fe94f82a}, []int64{5, 7}))
	_ = s.SetKeyBits(24)
	b, _ = s.MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Decode(b)
		if err != nil {
			if !errors.Is(err, synopsis.ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		if cap(s.entries) > 8*len(b) || cap(s.entries) > MaxEntries {
			t.Fatalf("%d entries' room for %d bytes", cap(s.entries), len(b))
		}
		// Varints need not be minimal in the input: compare what the
		// bytes say, not the bytes.
		again, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(again)
		if err != nil || back.Config() != s.Config() || back.KeyBits() != s.KeyBits() || !slices.Equal(back.Entries(), s.Entries()) {
			t.Fatalf("re-encoding differs (%v)", err)
		}
	})
}

// BenchmarkInsert is the per-packet cost of offering packets to a sample
// (the probe's cost of sampling) at a low rate and at rate 1, and of the
// join per joined packet.
func BenchmarkInsert(b *testing.B) {
	for _, rate := range []float64{0.01, 1} {
		b.Run(fmt.Sprintf("rate=%g", rate), func(b *testing.B) {
			cfg, _ := ForRate(1, rate)
			s, _ := New(cfg)
			id := uint64(0)
			for b.Loop() {
				id += 0x9e3779b97f4a7c15
				if s.Insert(id, int64(id>>40)) && s.Len() >= 1<<16 {
					s.Reset()
				}
			}
		})
	}
	b.Run("join", func(b *testing.B) {
		cfg, _ := ForRate(1, 1)
		up, _ := New(cfg)
		down, _ := New(cfg)
		for i := range 10_000 {
			id := uint64(i) * 0x9e3779b97f4a7c15
			up.Insert(id, int64(i))
			down.Insert(id, int64(i)+50_000)
		}
		for b.Loop() {
			up.sorted, down.sorted = false, false
			if _, err := Join(up, down, 0); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10_000, "ns/joined")
	})
}

// marshalIDs is wire version 1, as probes before keys sent it: by ID, the
// first whole and the others as differences, each with its offset.
func marshalIDs(cfg Config, ids []uint64, offs []int64) []byte {
	type e struct {
		id  uint64
		off int64
	}
	es := make([]e, len(ids))
	for i := range ids {
		es[i] = e{ids[i], offs[i]}
	}
	slices.SortFunc(es, func(a, b e) int { return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.off, b.off)) })
	b := synopsis.AppendHeader(nil, synopsis.KindSample, versionIDs)
	b = binary.LittleEndian.AppendUint64(b, cfg.Seed)
	b = binary.LittleEndian.AppendUint64(b, cfg.Threshold)
	b = binary.AppendUvarint(b, uint64(len(es)))
	for i, x := range es {
		if i == 0 {
			b = binary.LittleEndian.AppendUint64(b, x.id)
		} else {
			b = binary.AppendUvarint(b, x.id-es[i-1].id)
		}
		b = binary.AppendVarint(b, x.off)
	}
	return b
}

// A sample from a probe that sends IDs (version 1) decodes to the keys a
// probe that sends keys would have sent, so that the two join; and a
// version-1 sample is refused where it names an ID the rate does not keep.
func TestDecodeIDs(t *testing.T) {
	cfg, _ := ForShift(5, 2)
	r := rand.New(rand.NewPCG(8, 9))
	s, _ := New(cfg)
	var ids []uint64
	var offs []int64
	for len(ids) < 500 {
		id, off := r.Uint64(), r.Int64N(1e9)
		if s.Insert(id, off) {
			ids, offs = append(ids, id), append(offs, off)
		}
	}
	got, err := Decode(marshalIDs(cfg, ids, offs))
	if err != nil {
		t.Fatal(err)
	}
	if got.Config() != cfg || !slices.Equal(got.Entries(), s.Entries()) {
		t.Fatal("version 1 decodes to other entries than Insert keeps")
	}
	j, err := Join(got, s, 0)
	if err != nil || len(j.Delays) != 500 || len(j.UpLeft)+len(j.DownLeft) != 0 {
		t.Fatalf("joined %d of 500 (%v)", len(j.Delays), err)
	}
	var out uint64
	for out = 1; cfg.Keeps(out); out++ {
	}
	if _, err := Decode(marshalIDs(cfg, append(ids, out), append(offs, 0))); !errors.Is(err, synopsis.ErrFormat) {
		t.Errorf("an ID the rate does not keep: %v", err)
	}
}

// Version 2 refuses a bit stream that ends early, runs a key past its
// bits, or names a Rice parameter or offset width out of range.
func TestDecodeKeysRejects(t *testing.T) {
	cfg, _ := ForShift(5, 1)
	s, _ := New(cfg)
	for i := range 40 {
		s.Insert(uint64(i)*0x9e3779b97f4a7c15, int64(i)*777)
	}
	b, _ := s.MarshalBinary()
	// The envelope (5 bytes), seed, threshold, count (one byte under 128):
	// then the Rice parameter, the least offset (0: one byte), the width.
	n := 5 + 8 + 8 + 1
	if b[n+1] != 0 {
		t.Fatalf("least offset %d, want 0", b[n+1])
	}
	set := func(i int, v byte) []byte { c := slices.Clone(b); c[i] = v; return c }
	for name, bad := range map[string][]byte{
		"truncated": b[:len(b)-2],
		"rice 48":   set(n, KeyBits),
		"width 64":  set(n+2, 64),
		// Rice parameter 0, offsets of 0 bits: keys of ones only run
		// past 48 bits.
		"key too far": append(slices.Clone(b[:n]), 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff),
	} {
		if _, err := Decode(bad); !errors.Is(err, synopsis.ErrFormat) {
			t.Errorf("%s: %v, want a format error", name, err)
		}
	}
}

// ShiftFor gives an epoch as busy as peak about target entries: within a
// factor √2 either way once peak reaches target/√2, and rate 1 below.
func TestShiftFor(t *testing.T) {
	for _, c := range []struct {
		peak, target uint64
		want         int
	}{{0, 1000, 0}, {1000, 1000, 0}, {1414, 1000, 0}, {1415, 1000, 1}, {10_000, 1000, 3}, {100_000, 1000, 7}, {1_000_000, 1000, 10}} {
		if got := ShiftFor(c.peak, c.target); got != c.want {
			t.Errorf("ShiftFor(%d, %d) = %d, want %d", c.peak, c.target, got, c.want)
		}
	}
	for peak := uint64(708); peak < 1<<40; peak = peak*3/2 + 1 {
		n := float64(peak >> ShiftFor(peak, 1000))
		if n <= 1000/math.Sqrt2-1 || n > 1000*math.Sqrt2 {
			t.Errorf("peak %d: %v entries, not within a factor √2 of 1,000", peak, n)
		}
	}
}

// TestFlowPositions checks that the positions a sender gives of each
// flow's entries decode, on a decoded copy of its sample, to exactly the
// entries of that flow, and that bad positions are refused.
func TestFlowPositions(t *testing.T) {
	cfg, _ := ForShift(5, 2)
	s, _ := New(cfg)
	r := rand.New(rand.NewPCG(8, 9))
	want := map[uint64]map[uint64]bool{} // flow → keys
	for i := 0; i < 20_000; i++ {
		id, flow := r.Uint64(), uint64(r.IntN(40))
		if s.InsertFlow(id, flow, r.Int64N(1e9)) {
			if want[flow] == nil {
				want[flow] = map[uint64]bool{}
			}
			want[flow][cfg.Key(id)] = true
		}
	}
	flows := []uint64{3, 17, 39, 1000} // 1000: no entry
	gaps := s.FlowPositions(flows)
	b, _ := s.MarshalBinary()
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	es := got.Entries()
	for i, f := range flows {
		pos, err := Positions(gaps[i], len(es))
		if err != nil {
			t.Fatal(err)
		}
		if len(pos) != len(want[f]) {
			t.Fatalf("flow %d: %d positions, %d entries", f, len(pos), len(want[f]))
		}
		for _, p := range pos {
			if !want[f][es[p].Key] {
				t.Fatalf("flow %d: position %d holds a key of another flow", f, p)
			}
		}
	}
	for _, bad := range [][]uint32{{uint32(len(es))}, {0, 0}, {3, 1 << 31, 1 << 31}} {
		if _, err := Positions(bad, len(es)); err == nil {
			t.Errorf("positions %v of %d entries accepted", bad, len(es))
		}
	}
	// Appended: after what the array holds, in its storage.
	buf := make([]int, 1, 1000)
	all, err := AppendPositions(buf, gaps[0], len(es))
	first, _ := Positions(gaps[0], len(es))
	if err != nil || &all[0] != &buf[0] || all[0] != 0 || !slices.Equal(all[1:], first) {
		t.Errorf("appended positions: %v, %v", all, err)
	}
}

// TestKeyWidths: a sample's keys narrowed to fewer bits travel in wire
// version 3, about 48 − b bits an entry shorter, and decode to the same
// entries; a join of a narrowed side with a full one narrows the other
// and gives the same delays as two full sides; positions of flows stay
// true; widths out of range are refused.
func TestKeyWidths(t *testing.T) {
	cfg, _ := ForShift(31, 3)
	r := rand.New(rand.NewPCG(31, 32))
	up, _ := New(cfg)
	down, _ := New(cfg)
	for i := 0; i < 10_000; i++ {
		id, at := r.Uint64(), r.Int64N(900_000_000)
		up.InsertFlow(id, uint64(i%7), at)
		if i%100 != 0 {
			down.Insert(id, at+1000+r.Int64N(500_000))
		}
	}
	full, _ := Join(up, down, 0)
	wide, _ := up.MarshalBinary()
	narrow, _ := Decode(wide)
	if err := narrow.SetKeyBits(35); err != nil {
		t.Fatal(err)
	}
	b, _ := narrow.MarshalBinary()
	saved := float64(len(wide)-len(b)) * 8 / float64(up.Len())
	t.Logf("%d entries: %d bytes with 48-bit keys, %d with 35 (%.1f bits an entry less)", up.Len(), len(wide), len(b), saved)
	if b[4] != versionKeyWidths || saved < 12 || saved > 14 {
		t.Errorf("version %d, %.1f bits an entry saved, want 13", b[4], saved)
	}
	back, err := Decode(b)
	if err != nil || back.KeyBits() != 35 || !slices.Equal(back.Entries(), narrow.Entries()) {
		t.Fatalf("narrowed sample did not round-trip: %v", err)
	}
	j, err := Join(back, down, 0)
	if err != nil {
		t.Fatal(err)
	}
	if j.KeyBits != 35 || !slices.Equal(j.Delays, full.Delays) || len(j.UpLeft) != len(full.UpLeft) {
		t.Errorf("join at 35 bits: %d delays, %d lost; at 48: %d, %d", len(j.Delays), len(j.UpLeft), len(full.Delays), len(full.UpLeft))
	}
	// Positions taken after narrowing name the flows' entries in the
	// narrowed wire form.
	n2, _ := Decode(wide)
	for i, e := range up.Entries() {
		n2.entries[i].Flow = e.Flow
	}
	_ = n2.SetKeyBits(35)
	gaps := n2.FlowPositions([]uint64{3})
	nb, _ := n2.MarshalBinary()
	got, _ := Decode(nb)
	pos, err := Positions(gaps[0], got.Len())
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, e := range up.Entries() {
		if e.Flow == 3 {
			want++
		}
	}
	if len(pos) != want {
		t.Errorf("%d positions of flow 3, %d entries", len(pos), want)
	}
	for _, w := range []int{MinKeyBits - 1, 36} {
		if back.SetKeyBits(w) == nil {
			t.Errorf("width %d accepted from %d", w, back.KeyBits())
		}
	}
	bad := slices.Clone(b)
	for _, w := range []byte{MinKeyBits - 1, KeyBits} {
		bad[4+1+8+8] = w // after the envelope, seed and threshold
		if _, err := Decode(bad); !errors.Is(err, synopsis.ErrFormat) {
			t.Errorf("key width %d decoded: %v", w, err)
		}
	}
}

// BenchmarkDecode reads a side's sample of 1,250 packets of an epoch
// (5,000 packets at rate 1/4, keys 2 + 32 bits wide), as a collector does
// for every report.
func BenchmarkDecode(b *testing.B) {
	cfg, _ := ForShift(1, 2)
	s, _ := New(cfg)
	rng := rand.New(rand.NewPCG(1, 1))
	for s.Len() < 1250 {
		s.Insert(rng.Uint64(), rng.Int64N(1e9))
	}
	if err := s.SetKeyBits(34); err != nil {
		b.Fatal(err)
	}
	wire, _ := s.MarshalBinary()
	b.SetBytes(int64(len(wire)))
	for b.Loop() {
		if _, err := Decode(wire); err != nil {
			b.Fatal(err)
		}
	}
}
