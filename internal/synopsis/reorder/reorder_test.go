package reorder

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/owl-latency/owl/internal/capture"
)

// seg is a test segment: start, length in bytes, flags.
type seg struct {
	seq, n uint32
	flags  uint8
}

func TestObserve(t *testing.T) {
	const (
		I = inOrder
		R = reordered
		X = retransmitted
		Z = ignored
	)
	const big = 1 << 32
	for _, tc := range []struct {
		name  string
		segs  []seg
		win   []verdict // the window's verdicts
		exact []verdict // Exact's, when they differ
	}{
		{"in order", []seg{{0, 10, 0}, {10, 10, 0}, {20, 10, 0}}, []verdict{I, I, I}, nil},
		{"adjacent swap", []seg{{0, 10, 0}, {20, 10, 0}, {10, 10, 0}, {30, 10, 0}}, []verdict{I, I, R, I}, nil},
		// 1 2 5 3 4 6: 3 starts before 5, 4 after 3 (its predecessor).
		{"late by three", []seg{{0, 10, 0}, {10, 10, 0}, {40, 10, 0}, {20, 10, 0}, {30, 10, 0}, {50, 10, 0}}, []verdict{I, I, I, R, I, I}, nil},
		// 1 2 5 4 3: each of 4 and 3 starts before its predecessor.
		{"reversed", []seg{{0, 10, 0}, {10, 10, 0}, {40, 10, 0}, {30, 10, 0}, {20, 10, 0}}, []verdict{I, I, I, R, R}, nil},
		{"retransmission", []seg{{0, 10, 0}, {10, 10, 0}, {10, 10, 0}, {20, 10, 0}}, []verdict{I, I, X, I}, nil},
		{"retransmission of the first", []seg{{0, 10, 0}, {10, 10, 0}, {0, 10, 0}}, []verdict{I, I, X}, nil},
		{"retransmission past a gap", []seg{{0, 10, 0}, {20, 10, 0}, {20, 10, 0}, {10, 10, 0}, {10, 10, 0}}, []verdict{I, I, X, R, X}, nil},
		{"repacketized: old and new bytes", []seg{{0, 10, 0}, {10, 10, 0}, {15, 10, 0}}, []verdict{I, I, I}, nil},
		{"two gaps, filled in order", []seg{{0, 10, 0}, {20, 10, 0}, {40, 10, 0}, {10, 10, 0}, {30, 10, 0}, {30, 10, 0}},
			[]verdict{I, I, I, R, I, X}, nil},
		{"two gaps, seen bytes between them retransmitted", []seg{{0, 10, 0}, {20, 10, 0}, {40, 10, 0}, {20, 10, 0}, {10, 10, 0}, {30, 10, 0}},
			// The window's one widened hole takes [20, 30) for bytes not
			// seen and closes once as many bytes as it missed came in.
			[]verdict{I, I, I, R, R, X}, []verdict{I, I, I, X, R, I}},
		{"before the first segment", []seg{{100, 10, 0}, {90, 10, 0}, {110, 10, 0}}, []verdict{I, Z, I}, []verdict{I, R, I}},
		{"across the wrap", []seg{{big - 20, 10, 0}, {big - 10, 10, 0}, {10, 10, 0}, {0, 10, 0}, {20, 10, 0}}, []verdict{I, I, I, R, I}, nil},
		{"SYN, data, FIN", []seg{{99, 0, capture.TCPSyn}, {100, 10, capture.TCPAck}, {110, 0, capture.TCPFin | capture.TCPAck}, {99, 0, capture.TCPSyn}},
			[]verdict{I, I, I, X}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.exact
			if want == nil {
				want = tc.win
			}
			var s seqState
			var f exactFlow
			for i, sg := range tc.segs {
				p := packet(sg)
				g, ok := segmentOf(&p)
				if !ok {
					t.Fatalf("segment %d not a segment", i)
				}
				if v := s.observe(g); v != tc.win[i] {
					t.Errorf("window: segment %d (%d+%d): %d, want %d", i, sg.seq, sg.n, v, tc.win[i])
				}
				if v := f.observe(g); v != want[i] {
					t.Errorf("exact: segment %d (%d+%d): %d, want %d", i, sg.seq, sg.n, v, want[i])
				}
			}
		})
	}
}

