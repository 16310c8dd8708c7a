package evaluate

import (
	"cmp"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"

	"github.com/owl-latency/owl/internal/capture"
)

// reorderPkt is a packet of the trace: 24 bytes.
type reorderPkt struct {
	tNS     int64
	seq     uint32
	flow    uint32
	payload uint16
	flags   uint8
}

// reorderTrace is a synthetic trace in time order.
type reorderTrace struct {
	flows []capture.FlowKey
	pkts  []reorderPkt
	// reordering are the prefixes made to reorder.
	reordering map[netip.Prefix]bool
}

// mss is the data packets' payload.
const mss = 1448

// newReorderTrace draws a trace.
func newReorderTrace(c ReorderConfig, seed uint64) *reorderTrace {
	r := rand.New(rand.NewPCG(seed, 0x72656f))
	prefixes, rates, reordering := reorderPrefixes(c, r)
	cum := make([]float64, c.Prefixes)
	for k := range cum {
		cum[k] = math.Pow(float64(k+1), -c.PrefixSkew)
		if k > 0 {
			cum[k] += cum[k-1]
		}
	}
	tr := &reorderTrace{flows: make([]capture.FlowKey, c.Flows), reordering: reordering}
	var f []reorderPkt
	for i := range tr.flows {
		k, _ := slices.BinarySearch(cum, r.Float64()*cum[len(cum)-1])
		k = min(k, c.Prefixes-1)
		tr.flows[i] = reorderFlowKey(prefixes[k], r)
		rate := min(rates[k]*r.ExpFloat64(), 0.5)
		f = reorderFlow(c, r, f[:0], uint32(i), rate)
		tr.pkts = append(tr.pkts, f...)
	}
	slices.SortStableFunc(tr.pkts, func(a, b reorderPkt) int { return cmp.Compare(a.tNS, b.tNS) })
	return tr
}

// reorderPrefixes draws the prefixes, their reordering rates and which
// reorder. Popularity ranks are shuffled against the choice of the
// reordering ones, so that they are popular and not alike.
func reorderPrefixes(c ReorderConfig, r *rand.Rand) ([]netip.Prefix, []float64, map[netip.Prefix]bool) {
	prefixes := make([]netip.Prefix, c.Prefixes)
	rates := make([]float64, c.Prefixes)
	reordering := map[netip.Prefix]bool{}
	nReorder := int(math.Round(c.ReorderingShare * float64(c.Prefixes)))
	for k, j := range r.Perm(c.Prefixes) {
		if r.Float64() < c.IPv6Share {
			prefixes[k] = netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, byte(k >> 8), byte(k)}), 48)
		} else {
			prefixes[k] = netip.PrefixFrom(netip.AddrFrom4([4]byte{20, byte(k >> 8), byte(k), 0}), 24)
		}
		rates[k] = c.BackgroundRate
		if j < nReorder {
			rates[k] = c.RateMin + r.Float64()*(c.RateMax-c.RateMin)
			reordering[prefixes[k]] = true
		}
	}
	return prefixes, rates, reordering
}

// reorderFlowKey is a flow from a host of p to a client.
func reorderFlowKey(p netip.Prefix, r *rand.Rand) capture.FlowKey {
	src := p.Addr()
	if src.Is4() {
		b := src.As4()
		b[3] = byte(1 + r.IntN(254))
		src = netip.AddrFrom4(b)
	} else {
		b := src.As16()
		b[15] = byte(1 + r.IntN(254))
		src = netip.AddrFrom16(b)
	}
	dst := netip.AddrFrom4([4]byte{192, 168, byte(r.IntN(256)), byte(1 + r.IntN(254))})
	if !src.Is4() {
		dst = netip.AddrFrom16([16]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(r.IntN(256)), byte(r.IntN(256)), 1})
	}
	return capture.FlowKey{Src: src, Dst: dst, SrcPort: 443, DstPort: uint16(1024 + r.IntN(64512)), Proto: 6}
}

// reorderFlow appends one flow's packets: a SYN, the data, copies of
// some data packets sent again a few packets later, a FIN; then swaps
// packets (their contents, not their times) to reorder a share rate of
// the data.
func reorderFlow(c ReorderConfig, r *rand.Rand, out []reorderPkt, flow uint32, rate float64) []reorderPkt {
	n := c.MaxFlowPackets
	if x := float64(c.MinFlowPackets) / math.Pow(1-r.Float64(), 1/c.ParetoShape); x < float64(c.MaxFlowPackets) {
		n = int(x)
	}
	isn := r.Uint32()
	out = append(out, reorderPkt{seq: isn, flow: flow, flags: capture.TCPSyn})
	var again []int // indices in out of data to send again, and where
	for j := range n {
		out = append(out, reorderPkt{seq: isn + 1 + uint32(j)*mss, flow: flow, payload: mss, flags: capture.TCPAck})
		if r.Float64() < c.RetransRate {
			again = append(again, len(out)-1)
		}
	}
	for _, i := range again {
		at := min(i+3+r.IntN(6), len(out))
		out = slices.Insert(out, at, out[i])
		for k := range again { // later copies move one place down
			if again[k] >= at {
				again[k]++
			}
		}
	}
	out = append(out, reorderPkt{seq: isn + 1 + uint32(n)*mss, flow: flow, flags: capture.TCPFin | capture.TCPAck})
	// A swap at distance d reorders 1 packet if d = 1 and 2 otherwise
	// (the late one, and the first one after the early one): swap with
	// the probability that gives rate on average.
	perSwap := 1.0
	if d := c.MaxDisplacement; d > 1 {
		perSwap = (1 + 2*float64(d-1)) / float64(d)
	}
	for j := 1; j < len(out)-1; j++ {
		if r.Float64() < rate/perSwap {
			k := min(j+1+r.IntN(c.MaxDisplacement), len(out)-2)
			out[j].seq, out[k].seq = out[k].seq, out[j].seq
		}
	}
	start := int64(r.Float64() * float64(c.Duration))
	pps := c.MinPPS * math.Exp(r.Float64()*math.Log(c.MaxPPS/c.MinPPS))
	for j := range out {
		out[j].tNS = start
		start += int64(r.ExpFloat64() / pps * 1e9)
	}
	return out
}

// replay plays the trace into add (reorderSource).
func (tr *reorderTrace) replay(add func(*capture.Packet), epochNS int64, epoch func()) {
	var p capture.Packet
	var e epochs
	for _, q := range tr.pkts {
		e.advance(q.tNS, epochNS, epoch)
		p = capture.Packet{TimeNS: q.tNS, Flow: tr.flows[q.flow], IPLen: 40 + int(q.payload),
			L4: capture.Transport{Seq: q.seq, TCPFlags: q.flags, PayloadLen: int(q.payload)}}
		add(&p)
	}
	epoch()
}

func (tr *reorderTrace) packets() int { return len(tr.pkts) }

// epochs follows a replay's epochs.
type epochs struct {
	endNS   int64
	started bool
}

// advance calls epoch for each end of an epoch of epochNS (aligned on its
// multiples) passed since the last packet, before a packet at tNS.
func (e *epochs) advance(tNS, epochNS int64, epoch func()) {
	if !e.started {
		e.started, e.endNS = true, (tNS/epochNS+1)*epochNS
		return
	}
	for tNS >= e.endNS {
		epoch()
		e.endNS += epochNS
	}
}
