package fridge

import (
	"fmt"
	"math"
)

// SimpleEntryBytes is the memory of one entry of Simple: the request's key
// and time, 8 bytes each.
const SimpleEntryBytes = 16

// emptyNS marks an empty slot of Simple; a request at that time is ignored.
const emptyNS = math.MinInt64

// Simple is the plain always-overwrite hash-indexed array of §2.1.1, for
// comparison: every request enters and overwrites its slot, and every
// matched response is one sample (correction 1). It has no expiry
// threshold: where every request overwrites, a threshold can only discard
// matches, and the longest delays first, so it would add to the bias this
// array shows, not remove it.
type Simple struct {
	seed  uint64
	n     uint64
	keys  []uint64
	times []int64
}

// NewSimple returns an empty array of entries slots.
func NewSimple(entries int, seed uint64) (*Simple, error) {
	if entries < 1 || entries > MaxEntries {
		return nil, fmt.Errorf("%w: simple array of %d entries, want 1 to %d", ErrConfig, entries, MaxEntries)
	}
	s := &Simple{seed: seed, n: uint64(entries), keys: make([]uint64, entries), times: make([]int64, entries)}
	s.Reset()
	return s, nil
}

// SimpleEntries is the number of Simple's entries that fit in the memory
// of fridgeEntries fridge entries.
func SimpleEntries(fridgeEntries int) int { return fridgeEntries * EntryBytes / SimpleEntryBytes }

// MemoryBytes is the memory of the entries (SimpleEntryBytes each).
func (s *Simple) MemoryBytes() int { return len(s.keys) * SimpleEntryBytes }

func (s *Simple) index(key uint64) uint64 { return ((hash(key, s.seed) >> 32) * s.n) >> 32 }

// Request stores a request, overwriting its slot.
func (s *Simple) Request(key uint64, tNS int64) {
	i := s.index(key)
	s.keys[i], s.times[i] = key, tNS
}

// Response looks for the request with the same key; if it is still there
// it is removed and its sample returned, with correction 1 and x unknown
// (0).
func (s *Simple) Response(key uint64, tNS int64) (Sample, bool) {
	i := s.index(key)
	if s.times[i] == emptyNS || s.keys[i] != key {
		return Sample{}, false
	}
	reqNS := s.times[i]
	s.times[i] = emptyNS
	if tNS < reqNS {
		return Sample{}, false
	}
	return Sample{DelayNS: tNS - reqNS, Corr: 1, Corr2: 1}, true
}

// Reset empties the array.
func (s *Simple) Reset() {
	for i := range s.times {
		s.times[i] = emptyNS
	}
}
