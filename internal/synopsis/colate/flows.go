package colate

// flowTable counts packets per flow hash: open addressing with linear
// probing, grown at three quarters full, a flow's key and count side by
// side (one cache line per probe). It replaces a Go map on the per-packet
// path (a third of the insert time there).
type flowTable struct {
	slots []flowSlot
	used  int
	zero  uint32 // packets of flow hash 0, which cannot be a key
	// last is the slot of the flow counted last: packets come in runs
	// of one flow, and a run costs one probe.
	last int
}

type flowSlot struct {
	key   uint64 // 0 marks an empty slot
	count uint32
}

// maxFlows bounds the flows a table counts: past it (hostile traffic, a
// scan with a new flow per packet), packets of new flows are not counted,
// which bounds the table's memory and the vector's wire form.
var maxFlows = 1 << 20

// inc counts a packet of flow k; false when the table is full and k is
// not in it.
func (t *flowTable) inc(k uint64) bool {
	if t.last < len(t.slots) && t.slots[t.last].key == k && k != 0 {
		t.slots[t.last].count++
		return true
	}
	return t.add(k, 1)
}

// add counts n packets of flow k; false when the table is full and k is
// not in it.
func (t *flowTable) add(k uint64, n uint32) bool {
	if k == 0 {
		t.zero += n
		return true
	}
	if t.used >= maxFlows {
		if t.get(k) == 0 {
			return false
		}
	} else if 4*(t.used+1) > 3*len(t.slots) {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	for i := (k * 0x9e3779b97f4a7c15) >> 32 & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		switch s.key {
		case k:
			s.count += n
			t.last = int(i)
			return true
		case 0:
			s.key, s.count = k, n
			t.used++
			t.last = int(i)
			return true
		}
	}
}

func (t *flowTable) get(k uint64) uint32 {
	if k == 0 {
		return t.zero
	}
	if len(t.slots) == 0 {
		return 0
	}
	mask := uint64(len(t.slots) - 1)
	for i := (k * 0x9e3779b97f4a7c15) >> 32 & mask; ; i = (i + 1) & mask {
		switch t.slots[i].key {
		case k:
			return t.slots[i].count
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
	for _, s := range t.slots {
		if s.key != 0 {
			fn(s.key, s.count)
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
	old := t.slots
	t.alloc(max(1024, 2*len(old)))
	mask := uint64(len(t.slots) - 1)
	for _, s := range old {
		if s.key == 0 {
			continue
		}
		i := (s.key * 0x9e3779b97f4a7c15) >> 32 & mask
		for t.slots[i].key != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
		t.used++
	}
}

// alloc replaces the table with an empty one of size slots.
func (t *flowTable) alloc(size int) {
	t.slots, t.used = make([]flowSlot, size), 0
}

// reset forgets every flow, keeping the table's memory.
func (t *flowTable) reset() {
	clear(t.slots)
	t.used, t.zero = 0, 0
}

// reserve makes room for n flows without growing.
func (t *flowTable) reserve(n int) {
	size := 1024
	for 3*size < 4*(n+1) {
		size *= 2
	}
	if size > len(t.slots) && t.used == 0 {
		t.alloc(size)
	}
}
