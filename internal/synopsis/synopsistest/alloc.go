// Package synopsistest holds what the fuzz tests of decoders of outside
// bytes share.
package synopsistest

import (
	"math"
	"runtime"
)

// Allocated is the bytes the heap allocated while fn ran: the least of up
// to three runs, while over limit (a fuzz worker's own goroutines allocate
// too, now and then; a decoder allocates the same each time).
func Allocated(limit uint64, fn func()) uint64 {
	n := uint64(math.MaxUint64)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fn()
		runtime.ReadMemStats(&after)
		if n = min(n, after.TotalAlloc-before.TotalAlloc); n <= limit {
			break
		}
	}
	return n
}
