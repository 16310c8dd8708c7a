package synopsis

import (
	"math/rand/v2"
	"testing"
)

// TestIndex adds keys (random, sharing their low bits, repeated, and 0)
// to an index that grows from a small hint and checks every number
// against a map's: first added, first numbered, each once.
func TestIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 1000, 50_000} {
		x := NewIndex(3)
		want := map[uint64]int32{}
		var keys []uint64
		for i := range n {
			k := rng.Uint64()
			switch i % 4 {
			case 1:
				k <<= 40 // low bits all 0
			case 2:
				if len(keys) > 0 {
					k = keys[rng.IntN(len(keys))]
				}
			case 3:
				if i%40 == 3 {
					k = 0
				}
			}
			keys = append(keys, k)
			num, added := x.Add(k)
			w, seen := want[k]
			if !seen {
				w = int32(len(want))
				want[k] = w
			}
			if num != w || added == seen {
				t.Fatalf("%d keys: key %x numbered %d (added %t), want %d (added %t)", n, k, num, added, w, !seen)
			}
		}
		if x.Len() != len(want) {
			t.Errorf("%d keys: %d in the index, want %d", n, x.Len(), len(want))
		}
		for k, w := range want {
			if num, ok := x.Find(k); !ok || num != w {
				t.Errorf("%d keys: find %x gives %d, %t; want %d", n, k, num, ok, w)
			}
		}
		for range 1000 {
			k := rng.Uint64() | 1
			if _, in := want[k]; !in {
				if _, ok := x.Find(k); ok {
					t.Errorf("%d keys: found %x, never added", n, k)
				}
			}
		}
		if _, in := want[0]; !in {
			if _, ok := x.Find(0); ok {
				t.Errorf("%d keys: found 0, never added", n)
			}
		}
	}
}

// BenchmarkIndex numbers 2,000 keys of 100 distinct ones, through an
// Index and through a Go map.
func BenchmarkIndex(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	keys := make([]uint64, 2000)
	for i := range keys {
		keys[i] = 0x9e3779b97f4a7c15 * (rng.Uint64N(100) + 1)
	}
	b.Run("index", func(b *testing.B) {
		for b.Loop() {
			x := NewIndex(16)
			for _, k := range keys {
				x.Add(k)
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		for b.Loop() {
			m := make(map[uint64]int32, 16)
			for _, k := range keys {
				if _, ok := m[k]; !ok {
					m[k] = int32(len(m))
				}
			}
		}
	})
}