// packet is a TCP packet of one flow from 192.0.2.1 carrying sg.
func packet(sg seg) capture.Packet {
	return capture.Packet{Flow: capture.FlowKey{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("198.51.100.1"),
		SrcPort: 80, DstPort: 40000, Proto: protoTCP}, L4: capture.Transport{Seq: sg.seq, TCPFlags: sg.flags | capture.TCPAck, PayloadLen: int(sg.n)}}
}

func TestSegmentOf(t *testing.T) {
	p := packet(seg{1, 0, 0})
	if _, ok := segmentOf(&p); ok {
		t.Error("a pure ACK is a segment")
	}
	p = packet(seg{1, 10, capture.TCPRst})
	if _, ok := segmentOf(&p); ok || !isRST(&p) {
		t.Error("a RST with data is a segment, or not a RST")
	}
	p = packet(seg{1, 10, 0})
	p.Flow.Proto = 17
	if _, ok := segmentOf(&p); ok {
		t.Error("UDP is a segment")
	}
	p = packet(seg{1, 0, capture.TCPSyn | capture.TCPFin})
	if g, ok := segmentOf(&p); !ok || g.span != 2 {
		t.Errorf("SYN+FIN spans %d", g.span)
	}
}

// stream is a test trace: flows from nPrefixes /24s, each sending n
// segments of 100 bytes with a SYN and a FIN, reordering (swapping with
// the next) with probability reorder and retransmitting with probability
// retrans; flows interleaved at random.
func stream(nFlows, nPrefixes, n int, reorder, retrans float64, seed uint64) []capture.Packet {
	r := rand.New(rand.NewPCG(seed, 1))
	var flows [][]capture.Packet
	for i := range nFlows {
		pf := i % nPrefixes
		key := capture.FlowKey{Src: netip.AddrFrom4([4]byte{10, byte(pf >> 8), byte(pf), byte(1 + i/nPrefixes)}),
			Dst: netip.MustParseAddr("198.51.100.1"), SrcPort: 443, DstPort: uint16(1024 + i), Proto: protoTCP}
		isn := r.Uint32()
		f := []capture.Packet{{Flow: key, L4: capture.Transport{Seq: isn, TCPFlags: capture.TCPSyn}}}
		for j := range n {
			f = append(f, capture.Packet{Flow: key, L4: capture.Transport{Seq: isn + 1 + uint32(j)*100, TCPFlags: capture.TCPAck, PayloadLen: 100}})
			if r.Float64() < retrans {
				f = append(f, f[len(f)-1])
			}
		}
		f = append(f, capture.Packet{Flow: key, L4: capture.Transport{Seq: isn + 1 + uint32(n)*100, TCPFlags: capture.TCPFin | capture.TCPAck}})
		for j := 1; j+1 < len(f)-1; j++ {
			if r.Float64() < reorder && f[j].L4.Seq != f[j+1].L4.Seq {
				f[j], f[j+1] = f[j+1], f[j]
				j++
			}
		}
		flows = append(flows, f)
	}
	var out []capture.Packet
	for len(flows) > 0 {
		i := r.IntN(len(flows))
		out = append(out, flows[i][0])
		out[len(out)-1].TimeNS = int64(len(out)) * 1000
		if flows[i] = flows[i][1:]; len(flows[i]) == 0 {
			flows[i] = flows[len(flows)-1]
			flows = flows[:len(flows)-1]
		}
	}
	return out
}

