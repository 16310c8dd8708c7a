package synopsis

import (
	"math/bits"
	"slices"
)

// SortByKey returns the elements of s ordered by key, then by tie (nil:
// in any order among equal keys), in s's storage. Keys are meant to be
// keyed hashes, uniform over 64 bits: the elements are first scattered
// by their keys' top bits, about two to a run (one counting pass, one
// moving pass through a copy), and each run is then sorted by insertion;
// a run longer than 32 (keys that are not uniform) is sorted by
// comparison. For a few thousand elements this takes a third to a fifth
// of the time of a comparison sort (BenchmarkSortByKey).
func SortByKey[T any](s []T, key func(T) uint64, tie func(a, b T) int) {
	n := len(s)
	if n < 2 {
		return
	}
	less := func(a, b T) bool {
		ka, kb := key(a), key(b)
		return ka < kb || ka == kb && tie != nil && tie(a, b) < 0
	}
	var top uint64
	for _, e := range s {
		top = max(top, key(e))
	}
	b := min(max(bits.Len(uint(n))-1, 1), 16) // 2^b runs for n elements
	shift := max(bits.Len64(top)-b, 0)
	starts := make([]int, 1<<b+1)
	for _, e := range s {
		starts[key(e)>>shift+1]++
	}
	for i := 1; i < len(starts); i++ {
		starts[i] += starts[i-1]
	}
	next := slices.Clone(starts[:1<<b])
	src := slices.Clone(s)
	for _, e := range src {
		d := key(e) >> shift
		s[next[d]] = e
		next[d]++
	}
	for d := range 1 << b {
		run := s[starts[d]:starts[d+1]]
		if len(run) > 32 {
			slices.SortStableFunc(run, func(a, b T) int {
				switch {
				case less(a, b):
					return -1
				case less(b, a):
					return 1
				}
				return 0
			})
			continue
		}
		for i := 1; i < len(run); i++ {
			for j := i; j > 0 && less(run[j], run[j-1]); j-- {
				run[j], run[j-1] = run[j-1], run[j]
			}
		}
	}
}
