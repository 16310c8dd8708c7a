package sim

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// SynthConfig describes synthetic traffic: many flows with Pareto sizes,
// their packets spread at random over a time span. It complements the
// bundled capture, which has few flows, for per-flow estimators.
type SynthConfig struct {
	Flows int
	// ParetoShape is α of the flow sizes (P(size > x) = x^−α, x ≥ 1);
	// near 1 gives the heavy tail of real traffic.
	ParetoShape float64
	// MaxPackets caps a flow's size.
	MaxPackets int
	// Start and Span place the packets in time.
	Start time.Time
	Span  time.Duration
	Seed  uint64
}

// Synthesize makes Ethernet/IPv4 frames (UDP and TCP flows alternately)
// in time order. Every packet carries its flow and sequence number in its
// payload, so packet identities are distinct.
func Synthesize(c SynthConfig) (layers.LinkType, []Frame, error) {
	if c.Flows < 1 || c.ParetoShape <= 0 || c.MaxPackets < 1 || c.Span <= 0 {
		return 0, nil, fmt.Errorf("synthetic traffic needs flows, a Pareto shape, a size cap and a span: %+v", c)
	}
	r := rand.New(rand.NewPCG(c.Seed, 0x73796e7468))
	startNS := c.Start.UnixNano()
	var frames []Frame
	for f := 0; f < c.Flows; f++ {
		size := int(math.Min(math.Floor(math.Pow(1-r.Float64(), -1/c.ParetoShape)), float64(c.MaxPackets)))
		src := [4]byte{10, byte(f >> 16), byte(f >> 8), byte(f)}
		dst := [4]byte{192, 168, byte(r.IntN(256)), byte(1 + r.IntN(254))}
		sport, dport := uint16(1024+r.IntN(60000)), uint16(1+r.IntN(1023))
		proto := byte(17)
		if f%2 == 1 {
			proto = 6
		}
		for s := 0; s < size; s++ {
			ts := startNS + r.Int64N(int64(c.Span))
			frames = append(frames, Frame{Data: synthFrame(src, dst, sport, dport, proto, uint32(f), uint32(s)), TimeNS: ts})
		}
	}
	slices.SortStableFunc(frames, func(a, b Frame) int { return cmp.Compare(a.TimeNS, b.TimeNS) })
	for i := range frames {
		frames[i].WireLen = len(frames[i].Data)
	}
	return layers.LinkTypeEthernet, frames, nil
}

// synthFrame builds an Ethernet/IPv4/UDP-or-TCP frame with an 8-byte
// payload (flow, sequence).
func synthFrame(src, dst [4]byte, sport, dport uint16, proto byte, flow, seq uint32) []byte {
	l4 := 8
	if proto == 6 {
		l4 = 20
	}
	b := make([]byte, 14+20+l4+8)
	copy(b[0:6], []byte{2, 0, 0, 0, 0, 2})
	copy(b[6:12], []byte{2, 0, 0, 0, 0, 1})
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+l4+8))
	binary.BigEndian.PutUint16(ip[4:], uint16(seq))
	ip[8] = 64
	ip[9] = proto
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:], gopacket.FoldChecksum(gopacket.ComputeChecksum(ip, 0)))
	t := b[34:]
	binary.BigEndian.PutUint16(t[0:], sport)
	binary.BigEndian.PutUint16(t[2:], dport)
	if proto == 6 {
		binary.BigEndian.PutUint32(t[4:], seq*8)
		t[12] = 5 << 4
		t[13] = 0x18 // PSH, ACK
		binary.BigEndian.PutUint16(t[14:], 1024)
	} else {
		binary.BigEndian.PutUint16(t[4:], uint16(8+8))
	}
	binary.BigEndian.PutUint32(t[l4:], flow)
	binary.BigEndian.PutUint32(t[l4+4:], seq)
	return b
}
