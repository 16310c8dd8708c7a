package rda

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/owl-latency/owl/internal/synopsis"
	"github.com/owl-latency/owl/internal/synopsis/synopsistest"
)

func TestInsertRemoveSubtract(t *testing.T) {
	cfg := DefaultConfig()
	a, _ := New(cfg)
	b, _ := New(cfg)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 1000; i++ {
		id, off := r.Uint64(), r.Int64N(1e9)
		a.Insert(id, off)
		b.Insert(id, off+500)
	}
	d, err := b.Subtract(a)
	if err != nil {
		t.Fatal(err)
	}
	var sum, n int64
	for _, k := range d.Buckets(0) {
		if k.ID != 0 || k.Count != 0 || k.Check != 0 {
			t.Fatal("common packets did not cancel")
		}
		sum += k.SumNS
	}
	for _, k := range a.Buckets(1) {
		n += k.Count
	}
	if sum != 500*1000 || n != 1000 || a.Packets() != 1000 {
		t.Fatalf("sum %d count %d", sum, n)
	}
	// Insert then Remove leaves nothing behind.
	c, _ := New(cfg)
	c.Insert(42, 7)
	c.Remove(42, 7)
	for _, k := range c.buckets {
		if !k.Empty() || k.SumNS != 0 {
			t.Fatal("remove did not undo insert")
		}
	}
}

func TestPureAndIndex(t *testing.T) {
	for _, banks := range []int{1, 2, 3, 4} {
		cfg := Config{Banks: banks, Buckets: 97, Seed: 5, Check: true}
		r, _ := New(cfg)
		r.Insert(12345, 10)
		for l := 0; l < banks; l++ {
			i := r.Index(l, 12345)
			if !r.Pure(l, i) {
				t.Errorf("banks %d: single packet not pure in bank %d", banks, l)
			}
			if r.Buckets(l)[i].ID != 12345 {
				t.Errorf("banks %d: bank %d does not hold the packet at its index", banks, l)
			}
		}
	}
}

func TestMergeIsExact(t *testing.T) {
	cfg := DefaultConfig()
	whole, _ := New(cfg)
	s1, _ := New(cfg)
	s2, _ := New(cfg)
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 5000; i++ {
		id, off := r.Uint64(), r.Int64N(1e9)
		whole.Insert(id, off)
		if i%2 == 0 {
			s1.Insert(id, off)
		} else {
			s2.Insert(id, off)
		}
	}
	if err := s1.Merge(s2); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(whole.buckets, s1.buckets) {
		t.Fatal("merged shards differ from the whole")
	}
	other := cfg
	other.Buckets = 10
	o, _ := New(other)
	if err := whole.Merge(o); !errors.Is(err, synopsis.ErrMismatch) {
		t.Errorf("merge of another size: %v", err)
	}
}

func TestWireRoundTrip(t *testing.T) {
	for _, check := range []bool{true, false} {
		cfg := Config{Banks: 2, Buckets: 300, Seed: 9, Check: check}
		r, _ := New(cfg)
		rng := rand.New(rand.NewPCG(5, 6))
		for i := 0; i < 3000; i++ {
			r.Insert(rng.Uint64(), rng.Int64N(1e9))
		}
		r.Remove(1, 5) // negative counts survive the trip
		b, _ := r.MarshalBinary()
		got, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if got.cfg != cfg || !slices.Equal(got.buckets, r.buckets) {
			t.Fatal("round trip differs")
		}
		t.Logf("check=%t: %d bytes for %d buckets and 3000 packets (%.1f per bucket)", check, len(b), 600, float64(len(b))/600)
	}
}

