package colate

import (
	"errors"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/owl-latency/owl/internal/synopsis/synopsistest"
)

func smallConfig() Config {
	c := DefaultConfig()
	c.Counters = 1000
	c.Subvector = 4
	return c
}

func filled(t testing.TB, cfg Config, start int64, packets int, seed uint64) *Vector {
	t.Helper()
	v, err := New(cfg, start)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	for range packets {
		v.Insert(rng.Uint64N(50), rng.Uint64(), start+rng.Int64N(int64(time.Second)))
	}
	return v
}

func sameVector(t *testing.T, a, b *Vector) {
	t.Helper()
	a.materialize()
	b.materialize()
	if !slices.Equal(a.counters, b.counters) || a.sum != b.sum || a.packets != b.packets || a.startNS != b.startNS ||
		a.firstNS != b.firstNS || a.lastNS != b.lastNS || a.overflow != b.overflow || a.Flows() != b.Flows() {
		t.Fatalf("vectors differ: sum %d/%d packets %d/%d flows %d/%d", a.sum, b.sum, a.packets, b.packets, a.Flows(), b.Flows())
	}
	a.flows.each(func(k uint64, n uint32) {
		if b.FlowPackets(k) != n {
			t.Fatalf("flow %x: %d vs %d packets", k, n, b.FlowPackets(k))
		}
	})
}

func TestWireRoundTrip(t *testing.T) {
	cfg := smallConfig()
	for _, packets := range []int{0, 1, 3000} {
		v := filled(t, cfg, 5_000_000_000, packets, uint64(packets))
		b, err := v.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Unmarshal(b, cfg)
		if err != nil {
			t.Fatalf("%d packets: %v", packets, err)
		}
		sameVector(t, v, got)
		t.Logf("%d packets: %d bytes", packets, len(b))
	}
	// Counters travel at the width the largest needs.
	quiet, _ := New(cfg, 0)
	quiet.Insert(1, 1, 3)
	b, _ := quiet.MarshalBinary()
	if len(b) > 60+(cfg.Counters*2+7)/8+12 {
		t.Errorf("a vector of one small counter takes %d bytes", len(b))
	}
}

