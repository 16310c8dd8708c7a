package synopsis

// Index numbers 64-bit keys (packet IDs, flow hashes) 0, 1, 2, … in the
// order they are first added: open-addressed, for the loops that look up
// a key per packet or per sampled delay, where a Go map cost two to three
// times as much (BenchmarkIndex). Not safe for concurrent use.
type Index struct {
	keys  []uint64 // by slot; 0: empty (key 0 is kept apart)
	nums  []int32  // by slot
	shift uint     // 64 - log2(len(keys))
	n     int32
	zero  int32 // number of key 0; -1: not added
}

// NewIndex returns an empty index with room for about hint keys before it
// grows.
func NewIndex(hint int) *Index {
	x := &Index{zero: -1}
	x.alloc(max(hint, 4))
	return x
}

// alloc makes room for n keys at most half full, empty.
func (x *Index) alloc(n int) {
	bits := 3
	for 1<<bits < 2*n {
		bits++
	}
	x.keys, x.nums, x.shift = make([]uint64, 1<<bits), make([]int32, 1<<bits), uint(64-bits)
}

// slot is k's first slot (Fibonacci hashing: keys may share their low
// bits).
func (x *Index) slot(k uint64) uint64 { return k * 0x9e3779b97f4a7c15 >> x.shift }

// Reset empties the index, keeping its slots.
func (x *Index) Reset() {
	clear(x.keys)
	x.n, x.zero = 0, -1
}

// Len is the number of keys added.
func (x *Index) Len() int { return int(x.n) }

// Find returns k's number, if it was added.
func (x *Index) Find(k uint64) (int32, bool) {
	if k == 0 {
		return x.zero, x.zero >= 0
	}
	mask := uint64(len(x.keys) - 1)
	for i := x.slot(k); ; i = (i + 1) & mask {
		switch x.keys[i] {
		case k:
			return x.nums[i], true
		case 0:
			return 0, false
		}
	}
}

// Add returns k's number, giving it the next one if it is new (added).
func (x *Index) Add(k uint64) (num int32, added bool) {
	if k == 0 {
		if x.zero < 0 {
			x.zero, x.n = x.n, x.n+1
			return x.zero, true
		}
		return x.zero, false
	}
	mask := uint64(len(x.keys) - 1)
	i := x.slot(k)
	for ; x.keys[i] != 0; i = (i + 1) & mask {
		if x.keys[i] == k {
			return x.nums[i], false
		}
	}
	if 2*(int(x.n)+1) > len(x.keys) {
		x.grow()
		return x.Add(k)
	}
	x.keys[i], x.nums[i] = k, x.n
	x.n++
	return x.nums[i], true
}

// grow doubles the slots and puts the keys back.
func (x *Index) grow() {
	keys, nums := x.keys, x.nums
	x.alloc(len(keys))
	mask := uint64(len(x.keys) - 1)
	for j, k := range keys {
		if k == 0 {
			continue
		}
		i := x.slot(k)
		for x.keys[i] != 0 {
			i = (i + 1) & mask
		}
		x.keys[i], x.nums[i] = k, nums[j]
	}
}
