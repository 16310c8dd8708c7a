// Package reorder finds the IP prefixes whose TCP traffic is reordered, at
// one observation point and in a fixed memory, as chapter 3 of Zheng's
// dissertation (2024) proposes: measure at the flow level, aggregate and
// allocate memory at the prefix level, sample as many flows as possible
// for a short while each, and follow the large flows for long.
//
// Definitions, shared by the bounded Tracker and the unbounded Exact. A
// flow is one direction of a TCP connection (a 5-tuple); its segments are
// the packets that take sequence space (data, SYN or FIN; pure ACKs and
// RSTs are not segments). A segment whose bytes had all been seen in its
// flow is retransmitted. Any other segment is reordered when it starts
// before its predecessor, the last segment of the flow with new bytes;
// otherwise it is in order. Every segment judged counts as a packet, and a
// prefix's reordering rate is its reordered packets over its packets. A
// SYN with another sequence number than the flow's first starts the flow
// over (a new connection on the same 5-tuple). A retransmission of a
// segment lost before the point fills a gap like a late segment does and
// counts as reordered: the point cannot tell them apart.
//
// The Tracker holds three tables in one memory budget:
//
//   - windows: a hash-indexed array of 4-way buckets, one flow per slot,
//     each keeping the flow's sequence state (the highest byte, the
//     predecessor and one range of bytes not seen yet) and its counts.
//     A flow takes a free slot of its bucket, or one whose window is done:
//     WindowPackets segments counted, a FIN or RST seen, or idle for Idle.
//     It never takes a live window's slot, so a window runs to its end
//     and the sample does not favour short flows; and a done window keeps
//     counting until another flow takes its slot. A flow whose window is
//     done is not taken again until another flow has had the slot, so
//     that windows go to as many flows as possible whatever their size.
//     The first segment of a window sets the base: later segments wholly
//     before it are not counted (the window cannot tell what they are).
//   - long flows: a RAP table (internal/synopsis/rap) counts every flow's
//     segments; every RefreshPackets segments the flows with the most
//     (and more than WindowPackets) become long flows, followed for as
//     long as they stay among them, taking their window's state along.
//   - prefixes: per prefix and epoch, the counts of the windows and long
//     flows closed into it, summed at the flow level so that the rate's
//     standard error can be told (Stats.RateSE). Once a prefix holds
//     PrefixPackets packets (counting each open window as WindowPackets),
//     its flows take no more windows that epoch: memory goes to the
//     prefixes measured least.
//
// Memory is fixed when the Tracker is made and does not grow with the
// traffic: a flood of new flows only refuses them. None of the types is
// safe for concurrent use: each capture worker owns a Tracker and their
// reports merge.
package reorder

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/synopsis/rap"
)

// Config is a Tracker's memory and rules.
type Config struct {
	// MemoryBytes is the budget for the three tables.
	MemoryBytes int `yaml:"memory_bytes"`
	// Prefixes is how flows are grouped and how many prefixes a report
	// lists.
	Prefixes PrefixConfig `yaml:"prefixes"`
	// WindowPackets is the segments after which a window is done.
	WindowPackets int `yaml:"window_packets"`
	// Idle is the time without a segment after which a window is done.
	Idle time.Duration `yaml:"idle"`
	// PrefixPackets is the packets a prefix is measured for in an epoch
	// before its flows take no more windows; 0 for no limit.
	PrefixPackets int `yaml:"prefix_packets"`
	// PrefixShare and LongShare are the shares of MemoryBytes given to
	// the prefix table and to the long flows; windows get the rest.
	// LongShare 0 turns long flows off.
	PrefixShare float64 `yaml:"prefix_share"`
	LongShare   float64 `yaml:"long_share"`
	// RefreshPackets is the segments between two choices of the long
	// flows.
	RefreshPackets int `yaml:"refresh_packets"`
	// Seed keys the flow hash and RAP's admissions.
	Seed uint64 `yaml:"seed"`
}