// TestLazyReads: a decoded vector answers counters and flow counts from
// its wire form as its unpacked copy does.
func TestLazyReads(t *testing.T) {
	cfg := smallConfig()
	v := filled(t, cfg, 0, 3000, 9)
	b, _ := v.MarshalBinary()
	lazy, err := Unmarshal(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if lazy.packed == nil || lazy.rawFlows == nil {
		t.Fatal("Unmarshal unpacked the vector")
	}
	for i := range cfg.Counters {
		if lazy.counter(i) != v.counters[i] {
			t.Fatalf("counter %d: %d, want %d", i, lazy.counter(i), v.counters[i])
		}
	}
	for f := range uint64(60) {
		if lazy.FlowPackets(f) != v.FlowPackets(f) {
			t.Fatalf("flow %d: %d packets, want %d", f, lazy.FlowPackets(f), v.FlowPackets(f))
		}
	}
	if lazy.Flows() != v.Flows() || lazy.Packets() != v.Packets() || lazy.Sum() != v.Sum() || lazy.Check() != nil {
		t.Errorf("flows %d/%d packets %d/%d sum %d/%d check %v", lazy.Flows(), v.Flows(), lazy.Packets(), v.Packets(), lazy.Sum(), v.Sum(), lazy.Check())
	}
	// A header that lies about the sum or the packets fails Check.
	bad, _ := Unmarshal(b, cfg)
	bad.sum++
	if bad.Check() == nil {
		t.Error("Check accepted a wrong sum")
	}
	bad, _ = Unmarshal(b, cfg)
	bad.packets++
	if bad.Check() == nil {
		t.Error("Check accepted a wrong packet count")
	}
	// Inserting into a decoded vector unpacks it first.
	lazy2, _ := Unmarshal(b, cfg)
	lazy2.Insert(1, 2, 3)
	if lazy2.Packets() != v.Packets()+1 || lazy2.FlowPackets(1) != v.FlowPackets(1)+1 {
		t.Errorf("insert into a decoded vector: %d packets", lazy2.Packets())
	}
}

func TestUnmarshalRejects(t *testing.T) {
	cfg := smallConfig()
	v := filled(t, cfg, 0, 100, 1)
	b, _ := v.MarshalBinary()
	other := cfg
	other.Counters = 2000
	if _, err := Unmarshal(b, other); !errors.Is(err, ErrMismatch) {
		t.Errorf("other n: %v", err)
	}
	for _, cut := range []int{0, 1, 10, 40, len(b) / 2, len(b) - 1} {
		if _, err := Unmarshal(b[:cut], cfg); !errors.Is(err, ErrWire) {
			t.Errorf("cut at %d: %v", cut, err)
		}
	}
	if _, err := Unmarshal(append(slices.Clone(b), 0), cfg); !errors.Is(err, ErrWire) {
		t.Errorf("trailing byte: %v", err)
	}
}

func TestMergeIsTheUnion(t *testing.T) {
	cfg := smallConfig()
	whole, _ := New(cfg, 0)
	a, _ := New(cfg, 0)
	b, _ := New(cfg, 0)
	rng := rand.New(rand.NewPCG(3, 3))
	for range 5000 {
		f, id, ts := rng.Uint64N(80), rng.Uint64(), rng.Int64N(int64(time.Second))
		whole.Insert(f, id, ts)
		if f%2 == 0 { // fanout keeps a flow on one worker
			a.Insert(f, id, ts)
		} else {
			b.Insert(f, id, ts)
		}
	}
	if err := a.Merge(b); err != nil {
		t.Fatal(err)
	}
	sameVector(t, whole, a)
	late, _ := New(cfg, 1)
	if err := a.Merge(late); !errors.Is(err, ErrMismatch) {
		t.Errorf("merged vectors of different starts: %v", err)
	}
}

func FuzzUnmarshal(f *testing.F) {
	cfg := smallConfig()
	for _, n := range []int{0, 10, 500} {
		b, _ := filled(f, cfg, 7, n, uint64(n)).MarshalBinary()
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v *Vector
		var err error
		// Unmarshal keeps data and allocates for the deployment's
		// counters (a rank table), not for what the header says.
		if limit := uint64(cfg.Counters + 16<<10); synopsistest.Allocated(limit, func() { v, err = Unmarshal(data, cfg) }) > limit {
			t.Fatalf("decoding %d bytes allocated over %d", len(data), limit)
		}
		if err != nil {
			return
		}
		c7, f3 := v.counter(7), v.FlowPackets(3)
		// Check unpacks the counters (8 bytes each) and the flows (a
		// table of at least 1024 slots, about 3 per flow entry of 12
		// bytes); measured on a copy, as it unpacks once.
		check := func() {
			if w, err := Unmarshal(data, cfg); err == nil {
				_ = w.Check()
			}
		}
		if limit := uint64(9*cfg.Counters + 4*len(data) + 64<<10); synopsistest.Allocated(limit, check) > limit {
			t.Fatalf("checking %d bytes allocated over %d", len(data), limit)
		}
		_ = v.Check() // may fail: the header's sum is not checked by Unmarshal
		if v.counter(7) != c7 || v.FlowPackets(3) != f3 {
			t.Fatalf("lazy and unpacked reads differ: %d/%d, %d/%d", c7, v.counter(7), f3, v.FlowPackets(3))
		}
		// What decodes must encode to an equivalent vector.
		b, _ := v.MarshalBinary()
		w, err := Unmarshal(b, cfg)
		if err != nil {
			t.Fatalf("re-encoded vector does not decode: %v", err)
		}
		sameVector(t, v, w)
		if _, err := Mean([]*Vector{v}, []*Vector{w}, 3); err != nil && !errors.Is(err, ErrNoPackets) {
			t.Fatal(err)
		}
	})
}

func TestPackWidths(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for w := 1; w <= 64; w++ {
		vals := make([]uint64, 37)
		for i := range vals {
			vals[i] = rng.Uint64() & mask(w)
		}
		got := unpackBits(packBits(nil, vals, w), len(vals), w)
		if !slices.Equal(got, vals) {
			t.Fatalf("width %d: %x, want %x", w, got, vals)
		}
	}
}

