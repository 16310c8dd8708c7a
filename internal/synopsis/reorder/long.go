package reorder

import (
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/synopsis/rap"
)

// longFlow is a heavy flow followed for long: 56 bytes.
type longFlow struct {
	key    uint64 // flow hash; 0 for a free entry
	seq    seqState
	prefix uint32 // entry in the prefix table, or pendingPrefix
	// packets, reord and retrans are the counts since the flow's last
	// flush into its prefix.
	packets, reord, retrans uint32
}

// pendingPrefix marks a long flow promoted without a window: its prefix
// is looked up at its next segment, which carries its addresses.
const pendingPrefix = ^uint32(0)

// longFlows chooses the heavy flows with a RAP table and keeps their state.
type longFlows struct {
	rap      *rap.Table[struct{}]
	counters int
	epochs   uint64
	// slots find a long flow's entry by its hash: open addressing from
	// hash bits the window buckets do not use (they use the high half;
	// the lowest bit is always 1), each slot the entry + 1 (0: empty),
	// at least 8 slots a long flow, so that a segment of another flow
	// mostly reads one empty slot. (A Go map behind a filter of counts
	// by hash bits cost a map look-up per segment of a long flow.)
	slots []int32
	mask  uint64
	flows []longFlow
	free  []int32
	keep  []bool // scratch for choose
	// minPackets is the RAP count a flow needs to be promoted: more than
	// a window's segments.
	minPackets    uint64
	refresh, seen int
}

func newLongFlows(n, counters int, cfg Config) *longFlows {
	slots := slotsFor(n)
	l := &longFlows{rap: rap.New[struct{}](counters, cfg.Seed), counters: counters, slots: make([]int32, slots), mask: uint64(slots - 1),
		flows: make([]longFlow, n), free: make([]int32, n), keep: make([]bool, n),
		minPackets: uint64(cfg.WindowPackets), refresh: cfg.RefreshPackets}
	for i := range l.free {
		l.free[i] = int32(n - 1 - i)
	}
	return l
}

// slotsFor is the number of slots for n long flows: a power of two of at
// least 8n.
func slotsFor(n int) int {
	s := 1
	for s < 8*n {
		s <<= 1
	}
	return s
}

// home is h's first slot.
func (l *longFlows) home(h uint64) uint64 { return h >> 1 & l.mask }

// find is the entry of the long flow h.
func (l *longFlows) find(h uint64) (int32, bool) {
	for s := l.home(h); ; s = (s + 1) & l.mask {
		e := l.slots[s]
		if e == 0 {
			return 0, false
		}
		if l.flows[e-1].key == h {
			return e - 1, true
		}
	}
}

// track records that entry i holds the long flow h.
func (l *longFlows) track(h uint64, i int32) {
	s := l.home(h)
	for l.slots[s] != 0 {
		s = (s + 1) & l.mask
	}
	l.slots[s] = i + 1
}

// untrack forgets the long flow h (tracked), moving back the flows after
// it that probed past its slot.
func (l *longFlows) untrack(h uint64) {
	s := l.home(h)
	for l.flows[l.slots[s]-1].key != h {
		s = (s + 1) & l.mask
	}
	l.slots[s] = 0
	for j := (s + 1) & l.mask; l.slots[j] != 0; j = (j + 1) & l.mask {
		if home := l.home(l.flows[l.slots[j]-1].key); (j-home)&l.mask >= (j-s)&l.mask { // s lies on its probe from home
			l.slots[s], l.slots[j] = l.slots[j], 0
			s = j
		}
	}
}

// len is the number of long flows.
func (l *longFlows) len() int { return len(l.flows) - len(l.free) }

