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

	"github.com/zeebo/xxh3"

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
	l4 := &p.L4
	switch {
	case l4.DNS:
		k := key(p.Flow, uint32(l4.DNSID), DNS, seed, l4.DNSAnswer)
		if l4.DNSAnswer {
			return Event{Response: true, ResponseKey: k, ResponseKind: DNS, Responder: p.Flow.Src}
		}
		return Event{Request: true, RequestKey: k, Kind: DNS, Responder: p.Flow.Dst}
	case p.Flow.Proto != 6 || l4.TCPFlags&capture.TCPRst != 0:
		return Event{}
	}
	ev := Event{Responder: p.Flow.Src}
	if l4.TCPFlags&capture.TCPAck != 0 {
		if l4.TCPFlags&capture.TCPSyn != 0 {
			ev.ResponseKind = TCPHandshake
		}
		ev.Response, ev.ResponseKey = true, key(p.Flow, l4.Ack, ev.ResponseKind, seed, true)
	}
	span := uint32(l4.PayloadLen)
	if l4.TCPFlags&capture.TCPSyn != 0 {
		span++
	}
	if l4.TCPFlags&capture.TCPFin != 0 {
		span++
	}
	if span > 0 {
		if l4.TCPFlags&(capture.TCPSyn|capture.TCPAck) == capture.TCPSyn {
			ev.Kind = TCPHandshake
		}
		ev.Request, ev.RequestKey = true, key(p.Flow, l4.Seq+span, ev.Kind, seed, false)
	}
	return ev
}

// key hashes a request's flow (a response's reversed) with the number
// that pairs them (a TCP segment's end in sequence space or a DNS ID) and
// the pair's kind.
func key(f capture.FlowKey, n uint32, k Kind, seed uint64, reverse bool) uint64 {
	if reverse {
		f.Src, f.Dst, f.SrcPort, f.DstPort = f.Dst, f.Src, f.DstPort, f.SrcPort
	}
	var b [capture.FlowKeySize + 5]byte
	f.AppendBinary(b[:0])
	binary.LittleEndian.PutUint32(b[capture.FlowKeySize:], n)
	b[capture.FlowKeySize+4] = byte(k)
	return xxh3.HashSeed(b[:], seed)
}