// DefaultConfig is 256 KiB, 35% for prefixes (1,042 of them) and 10% for
// long flows (131), the rest for 2,772 windows; windows of 32 segments or
// 1 s idle; a prefix measured for 4,096 packets per epoch at most; long
// flows chosen every 4,096 segments. The shares are measured
// (docs/evaluation.md): a prefix the table has no room for is not
// measured at all, and long flows, at 200 bytes each, found no more
// prefixes than windows did.
func DefaultConfig() Config {
	return Config{MemoryBytes: 512 << 10, Prefixes: DefaultPrefixConfig(), WindowPackets: 32, Idle: time.Second,
		PrefixPackets: 4096, PrefixShare: 0.35, LongShare: 0.10, RefreshPackets: 4096, Seed: 0x72656f72646572}
}

// Bounds of the Config.
const (
	MaxMemoryBytes = 1 << 30
	// MinMemoryBytes is the smallest budget with a bucket of windows and a
	// prefix at the default shares.
	MinMemoryBytes = 1 << 10
	ways           = 4 // slots in a bucket of windows
)

// Validate reports parameters out of range.
func (c Config) Validate() error {
	if err := c.Prefixes.Validate(); err != nil {
		return err
	}
	switch {
	case c.MemoryBytes < MinMemoryBytes || c.MemoryBytes > MaxMemoryBytes:
		return fmt.Errorf("reorder memory %d bytes out of [%d, %d]", c.MemoryBytes, MinMemoryBytes, MaxMemoryBytes)
	case c.WindowPackets < 2 || c.WindowPackets > 1<<15:
		return fmt.Errorf("reorder window of %d packets out of [2, %d]", c.WindowPackets, 1<<15)
	case c.Idle < time.Millisecond || c.Idle > time.Hour:
		return fmt.Errorf("reorder idle time %v out of [1ms, 1h]", c.Idle)
	case c.PrefixPackets < 0:
		return fmt.Errorf("reorder prefix packets %d negative", c.PrefixPackets)
	case !(c.PrefixShare > 0 && c.LongShare >= 0 && c.PrefixShare+c.LongShare < 1):
		return fmt.Errorf("reorder memory shares: prefixes %v, long flows %v: want prefixes > 0, long flows ≥ 0, sum < 1", c.PrefixShare, c.LongShare)
	case c.RefreshPackets < 1:
		return fmt.Errorf("reorder refresh every %d packets: want at least 1", c.RefreshPackets)
	}
	if s := c.Sizes(); s.Windows < ways || s.Prefixes < 1 {
		return fmt.Errorf("reorder memory %d bytes too small for its shares: %d windows, %d prefixes", c.MemoryBytes, s.Windows, s.Prefixes)
	}
	return nil
}

// Sizes are the tables a Config's memory buys.
type Sizes struct {
	Windows   int // window slots, a multiple of 4
	Prefixes  int // prefixes an epoch can hold, besides Other
	LongFlows int
	Counters  int // RAP counters, two per long flow
	// Bytes is their memory by the per-entry costs below: at most the
	// budget.
	Bytes int
}

// Per-entry memory. A Go map's entry is taken as mapEntryBytes (an
// 8-byte key and a small value at the map's load factor, with its
// control bytes).
const (
	mapEntryBytes = 32
	// WindowBytes is a window slot: its key and its state.
	WindowBytes = int(unsafe.Sizeof(uint64(0)) + unsafe.Sizeof(window{}))
	// PrefixBytes is a prefix entry and its index slots.
	PrefixBytes = int(unsafe.Sizeof(prefixEntry{})) + prefixIndexBytes
	// LongFlowBytes is a long flow with its index entry, its filter slots
	// (fewer than 16) and its two RAP counters (heap entry and index entry
	// each).
	LongFlowBytes = int(unsafe.Sizeof(longFlow{})) + mapEntryBytes + 16 + 2*(int(unsafe.Sizeof(rap.Entry[struct{}]{}))+mapEntryBytes)
)

