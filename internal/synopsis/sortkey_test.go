package synopsis

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

type keyed struct{ key, at, order uint64 }

func byKeyThenAt(a, b keyed) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.at, b.at)) }

// TestSortByKey sorts uniform keys, keys sharing their top bits (all in
// one run), repeated keys, and sizes around the run counts' steps, and
// compares with a comparison sort.
func TestSortByKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	key := func(e keyed) uint64 { return e.key }
	gens := map[string]func() uint64{
		"uniform":  rng.Uint64,
		"low bits": func() uint64 { return rng.Uint64N(1 << 20) },
		"sampled":  func() uint64 { return rng.Uint64N(1<<57) &^ (1<<15 - 1) },
		"zero":     func() uint64 { return 0 },
		"repeated": func() uint64 { return rng.Uint64N(16) << 60 },
	}
	for name, gen := range gens {
		for _, n := range []int{0, 1, 2, 3, 31, 33, 100, 4300, 70_000} {
			s := make([]keyed, n)
			for i := range s {
				s[i] = keyed{key: gen(), at: rng.Uint64N(4), order: uint64(i)}
			}
			want := slices.Clone(s)
			slices.SortFunc(want, byKeyThenAt)
			got := slices.Clone(s)
			SortByKey(got, key, byKeyThenAt)
			for i := range want {
				if got[i].key != want[i].key || got[i].at != want[i].at {
					t.Fatalf("%s, %d elements: element %d is %+v, want %+v", name, n, i, got[i], want[i])
				}
			}
			// Without a tie-break, keys are still in order.
			got = slices.Clone(s)
			SortByKey(got, key, nil)
			if !slices.IsSortedFunc(got, func(a, b keyed) int { return cmp.Compare(a.key, b.key) }) {
				t.Fatalf("%s, %d elements, no tie-break: keys out of order", name, n)
			}
		}
	}
}

// BenchmarkSortByKey sorts a few thousand 32-byte elements (an epoch's
// exact list or sample) by SortByKey and by slices.SortFunc.
func BenchmarkSortByKey(b *testing.B) {
	for _, n := range []int{4300, 100_000} {
		rng := rand.New(rand.NewPCG(5, 6))
		s := make([]keyed, n)
		for i := range s {
			s[i] = keyed{key: rng.Uint64(), at: rng.Uint64()}
		}
		work := make([]keyed, n)
		b.Run(fmt.Sprintf("SortByKey/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				copy(work, s)
				SortByKey(work, func(e keyed) uint64 { return e.key }, byKeyThenAt)
			}
		})
		b.Run(fmt.Sprintf("SortFunc/n=%d", n), func(b *testing.B) {
			for b.Loop() {
				copy(work, s)
				slices.SortFunc(work, byKeyThenAt)
			}
		})
	}
}
