package lds

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestLoad(t *testing.T) {
	for _, tc := range []struct {
		large, small, cols int
	}{
		{large: 0, small: 500, cols: 4096},
		{large: 20, small: 2000, cols: 4096},
		{large: 300, small: 5000, cols: 4096},
		{large: 300, small: 0, cols: 512}, // many cells shared
	} {
		l, err := New(Config{Rows: 4, Cols: tc.cols, K: 4, RowSampleLog2: []uint8{6, 3, 1, 0}, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		id := uint64(0)
		add := func(flow uint64, packets int) {
			for range packets {
				id++
				l.Insert(flow, rng.Uint64(), int64(id), 1)
			}
		}
		for f := range tc.large {
			add(uint64(f)*0x9e3779b97f4a7c15+1, 500+rng.IntN(2000))
		}
		for f := range tc.small {
			add(uint64(f)*0xbf58476d1ce4e5b9+2, 1+rng.IntN(10))
		}
		got, packets := l.Load(128)
		if math.Abs(got-float64(tc.large)) > 0.15*float64(tc.large)+2 || packets != float64(id) {
			t.Errorf("%d large and %d small flows (%d packets) in %d cols: Load = %.1f, %v", tc.large, tc.small, id, tc.cols, got, packets)
		}
	}
	full, _ := New(Config{Rows: 1, Cols: 8, K: 1, Seed: 1})
	for i := range uint64(2000) {
		full.Insert(i, i*0x9e3779b97f4a7c15, 1, 1)
	}
	if got, _ := full.Load(1); !math.IsInf(got, 1) {
		t.Errorf("a row of heavy cells gives %v, want +Inf", got)
	}
}

func TestColsFor(t *testing.T) {
	for _, tc := range []struct {
		large, packets float64
		want           int
	}{
		{0, 0, 64},
		{10, 1000, 64},         // 10·4/0.75 = 53, 1,000·4/128 = 31
		{100, 1000, 1024},      // 533
		{10, 40_000, 2048},     // 1,250
		{700, 1000, 4096},      // 3,733
		{5000, 1000, 4096},     // capped
		{10, 1_000_000, 4096},  // capped
		{math.Inf(1), 0, 4096}, // a sketch too small to tell
	} {
		if got := ColsFor(tc.large, tc.packets, 128, 4, 4, 0.01, 64, 4096); got != tc.want {
			t.Errorf("ColsFor(%v, %v) = %d, want %d", tc.large, tc.packets, got, tc.want)
		}
	}
}

func TestRowsFor(t *testing.T) {
	cfg := DefaultConfig() // rows sampling 2^-6, 2^-3, 2^-1, 1
	for _, tc := range []struct {
		loss, largest float64
		keep          int
		want          uint32
	}{
		{0, 20_000, 2, 0b1100},      // no loss: the two densest
		{0, 20_000, 1, 0b1000},      // ... or the densest
		{1e-3, 20_000, 2, 0b1110},   // 1/8 is clean for the largest flow
		{1e-3, 2_000, 2, 0b1100},    // at 2,000 packets 1/2 is
		{1e-2, 20_000, 2, 0b1111},   // every row
		{0.2, 20_000, 2, 0b0011},    // even 100-packet flows need 1/8: the two sparsest
		{1e-3, 20_000, 0, 0b1111},   // keep < 1: all
		{1e-3, 20_000, 4, 0b1111},   // keep ≥ rows: all
		{0, 20_000, 3, 0b1110},      // three
		{0.5, 1_000_000, 1, 0b0001}, // nothing clean: the sparsest
	} {
		if got := RowsFor(cfg, tc.loss, tc.largest, tc.keep); got != tc.want {
			t.Errorf("loss %g, largest %g, keep %d: %04b, want %04b", tc.loss, tc.largest, tc.keep, got, tc.want)
		}
	}
}

func TestSelect(t *testing.T) {
	cfg := DefaultConfig()
	sel, err := cfg.Select(0b1010)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Rows != 2 || !slices.Equal(sel.RowSampleLog2, []uint8{3, 0}) || sel.Cols != cfg.Cols || sel.Seed != cfg.Seed {
		t.Errorf("rows 1 and 3 of %v: %+v", cfg.RowSampleLog2, sel)
	}
	for _, m := range []uint32{0, 0b1111} {
		if s, err := cfg.Select(m); err != nil || s.Rows != 4 {
			t.Errorf("mask %04b: %+v, %v; want every row", m, s, err)
		}
	}
	if _, err := cfg.Select(0b10000); err == nil {
		t.Error("a mask naming row 4 of 4 passed")
	}
}

// TestSpoiled: a share of packets lost between two sketches comes back
// from the cells that disagree, within three standard deviations of the
// count lost, though flows of very different sizes crowd the cells
// unevenly.
func TestSpoiled(t *testing.T) {
	cfg := Config{Rows: 2, Cols: 1024, K: 4, RowSampleLog2: []uint8{3, 0}, Seed: 1}
	rng := rand.New(rand.NewPCG(4, 5))
	for _, loss := range []float64{0, 0.0005, 0.002} {
		up, _ := New(cfg)
		down, _ := New(cfg)
		const n = 1_000_000
		for i := 0; i < n; i++ {
			flow, id := uint64(rng.ExpFloat64()*300), rng.Uint64() // a few flows hold most packets
			up.Insert(flow, id, int64(i), 1)
			if rng.Float64() >= loss {
				down.Insert(flow, id, int64(i)+500, 1)
			}
		}
		got := Spoiled(up, down)
		t.Logf("loss %g: Spoiled %g", loss, got)
		if math.Abs(got-loss) > 3*math.Sqrt(n*loss)/n { // three standard deviations of the lost count

			t.Errorf("loss %g: Spoiled %g", loss, got)
		}
	}
	up, _ := New(cfg)
	down, _ := New(cfg)
	if got := Spoiled(up, down); got != 0 {
		t.Errorf("empty sketches: %g", got)
	}
	for i := 0; i < 1_000_000; i++ {
		up.Insert(uint64(i), uint64(i)*7919, 0, 1)
	}
	if got := Spoiled(up, down); !math.IsInf(got, 1) {
		t.Errorf("nothing downstream: %g, want +Inf", got)
	}
}