// Sizes divides the budget: the prefix and long flow shares first, the
// rest to windows in whole buckets.
func (c Config) Sizes() Sizes {
	m := float64(c.MemoryBytes)
	s := Sizes{Prefixes: min(int(c.PrefixShare*m)/PrefixBytes, 1<<24)}
	if c.LongShare > 0 {
		s.LongFlows = int(c.LongShare*m) / LongFlowBytes
		s.Counters = 2 * s.LongFlows
	}
	rest := c.MemoryBytes - s.Prefixes*PrefixBytes - s.LongFlows*LongFlowBytes
	s.Windows = max(rest/WindowBytes/ways*ways, 0)
	s.Bytes = s.Windows*WindowBytes + s.Prefixes*PrefixBytes + s.LongFlows*LongFlowBytes
	return s
}

// timeShift makes a window's time stamp: nanoseconds >> 20, about 1 ms,
// 32 bits wrapping every 75 minutes (comparisons are modular).
const timeShift = 20

// window is a flow being sampled: 44 bytes, and its key in Tracker.keys.
type window struct {
	seq     seqState
	prefix  uint32 // entry in the prefix table
	seen    uint32 // time of its last segment, >> timeShift
	packets uint16
	reord   uint16
	retrans uint16
	// done: WindowPackets counted, or a FIN or RST seen. A done window
	// (or an idle one) yields its slot to another flow.
	done bool
}

// Tracker measures reordering by prefix at one point in a fixed memory.
// Not safe for concurrent use.
type Tracker struct {
	cfg       Config
	sizes     Sizes
	keys      []uint64 // flow hash by slot; 0 is free
	wins      []window
	buckets   uint64
	idleUnits uint32
	prefixes  prefixTable
	long      *longFlows // nil without long flows
	counters  Counters
	// sel chooses the prefixes a report lists; nil when a report can
	// list every prefix the table holds.
	sel *Selector
}

// New returns an empty tracker.
func New(cfg Config) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := cfg.Sizes()
	t := &Tracker{cfg: cfg, sizes: s, keys: make([]uint64, s.Windows), wins: make([]window, s.Windows),
		buckets: uint64(s.Windows / ways), idleUnits: uint32(max(cfg.Idle.Nanoseconds()>>timeShift, 1)),
		prefixes: newPrefixTable(s.Prefixes)}
	if s.LongFlows > 0 {
		t.long = newLongFlows(s.LongFlows, s.Counters, cfg)
	}
	if cfg.Prefixes.Max < s.Prefixes {
		t.sel = NewSelector(cfg.Prefixes.Max)
	}
	return t, nil
}

// Sizes are the tracker's tables.
func (t *Tracker) Sizes() Sizes { return t.sizes }

// Add offers a packet. Packets other than TCP segments cost a few
// comparisons (a RST a look-up, to end its flow's window).
func (t *Tracker) Add(p *capture.Packet) {
	t.counters.Packets++
	g, ok := segmentOf(p)
	if !ok {
		if isRST(p) {
			t.end(flowHash(&p.Flow, t.cfg.Seed))
		}
		return
	}
	t.counters.Segments++
	h := flowHash(&p.Flow, t.cfg.Seed)
	if t.long != nil && t.long.add(t, h, p, g) {
		return
	}
	t.addWindow(h, p, g, uint32(p.TimeNS>>timeShift))
}

// bucket is the first slot of h's bucket (Lemire's multiply-shift range
// reduction of the hash's high half).
func (t *Tracker) bucket(h uint64) int {
	return int((h>>32)*t.buckets>>32) * ways
}

// find is h's slot, or -1.
func (t *Tracker) find(h uint64) int {
	b := t.bucket(h)
	for i, k := range t.keys[b : b+ways] {
		if k == h {
			return b + i
		}
	}
	return -1
}

// end marks h's window done (its flow sent a RST).
func (t *Tracker) end(h uint64) {
	if i := t.find(h); i >= 0 {
		t.wins[i].done = true
	}
}