// TestRoomyTrackerIsExact: with a window for every flow and windows long
// enough for whole flows, the tracker counts what Exact counts.
func TestRoomyTrackerIsExact(t *testing.T) {
	pkts := stream(300, 20, 50, 0.03, 0.01, 1)
	c := DefaultConfig()
	c.MemoryBytes, c.WindowPackets, c.PrefixPackets, c.LongShare = 1<<20, 1<<15, 0, 0
	c.Prefixes.Max = 100
	tr, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	x := NewExact(c.Prefixes)
	for i := range pkts {
		tr.Add(&pkts[i])
		x.Add(&pkts[i])
	}
	got, want := tr.Report(), x.Report()
	if len(got.Prefixes) != 20 || len(want.Prefixes) != 20 {
		t.Fatalf("%d and %d prefixes, want 20", len(got.Prefixes), len(want.Prefixes))
	}
	if want.Total().Reordered == 0 || want.Total().Retransmitted == 0 {
		t.Fatalf("trace without reordering or retransmissions: %+v", want.Total())
	}
	for i := range got.Prefixes {
		if got.Prefixes[i] != want.Prefixes[i] {
			t.Errorf("prefix %d: tracker %+v, exact %+v", i, got.Prefixes[i], want.Prefixes[i])
		}
	}
	if got.Counters.Windows != 300 || got.Counters.Refused != 0 {
		t.Errorf("counters %+v", got.Counters)
	}
}

// TestLongFlowsTakeTheirWindow: with long flows on, a tracker whose
// windows are short still counts every segment of a few big flows (the
// long flows take over their windows' state), and its counts match
// Exact's.
func TestLongFlowsTakeTheirWindow(t *testing.T) {
	pkts := stream(8, 4, 3000, 0.02, 0.005, 2)
	c := DefaultConfig()
	c.MemoryBytes, c.PrefixPackets, c.RefreshPackets = 64<<10, 0, 64
	tr, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	x := NewExact(c.Prefixes)
	for i := range pkts {
		tr.Add(&pkts[i])
		x.Add(&pkts[i])
	}
	got, want := tr.Report(), x.Report()
	if got.Counters.Promoted != 8 || got.Counters.Windows != 8 {
		t.Errorf("counters %+v: want 8 windows, 8 promoted", got.Counters)
	}
	if g, w := got.Total(), want.Total(); g.Packets != w.Packets || g.Reordered != w.Reordered || g.Retransmitted != w.Retransmitted {
		t.Errorf("tracker %+v, exact %+v", g, w)
	}
}

// TestEpochs: counts start over each epoch, flows go on with their state,
// and prefixes no flow points to any more leave the table.
// TestLongFlowSlots crowds long flows onto three home slots (one at the
// table's end, so that probes wrap) and checks, after every promotion and
// demotion, that each long flow is found at its entry and no other flow
// is found.
func TestLongFlowSlots(t *testing.T) {
	tr, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	l := tr.long
	homes := []uint64{3, 4, l.mask}
	var keys []uint64
	for k := range uint64(12) {
		for _, home := range homes {
			keys = append(keys, (home+(k+1)*(l.mask+1))<<1|1)
		}
	}
	at := map[uint64]int32{} // long flow → entry
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 4000 {
		h := keys[rng.IntN(len(keys))]
		if i, ok := at[h]; ok {
			l.demote(tr, int(i))
			delete(at, h)
		} else if len(l.free) > 0 {
			at[h] = l.free[len(l.free)-1] // the entry promote takes
			l.promote(tr, h)
		}
		for _, k := range keys {
			i, ok := l.find(k)
			if want, long := at[k]; ok != long || ok && i != want {
				t.Fatalf("step %d: flow %x found %t at %d, want %t at %d", step, k, ok, i, long, want)
			}
		}
		if l.len() != len(at) {
			t.Fatalf("step %d: %d long flows, want %d", step, l.len(), len(at))
		}
	}
}

func TestEpochs(t *testing.T) {
	pkts := stream(40, 10, 40, 0.05, 0, 3)
	c := DefaultConfig()
	c.LongShare, c.PrefixPackets, c.WindowPackets = 0, 0, 1000
	tr, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	x := NewExact(c.Prefixes)
	var got, want Stats
	for i := range pkts {
		tr.Add(&pkts[i])
		x.Add(&pkts[i])
		if i == len(pkts)/2 {
			got.Add(tr.Report().Total())
			want.Add(x.Report().Total())
		}
	}
	r := tr.Report()
	got.Add(r.Total())
	want.Add(x.Report().Total())
	if got.Packets != want.Packets || got.Reordered != want.Reordered {
		t.Errorf("two epochs: tracker %+v, exact %+v", got, want)
	}
	if r.Counters.Packets != uint64(len(pkts)-len(pkts)/2-1) {
		t.Errorf("second epoch counted %d packets, want %d", r.Counters.Packets, len(pkts)-len(pkts)/2-1)
	}
	// Every flow ended with a FIN but still holds its window: the table
	// keeps their prefixes until other flows take the slots.
	if n := len(tr.prefixes.entries) - 1; n != 10 {
		t.Errorf("%d prefixes kept, want 10", n)
	}
	if e := tr.Report(); len(e.Prefixes) != 0 || e.Counters.Packets != 0 {
		t.Errorf("an empty epoch reports %+v", e)
	}
}

