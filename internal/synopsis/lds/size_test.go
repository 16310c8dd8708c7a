package lds

import (
	"math"
	"math/rand/v2"
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
