package colate

// flowTable counts packets per flow hash: open addressing with linear
// probing, grown at three quarters full. It replaces a Go map on the
// per-packet path (a third of the insert time there).
type flowTable struct {
	keys   []uint64 // 0 marks an empty slot
	counts []uint32
	used   int
	zero   uint32 // packets of flow hash 0, which cannot be a key
	// last is the slot of the flow counted last: packets come in runs
	// of one flow, and a run costs one probe.
	last int
}

func (t *flowTable) inc(k uint64) {
	if t.last < len(t.keys) && t.keys[t.last] == k && k != 0 {
		t.counts[t.last]++
		return
	}
	t.add(k, 1)
}

// add counts n packets of flow k.
func (t *flowTable) add(k uint64, n uint32) {
	if k == 0 {
		t.zero += n
		return
	}
	if 4*(t.used+1) > 3*len(t.keys) {
		t.grow()
	}
	mask := uint64(len(t.keys) - 1)
	for i := (k * 0x9e3779b97f4a7c15) >> 32 & mask; ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			t.counts[i] += n
			t.last = int(i)
			return
		case 0:
			t.keys[i], t.counts[i] = k, n
			t.used++
			t.last = int(i)
			return
		}
	}
}

func (t *flowTable) get(k uint64) uint32 {
	if k == 0 {
		return t.zero
	}
	if len(t.keys) == 0 {
		return 0
	}
	mask := uint64(len(t.keys) - 1)
	for i := (k * 0x9e3779b97f4a7c15) >> 32 & mask; ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			return t.counts[i]
		case 0:
			return 0
		}
	}
}

// each calls fn for every flow and its count.
func (t *flowTable) each(fn func(k uint64, n uint32)) {
	if t.zero > 0 {
		fn(0, t.zero)
	}
	for i, k := range t.keys {
		if k != 0 {
			fn(k, t.counts[i])
		}
	}
}

func (t *flowTable) len() int {
	if t.zero > 0 {
		return t.used + 1
	}
	return t.used
}

func (t *flowTable) grow() {
	old, oldCounts := t.keys, t.counts
	size := max(1024, 2*len(old))
	t.keys, t.counts, t.used = make([]uint64, size), make([]uint32, size), 0
	mask := uint64(size - 1)
	for j, k := range old {
		if k == 0 {
			continue
		}
		i := (k * 0x9e3779b97f4a7c15) >> 32 & mask
		for t.keys[i] != 0 {
			i = (i + 1) & mask
		}
		t.keys[i], t.counts[i] = k, oldCounts[j]
		t.used++
	}
}

// reset forgets every flow, keeping the table's memory.
func (t *flowTable) reset() {
	clear(t.keys)
	clear(t.counts)
	t.used, t.zero = 0, 0
}

// reserve makes room for n flows without growing.
func (t *flowTable) reserve(n int) {
	size := 1024
	for 3*size < 4*(n+1) {
		size *= 2
	}
	if size > len(t.keys) && t.used == 0 {
		t.keys, t.counts = make([]uint64, size), make([]uint32, size)
	}
}