// TestFloodKeepsMemory floods a tracker with a million one-segment flows
// from as many /24s and checks that it allocates nothing, that its tables
// stay within their sizes, and that a flow admitted before the flood is
// still measured.
func TestFloodKeepsMemory(t *testing.T) {
	c := DefaultConfig()
	c.MemoryBytes = 64 << 10
	tr, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	steady := stream(1, 1, 2000, 0.05, 0, 4)
	sz := tr.Sizes()
	var before, after runtime.MemStats
	p := capture.Packet{Flow: capture.FlowKey{Dst: netip.MustParseAddr("198.51.100.1"), SrcPort: 1, DstPort: 80, Proto: protoTCP},
		L4: capture.Transport{TCPFlags: capture.TCPSyn}}
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 1_000_000 {
		if i%500 == 0 {
			tr.Add(&steady[i/500])
		}
		p.Flow.Src = netip.AddrFrom4([4]byte{byte(i >> 16), byte(i >> 8), byte(i), 1})
		p.L4.Seq = uint32(i)
		p.TimeNS = int64(i) * 1000
		tr.Add(&p)
	}
	runtime.ReadMemStats(&after)
	if n := after.Mallocs - before.Mallocs; n > 2000 {
		t.Errorf("%d allocations under the flood", n)
	}
	if n := len(tr.prefixes.entries) - 1; n > sz.Prefixes {
		t.Errorf("%d prefixes held, %d allowed", n, sz.Prefixes)
	}
	if n := tr.long.len(); n > sz.LongFlows || tr.long.rap.Len() > sz.Counters {
		t.Errorf("%d long flows, %d counters: %d and %d allowed", n, tr.long.rap.Len(), sz.LongFlows, sz.Counters)
	}
	r := tr.Report()
	t.Logf("flood: %+v; %d prefixes reported, other %d packets, %d bytes", r.Counters, len(r.Prefixes), r.Other.Packets, sz.Bytes)
	if r.Counters.PrefixFull == 0 {
		t.Error("the prefix table never filled")
	}
	var steadyPackets uint64
	for _, ps := range r.Prefixes {
		if ps.Prefix.Addr() == netip.MustParseAddr("10.0.0.0") {
			steadyPackets = ps.Packets
		}
	}
	if steadyPackets < 1900 {
		t.Errorf("the steady flow measured for %d packets of 2,000", steadyPackets)
	}
}

// TestFloodAcrossEpochs floods a default tracker with a million SYNs of
// distinct flows from 4,096 /24s, ending an epoch every 100,000 packets
// as a probe would: the live heap after the flood is within a few
// kilobytes of what it was before (the reports are garbage once read),
// and no table outgrows its size.
func TestFloodAcrossEpochs(t *testing.T) {
	tr, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	sz := tr.Sizes()
	entries, index := cap(tr.prefixes.entries), len(tr.prefixes.index)
	p := capture.Packet{Flow: capture.FlowKey{Dst: netip.MustParseAddr("198.51.100.1"), DstPort: 443, Proto: protoTCP},
		L4: capture.Transport{TCPFlags: capture.TCPSyn}}
	flood := func(from, to int) {
		for i := from; i < to; i++ {
			p.Flow.Src = netip.AddrFrom4([4]byte{10, byte(i >> 8 & 0x0f), byte(i), byte(i >> 12)})
			p.Flow.SrcPort = uint16(i >> 20)
			p.L4.Seq = uint32(i) * 2654435761
			p.TimeNS = int64(i) * 1000
			tr.Add(&p)
			if i%100_000 == 99_999 {
				if r := tr.Report(); len(r.Prefixes) > tr.cfg.Prefixes.Max {
					t.Fatalf("report of %d prefixes", len(r.Prefixes))
				}
			}
		}
	}
	flood(0, 100_000) // the map and the RAP table reach their working size
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	flood(100_000, 1_000_000)
	runtime.GC()
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("live heap %d → %d bytes; tracker %d bytes", before.HeapAlloc, after.HeapAlloc, sz.Bytes)
	if grown > 64<<10 {
		t.Errorf("live heap grew by %d bytes under the flood (tracker of %d bytes)", grown, sz.Bytes)
	}
	if cap(tr.prefixes.entries) != entries || len(tr.prefixes.index) != index || len(tr.keys) != sz.Windows || len(tr.wins) != sz.Windows {
		t.Errorf("tables resized: prefixes %d → %d, index %d → %d, windows %d, %d of %d",
			entries, cap(tr.prefixes.entries), index, len(tr.prefixes.index), len(tr.keys), len(tr.wins), sz.Windows)
	}
	if n := tr.long.len(); n > sz.LongFlows || tr.long.rap.Len() > sz.Counters {
		t.Errorf("%d long flows, %d counters: %d and %d allowed", n, tr.long.rap.Len(), sz.LongFlows, sz.Counters)
	}
	runtime.KeepAlive(tr)
}

