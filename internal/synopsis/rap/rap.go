// Package rap finds the heaviest flows of a stream with the Random Admission
// Policy (Ben Basat et al., as analysed in Zheng's dissertation, ch. 1 and
// 4): a SpaceSaving variant with a fixed number of counters. A tracked flow's
// counter grows with each of its packets; a new flow takes over the smallest
// counter c_min with probability 1/(c_min+1), starting at c_min+1, and is
// otherwise ignored. Random admission keeps the many small flows from
// churning the table, so heavy flows stay in it.
package rap

import (
	"math/bits"
	"math/rand/v2"
	"slices"
)

// Entry is a tracked flow.
type Entry[T any] struct {
	Key   uint64 // the flow's hash
	Value T      // what the caller keeps with it (the flow key)
	// Count estimates the flow's packets; for a flow admitted late it
	// includes the counter it took over (an overestimate).
	Count uint64
}

// Table holds k counters. Not safe for concurrent use.
type Table[T any] struct {
	k    int
	heap []Entry[T] // min-heap by Count
	// index finds a tracked key's counter: open addressing from the
	// key's top bits, each slot the heap index + 1 of the key in it (0:
	// empty), at least 8 slots a counter, so that most packets of a
	// stream of many small flows are counted after reading one empty
	// slot. slot is where each heap entry's key sits in index. (A Go map
	// from key to heap index cost 7% of the probe's pipeline: a look-up
	// per packet of a tracked flow, and two stores per swap of the heap.)
	index []int32
	slot  []int32
	mask  uint64
	shift uint
	rnd   *rand.PCG // the admission coin's source (rand.Rand's interface cost 1.5% of a probe)
}

// New returns a table of k counters; seed makes admissions repeatable.
func New[T any](k int, seed uint64) *Table[T] {
	k = max(k, 1)
	bits := uint(6)
	for 1<<bits < 8*k {
		bits++
	}
	return &Table[T]{k: k, rnd: rand.NewPCG(seed, 0x726170),
		index: make([]int32, 1<<bits), mask: 1<<bits - 1, shift: 64 - bits}
}

// find is the heap index of a tracked key.
func (t *Table[T]) find(key uint64) (int, bool) {
	for s := key >> t.shift; ; s = (s + 1) & t.mask {
		h := t.index[s]
		if h == 0 {
			return 0, false
		}
		if t.heap[h-1].Key == key {
			return int(h - 1), true
		}
	}
}

// track records that heap[i] holds key.
func (t *Table[T]) track(key uint64, i int) {
	s := key >> t.shift
	for t.index[s] != 0 {
		s = (s + 1) & t.mask
	}
	t.index[s] = int32(i + 1)
	if i == len(t.slot) {
		t.slot = append(t.slot, 0)
	}
	t.slot[i] = int32(s)
}

// untrack forgets the key of heap[i], moving back the keys after it that
// probed past its slot.
func (t *Table[T]) untrack(i int) {
	s := uint64(t.slot[i])
	t.index[s] = 0
	for j := (s + 1) & t.mask; t.index[j] != 0; j = (j + 1) & t.mask {
		h := t.index[j]
		home := t.heap[h-1].Key >> t.shift
		if (j-home)&t.mask >= (j-s)&t.mask { // s lies on its probe from home
			t.index[s], t.slot[h-1], t.index[j] = h, int32(s), 0
			s = j
		}
	}
}

// Add counts a packet of the flow with this key; v is copied only when the
// flow is admitted.
func (t *Table[T]) Add(key uint64, v *T) {
	if i, ok := t.find(key); ok {
		t.heap[i].Count++
		t.down(i)
		return
	}
	if len(t.heap) < t.k {
		t.heap = append(t.heap, Entry[T]{Key: key, Value: *v, Count: 1})
		t.track(key, len(t.heap)-1)
		t.up(len(t.heap) - 1)
		return
	}
	min := t.heap[0].Count
	// Admitted with probability 1/(min+1): the high word of a uniform
	// 64-bit value times min+1 is zero for ⌊2⁶⁴/(min+1)⌋ of the values.
	if hi, _ := bits.Mul64(t.rnd.Uint64(), min+1); hi != 0 {
		return
	}
	t.untrack(0)
	t.heap[0] = Entry[T]{Key: key, Value: *v, Count: min + 1}
	t.track(key, 0)
	t.down(0)
}

// Top returns the n largest counters, largest first.
func (t *Table[T]) Top(n int) []Entry[T] {
	out := slices.Clone(t.heap)
	slices.SortFunc(out, func(a, b Entry[T]) int {
		switch {
		case a.Count > b.Count:
			return -1
		case a.Count < b.Count:
			return 1
		}
		return 0
	})
	if n < len(out) {
		out = out[:n]
	}
	return out
}

// Len is the number of tracked flows.
func (t *Table[T]) Len() int { return len(t.heap) }

func (t *Table[T]) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.slot[i], t.slot[j] = t.slot[j], t.slot[i]
	t.index[t.slot[i]], t.index[t.slot[j]] = int32(i+1), int32(j+1)
}

func (t *Table[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if t.heap[p].Count <= t.heap[i].Count {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *Table[T]) down(i int) {
	n := len(t.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && t.heap[r].Count < t.heap[l].Count {
			m = r
		}
		if t.heap[i].Count <= t.heap[m].Count {
			return
		}
		t.swap(i, m)
		i = m
	}
}

// AddCount counts n packets of a flow at once, as when combining tables:
// a tracked flow's counter grows by n; an untracked flow takes a free
// counter, or the smallest one if n exceeds it.
func (t *Table[T]) AddCount(key uint64, v *T, n uint64) {
	if i, ok := t.find(key); ok {
		t.heap[i].Count += n
		t.down(i)
		return
	}
	if len(t.heap) < t.k {
		t.heap = append(t.heap, Entry[T]{Key: key, Value: *v, Count: n})
		t.track(key, len(t.heap)-1)
		t.up(len(t.heap) - 1)
		return
	}
	if n <= t.heap[0].Count {
		return
	}
	t.untrack(0)
	t.heap[0] = Entry[T]{Key: key, Value: *v, Count: n}
	t.track(key, 0)
	t.down(0)
}
