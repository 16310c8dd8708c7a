// Package capture turns captured frames into packet observations: the sources
// that deliver frames (capture files, live interfaces), the decoder that finds
// the IP packet inside a frame, and the packet identity both observation
// points of a path compute alike.
package capture

import (
	"fmt"
	"net/netip"
)

// Packet is one observed packet: when it was seen, who it is and which flow
// it belongs to. It holds no payload.
type Packet struct {
	// TimeNS is the capture timestamp, nanoseconds since the Unix epoch.
	TimeNS int64
	// ID is the packet identity: a seeded 64-bit hash of the bytes that do
	// not change in flight (see Identity).
	ID uint64
	// Flow is the packet's 5-tuple.
	Flow FlowKey
	// IPLen is the length of the (innermost) IP packet in bytes, from its header.
	IPLen int
}

// FlowKey is a 5-tuple. Ports are zero for protocols without ports and for
// IP fragments other than the first.
type FlowKey struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	Proto            uint8
}

// String renders the flow as "proto src:port->dst:port".
func (f FlowKey) String() string {
	return fmt.Sprintf("%d %s->%s", f.Proto,
		netip.AddrPortFrom(f.Src, f.SrcPort), netip.AddrPortFrom(f.Dst, f.DstPort))
}

// AppendBinary appends a fixed-size (37-byte) encoding of the flow key, for
// hashing and storage: 16-byte source and destination addresses (IPv4 as
// IPv4-mapped IPv6), source and destination ports, protocol.
func (f FlowKey) AppendBinary(b []byte) []byte {
	s, d := f.Src.As16(), f.Dst.As16()
	b = append(b, s[:]...)
	b = append(b, d[:]...)
	return append(b, byte(f.SrcPort>>8), byte(f.SrcPort), byte(f.DstPort>>8), byte(f.DstPort), f.Proto)
}
