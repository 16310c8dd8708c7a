package capture

import (
	"encoding/binary"
	"sync"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// parsedUDPPorts marks the UDP ports whose payload gopacket's parser would
// go on to decode with one of the Decoder's layers (VXLAN on 4789): a
// datagram to or from one of them is left to the parser.
var parsedUDPPorts = sync.OnceValue(func() *[1 << 16 / 64]uint64 {
	var d Decoder
	decoded := map[gopacket.LayerType]bool{}
	for _, l := range []gopacket.DecodingLayer{&d.eth, &d.sll, &d.sll2, &d.loop, &d.dot1q, &d.mpls, &d.gre, &d.erspan2, &d.erspan3,
		&d.vxlan, &d.ip4, &d.ip6, &d.ext, &d.frag6, &d.tcp, &d.udp, &d.icmp4, &d.icmp6} {
		for _, t := range l.CanDecode().LayerTypes() {
			decoded[t] = true
		}
	}
	var set [1 << 16 / 64]uint64
	for p := range 1 << 16 {
		if decoded[layers.UDPPort(p).LayerType()] {
			set[p/64] |= 1 << (p % 64)
		}
	}
	return &set
})

// fast decodes the common frame without gopacket's parser: Ethernet with
// at most one 802.1Q tag (or a raw IP packet), an IPv4 header without
// options that is not a fragment or an IPv6 header without extension
// headers, and a whole TCP or UDP header (a snap length may cut what
// follows). It fills
// the layers and d.decoded as the parser would, and returns false for any
// other frame, which the parser then takes. Half the cost of a parsed
// frame was the parser's own dispatch; FuzzFastDecode holds both ways to
// the same packet.
func (d *Decoder) fast(frame []byte) bool {
	d.decoded = d.decoded[:0]
	ip := frame
	if !d.raw {
		if d.linkLen != 14 || len(frame) < 14 {
			return false
		}
		d.decoded = append(d.decoded, layers.LayerTypeEthernet)
		et, rest := binary.BigEndian.Uint16(frame[12:]), frame[14:]
		if et == uint16(layers.EthernetTypeDot1Q) {
			if len(rest) < 4 {
				return false
			}
			d.dot1q.VLANIdentifier = binary.BigEndian.Uint16(rest) & 0x0fff
			d.decoded = append(d.decoded, layers.LayerTypeDot1Q)
			et, rest = binary.BigEndian.Uint16(rest[2:]), rest[4:]
		}
		switch {
		case et == uint16(layers.EthernetTypeIPv4) && len(rest) > 0 && rest[0]>>4 == 4:
		case et == uint16(layers.EthernetTypeIPv6) && len(rest) > 0 && rest[0]>>4 == 6:
		default:
			return false
		}
		ip = rest
	}
	var l4 []byte
	var proto uint8
	switch {
	case len(ip) >= 20 && ip[0] == 0x45:
		n := int(binary.BigEndian.Uint16(ip[2:]))
		if n < 20 || binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
			return false // no length (TSO), or a fragment
		}
		proto = ip[9]
		d.ip4.Contents, d.ip4.Payload = ip[:20], ip[20:min(n, len(ip))] // a snap length may cut it
		d.ip4.SrcIP, d.ip4.DstIP = ip[12:16], ip[16:20]
		d.ip4.Protocol, d.ip4.Length = layers.IPProtocol(proto), uint16(n)
		d.decoded = append(d.decoded, layers.LayerTypeIPv4)
		l4 = d.ip4.Payload
	case len(ip) >= 40 && ip[0]>>4 == 6:
		n := int(binary.BigEndian.Uint16(ip[4:]))
		if n == 0 {
			return false // a jumbogram, or broken
		}
		proto = ip[6]
		d.ip6.Contents, d.ip6.Payload = ip[:40], ip[40:min(40+n, len(ip))]
		d.ip6.SrcIP, d.ip6.DstIP = ip[8:24], ip[24:40]
		d.ip6.NextHeader, d.ip6.Length, d.ip6.HopByHop = layers.IPProtocol(proto), uint16(n), nil
		d.decoded = append(d.decoded, layers.LayerTypeIPv6)
		l4 = d.ip6.Payload
	default:
		return false
	}
	return d.fastL4(proto, l4)
}

// fastL4 decodes a whole TCP or UDP header for fast, or returns false.
func (d *Decoder) fastL4(proto uint8, l4 []byte) bool {
	switch proto {
	case uint8(layers.IPProtocolTCP):
		if len(l4) < 20 {
			return false
		}
		n := int(l4[12]>>4) * 4
		if n < 20 || n > len(l4) {
			return false
		}
		t := &d.tcp
		t.SrcPort, t.DstPort = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
		t.Seq, t.Ack, t.Flags = binary.BigEndian.Uint32(l4[4:]), binary.BigEndian.Uint32(l4[8:]), l4[13]
		t.Contents, t.Payload = l4[:n], l4[n:]
		d.decoded = append(d.decoded, layers.LayerTypeTCP)
	case uint8(layers.IPProtocolUDP):
		if len(l4) < 8 {
			return false
		}
		src, dst, n := binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:]), int(binary.BigEndian.Uint16(l4[4:]))
		ports := parsedUDPPorts()
		if n < 8 || ports[src/64]&(1<<(src%64)) != 0 || ports[dst/64]&(1<<(dst%64)) != 0 ||
			d.inner != nil && dst == d.cfg.VXLANPort {
			return false
		}
		u := &d.udp
		u.SrcPort, u.DstPort, u.Length = layers.UDPPort(src), layers.UDPPort(dst), uint16(n)
		u.Contents, u.Payload = l4[:8], l4[8:min(n, len(l4))]
		d.decoded = append(d.decoded, layers.LayerTypeUDP)
	default:
		return false
	}
	return true
}
