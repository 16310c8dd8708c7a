package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/e2e/harness"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
)

// needRoot skips a test that needs root and the named tools.
func needRoot(t *testing.T, tools ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("live test")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
}

func sh(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// TestLiveProbes runs two probes capturing live, one at each end of a veth
// pair (the upstream one sees the frames leave, the downstream one sees
// them arrive), with 2 fanout workers downstream, while tcpreplay sends the
// bundled trace through. The collector must reconcile every epoch without
// loss, with the small positive delay of a veth crossing, and count as many
// packets as tcpdump at the receiving end.
func TestLiveProbes(t *testing.T) {
	needRoot(t, "ip", "tcpreplay", "tcpdump")
	env := newEnv(t)
	dir := env.Dir
	a, b := "owllivea", "owlliveb"
	vethPair(t, a, b)
	coll, addrs, err := env.StartCollector("collector", collectorYAML(filepath.Join(dir, "data"), "127.0.0.1:0", `  - name: a-to-b
    upstream: live-a
    downstream: live-b
`))
	if err != nil {
		t.Fatal(err)
	}
	// 16 MiB rings hold 0.8 s of the replay. Race-built probes run several
	// times slower and stall longer at an epoch's close, both at once on
	// two busy cores: they get the default 64.
	blocks := "16"
	if os.Getenv("OWL_E2E_RACE") == "1" {
		blocks = "64"
	}
	pa, err := env.Start("live-a", "probe", "-id", "live-a", "-collector", addrs.GRPC, "-interface", a, "-capture-outgoing", "-ring-blocks", blocks)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := env.Start("live-b", "probe", "-id", "live-b", "-collector", addrs.GRPC, "-interface", b, "-workers", "2", "-ring-blocks", blocks)
	if err != nil {
		t.Fatal(err)
	}
	q := query(t, addrs.GRPC)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		ps, err := q.ListProbes(ctx, &owlv1.ListProbesRequest{})
		if err == nil && len(ps.GetProbes()) == 2 && ps.GetProbes()[0].GetConnected() && ps.GetProbes()[1].GetConnected() {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("probes did not connect\n%s\n%s", pa.Log(), pb.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitCapturing(t, pa, pb)
	// The epoch the probes started in is partial: traffic begins in the next.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 50*time.Millisecond)))

	dump := filepath.Join(dir, "b.pcap")
	// The ground truth must see every frame. With its default 2 MiB
	// buffer, and started 500 ms before the replay without waiting for it
	// to listen, tcpdump on a slow machine once saw 25,007 and once 24,582
	// frames where both probes counted 25,766 (of the trace's 25,768), the
	// second time saying it dropped none: most likely it was not yet
	// listening when the replay began. It now gets 64 MiB, as the
	// real-link test's tcpdump, and the replay waits until it says it
	// listens.
	td, err := env.Start("tcpdump-b", "tcpdump", "-i", b, "-s", "0", "-B", "65536", "-U", "-w", dump, "-q")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(td.Log(), "listening on"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) || td.Exited() {
			t.Fatalf("tcpdump is not listening:\n%s", td.Log())
		}
	}
	sh(t, "tcpreplay", "-q", "-i", a, "--pps", "10000", "../testdata/trace.pcap")
	time.Sleep(2500 * time.Millisecond) // the last epoch closes after 1 s + grace
	if err := td.Signal(os.Interrupt, 10*time.Second); err != nil {
		t.Fatalf("tcpdump did not stop: %v\n%s", err, td.Log())
	}
	if m := regexp.MustCompile(`(\d+) packets? dropped by kernel`).FindStringSubmatch(td.Log()); m == nil || m[1] != "0" {
		t.Fatalf("tcpdump, the test's ground truth, dropped frames or did not say:\n%s", td.Log())
	}

	// Wait for the epochs the packets fell in, as the receiving end
	// stamped them (the times tcpreplay started and ended are not).
	frames, packets, firstNS, lastNS := pcapFrames(t, dump)
	first, _ := epochOf(time.Unix(0, firstNS))
	last, _ := epochOf(time.Unix(0, lastNS))
	stats, err := harness.WaitEpochs(ctx, q, "a-to-b", harness.Epochs(first, last))
	if err != nil {
		t.Fatalf("%v\n%s", err, coll.Log())
	}
	var up, down uint64
	var b2 strings.Builder
	for _, s := range stats {
		fmt.Fprintf(&b2, "epoch %d: %v %s mean %.3f µs std %.3f µs, up %d down %d, lost %.0f, decoded %t\n", s.GetEpoch(), s.GetStatus(),
			s.GetEstimator(), s.GetMeanNs()/1e3, s.GetStddevNs()/1e3, s.GetUpstreamPackets(), s.GetDownstreamPackets(), s.GetLost(), s.GetDecoded())
		if s.GetUpstreamPackets() == 0 && s.GetDownstreamPackets() == 0 {
			continue
		}
		up += s.GetUpstreamCounters().GetPackets()
		down += s.GetDownstreamCounters().GetPackets()
		if s.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK || s.GetEstimator() != "rda" || !s.GetDecoded() {
			t.Errorf("epoch %d: %v, estimator %s, decoded %t", s.GetEpoch(), s.GetStatus(), s.GetEstimator(), s.GetDecoded())
		}
		if s.GetLost() != 0 || s.GetUpstreamCounters().GetDropped()+s.GetDownstreamCounters().GetDropped() != 0 {
			t.Errorf("epoch %d: lost %.0f, ring drops %d + %d", s.GetEpoch(), s.GetLost(), s.GetUpstreamCounters().GetDropped(), s.GetDownstreamCounters().GetDropped())
		}
		if m := s.GetMeanNs(); s.GetSamples() > 0 && (m <= 0 || m > 10e6) {
			t.Errorf("epoch %d: mean delay %.0f ns across a veth pair", s.GetEpoch(), m)
		}
	}
	t.Logf("live results:\n%s", b2.String())
	if up != down || int(down) != packets {
		t.Errorf("upstream counted %d packets, downstream %d; tcpdump at the receiving end: %d frames, %d IP packets", up, down, frames, packets)
	}
	for _, p := range []*harness.Proc{pa, pb} {
		if err := p.Stop(10 * time.Second); err != nil {
			t.Errorf("%s did not stop cleanly: %v\n%s", p.Name, err, p.Log())
		}
	}
}

func epochOf(t time.Time) (int64, int64) { return epoch.DefaultConfig().Of(t.UnixNano()) }

// pcapFrames counts the frames of a capture file and the IP packets in
// them, and returns the first and last of those packets' timestamps.
func pcapFrames(t *testing.T, path string) (frames, packets int, firstNS, lastNS int64) {
	t.Helper()
	eachFrame(t, path, func(f capture.Frame, p *capture.Packet) {
		frames++
		if p != nil {
			if packets == 0 || f.TimeNS < firstNS {
				firstNS = f.TimeNS
			}
			lastNS = max(lastNS, f.TimeNS)
			packets++
		}
	})
	return frames, packets, firstNS, lastNS
}

// eachFrame calls fn with each frame of a capture file, and its packet
// when it decodes (nil when not).
func eachFrame(t *testing.T, path string, fn func(f capture.Frame, p *capture.Packet)) {
	t.Helper()
	src, err := capture.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	d, _ := capture.NewDecoder(src.LinkType(), capture.DefaultIdentityConfig())
	for {
		f, err := src.Next()
		if err != nil {
			return
		}
		var p capture.Packet
		if d.Decode(f.Data, f.TimeNS, &p) == nil {
			fn(f, &p)
		} else {
			fn(f, nil)
		}
	}
}
