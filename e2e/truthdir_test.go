package e2e

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// TestTruthDirection: the ground truth takes a packet by its own (outer)
// destination. An ICMP error from A to B quotes a packet to A, and
// tshark's ip.dst filter matches it for A too; counted there, it looked
// like a packet lost on the way to A and another duplicated (a CI run
// failed on it).
func TestTruthDirection(t *testing.T) {
	needRoot(t, "tshark")
	a, b := net.IPv4(10, 0, 0, 1), net.IPv4(10, 0, 0, 2)
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	// A datagram from B to A, and A's port-unreachable answer quoting it.
	ipBA := &layers.IPv4{Version: 4, TTL: 64, Id: 7, Protocol: layers.IPProtocolUDP, SrcIP: b, DstIP: a}
	udp := &layers.UDP{SrcPort: 9000, DstPort: 40000}
	_ = udp.SetNetworkLayerForChecksum(ipBA)
	dgram := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(dgram, opts, ipBA, udp, gopacket.Payload("hello")); err != nil {
		t.Fatal(err)
	}
	frames := [][]byte{}
	f1 := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(f1, opts, eth, ipBA, udp, gopacket.Payload("hello")); err != nil {
		t.Fatal(err)
	}
	frames = append(frames, f1.Bytes())
	ipAB := &layers.IPv4{Version: 4, TTL: 64, Id: 8, Protocol: layers.IPProtocolICMPv4, SrcIP: a, DstIP: b}
	icmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodePort)}
	f2 := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(f2, opts, eth, ipAB, icmp, gopacket.Payload(dgram.Bytes())); err != nil {
		t.Fatal(err)
	}
	frames = append(frames, f2.Bytes())
	path := filepath.Join(t.TempDir(), "icmp.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := pcapgo.NewWriterNanos(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	for i, fr := range frames {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, int64(i)), CaptureLength: len(fr), Length: len(fr)}
		if err := w.WritePacket(ci, fr); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dst   string
		proto uint8
	}{{"10.0.0.1", 17}, {"10.0.0.2", 1}} {
		got := tsharkPackets(t, path, netip.MustParseAddr(c.dst))
		if len(got) != 1 || got[0].flow.Proto != c.proto {
			t.Errorf("packets to %s: %+v, want the one of protocol %d", c.dst, got, c.proto)
		}
	}
}