// add counts a segment of the flow h in the RAP table, chooses the long
// flows when it is time, and counts the segment in h's state if h is a
// long flow; it says whether it was.
func (l *longFlows) add(t *Tracker, h uint64, p *capture.Packet, g segment) bool {
	l.rap.Add(h, &struct{}{})
	if l.seen++; l.seen >= l.refresh {
		l.seen = 0
		l.choose(t)
	}
	i, ok := l.find(h)
	if !ok {
		return false
	}
	f := &l.flows[i]
	if f.prefix == pendingPrefix {
		pi, ok := t.prefixes.lookup(t.cfg.Prefixes.PrefixOf(&p.Flow))
		if !ok {
			t.counters.PrefixFull++
		}
		f.prefix = pi
		t.prefixes.entries[pi].open++
	}
	if f.seq.restarts(g) {
		l.flush(t, f)
		f.seq = seqState{}
	}
	switch f.seq.observe(g) {
	case ignored:
		return true
	case reordered:
		f.reord++
	case retransmitted:
		f.retrans++
	}
	if f.packets++; f.packets == 1<<32-1 {
		l.flush(t, f)
	}
	return true
}

// choose makes the flows with the largest RAP counts the long flows:
// those that fell out are flushed and dropped, those that came in take
// their window's state (and its place in the prefix's count) if they had
// one.
func (l *longFlows) choose(t *Tracker) {
	top := l.rap.Top(len(l.flows))
	clear(l.keep)
	for _, e := range top {
		if i, ok := l.find(e.Key); ok {
			l.keep[i] = true
		}
	}
	for i := range l.flows {
		if l.flows[i].key != 0 && !l.keep[i] {
			l.demote(t, i)
		}
	}
	for _, e := range top {
		if e.Count <= l.minPackets || len(l.free) == 0 {
			return
		}
		if _, ok := l.find(e.Key); !ok {
			l.promote(t, e.Key)
		}
	}
}

// promote makes h a long flow.
func (l *longFlows) promote(t *Tracker, h uint64) {
	i := l.free[len(l.free)-1]
	l.free = l.free[:len(l.free)-1]
	f := &l.flows[i]
	*f = longFlow{key: h, prefix: pendingPrefix}
	if s := t.find(h); s >= 0 {
		w := &t.wins[s]
		f.seq, f.prefix = w.seq, w.prefix
		f.packets, f.reord, f.retrans = uint32(w.packets), uint32(w.reord), uint32(w.retrans)
		t.keys[s] = 0 // the window's hold on its prefix passes to the long flow
	}
	l.track(h, i)
	t.counters.Promoted++
}

// demote flushes the long flow at i and frees its entry.
func (l *longFlows) demote(t *Tracker, i int) {
	f := &l.flows[i]
	if f.prefix != pendingPrefix {
		l.flush(t, f)
		t.prefixes.entries[f.prefix].open--
	}
	l.untrack(f.key)
	f.key = 0
	l.free = append(l.free, int32(i))
	t.counters.Demoted++
}

// flush counts f's packets into its prefix as one flow and zeroes them.
func (l *longFlows) flush(t *Tracker, f *longFlow) {
	if f.prefix == pendingPrefix {
		return
	}
	t.prefixes.entries[f.prefix].stats.addFlow(uint64(f.packets), uint64(f.reord), uint64(f.retrans))
	f.packets, f.reord, f.retrans = 0, 0, 0
}

// flushAll flushes every long flow (at the end of an epoch).
func (l *longFlows) flushAll(t *Tracker) {
	for i := range l.flows {
		if l.flows[i].key != 0 {
			l.flush(t, &l.flows[i])
		}
	}
}

// startEpoch points the long flows at their prefixes' new entries and
// halves the RAP counts: a new RAP table takes the old one's counters at
// half their counts, so that a flow needs recent packets to stay heavy.
func (l *longFlows) startEpoch(remap []uint32, seed uint64) {
	for i := range l.flows {
		if f := &l.flows[i]; f.key != 0 && f.prefix != pendingPrefix {
			f.prefix = remap[f.prefix]
		}
	}
	l.epochs++
	old := l.rap.Top(l.counters)
	l.rap = rap.New[struct{}](l.counters, seed+l.epochs)
	var v struct{}
	for _, e := range old {
		if c := e.Count / 2; c > 0 {
			l.rap.AddCount(e.Key, &v, c)
		}
	}
}
