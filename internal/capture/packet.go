// Package capture turns captured frames into packet observations: the sources
// that deliver frames (capture files, live interfaces), the decoder that finds
// the IP packet inside a frame, and the packet identity both observation
// points of a path compute alike.
package capture

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/owl-latency/owl/internal/synopsis/lds"
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
	// L4 is what its TCP or DNS header says that matching requests with
	// responses at one point needs (zero for other packets).
	L4 Transport
}

// TCP flags, as in the header's flags byte.
const (
	TCPFin = 0x01
	TCPSyn = 0x02
	TCPRst = 0x04
	TCPAck = 0x10
)

// Transport holds the request/response fields of a packet's transport
// header: for TCP the sequence and acknowledgement numbers, the flags and
// the payload's length (from the IP header's lengths, so a capture cut to
// a snap length still tells it); for a DNS message over UDP (port 53) its
// ID and whether it is a response.
type Transport struct {
	Seq, Ack   uint32
	TCPFlags   uint8
	PayloadLen int
	DNS        bool
	DNSID      uint16
	DNSAnswer  bool
}

// FlowKey is a 5-tuple. Ports are zero for protocols without ports and for
// IP fragments other than the first. With IdentityConfig.FlowTag, Tag holds
// the innermost VLAN ID, or 1<<24 | VNI for a VXLAN packet.
type FlowKey struct {
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	Proto            uint8
	Tag              uint32
}

// String renders the flow as "proto src:port->dst:port" (and the tag).
func (f FlowKey) String() string {
	s := fmt.Sprintf("%d %s->%s", f.Proto, netip.AddrPortFrom(f.Src, f.SrcPort), netip.AddrPortFrom(f.Dst, f.DstPort))
	if f.Tag != 0 {
		s += fmt.Sprintf(" tag %#x", f.Tag)
	}
	return s
}

// FlowKeySize is the length of AppendBinary's encoding.
const FlowKeySize = 41

// AppendBinary appends a fixed-size (41-byte) encoding of the flow key, for
// hashing and storage: 16-byte source and destination addresses (IPv4 as
// IPv4-mapped IPv6), source and destination ports, protocol, tag.
func (f FlowKey) AppendBinary(b []byte) []byte {
	var k [FlowKeySize]byte
	f.put(&k)
	return append(b, k[:]...)
}

// put writes AppendBinary's encoding into k.
func (f *FlowKey) put(k *[FlowKeySize]byte) {
	putAddr((*[16]byte)(k[0:16]), f.Src)
	putAddr((*[16]byte)(k[16:32]), f.Dst)
	binary.BigEndian.PutUint16(k[32:], f.SrcPort)
	binary.BigEndian.PutUint16(k[34:], f.DstPort)
	k[36] = f.Proto
	binary.BigEndian.PutUint32(k[37:], f.Tag)
}

// putAddr writes a's 16-byte form into k (an IPv4 address IPv4-mapped),
// 8 bytes at a time: As16 stores its result 8 bytes at a time, and the
// 16-byte load that copied it waited for both stores (a tenth of the
// probe's time in put, hashing flows).
func putAddr(k *[16]byte, a netip.Addr) {
	if a.Is4() {
		v4 := a.As4()
		binary.LittleEndian.PutUint64(k[0:8], 0)
		binary.LittleEndian.PutUint64(k[8:16], 0xffff<<16|uint64(binary.LittleEndian.Uint32(v4[:]))<<32)
		return
	}
	b := a.As16()
	binary.BigEndian.PutUint64(k[0:8], binary.BigEndian.Uint64(b[0:8]))
	binary.BigEndian.PutUint64(k[8:16], binary.BigEndian.Uint64(b[8:16]))
}

// Hash is the flow's hash under seed (the deployment's LDS seed): the key
// by which the LDS, the COLATE vector, the collector's per-flow results
// and the evaluator all know a flow.
func (f *FlowKey) Hash(seed uint64) uint64 {
	var k [FlowKeySize]byte
	f.put(&k)
	return lds.FlowHash(k[:], seed)
}
