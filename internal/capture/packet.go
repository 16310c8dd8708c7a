// Package capture turns captured frames into packet observations: the sources
// that deliver frames (capture files, live interfaces), the decoder that finds
// the IP packet inside a frame, and the packet identity both observation
// points of a path compute alike.
package capture

import (
	"encoding/binary"
	"fmt"
	"math/bits"
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

// put writes AppendBinary's encoding into k, each address 8 bytes at a
// time (AddrWords).
func (f *FlowKey) put(k *[FlowKeySize]byte) {
	sh, sl := AddrWords(f.Src)
	dh, dl := AddrWords(f.Dst)
	binary.LittleEndian.PutUint64(k[0:], bits.ReverseBytes64(sh))
	binary.LittleEndian.PutUint64(k[8:], bits.ReverseBytes64(sl))
	binary.LittleEndian.PutUint64(k[16:], bits.ReverseBytes64(dh))
	binary.LittleEndian.PutUint64(k[24:], bits.ReverseBytes64(dl))
	binary.BigEndian.PutUint16(k[32:], f.SrcPort)
	binary.BigEndian.PutUint16(k[34:], f.DstPort)
	k[36] = f.Proto
	binary.BigEndian.PutUint32(k[37:], f.Tag)
}

// AddrWords are the two halves of a's 16-byte form (an IPv4 address
// IPv4-mapped), big-endian. An IPv4 address's come from As4: As16 stores
// its result 8 bytes at a time, and the 16-byte load that copied it
// waited for both stores (a tenth of a probe's time, hashing flows).
func AddrWords(a netip.Addr) (hi, lo uint64) {
	if a.Is4() {
		b := a.As4()
		return 0, 0xffff<<32 | uint64(binary.BigEndian.Uint32(b[:]))
	}
	return addrWords16(a)
}

// addrWords16 is AddrWords of an address that is not IPv4.
func addrWords16(a netip.Addr) (hi, lo uint64) {
	b := a.As16()
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
}

// Hash is the flow's hash under seed (the deployment's LDS seed): the key
// by which the LDS, the COLATE vector, the collector's per-flow results
// and the evaluator all know a flow.
func (f *FlowKey) Hash(seed uint64) uint64 {
	var k [FlowKeySize]byte
	f.put(&k)
	return lds.FlowHash(k[:], seed)
}