// TestFlowTableBound: past maxFlows a vector stops counting new flows
// (their packets still go into the counters), says so, and keeps saying
// so through the wire form and merges.
func TestFlowTableBound(t *testing.T) {
	defer func(n int) { maxFlows = n }(maxFlows)
	maxFlows = 100
	cfg := smallConfig()
	v, _ := New(cfg, 0)
	for f := range uint64(150) {
		v.Insert(f+1, f, 10)
		v.Insert(f+1, f+1000, 20)
	}
	if !v.FlowsFull() || v.Flows() != 100 || v.Packets() != 300 || v.FlowPackets(1) != 2 || v.FlowPackets(150) != 0 {
		t.Fatalf("full %v, %d flows, %d packets, flow 1: %d, flow 150: %d", v.FlowsFull(), v.Flows(), v.Packets(), v.FlowPackets(1), v.FlowPackets(150))
	}
	b, _ := v.MarshalBinary()
	w, err := Unmarshal(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Check(); err != nil || !w.FlowsFull() || w.FlowPackets(1) != 2 {
		t.Errorf("decoded: %v, full %v", err, w.FlowsFull())
	}
	other, _ := New(cfg, 0)
	other.Insert(999, 1, 5)
	if err := other.Merge(v); err != nil || !other.FlowsFull() || other.Flows() != 100 {
		t.Errorf("merged: %v, full %v, %d flows", err, other.FlowsFull(), other.Flows())
	}
}

// TestSparseForm: a vector with many more counters than packets travels
// as marks and non-zero values, a busy one dense; both read back the same,
// lazily and whole, and a sparse form that marks a zero or a counter past
// n is refused.
func TestSparseForm(t *testing.T) {
	cfg := smallConfig()
	cfg.Counters = 1001 // marks end mid-byte
	for _, c := range []struct {
		name   string
		flows  uint64
		sparse bool
	}{{"sparse", 20, true}, {"dense", 5000, false}} {
		v, _ := New(cfg, 0)
		rng := rand.New(rand.NewPCG(9, 9))
		for range 20000 {
			v.Insert(rng.Uint64N(c.flows)+1, rng.Uint64(), rng.Int64N(int64(time.Millisecond)))
		}
		b, err := v.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		lazy, err := Unmarshal(b, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := lazy.present != nil; got != c.sparse {
			t.Errorf("%s: sparse form %t", c.name, got)
		}
		nonzero := 0
		for i := range cfg.Counters {
			if v.counters[i] != 0 {
				nonzero++
			}
			if lazy.counter(i) != v.counters[i] {
				t.Fatalf("%s: counter %d reads %d, want %d", c.name, i, lazy.counter(i), v.counters[i])
			}
		}
		w := bits.Len64(slices.Max(v.counters))
		dense := (cfg.Counters*w + 7) / 8
		want := min(dense, (cfg.Counters+7)/8+(nonzero*w+7)/8)
		if head := len(b) - want - 1 - flowEntry*v.Flows(); head > 80 {
			t.Errorf("%s: %d bytes, %d of them beside the counters and flows (the counters need %d)", c.name, len(b), head, want)
		}
		if err := lazy.Check(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		w2, _ := Unmarshal(b, cfg)
		sameVector(t, v, w2)
	}
	// One counter of 20 bits: its value is the 3 bytes before the flows
	// (a count of flows, one entry).
	v, _ := New(cfg, 0)
	v.Insert(1, 1, 1<<19)
	b, _ := v.MarshalBinary()
	if lv, _ := Unmarshal(b, cfg); lv == nil || lv.present == nil {
		t.Fatal("one non-zero counter: not sparse")
	}
	bad := slices.Clone(b)
	clear(bad[len(b)-4-flowEntry : len(b)-1-flowEntry])
	lv, err := Unmarshal(bad, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := lv.Check(); err == nil || !strings.Contains(err.Error(), "zero") {
		t.Errorf("a marked zero: Check says %v", err)
	}
	// The marks' last byte: counter 1000 is bit 0; bit 1 is past n.
	at := len(b) - 5 - flowEntry
	bad = slices.Clone(b)
	bad[at] |= 2
	if _, err := Unmarshal(bad, cfg); err == nil {
		t.Error("a mark past the last counter was accepted")
	}
}
