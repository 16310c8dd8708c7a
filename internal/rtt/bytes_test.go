package rtt

import (
	"net"
	"slices"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/owl-latency/owl/internal/capture"
)

// frame serializes layers with lengths and checksums set.
func frame(t *testing.T, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	var nl gopacket.NetworkLayer
	for _, l := range ls {
		if n, ok := l.(gopacket.NetworkLayer); ok {
			nl = n
		}
	}
	for _, l := range ls {
		if c, ok := l.(interface {
			SetNetworkLayerForChecksum(gopacket.NetworkLayer) error
		}); ok {
			_ = c.SetNetworkLayerForChecksum(nl)
		}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestPairsFromRealBytes: handshakes and data without TCP timestamp
// options, over IPv4 in QinQ and over IPv6 in one VLAN, and a DNS query
// and answer, decoded from real bytes, give their pairs.
func TestPairsFromRealBytes(t *testing.T) {
	eth := func(et layers.EthernetType) *layers.Ethernet {
		return &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: et}
	}
	qinq := func(inner layers.EthernetType) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{eth(layers.EthernetTypeQinQ), &layers.Dot1Q{VLANIdentifier: 10, Type: layers.EthernetTypeDot1Q},
			&layers.Dot1Q{VLANIdentifier: 20, Type: inner}}
	}
	vlan := func(inner layers.EthernetType) []gopacket.SerializableLayer {
		return []gopacket.SerializableLayer{eth(layers.EthernetTypeDot1Q), &layers.Dot1Q{VLANIdentifier: 30, Type: inner}}
	}
	v4 := func(out bool, p layers.IPProtocol) gopacket.SerializableLayer {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: p, SrcIP: net.IP{10, 0, 0, 1}, DstIP: net.IP{192, 0, 2, 7}}
		if !out {
			ip.SrcIP, ip.DstIP = ip.DstIP, ip.SrcIP
		}
		return ip
	}
	v6 := func(out bool, p layers.IPProtocol) gopacket.SerializableLayer {
		ip := &layers.IPv6{Version: 6, NextHeader: p, HopLimit: 64, SrcIP: net.ParseIP("fd00::1"), DstIP: net.ParseIP("2001:db8::7")}
		if !out {
			ip.SrcIP, ip.DstIP = ip.DstIP, ip.SrcIP
		}
		return ip
	}
	tcp := func(out, syn, ack bool, seq, ackN uint32) *layers.TCP {
		s := &layers.TCP{SrcPort: 40000, DstPort: 443, Seq: seq, Ack: ackN, SYN: syn, ACK: ack, Window: 500}
		if !out {
			s.SrcPort, s.DstPort = s.DstPort, s.SrcPort
		}
		return s
	}
	data := gopacket.Payload(make([]byte, 100))
	for _, c := range []struct {
		name  string
		encap func(layers.EthernetType) []gopacket.SerializableLayer
		ip    func(bool, layers.IPProtocol) gopacket.SerializableLayer
		et    layers.EthernetType
	}{{"ipv4 in qinq", qinq, v4, layers.EthernetTypeIPv4}, {"ipv6 in a vlan", vlan, v6, layers.EthernetTypeIPv6}} {
		seg := func(out bool, l ...gopacket.SerializableLayer) []byte {
			return frame(t, append(append(c.encap(c.et), c.ip(out, layers.IPProtocolTCP)), l...)...)
		}
		frames := [][]byte{
			seg(true, tcp(true, true, false, 100, 0)),         // SYN
			seg(false, tcp(false, true, true, 500, 101)),      // SYN/ACK
			seg(true, tcp(true, false, true, 101, 501), data), // data, no timestamp option
			seg(false, tcp(false, false, true, 501, 201)),     // its ACK
			frame(t, append(append(c.encap(c.et), c.ip(true, layers.IPProtocolUDP)), &layers.UDP{SrcPort: 5353, DstPort: 53},
				gopacket.Payload([]byte{0, 9, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}))...),
			frame(t, append(append(c.encap(c.et), c.ip(false, layers.IPProtocolUDP)), &layers.UDP{SrcPort: 53, DstPort: 5353},
				gopacket.Payload([]byte{0, 9, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0}))...),
		}
		d, err := capture.NewDecoder(layers.LinkTypeEthernet, capture.DefaultIdentityConfig())
		if err != nil {
			t.Fatal(err)
		}
		x := NewExact(1)
		var kinds []Kind
		for i, f := range frames {
			var p capture.Packet
			if err := d.Decode(f, int64(i)*1000, &p); err != nil {
				t.Fatalf("%s frame %d: %v", c.name, i, err)
			}
			if s, ok := x.Add(&p); ok {
				kinds = append(kinds, s.Kind)
				if s.DelayNS != 1000 {
					t.Errorf("%s: %v pair of %d ns, want 1000", c.name, s.Kind, s.DelayNS)
				}
			}
		}
		// The data segment also acknowledges the SYN/ACK: a data pair.
		if want := []Kind{TCPHandshake, TCPData, TCPData, DNS}; !slices.Equal(kinds, want) {
			t.Errorf("%s: pairs %v, want %v", c.name, kinds, want)
		}
	}
}