// addWindow counts g in h's window, opening one if a slot is free.
func (t *Tracker) addWindow(h uint64, p *capture.Packet, g segment, now uint32) {
	b := t.bucket(h)
	slot := -1
	for i, k := range t.keys[b : b+ways] {
		if k == h {
			t.update(b+i, g, now)
			return
		}
		if k == 0 && slot < 0 {
			slot = b + i
		}
	}
	if slot < 0 {
		slot = t.victim(b, now)
	}
	if slot < 0 {
		t.counters.Refused++
		return
	}
	pi, ok := t.admit(p)
	if !ok {
		return
	}
	if t.keys[slot] != 0 {
		t.close(slot)
	}
	t.keys[slot] = h
	t.wins[slot] = window{prefix: pi, seen: now}
	t.prefixes.entries[pi].open++
	t.counters.Windows++
	t.update(slot, g, now)
}

// victim is a slot of the bucket at b whose window is done or idle, or -1.
func (t *Tracker) victim(b int, now uint32) int {
	for i := b; i < b+ways; i++ {
		if w := &t.wins[i]; w.done || now-w.seen > t.idleUnits {
			return i
		}
	}
	return -1
}

// admit is the prefix entry of a flow that may take a window: false when
// the prefix table is full or the prefix measured enough this epoch.
func (t *Tracker) admit(p *capture.Packet) (uint32, bool) {
	pi, ok := t.prefixes.lookup(t.cfg.Prefixes.PrefixOf(&p.Flow))
	if !ok {
		t.counters.PrefixFull++
		return 0, false
	}
	e := &t.prefixes.entries[pi]
	if q := uint64(t.cfg.PrefixPackets); q > 0 && e.stats.Packets+uint64(e.open)*uint64(t.cfg.WindowPackets) >= q {
		t.counters.Quota++
		return 0, false
	}
	return pi, true
}

// update counts g in the window at slot i.
func (t *Tracker) update(i int, g segment, now uint32) {
	w := &t.wins[i]
	w.seen = now
	if w.seq.restarts(g) {
		t.flush(w)
		w.seq, w.done = seqState{}, false
	}
	switch w.seq.observe(g) {
	case ignored:
		return
	case reordered:
		w.reord++
	case retransmitted:
		w.retrans++
	}
	w.packets++
	if g.fin || int(w.packets) >= t.cfg.WindowPackets {
		w.done = true
	}
	if w.packets == 1<<16-1 {
		t.flush(w)
	}
}

// flush counts w's packets into its prefix as one flow and zeroes them.
func (t *Tracker) flush(w *window) {
	t.prefixes.entries[w.prefix].stats.addFlow(uint64(w.packets), uint64(w.reord), uint64(w.retrans))
	w.packets, w.reord, w.retrans = 0, 0, 0
}

// close flushes the window at slot i and frees the slot.
func (t *Tracker) close(i int) {
	w := &t.wins[i]
	t.flush(w)
	t.prefixes.entries[w.prefix].open--
	t.keys[i] = 0
}

// Report ends the epoch: every window and long flow counts what it has
// counted so far into its prefix (and goes on, with its sequence state,
// into the next epoch), and at most Prefixes.Max prefixes are returned,
// most packets first, chosen by a Selector (those that showed reordering
// in earlier epochs, then those with the most packets), the rest summed
// in Other. The prefix table then keeps only the prefixes that open
// windows and long flows point to, and the RAP counts are halved, so that
// flows that were heavy long ago make way.
func (t *Tracker) Report() *Report {
	for i, k := range t.keys {
		if k != 0 {
			t.flush(&t.wins[i])
		}
	}
	if t.long != nil {
		t.long.flushAll(t)
	}
	r := &Report{Counters: t.counters}
	es := t.prefixes.entries
	r.Other = es[otherEntry].stats
	for i := 1; i < len(es); i++ {
		if es[i].stats.Packets > 0 {
			r.Prefixes = append(r.Prefixes, PrefixStats{Prefix: es[i].prefix(), Stats: es[i].stats})
		}
	}
	if t.sel != nil {
		t.sel.Cut(r)
	} else {
		r.fold(t.cfg.Prefixes.Max)
	}
	remap := t.prefixes.compact()
	for i, k := range t.keys {
		if k != 0 {
			t.wins[i].prefix = remap[t.wins[i].prefix]
		}
	}
	if t.long != nil {
		t.long.startEpoch(remap, t.cfg.Seed)
	}
	t.counters = Counters{}
	return r
}
