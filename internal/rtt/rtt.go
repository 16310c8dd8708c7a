// Package rtt measures round-trip times at one observation point from the
// traffic itself: the delay between a request and its response as the
// point sees them pass (TCP data and the ACK that acknowledges exactly its
// end, SYN and SYN/ACK, DNS query and answer). It needs no TCP timestamp
// option, so it sees traffic that tools matching timestamps miss.
//
// Which packets are requests and responses, and the keys that pair them,
// are the same for the probe's bounded matcher (requests kept in fridges,
// internal/synopsis/fridge) and for the unbounded one that gives the
// ground truth in tests (Exact).
package rtt

import (
	"encoding/binary"
	"net/netip"

	"github.com/owl-latency/owl/internal/capture"
)

// Kind is the kind of a request/response pair.
type Kind uint8

// Kinds of pairs.
const (
	// TCPData is a TCP segment carrying data (or a FIN) and the ACK that
	// acknowledges exactly its end.
	TCPData Kind = iota
	// TCPHandshake is a SYN and its SYN/ACK.
	TCPHandshake
	// DNS is a DNS query over UDP and its answer.
	DNS
	// Kinds is the number of kinds.
	Kinds
)

// String names the kind as the API does.
func (k Kind) String() string {
	switch k {
	case TCPData:
		return "tcp-data"
	case TCPHandshake:
		return "tcp-handshake"
	case DNS:
		return "dns"
	}
	return "unknown"
}

// ParseKind is the Kind named s (String's names).
func ParseKind(s string) (Kind, bool) {
	for k := range Kinds {
		if k.String() == s {
			return k, true
		}
	}
	return 0, false
}

// Event is what a packet is to request/response matching. A TCP segment
// that carries data and acknowledges the other direction's is both a
// request and a response.
type Event struct {
	Request, Response bool
	// RequestKey and ResponseKey pair a request with its response: a
	// response's key is the key of the request it answers.
	RequestKey, ResponseKey uint64
	// Kind is the request's kind, ResponseKind that of the pair the
	// packet answers: keys differ by kind, so that each is the pair's.
	Kind, ResponseKind Kind
	// Responder is the address that answers: a response's source (and a
	// request's destination). Round-trip times are grouped by its prefix.
	Responder netip.Addr
}

// Classify says what p is to matching; keys are hashed under seed.
// Packets of other protocols and RSTs are neither requests nor responses.
// A TCP request is a segment that takes sequence space (data, SYN or FIN)
// and its response the first ACK of exactly its end: an ACK that covers
// several segments answers the last (delayed ACKs leave the others
// unanswered), as the dissertation's matching does. A SYN and its SYN/ACK
// are a handshake pair; the SYN/ACK and the ACK that answers it count as
// data (the ACK cannot tell what it answers, and a key per kind keeps the
// matcher to one look-up).
func Classify(p *capture.Packet, seed uint64) Event {
	var ev Event
	if matchable(p) {
		classify(&ev, p, flowOf(&p.Flow, seed))
	}
	return ev
}

// matchable says whether p can be a request or a response: TCP but for
// an RST, or DNS.
func matchable(p *capture.Packet) bool {
	return p.L4.DNS || p.Flow.Proto == 6 && p.L4.TCPFlags&capture.TCPRst == 0
}

// Classifier is Classify for a stream of packets, on the probe's hot
// path. It remembers the last flow it hashed, so that consecutive packets
// of a flow, in either direction, hash it once (nine packets in ten of
// the bundled trace), and it writes the caller's Event: a returned one,
// nine registers, is spilled to memory and copied. Not safe for
// concurrent use.
type Classifier struct {
	seed uint64
	last capture.FlowKey
	// the last flow's ends, mixed, and hash; valid once a flow is hashed
	a, b, hash uint64
	valid      bool
}

// NewClassifier returns a Classifier whose keys hash under seed.
func NewClassifier(seed uint64) *Classifier { return &Classifier{seed: seed} }

// Classify is Classify(p, seed) into *ev, which must be zero.
func (c *Classifier) Classify(ev *Event, p *capture.Packet) {
	if matchable(p) {
		classify(ev, p, c.flowOf(&p.Flow))
	}
}

