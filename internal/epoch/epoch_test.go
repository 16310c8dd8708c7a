package epoch

import (
	"math/big"
	"testing"
	"time"
)

func TestOf(t *testing.T) {
	c := Config{Start: time.Unix(100, 0), Length: time.Second}
	tests := []struct {
		ts     int64
		e, off int64
	}{
		{100e9, 0, 0},
		{100e9 + 999_999_999, 0, 999_999_999},
		{101e9, 1, 0},
		{99e9 + 1, -1, 1},
		{99e9, -1, 0},
		{98e9 + 5, -2, 5},
	}
	for _, tt := range tests {
		e, off := c.Of(tt.ts)
		if e != tt.e || off != tt.off {
			t.Errorf("Of(%d) = %d, %d; want %d, %d", tt.ts, e, off, tt.e, tt.off)
		}
		if got := c.StartNS(e) + off; got != tt.ts {
			t.Errorf("StartNS(%d)+%d = %d, want %d", e, off, got, tt.ts)
		}
	}
}

func TestValidateAndCompatible(t *testing.T) {
	if err := (Config{Length: 0}).Validate(); err == nil {
		t.Error("zero length accepted")
	}
	if err := (Config{Length: time.Second, Grace: 20 * time.Second}).Validate(); err == nil {
		t.Error("grace of 20 lengths accepted")
	}
	a := DefaultConfig()
	b := a
	b.Grace = time.Second
	if err := a.Compatible(b); err != nil {
		t.Errorf("grace difference rejected: %v", err)
	}
	b.Length = 2 * time.Second
	if err := a.Compatible(b); err == nil {
		t.Error("length difference accepted")
	}
	b = a
	b.Start = time.Unix(1, 0)
	if err := a.Compatible(b); err == nil {
		t.Error("start difference accepted")
	}
	b.Start = time.Unix(0, 0)
	if err := a.Compatible(b); err != nil {
		t.Errorf("Unix epoch start and zero start differ: %v", err)
	}
}

// counter is a per-epoch value that counts packets and sums offsets.
type counter struct {
	n   int
	sum int64
}

func TestWindowPipeline(t *testing.T) {
	cfg := Config{Length: time.Second, Grace: 200 * time.Millisecond}
	var got []Closed[*counter]
	w, err := NewWindow(cfg, func(int64) *counter { return &counter{} },
		func(c Closed[*counter]) { got = append(got, c) })
	if err != nil {
		t.Fatal(err)
	}
	put := func(tsNS int64) bool {
		c, off, ok := w.Get(tsNS)
		if ok {
			c.n++
			c.sum += off
		}
		return ok
	}
	ms := int64(time.Millisecond)
	put(500 * ms)  // epoch 0
	put(1100 * ms) // epoch 1; epoch 0 stays open (grace)
	if len(got) != 0 || w.Open() != 2 {
		t.Fatalf("epoch closed before its grace: closed %d open %d", len(got), w.Open())
	}
	if !put(900 * ms) { // late by 200ms but within grace: still epoch 0
		t.Fatal("packet within grace refused")
	}
	put(1250 * ms) // closes epoch 0
	if len(got) != 1 || got[0].Epoch != 0 || got[0].Value.n != 2 || got[0].Value.sum != 1400*ms {
		t.Fatalf("after grace: %+v", got)
	}
	if put(950 * ms) {
		t.Fatal("packet for a closed epoch accepted")
	}
	put(3500 * ms) // closes epoch 1, opens 3
	if len(got) != 2 || got[1].Epoch != 1 || got[1].Late != 1 || got[1].Value.n != 2 {
		t.Fatalf("second close: %+v", got[1])
	}
	w.Advance(4300 * ms) // a clock tick closes epoch 3 with no packet
	if len(got) != 3 || got[2].Epoch != 3 || got[2].Late != 0 {
		t.Fatalf("advance: %+v", got)
	}
	put(4400 * ms)
	w.Flush()
	if len(got) != 4 || got[3].Epoch != 4 || w.Open() != 0 {
		t.Fatalf("flush: %+v", got)
	}
	if put(4500 * ms) {
		t.Fatal("packet for a flushed epoch accepted")
	}
	if w.LateTotal() != 2 {
		t.Fatalf("late total %d, want 2", w.LateTotal())
	}
}

// Open epochs stay bounded whatever the timestamps do.
func TestWindowBounded(t *testing.T) {
	cfg := Config{Length: time.Millisecond, Grace: 3 * time.Millisecond}
	w, _ := NewWindow(cfg, func(int64) *counter { return &counter{} }, func(Closed[*counter]) {})
	ts := int64(0)
	for i := 0; i < 100000; i++ {
		ts += int64(i%7) * 400_000
		if i%13 == 0 {
			w.Get(ts - int64(i%5)*1_000_000)
		} else {
			w.Get(ts)
		}
		if w.Open() > 4 {
			t.Fatalf("%d open epochs at step %d", w.Open(), i)
		}
	}
}

// Offsets are relative to the epoch start, so sums of ten million offsets
// into one counter do not overflow.
func TestNoOverflowInOneBucket(t *testing.T) {
	cfg := DefaultConfig()
	var sum int64
	var n int
	w, _ := NewWindow(cfg, func(int64) *counter { return &counter{} }, func(c Closed[*counter]) {
		sum, n = c.Value.sum, c.Value.n
	})
	base := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC).UnixNano()
	const packets = 10_000_000
	want := new(big.Int)
	for i := 0; i < packets; i++ {
		off := int64(999_999_999 - i%1000) // the worst case: every packet near the end
		c, o, ok := w.Get(base + off)
		if !ok {
			t.Fatal("refused")
		}
		c.n++
		c.sum += o
		want.Add(want, big.NewInt(off))
	}
	w.Flush()
	if n != packets {
		t.Fatalf("count %d", n)
	}
	if !want.IsInt64() || sum != want.Int64() {
		t.Fatalf("sum %d, want %v", sum, want)
	}
}
