package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/e2e/harness"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/sim"
)

// TestBoundaryDuplicate: a packet duplicated on the link whose two copies
// arrive on either side of an epoch boundary, 2 ms apart, is one
// duplicate of the later epoch, not a packet reordered into it, and no
// loss in the earlier one (a CI run once failed TestRealLink on such a
// packet). One duplicated before the upstream point, its copies on
// either side of a boundary there and both after it downstream, is no
// duplicate and no loss: its first copy crossed the boundary. Captures
// of four epochs of 2,000 UDP packets each, 200 µs on the way; the
// first duplicate at the second boundary, the other at the third.
func TestBoundaryDuplicate(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	env := newEnv(t)
	cfg := epoch.DefaultConfig()
	first, _ := cfg.Of(time.Now().Add(-time.Hour).UnixNano())
	const perEpoch, delayNS = 2000, 200_000
	var up, down []sim.Frame
	for i := range 4 * perEpoch {
		e := first + int64(i/perEpoch)
		sent := cfg.StartNS(e) + int64(i%perEpoch)*int64(cfg.Length)/perEpoch + 1000
		b := udpFrame(t, uint16(1000+i%50), uint32(i))
		up = append(up, sim.Frame{Data: b, TimeNS: sent})
		down = append(down, sim.Frame{Data: b, TimeNS: sent + delayNS})
	}
	// Duplicated on the link: both copies of one packet at the upstream
	// point before the boundary, one at the downstream point after it.
	boundary := cfg.StartNS(first + 2)
	dup := udpFrame(t, 999, 1<<31)
	up = insertFrame(up, sim.Frame{Data: dup, TimeNS: boundary - 1_200_000})
	down = insertFrame(down, sim.Frame{Data: dup, TimeNS: boundary - 1_000_000})
	down = insertFrame(down, sim.Frame{Data: dup, TimeNS: boundary + 1_000_000})
	// Duplicated before the upstream point, its copies on either side of
	// the next boundary there, both after it downstream: the first copy
	// crossed the boundary.
	boundary2 := cfg.StartNS(first + 3)
	dup2 := udpFrame(t, 998, 1<<30)
	up = insertFrame(up, sim.Frame{Data: dup2, TimeNS: boundary2 - 100_000})
	up = insertFrame(up, sim.Frame{Data: dup2, TimeNS: boundary2 + 50_000})
	down = insertFrame(down, sim.Frame{Data: dup2, TimeNS: boundary2 + 100_000})
	down = insertFrame(down, sim.Frame{Data: dup2, TimeNS: boundary2 + 250_000})
	out := sim.OutputsFor(filepath.Join(env.Dir, "dup"))
	for _, c := range []struct {
		name   string
		frames []sim.Frame
	}{{out.Up, up}, {out.Down, down}} {
		f, err := os.Create(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if err := sim.WritePcap(f, layers.LinkTypeEthernet, c.frames); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}

	coll, addrs := startReplayCollector(t, env)
	runProbes(t, env, addrs.GRPC, out, "-replay-speed", "0")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stats, err := harness.WaitStats(ctx, query(t, addrs.GRPC), "a-to-b", 4)
	if err != nil {
		t.Fatalf("%v\n%s", err, tail(coll.Log()))
	}
	byEpoch := map[int64]*owlv1.PathStats{}
	for _, s := range stats {
		byEpoch[s.GetEpoch()] = s
	}
	before, after := byEpoch[first+1], byEpoch[first+2]
	t.Logf("epoch before: lost %v, duplicates %d, reordered %d; after: lost %v, duplicates %d, reordered %d",
		before.GetLost(), before.GetDuplicates(), before.GetReordered(), after.GetLost(), after.GetDuplicates(), after.GetReordered())
	if before.GetEstimator() != "rda" || after.GetEstimator() != "rda" {
		t.Fatalf("estimators %s and %s, want rda", before.GetEstimator(), after.GetEstimator())
	}
	if before.GetLost() != 0 || before.GetDuplicates() != 0 || before.GetReordered() != 0 {
		t.Errorf("epoch before the boundary: lost %v, duplicates %d, reordered %d; want none",
			before.GetLost(), before.GetDuplicates(), before.GetReordered())
	}
	if after.GetLost() != 0 || after.GetDuplicates() != 1 || after.GetReordered() != 0 || after.GetBoundaryMatched() != 1 {
		t.Errorf("epoch after the boundary: lost %v, duplicates %d, reordered %d, boundary matched %d; want 0, 1, 0, 1",
			after.GetLost(), after.GetDuplicates(), after.GetReordered(), after.GetBoundaryMatched())
	}
	last := byEpoch[first+3]
	t.Logf("epoch after the second boundary: lost %v, duplicates %d, reordered %d", last.GetLost(), last.GetDuplicates(), last.GetReordered())
	if last.GetEstimator() != "rda" || last.GetLost() != 0 || last.GetDuplicates() != 0 || last.GetReordered() != 0 {
		t.Errorf("epoch after the second boundary: %s, lost %v, duplicates %d, reordered %d; want rda, none",
			last.GetEstimator(), last.GetLost(), last.GetDuplicates(), last.GetReordered())
	}
}

// udpFrame is an Ethernet frame of a UDP packet from port sport whose
// payload carries n.
func udpFrame(t *testing.T, sport uint16, n uint32) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IPv4(10, 0, 0, 1), DstIP: net.IPv4(10, 0, 0, 2)}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: 5000}
	_ = udp.SetNetworkLayerForChecksum(ip)
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	payload := []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// insertFrame puts f into frames, which are in time order.
func insertFrame(frames []sim.Frame, f sim.Frame) []sim.Frame {
	i := 0
	for i < len(frames) && frames[i].TimeNS <= f.TimeNS {
		i++
	}
	return append(frames[:i], append([]sim.Frame{f}, frames[i:]...)...)
}