func TestRateSE(t *testing.T) {
	flows := func(fs ...[2]uint64) Stats {
		var s Stats
		for _, f := range fs {
			s.addFlow(f[0], f[1], 0)
		}
		return s
	}
	for _, tc := range []struct {
		name     string
		s        Stats
		rate, se float64
	}{
		{"nothing", Stats{}, 0, math.Sqrt(0.25 / 2)},
		// One flow: the binomial floor with p = 11/1002.
		{"one flow", flows([2]uint64{1000, 10}), 0.01, math.Sqrt(11.0 / 1002 * 991 / 1002 / 1002)},
		// Ten equal flows: no spread between them, the floor again.
		{"equal flows", flows([2]uint64{100, 1}, [2]uint64{100, 1}, [2]uint64{100, 1}, [2]uint64{100, 1}, [2]uint64{100, 1},
			[2]uint64{100, 1}, [2]uint64{100, 1}, [2]uint64{100, 1}, [2]uint64{100, 1}, [2]uint64{100, 1}), 0.01, math.Sqrt(11.0 / 1002 * 991 / 1002 / 1002)},
		// All the reordering in one of four flows: √(4/3 · (30² + 3·10²))/400.
		{"one flow of four", flows([2]uint64{100, 40}, [2]uint64{100, 0}, [2]uint64{100, 0}, [2]uint64{100, 0}), 0.1,
			math.Sqrt(4.0/3*(30*30+3*10*10)) / 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := tc.s.Rate(); math.Abs(r-tc.rate) > 1e-12 {
				t.Errorf("rate %v, want %v", r, tc.rate)
			}
			if se := tc.s.RateSE(); math.Abs(se-tc.se) > 1e-9 {
				t.Errorf("SE %v, want %v", se, tc.se)
			}
		})
	}
}

func TestReportFoldAndMerge(t *testing.T) {
	pf := func(s string, n uint64) PrefixStats {
		return PrefixStats{Prefix: netip.MustParsePrefix(s), Stats: Stats{Packets: n, Reordered: n / 10, Flows: 1}}
	}
	a := &Report{Prefixes: []PrefixStats{pf("10.0.0.0/24", 100), pf("10.0.1.0/24", 50), pf("2001:db8::/48", 70)}, Counters: Counters{Packets: 300}}
	b := &Report{Prefixes: []PrefixStats{pf("10.0.1.0/24", 40), pf("10.0.2.0/24", 10)}, Other: Stats{Packets: 5}, PrefixesFolded: 1, Counters: Counters{Packets: 60}}
	m := Merge(2, a, b)
	if len(m.Prefixes) != 2 || m.Prefixes[0].Packets != 100 || m.Prefixes[1].Packets != 90 || m.Prefixes[1].Flows != 2 {
		t.Fatalf("merged %+v", m.Prefixes)
	}
	if m.Other.Packets != 5+70+10 || m.PrefixesFolded != 3 || m.Counters.Packets != 360 {
		t.Errorf("other %+v, folded %d, counters %+v", m.Other, m.PrefixesFolded, m.Counters)
	}
	if tot := m.Total(); tot.Packets != 275 {
		t.Errorf("total %d packets, want 275", tot.Packets)
	}
}