// flowOf is flowOf(f, c.seed), from the last flow when f is it.
func (c *Classifier) flowOf(f *capture.FlowKey) flow {
	l := &c.last
	if c.valid && f.Proto == l.Proto && f.Tag == l.Tag {
		if f.Src == l.Src && f.Dst == l.Dst && f.SrcPort == l.SrcPort && f.DstPort == l.DstPort {
			return flow{hash: c.hash, forward: c.a <= c.b}
		}
		if f.Src == l.Dst && f.Dst == l.Src && f.SrcPort == l.DstPort && f.DstPort == l.SrcPort {
			return flow{hash: c.hash, forward: c.b <= c.a}
		}
	}
	c.a, c.b = flowEnds(f)
	c.hash, c.last, c.valid = flowHash(f, c.a, c.b, c.seed), *f, true
	return flow{hash: c.hash, forward: c.a <= c.b}
}

// classify is Classify of a matchable packet whose flow is hashed.
func classify(ev *Event, p *capture.Packet, f flow) {
	l4 := &p.L4
	if l4.DNS {
		if l4.DNSAnswer {
			ev.Response, ev.ResponseKey, ev.ResponseKind, ev.Responder = true, f.key(uint32(l4.DNSID), DNS, true), DNS, p.Flow.Src
		} else {
			ev.Request, ev.RequestKey, ev.Kind, ev.Responder = true, f.key(uint32(l4.DNSID), DNS, false), DNS, p.Flow.Dst
		}
		return
	}
	flags := l4.TCPFlags
	ev.Responder = p.Flow.Src
	if flags&capture.TCPAck != 0 {
		if flags&capture.TCPSyn != 0 {
			ev.ResponseKind = TCPHandshake
		}
		ev.Response, ev.ResponseKey = true, f.key(l4.Ack, ev.ResponseKind, true)
	}
	span := uint32(l4.PayloadLen) + uint32(flags&capture.TCPSyn)>>1 + uint32(flags&capture.TCPFin)
	if span > 0 {
		if flags&(capture.TCPSyn|capture.TCPAck) == capture.TCPSyn {
			ev.Kind = TCPHandshake
		}
		ev.Request, ev.RequestKey = true, f.key(l4.Seq+span, ev.Kind, false)
	}
}

// flow is a packet's flow hashed once for both of its keys: the hash of
// the flow's two ends in a fixed order, and which end sent the packet.
type flow struct {
	hash    uint64
	forward bool // the packet goes from the lower end to the higher
}

// flowOf hashes f's ends so that both directions of a flow hash alike:
// each end (address and port) is mixed on its own and the two are added,
// then mixed with the protocol, tag and seed. A few multiplications, where
// hashing the flow's bytes cost a third of the matcher's time.
func flowOf(f *capture.FlowKey, seed uint64) flow {
	a, b := flowEnds(f)
	return flow{hash: flowHash(f, a, b, seed), forward: a <= b}
}

// flowEnds is f's source and destination ends, mixed.
func flowEnds(f *capture.FlowKey) (a, b uint64) {
	if f.Src.Is4() && f.Dst.Is4() {
		src, dst := f.Src.As4(), f.Dst.As4()
		a = mix(uint64(binary.BigEndian.Uint32(src[:]))<<16 | uint64(f.SrcPort) | 1<<62)
		b = mix(uint64(binary.BigEndian.Uint32(dst[:]))<<16 | uint64(f.DstPort) | 1<<62)
		return a, b
	}
	return end(f.Src, f.SrcPort), end(f.Dst, f.DstPort)
}

// flowHash is the hash of f from its mixed ends.
func flowHash(f *capture.FlowKey, a, b, seed uint64) uint64 {
	return mix(a + b ^ seed ^ uint64(f.Proto)<<32 ^ uint64(f.Tag))
}

// end mixes one end of a flow (flowEnds mixes IPv4 ends itself, alike).
func end(a netip.Addr, port uint16) uint64 {
	if a.Is4() {
		b := a.As4()
		return mix(uint64(binary.BigEndian.Uint32(b[:]))<<16 | uint64(port) | 1<<62)
	}
	b := a.As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	return mix(mix(hi^0x9e3779b97f4a7c15) ^ lo ^ uint64(port)<<48)
}

// mix is the splitmix64 finalizer.
func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// key pairs a request with its response: the flow, the direction of the
// request (a response's is the other), the number that pairs them (a TCP
// segment's end in sequence space or a DNS ID) and the pair's kind. The
// flow's hash is mixed already, and the fridges mix keys again, so the
// key is not: equal keys are the same either way.
func (f flow) key(n uint32, k Kind, reverse bool) uint64 {
	dir := uint64(0)
	if f.forward != reverse {
		dir = 1
	}
	return f.hash ^ (uint64(n)<<16 | uint64(k)<<1 | dir)
}
