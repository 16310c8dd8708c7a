package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/zeebo/xxh3"
)

// Reason says why a frame yielded no packet; it labels drop counters.
type Reason uint8

// Reasons a frame is not turned into a packet.
const (
	ReasonNone      Reason = iota
	ReasonNotIP            // no IPv4 or IPv6 packet in the frame (ARP, LLDP, ...)
	ReasonTruncated        // the frame ends inside a header
	ReasonMalformed        // a header is invalid
	numReasons
)

// Reasons lists every failure reason, for metrics.
var Reasons = []Reason{ReasonNotIP, ReasonTruncated, ReasonMalformed}

// String names the reason as it appears in metric labels.
func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonNotIP:
		return "not_ip"
	case ReasonTruncated:
		return "truncated"
	case ReasonMalformed:
		return "malformed"
	}
	return fmt.Sprintf("reason_%d", uint8(r))
}

// DecodeError says why a frame could not be decoded.
type DecodeError struct {
	Reason Reason
	Err    error
}

func (e *DecodeError) Error() string {
	if e.Err == nil {
		return "decoding frame: " + e.Reason.String()
	}
	return fmt.Sprintf("decoding frame: %s: %v", e.Reason, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// ErrNotIP is returned for frames that carry no IP packet.
var ErrNotIP = &DecodeError{Reason: ReasonNotIP}

// ReasonOf returns the Reason behind an error from Decode.
func ReasonOf(err error) Reason {
	if err == nil {
		return ReasonNone
	}
	var de *DecodeError
	if errors.As(err, &de) {
		return de.Reason
	}
	return ReasonMalformed
}

// Decoder finds the innermost IP packet of a frame and computes its identity
// and flow key. It reuses its buffers: a Decoder is for one goroutine, and
// Decode allocates nothing for well-formed frames.
type Decoder struct {
	cfg     IdentityConfig
	parser  *gopacket.DecodingLayerParser
	parser6 *gopacket.DecodingLayerParser // for raw-IP links whose packet is IPv6
	raw     bool                          // link carries bare IP packets
	linkLen int                           // shortest frame that holds the link header

	inner *gopacket.DecodingLayerParser // Ethernet-first, for VXLAN on VXLANPort

	eth     layers.Ethernet
	sll     layers.LinuxSLL
	sll2    layers.LinuxSLL2
	loop    layers.Loopback
	dot1q   layers.Dot1Q
	mpls    mplsStack
	gre     layers.GRE
	erspan2 layers.ERSPANII
	erspan3 erspan3
	vxlan   layers.VXLAN
	ip4     layers.IPv4
	ip6     layers.IPv6
	ext     layers.IPv6ExtensionSkipper
	frag6   layers.IPv6Fragment
	tcp     tcpHeader
	udp     layers.UDP
	icmp4   layers.ICMPv4
	icmp6   layers.ICMPv6

	decoded []gopacket.LayerType
	scratch []byte
	noFast  bool // every frame through the parser (tests)
}

// NewDecoder returns a Decoder for frames of the given link type (Ethernet,
// raw IP, Linux cooked v1/v2, BSD loopback).
func NewDecoder(link layers.LinkType, cfg IdentityConfig) (*Decoder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Decoder{cfg: cfg, decoded: make([]gopacket.LayerType, 0, 16)}
	d.scratch = make([]byte, 0, scratchSize(cfg.PayloadBytes))
	var first gopacket.LayerType
	switch link {
	case layers.LinkTypeEthernet:
		first, d.linkLen = layers.LayerTypeEthernet, 14
	case layers.LinkTypeLinuxSLL:
		first, d.linkLen = layers.LayerTypeLinuxSLL, 16
	case layers.LinkTypeLinuxSLL2:
		first, d.linkLen = layers.LayerTypeLinuxSLL2, 20
	case layers.LinkTypeNull, layers.LinkTypeLoop:
		first, d.linkLen = layers.LayerTypeLoopback, 4
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6, 12 /* raw on some BSDs */ :
		first, d.raw, d.linkLen = layers.LayerTypeIPv4, true, 1
	default:
		return nil, fmt.Errorf("unsupported link type %v (%d)", link, link)
	}
	decoders := []gopacket.DecodingLayer{&d.eth, &d.sll, &d.sll2, &d.loop, &d.dot1q, &d.mpls, &d.gre, &d.erspan2, &d.erspan3, &d.vxlan,
		&d.ip4, &d.ip6,
		// The skipper takes every IPv6 extension header; the fragment
		// header is then claimed by its own layer so that non-first
		// fragments are not read as transport headers.
		&d.ext, &d.frag6, &d.tcp, &d.udp, &d.icmp4, &d.icmp6}
	newParser := func(first gopacket.LayerType) *gopacket.DecodingLayerParser {
		p := gopacket.NewDecodingLayerParser(first, decoders...)
		// An array indexed by layer type finds the next decoder faster
		// than the default map.
		var sparse gopacket.DecodingLayerSparse
		for _, l := range decoders {
			sparse = sparse.Put(l).(gopacket.DecodingLayerSparse)
		}
		p.SetDecodingLayerContainer(sparse)
		p.IgnoreUnsupported = true
		return p
	}
	d.parser = newParser(first)
	if d.raw {
		d.parser6 = newParser(layers.LayerTypeIPv6)
	}
	if cfg.VXLANPort != 0 {
		d.inner = newParser(layers.LayerTypeEthernet)
	}
	return d, nil
}

// Config returns the identity settings the decoder uses.
func (d *Decoder) Config() IdentityConfig { return d.cfg }

// Decode decodes frame, captured at tsNS, into p. It returns ErrNotIP for
// frames without IP and a *DecodeError for broken ones.
func (d *Decoder) Decode(frame []byte, tsNS int64, p *Packet) error {
	if d.noFast || !d.fast(frame) {
		if err := d.parse(frame); err != nil {
			return err
		}
	}
	ipIdx, l4, tag := d.innermostIP()

	b := d.scratch[:0]
	var ipPayload []byte
	if d.decoded[ipIdx] == layers.LayerTypeIPv4 {
		b = appendIPv4(b, d.ip4.Contents, d.cfg.NATSafe)
		ipPayload = d.ip4.Payload
		p.Flow.Src = netip.AddrFrom4([4]byte(d.ip4.SrcIP))
		p.Flow.Dst = netip.AddrFrom4([4]byte(d.ip4.DstIP))
		p.Flow.Proto = uint8(d.ip4.Protocol)
		p.IPLen = int(d.ip4.Length)
	} else {
		b, ipPayload = d.appendIPv6Headers(b, ipIdx, l4, p)
	}

	p.Flow.SrcPort, p.Flow.DstPort, p.Flow.Tag = 0, 0, 0
	if d.cfg.FlowTag {
		p.Flow.Tag = tag
	}
	natSafe := d.cfg.NATSafe
	var payload []byte
	p.L4 = Transport{}
	switch l4 {
	case layers.LayerTypeTCP:
		b = appendL4(b, d.tcp.Contents, 16, natSafe, 0, 4)
		payload = d.tcp.Payload
		p.Flow.SrcPort, p.Flow.DstPort = d.tcp.SrcPort, d.tcp.DstPort
		d.tcpTransport(p, ipIdx)
	case layers.LayerTypeUDP:
		b = appendL4(b, d.udp.Contents, 6, natSafe, 0, 4)
		payload = d.udp.Payload
		p.Flow.SrcPort, p.Flow.DstPort = uint16(d.udp.SrcPort), uint16(d.udp.DstPort)
		if (p.Flow.SrcPort == 53 || p.Flow.DstPort == 53) && len(payload) >= 12 {
			p.L4 = Transport{DNS: true, DNSID: binary.BigEndian.Uint16(payload), DNSAnswer: payload[2]&0x80 != 0}
		}
	case layers.LayerTypeICMPv4:
		natLen := 0
		if t := d.icmp4.TypeCode.Type(); t == layers.ICMPv4TypeEchoRequest || t == layers.ICMPv4TypeEchoReply {
			natLen = 2
		}
		b = appendL4(b, d.icmp4.Contents, 2, natSafe, 4, natLen)
		payload = d.icmp4.Payload
	case layers.LayerTypeICMPv6:
		natLen := 0
		if t := d.icmp6.TypeCode.Type(); t == layers.ICMPv6TypeEchoRequest || t == layers.ICMPv6TypeEchoReply {
			natLen = 2
		}
		b = appendL4(b, d.icmp6.Contents, 2, natSafe, 4, natLen)
		// gopacket keeps the ICMPv6 identifier and sequence in the payload.
		payload = d.icmp6.Payload
		if natSafe && natLen > 0 && len(payload) >= 2 {
			b = append(b, 0, 0)
			payload = payload[2:]
		}
	default:
		payload = ipPayload
	}
	b = append(b, payload[:min(len(payload), d.cfg.PayloadBytes)]...)
	p.ID = xxh3.HashSeed(b, d.cfg.Seed)
	p.TimeNS = tsNS
	return nil
}

// parse decodes frame's layers with gopacket's parser into d.decoded; it
// returns the error of a frame that yields no usable IP packet.
func (d *Decoder) parse(frame []byte) error {
	parser := d.parser
	if d.raw && len(frame) > 0 && frame[0]>>4 == 6 {
		parser = d.parser6
	}
	err := parser.DecodeLayers(frame, &d.decoded)
	if d.inner != nil && err == nil {
		parser, err = d.decodeVXLAN(parser)
	}
	ipIdx, l4, _ := d.innermostIP()
	if ipIdx < 0 || err != nil && l4 == gopacket.LayerTypeZero {
		return d.frameError(frame, parser, err, ipIdx)
	}
	return nil
}

// tcpTransport fills p.L4 from the TCP header. The payload's length comes
// from the IP header's length less the IP and TCP headers: every header
// decoded is a slice of the frame, so the distance between the IP and TCP
// headers is the difference of their capacities.
func (d *Decoder) tcpTransport(p *Packet, ipIdx int) {
	ip := d.ip4.Contents
	if d.decoded[ipIdx] == layers.LayerTypeIPv6 {
		ip = d.ip6.Contents
	}
	headers := cap(ip) - cap(d.tcp.Contents) + len(d.tcp.Contents)
	p.L4 = Transport{Seq: d.tcp.Seq, Ack: d.tcp.Ack, TCPFlags: d.tcp.Flags, PayloadLen: max(p.IPLen-headers, 0)}
}

// decodeVXLAN decodes the inner frame of VXLAN on the configured port, when
// the frame decoded by parser carries one; it returns the parser that ran
// last and its error.
func (d *Decoder) decodeVXLAN(parser *gopacket.DecodingLayerParser) (*gopacket.DecodingLayerParser, error) {
	var err error
	if len(d.decoded) > 0 && d.decoded[len(d.decoded)-1] == layers.LayerTypeUDP &&
		uint16(d.udp.DstPort) == d.cfg.VXLANPort && d.vxlan.DecodeFromBytes(d.udp.Payload, gopacket.NilDecodeFeedback) == nil {
		// VXLAN on a port gopacket does not know: decode the inner frame.
		// The inner layers overwrite the outer ones, as for 4789.
		vni := d.vxlan.VNI
		err = d.inner.DecodeLayers(d.vxlan.Payload, &d.decoded)
		d.decoded = append(d.decoded[:0:0], append([]gopacket.LayerType{layers.LayerTypeVXLAN}, d.decoded...)...)
		d.vxlan.VNI = vni
		parser = d.inner
	}
	return parser, err
}

// innermostIP finds the innermost IP layer among the decoded ones (-1 if
// none), the transport layer after it, and the innermost VLAN or VXLAN tag.
func (d *Decoder) innermostIP() (ipIdx int, l4 gopacket.LayerType, tag uint32) {
	ipIdx, l4 = -1, gopacket.LayerTypeZero
	for i, t := range d.decoded {
		switch t {
		case layers.LayerTypeDot1Q:
			tag = uint32(d.dot1q.VLANIdentifier)
		case layers.LayerTypeVXLAN:
			tag = 1<<24 | d.vxlan.VNI
		case layers.LayerTypeIPv4, layers.LayerTypeIPv6:
			ipIdx, l4 = i, gopacket.LayerTypeZero
		case layers.LayerTypeTCP, layers.LayerTypeUDP, layers.LayerTypeICMPv4, layers.LayerTypeICMPv6:
			if ipIdx >= 0 && l4 == gopacket.LayerTypeZero {
				l4 = t
			}
		}
	}
	return ipIdx, l4, tag
}

// frameError returns the error for a frame without an IP packet (ipIdx < 0)
// or whose decoding failed after the IP header, or nil when the packet is
// usable all the same (a transport header cut by the snap length).
func (d *Decoder) frameError(frame []byte, parser *gopacket.DecodingLayerParser, err error, ipIdx int) error {
	if ipIdx < 0 {
		if len(frame) < d.linkLen {
			return &DecodeError{Reason: ReasonTruncated, Err: fmt.Errorf("%d-byte frame is shorter than its link header", len(frame))}
		}
		if err != nil {
			return decodeFailure(parser, err)
		}
		return ErrNotIP
	}
	// The IP header decoded but a later header is broken. A transport
	// header cut by the snap length is not an error of the packet:
	// the identity then covers the bytes that are there. A broken
	// tunnel header is: the innermost packet is out of reach.
	last := d.decoded[len(d.decoded)-1]
	ipLast := last == layers.LayerTypeIPv4 || last == layers.LayerTypeIPv6 ||
		last == layers.LayerTypeIPv6Fragment || layers.LayerClassIPv6Extension.Contains(last)
	if !parser.Truncated || !ipLast {
		return decodeFailure(parser, err)
	}
	return nil
}

// appendIPv6Headers appends the identity bytes of the IPv6 header at ipIdx
// and its extension headers to b, fills p's addresses, protocol and IP
// length, and returns the IP payload after the extension headers.
func (d *Decoder) appendIPv6Headers(b []byte, ipIdx int, l4 gopacket.LayerType, p *Packet) ([]byte, []byte) {
	b = appendIPv6(b, d.ip6.Contents, d.cfg.NATSafe)
	ipPayload := d.ip6.Payload
	p.Flow.Src = netip.AddrFrom16([16]byte(d.ip6.SrcIP))
	p.Flow.Dst = netip.AddrFrom16([16]byte(d.ip6.DstIP))
	p.IPLen = 40 + int(d.ip6.Length)
	next := uint8(d.ip6.NextHeader)
	if d.ip6.HopByHop != nil {
		next = uint8(d.ip6.HopByHop.NextHeader)
	}
	// The extension headers lie between the fixed header (and the
	// Hop-by-Hop header, which the IPv6 layer consumed) and the
	// transport header, or what is left after the last one.
	rest := d.l4Bytes(l4)
	if l4 == gopacket.LayerTypeZero {
		rest = d.ip6Tail(ipIdx)
	}
	extLen := len(ipPayload) - len(rest)
	if extLen > 0 {
		b = appendIPv6Ext(b, next, ipPayload[:extLen])
		next = lastNextHeader(next, ipPayload[:extLen])
		ipPayload = rest
	}
	p.Flow.Proto = next
	return b, ipPayload
}

// l4Bytes returns the transport header and payload of the decoded layer t.
func (d *Decoder) l4Bytes(t gopacket.LayerType) []byte {
	var c, pl []byte
	switch t {
	case layers.LayerTypeTCP:
		c, pl = d.tcp.Contents, d.tcp.Payload
	case layers.LayerTypeUDP:
		c, pl = d.udp.Contents, d.udp.Payload
	case layers.LayerTypeICMPv4:
		c, pl = d.icmp4.Contents, d.icmp4.Payload
	case layers.LayerTypeICMPv6:
		c, pl = d.icmp6.Contents, d.icmp6.Payload
	default:
		return nil
	}
	// Contents and Payload are adjacent slices of the frame.
	return c[:len(c)+len(pl)]
}

// lastNextHeader walks a chain of IPv6 extension headers and returns the
// protocol number that follows the last one.
func lastNextHeader(next uint8, ext []byte) uint8 {
	for len(ext) >= 2 {
		var size int
		switch next {
		case ipv6Fragment:
			size = 8
		case ipv6AH:
			size = (int(ext[1]) + 2) * 4
		default:
			size = (int(ext[1]) + 1) * 8
		}
		if size > len(ext) {
			break
		}
		next, ext = ext[0], ext[size:]
	}
	return next
}

func decodeFailure(parser *gopacket.DecodingLayerParser, err error) error {
	if parser.Truncated {
		return &DecodeError{Reason: ReasonTruncated, Err: err}
	}
	return &DecodeError{Reason: ReasonMalformed, Err: err}
}

// ip6Tail returns the bytes after the last IPv6 header or extension header
// decoded at or after index ipIdx of the decoded layers.
func (d *Decoder) ip6Tail(ipIdx int) []byte {
	tail := d.ip6.Payload
	for _, t := range d.decoded[ipIdx+1:] {
		switch t {
		case layers.LayerTypeIPv6Fragment:
			tail = d.frag6.Payload
		case layers.LayerTypeIPv6Destination, layers.LayerTypeIPv6Routing, layers.LayerTypeIPv6HopByHop:
			tail = d.ext.Payload
		}
	}
	return tail
}