func TestDecodeRejects(t *testing.T) {
	r, _ := New(Config{Banks: 2, Buckets: 4, Seed: 1, Check: true})
	r.Insert(7, 7)
	good, _ := r.MarshalBinary()
	bad := map[string][]byte{
		"empty":       nil,
		"header":      good[:5],
		"kind":        append([]byte("OWLL"), good[4:]...),
		"truncated":   good[:len(good)-1],
		"trailing":    append(append([]byte{}, good...), 0),
		"zero banks":  append(append([]byte{}, good[:5]...), append([]byte{0}, good[6:]...)...),
		"many banks":  append(append([]byte{}, good[:5]...), append([]byte{9}, good[6:]...)...),
		"check value": append(append([]byte{}, good[:6]...), append([]byte{2}, good[7:]...)...),
		"huge":        append(append([]byte{}, good[:7]...), 0xff, 0xff, 0xff, 0x7f),
	}
	for name, b := range bad {
		if _, err := Decode(b); !errors.Is(err, synopsis.ErrFormat) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestFalseDecodeRate measures how often an impure bucket with count ±1
// passes the purity test, over 10⁶ buckets, with the paper's test (index and
// count) and with the 32-bit check added.
func TestFalseDecodeRate(t *testing.T) {
	const m = 64
	const trials = 1_000_000
	base := Config{Banks: 1, Buckets: m, Seed: 11}
	// IDs that land in each bucket of bank 0.
	pool := make([][]uint64, m)
	r := rand.New(rand.NewPCG(7, 8))
	probe, _ := New(base)
	for filled := 0; filled < m; {
		id := r.Uint64()
		i := probe.Index(0, id)
		if len(pool[i]) < 64 {
			pool[i] = append(pool[i], id)
			if len(pool[i]) == 64 {
				filled++
			}
		}
	}
	for _, check := range []bool{false, true} {
		cfg := base
		cfg.Check = check
		candidates, passed := 0, 0
		for n := 0; n < trials; n++ {
			x, _ := New(cfg)
			i := r.IntN(m)
			k := 3 + 2*r.IntN(2) // 3 or 5 distinct packets, signs summing to ±1
			seen := map[uint64]bool{}
			sign := int64(1)
			for j := 0; j < k; {
				id := pool[i][r.IntN(len(pool[i]))]
				if seen[id] {
					continue
				}
				seen[id] = true
				x.add(id, 1, sign)
				sign = -sign
				j++
			}
			candidates++
			if x.Pure(0, i) {
				passed++
			}
		}
		rate := float64(passed) / float64(candidates)
		t.Logf("purity test %s: %d of %d impure buckets with count ±1 passed (rate %.2e; 1/m = %.2e)",
			map[bool]string{false: "index+count (paper)", true: "index+count+32-bit check"}[check], passed, candidates, rate, 1.0/m)
		if !check && (rate < 0.5/m || rate > 2.0/m) {
			t.Errorf("paper's test: rate %.3e, expected about 1/m = %.3e", rate, 1.0/m)
		}
		if check && passed > 0 {
			t.Errorf("with the check field %d impure buckets passed", passed)
		}
	}
}

func FuzzDecode(f *testing.F) {
	r, _ := New(Config{Banks: 2, Buckets: 8, Seed: 1, Check: true})
	for i := uint64(1); i < 20; i++ {
		r.Insert(i*0x9e3779b97f4a7c15, int64(i))
	}
	b, _ := r.MarshalBinary()
	f.Add(b)
	r2, _ := New(Config{Banks: 3, Buckets: 5, Seed: 2})
	r2.Remove(3, 4)
	b2, _ := r2.MarshalBinary()
	f.Add(b2)
	// A header announcing the most buckets the limits allow, and none.
	huge := synopsis.AppendHeader(nil, synopsis.KindRDA, version)
	huge = binary.AppendUvarint(append(huge, MaxBanks, 1), MaxBuckets)
	f.Add(binary.LittleEndian.AppendUint64(huge, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r *RDA
		var err error
		// A bucket takes at least 10 bytes on the wire and 32 decoded.
		if limit := uint64(4*len(b) + 16<<10); synopsistest.Allocated(limit, func() { r, err = Decode(b) }) > limit {
			t.Fatalf("decoding %d bytes allocated over %d", len(b), limit)
		}
		if cfg, cerr := DecodeConfig(b); err == nil && (cerr != nil || cfg != r.cfg) {
			t.Fatalf("DecodeConfig says %+v, %v; Decode %+v", cfg, cerr, r.cfg)
		}
		if err != nil {
			if !errors.Is(err, synopsis.ErrFormat) {
				t.Fatalf("%v does not wrap ErrFormat", err)
			}
			return
		}
		again, _ := r.MarshalBinary()
		r2, err := Decode(again)
		if err != nil || !slices.Equal(r2.buckets, r.buckets) || r2.cfg != r.cfg {
			t.Fatalf("re-encoded form decodes differently: %v", err)
		}
		// Into a used RDA of more buckets (a collector's reused ones):
		// the same RDA, nothing left of what it held.
		reused, _ := New(Config{Banks: 4, Buckets: 64, Seed: 9, Check: true})
		for i := range reused.buckets {
			reused.buckets[i] = Bucket{ID: uint64(i) + 1, SumNS: 5, Count: 1, Check: 7}
		}
		if err := reused.UnmarshalBinary(b); err != nil || !slices.Equal(reused.buckets, r.buckets) || reused.cfg != r.cfg {
			t.Fatalf("decoded into a used RDA: %v, not what Decode gives", err)
		}
	})
}

func BenchmarkInsert(b *testing.B) {
	r, _ := New(DefaultConfig())
	ids := make([]uint64, 1<<16)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range ids {
		ids[i] = rng.Uint64()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Insert(ids[i&(len(ids)-1)], int64(i))
	}
}

// TestSetInReusedStorage: SetDifference and SetCopy into an RDA that
// held another of another size give what Subtract and Clone give, and
// reuse its storage when it is large enough.
func TestSetInReusedStorage(t *testing.T) {
	fill := func(cfg Config, seed uint64, n int) *RDA {
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rnd := rand.New(rand.NewPCG(seed, 1))
		for range n {
			r.Insert(rnd.Uint64(), int64(rnd.IntN(1e9)))
		}
		return r
	}
	small := Config{Banks: 2, Buckets: 64, Seed: 5, Check: true}
	large := Config{Banks: 2, Buckets: 512, Seed: 5, Check: true}
	a, b := fill(small, 1, 300), fill(small, 2, 280)
	want, err := a.Subtract(b)
	if err != nil {
		t.Fatal(err)
	}
	var dst RDA
	dst.SetCopy(fill(large, 3, 100)) // larger, other contents
	before := &dst.buckets[0]
	if err := dst.SetDifference(a, b); err != nil {
		t.Fatal(err)
	}
	if dst.Config() != small || !slices.Equal(dst.buckets, want.buckets) {
		t.Fatalf("difference in reused storage differs from Subtract's")
	}
	if &dst.buckets[0] != before {
		t.Errorf("a large enough RDA's storage was not reused")
	}
	dst.SetCopy(a)
	if dst.Config() != a.Config() || !slices.Equal(dst.buckets, a.Clone().buckets) {
		t.Fatalf("copy in reused storage differs from Clone's")
	}
	if err := dst.SetDifference(a, fill(large, 4, 10)); err == nil {
		t.Errorf("RDAs of two sizes subtracted")
	}
}

// TestInsertMany: InsertMany gives the RDA one Insert per packet gives,
// for two banks (its own loop) and others.
func TestInsertMany(t *testing.T) {
	for _, banks := range []int{1, 2, 3, 4} {
		cfg := Config{Banks: banks, Buckets: 97, Seed: 5, Check: true}
		a, _ := New(cfg)
		b, _ := New(cfg)
		rng := rand.New(rand.NewPCG(3, uint64(banks)))
		ids, offs := make([]uint64, 1000), make([]int64, 1000)
		for i := range ids {
			ids[i], offs[i] = rng.Uint64(), rng.Int64N(1e9)
			a.Insert(ids[i], offs[i])
		}
		b.InsertMany(ids[:1], offs[:1])
		b.InsertMany(ids[1:77], offs[1:77])
		b.InsertMany(ids[77:], offs[77:])
		if !slices.Equal(a.buckets, b.buckets) {
			t.Errorf("%d banks: InsertMany's RDA differs from Insert's", banks)
		}
	}
}

// BenchmarkInsertLarge inserts into an RDA of a lossy epoch (2 × 22,500
// buckets, 1.4 MB, past the core's cache): one at a time, and in batches
// of 64 (InsertMany).
func BenchmarkInsertLarge(b *testing.B) {
	r, _ := New(Config{Banks: 2, Buckets: 22500, Seed: 1, Check: true})
	ids, offs := make([]uint64, 1<<16), make([]int64, 1<<16)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range ids {
		ids[i], offs[i] = rng.Uint64(), rng.Int64N(1e9)
	}
	b.Run("one", func(b *testing.B) {
		for i := range b.N {
			r.Insert(ids[i&(1<<16-1)], offs[i&(1<<16-1)])
		}
	})
	b.Run("batch64", func(b *testing.B) {
		for i := 0; i < b.N; i += 64 {
			j := i & (1<<16 - 1)
			r.InsertMany(ids[j:j+64], offs[j:j+64])
		}
	})
}

// BenchmarkDecode decodes a report's RDA (2 × 256 buckets, with checks)
// into a reused one, as a collector does.
func BenchmarkDecode(b *testing.B) {
	r, _ := New(Config{Banks: 2, Buckets: 256, Seed: 3, Check: true})
	rng := rand.New(rand.NewPCG(2, 2))
	for range 5000 {
		r.Insert(rng.Uint64(), rng.Int64N(1e9))
	}
	wire, _ := r.MarshalBinary()
	into := &RDA{}
	b.SetBytes(int64(len(wire)))
	for b.Loop() {
		if err := into.UnmarshalBinary(wire); err != nil {
			b.Fatal(err)
		}
	}
}