func TestConfigValidate(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New of a zero config did not fail")
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"default", func(*Config) {}, ""},
		{"no long flows", func(c *Config) { c.LongShare = 0 }, ""},
		{"memory", func(c *Config) { c.MemoryBytes = 100 }, "memory 100 bytes"},
		{"window", func(c *Config) { c.WindowPackets = 1 }, "window of 1 packets"},
		{"idle", func(c *Config) { c.Idle = time.Microsecond }, "idle time 1µs"},
		{"quota", func(c *Config) { c.PrefixPackets = -1 }, "prefix packets -1"},
		{"shares", func(c *Config) { c.PrefixShare, c.LongShare = 0.5, 0.5 }, "memory shares"},
		{"refresh", func(c *Config) { c.RefreshPackets = 0 }, "refresh every 0"},
		{"bits", func(c *Config) { c.Prefixes.V4Bits = 33 }, "/33 (IPv4)"},
		{"max", func(c *Config) { c.Prefixes.Max = MaxPrefixes + 1 }, "max prefixes 4097"},
		{"small for shares", func(c *Config) { c.MemoryBytes, c.PrefixShare, c.LongShare = MinMemoryBytes, 0.05, 0.9 }, "too small"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestSizesWithinBudget: the tables never take more than the budget.
func TestSizesWithinBudget(t *testing.T) {
	for _, m := range []int{MinMemoryBytes, 16 << 10, 100_000, 1 << 20, MaxMemoryBytes} {
		c := DefaultConfig()
		c.MemoryBytes = m
		s := c.Sizes()
		if s.Bytes > m || s.Windows%ways != 0 || s.Windows < ways || s.Counters != 2*s.LongFlows {
			t.Errorf("%d bytes: %+v", m, s)
		}
	}
}

func benchmarkAdd(b *testing.B, longShare float64) {
	pkts := stream(20_000, 1000, 30, 0.02, 0.01, 5)
	c := DefaultConfig()
	c.LongShare = longShare
	tr, err := New(c)
	if err != nil {
		b.Fatal(err)
	}
	for i := range pkts { // warm the tables
		tr.Add(&pkts[i])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := &pkts[i%len(pkts)]
		p.TimeNS += int64(len(pkts)) * 1000
		tr.Add(p)
	}
	b.ReportMetric(float64(c.Sizes().Bytes), "bytes")
}

// BenchmarkAdd is the cost of a packet with the default config (256 KiB)
// on 20,000 flows of 32 packets each over 1,000 prefixes.
func BenchmarkAdd(b *testing.B) { benchmarkAdd(b, DefaultConfig().LongShare) }

// BenchmarkAddWindowsOnly is the same without long flows.
func BenchmarkAddWindowsOnly(b *testing.B) { benchmarkAdd(b, 0) }

// BenchmarkAddFlood is the cost of a SYN of a new flow, every packet,
// from 4,096 /24s: the tracker's worst case, the one that must not grow.
func BenchmarkAddFlood(b *testing.B) {
	tr, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	p := capture.Packet{Flow: capture.FlowKey{Dst: netip.MustParseAddr("198.51.100.1"), DstPort: 443, Proto: protoTCP},
		L4: capture.Transport{TCPFlags: capture.TCPSyn}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		p.Flow.Src = netip.AddrFrom4([4]byte{10, byte(i >> 8 & 0x0f), byte(i), byte(i >> 12)})
		p.Flow.SrcPort = uint16(i >> 20)
		p.L4.Seq = uint32(i) * 2654435761
		p.TimeNS = int64(i) * 1000
		tr.Add(&p)
	}
}

// BenchmarkExactAdd is the ground truth's cost on the same packets.
func BenchmarkExactAdd(b *testing.B) {
	pkts := stream(20_000, 1000, 30, 0.02, 0.01, 5)
	x := NewExact(DefaultPrefixConfig())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		x.Add(&pkts[i%len(pkts)])
	}
}
