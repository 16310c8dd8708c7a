package rtt

import (
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket/layers"

	"github.com/owl-latency/owl/internal/capture"
)

var (
	client = netip.MustParseAddr("10.0.0.1")
	server = netip.MustParseAddr("192.0.2.7")
)

// seg is a TCP segment at tNS from the client (out) or the server.
func seg(tNS int64, out bool, flags uint8, seq, ack uint32, n int) *capture.Packet {
	f := capture.FlowKey{Src: client, Dst: server, SrcPort: 40000, DstPort: 443, Proto: 6}
	if !out {
		f.Src, f.Dst, f.SrcPort, f.DstPort = f.Dst, f.Src, f.DstPort, f.SrcPort
	}
	return &capture.Packet{TimeNS: tNS, Flow: f, L4: capture.Transport{Seq: seq, Ack: ack, TCPFlags: flags, PayloadLen: n}}
}

func dns(tNS int64, answer bool, id uint16) *capture.Packet {
	f := capture.FlowKey{Src: client, Dst: server, SrcPort: 5353, DstPort: 53, Proto: 17}
	if answer {
		f.Src, f.Dst, f.SrcPort, f.DstPort = f.Dst, f.Src, f.DstPort, f.SrcPort
	}
	return &capture.Packet{TimeNS: tNS, Flow: f, L4: capture.Transport{DNS: true, DNSID: id, DNSAnswer: answer}}
}

// TestExactPairs: a connection's handshake, data both ways with a
// delayed ACK and a retransmission, its close, and a DNS exchange give
// exactly the pairs the rules name, with their delays and kinds.
func TestExactPairs(t *testing.T) {
	const ack, syn, fin = capture.TCPAck, capture.TCPSyn, capture.TCPFin
	pkts := []*capture.Packet{
		seg(0, true, syn, 100, 0, 0),                // SYN (ends at 101)
		seg(1000, false, syn|ack, 500, 101, 0),      // SYN/ACK: 1000 ns handshake; ends at 501
		seg(1300, true, ack, 101, 501, 0),           // ACK of the SYN/ACK: 300 ns handshake
		seg(2000, true, ack|0x08, 101, 501, 100),    // data, ends at 201
		seg(2100, true, ack|0x08, 201, 501, 100),    // data, ends at 301
		seg(5000, false, ack, 501, 301, 0),          // one ACK for both: 2900 ns for the second only
		seg(6000, true, ack|0x08, 301, 501, 50),     // data, ends at 351
		seg(7000, true, ack|0x08, 301, 501, 50),     // retransmitted: ambiguous
		seg(8000, false, ack|0x08, 501, 351, 20),    // ACK (no sample) carrying data, ends at 521
		seg(8400, true, ack|fin, 351, 521, 0),       // ACK of the data: 400 ns; FIN ends at 352
		seg(9000, false, ack|fin, 521, 352, 0),      // ACK of the FIN: 600 ns; FIN ends at 522
		seg(9100, true, ack, 352, 522, 0),           // ACK of the FIN: 100 ns
		dns(10_000, false, 7), dns(13_000, true, 7), // 3000 ns
		dns(14_000, true, 8),                         // an answer without its query
		seg(15_000, true, capture.TCPRst, 352, 0, 0), // RST: nothing
	}
	want := []Sample{
		{1000, TCPHandshake, server, 1}, {300, TCPData, client, 1}, {2900, TCPData, server, 1},
		{400, TCPData, client, 1}, {600, TCPData, server, 1}, {100, TCPData, client, 1}, {3000, DNS, server, 1},
	}
	x := NewExact(1)
	var got []Sample
	for _, p := range pkts {
		if s, ok := x.Add(p); ok {
			got = append(got, s)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d samples %v, want %d %v", len(got), got, len(want), want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("sample %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if x.Ambiguous != 1 {
		t.Errorf("%d ambiguous, want the retransmitted segment's 1", x.Ambiguous)
	}
	if x.Pending() != 1 { // the first data segment, its ACK covered by the next one's
		t.Errorf("%d requests pending, want 1", x.Pending())
	}
}

// traceBundled is the bundled trace's packets, decoded.
func traceBundled(tb testing.TB) []capture.Packet {
	tb.Helper()
	src, err := capture.OpenFile("../../testdata/trace.pcap")
	if err != nil {
		tb.Fatal(err)
	}
	defer src.Close()
	d, _ := capture.NewDecoder(layers.LinkTypeEthernet, capture.DefaultIdentityConfig())
	var pkts []capture.Packet
	for {
		f, err := src.Next()
		if err != nil {
			break
		}
		var p capture.Packet
		if d.Decode(f.Data, f.TimeNS, &p) == nil {
			pkts = append(pkts, p)
		}
	}
	return pkts
}

// TestClassifierIsClassify: the Classifier, which reuses the last flow's
// hash, gives every packet of the bundled trace the Event Classify gives
// it, and so do packets made to defeat its cache: the same flow reversed,
// another tag, protocol, port or address family.
func TestClassifierIsClassify(t *testing.T) {
	pkts := traceBundled(t)
	if len(pkts) < 1000 {
		t.Fatalf("%d packets in the bundled trace", len(pkts))
	}
	six := netip.MustParseAddr("2001:db8::1")
	for _, p := range []*capture.Packet{seg(0, true, capture.TCPSyn, 1, 0, 0), seg(1, false, capture.TCPSyn|capture.TCPAck, 9, 2, 0)} {
		for _, change := range []func(*capture.Packet){
			func(*capture.Packet) {},
			func(q *capture.Packet) { q.Flow.Tag = 7 },
			func(q *capture.Packet) { q.Flow.SrcPort++ },
			func(q *capture.Packet) { q.Flow.Src, q.Flow.Dst = q.Flow.Dst, q.Flow.Src },
			func(q *capture.Packet) { q.Flow.Src = six },
			func(q *capture.Packet) { q.Flow.Proto = 17; q.L4.DNS = true; q.L4.DNSAnswer = true },
		} {
			q := *p
			change(&q)
			pkts = append(pkts, *p, q, *p)
		}
	}
	c := NewClassifier(3)
	var hits int
	for i := range pkts {
		var got Event
		c.Classify(&got, &pkts[i])
		want := Classify(&pkts[i], 3)
		if got != want {
			t.Fatalf("packet %d %+v: Classifier %+v, Classify %+v", i, pkts[i].Flow, got, want)
		}
		if want.Request || want.Response {
			hits++
		}
	}
	if hits < len(pkts)/2 {
		t.Errorf("%d of %d packets are requests or responses: the comparison says little", hits, len(pkts))
	}
}

// BenchmarkClassify classifies the bundled trace's packets (decoded
// beforehand) with a Classifier, summing the keys.
func BenchmarkClassify(b *testing.B) {
	pkts := traceBundled(b)
	var sum uint64
	c := NewClassifier(1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var ev Event
		c.Classify(&ev, &pkts[i%len(pkts)])
		sum += ev.RequestKey ^ ev.ResponseKey
	}
	if sum == 1 {
		b.Log(sum)
	}
}
