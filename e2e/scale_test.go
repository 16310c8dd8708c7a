package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/e2e/harness"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/sim"
)

// collectorPeakBound is the most memory the collector may hold in a fast
// replay, whatever its length.
const collectorPeakBound = 300 << 20

// TestFastReplay replays captures as fast as the probes read them, far
// faster than the collector reconciles: every epoch must come out exact
// (rda, every bucket repaired), its loss equal to the truth, and the
// collector's peak memory within collectorPeakBound. "real-capture" is a
// capture the project did not make (gopacket's cip.pcap: 174 s, 26,068
// packets); "600-epochs" is the bundled trace 100 times over, one copy
// every 6 s (2.58 M packets; OWL_SCALE_COPIES changes the count).
func TestFastReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	t.Run("real-capture", func(t *testing.T) {
		env := newEnv(t)
		fastReplay(t, env, gopacketCapture(t, "layers/testdata/cip.pcap"), sim.Shape{})
	})
	t.Run("600-epochs", func(t *testing.T) {
		if os.Getenv("OWL_E2E_RACE") == "1" {
			t.Skip("too long for race-built binaries on two cores")
		}
		copies := 100
		if n, err := strconv.Atoi(os.Getenv("OWL_SCALE_COPIES")); err == nil && n > 0 {
			copies = n
		}
		fastReplay(t, newEnv(t), "../testdata/trace.pcap", sim.Shape{Repeat: copies, Every: 6 * time.Second})
	})
}

// gopacketCapture is the path of a capture file in gopacket's module.
func gopacketCapture(t *testing.T, rel string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/gopacket/gopacket").Output()
	if err != nil {
		t.Fatalf("finding gopacket's module: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), rel)
}

// startReplayCollector starts a collector of path a-to-b at the default
// pair timeout (30 s): in a fast replay a side may wait seconds for its
// pair while the other probe is held back by its caches.
func startReplayCollector(t *testing.T, env *harness.Env) (*harness.Proc, harness.Addrs) {
	t.Helper()
	yaml := strings.Replace(collectorYAML(filepath.Join(env.Dir, "data"), "127.0.0.1:0", pathAB), "pair_timeout: 3s", "pair_timeout: 30s", 1)
	coll, addrs, err := env.StartCollector("collector", yaml)
	if err != nil {
		t.Fatal(err)
	}
	return coll, addrs
}

// fastReplay runs a collector and two probes at full speed on the
// captures of in, shaped, across a path with 1% loss and checks every
// epoch.
func fastReplay(t *testing.T, env *harness.Env, in string, shape sim.Shape) {
	out, truth := makeShapedTrace(t, env, in, shape, lossOnly)
	truths := sim.EpochTruths(truth, epoch.DefaultConfig(), 0)
	coll, addrs := startReplayCollector(t, env)
	start := time.Now()
	a, b := runProbes(t, env, addrs.GRPC, out, "-replay-speed", "0")
	replayed := time.Since(start)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stats, err := harness.WaitStats(ctx, query(t, addrs.GRPC), "a-to-b", len(truths))
	if err != nil {
		t.Fatalf("%v\n%s", err, tail(coll.Log()))
	}
	peak, err := coll.PeakRSS()
	if err != nil {
		t.Fatal(err)
	}
	byEpoch := map[int64]*owlv1.PathStats{}
	for _, s := range stats {
		byEpoch[s.GetEpoch()] = s
	}
	sent, lost, wrong, trueLost := 0, 0.0, 0, 0
	last := truths[len(truths)-1].Epoch
	repeated := repeatedLoss(truth)
	near, exactStd, whole := 0, 0, 0
	for _, tr := range truths {
		s := byEpoch[tr.Epoch]
		if s.GetStddevExact() {
			exactStd++
		}
		// Sampled whole, with RDA's mean exact: every packet's delay
		// is known, so the standard deviation must say it is exact.
		if s.GetSampleRate() == 1 && s.GetSampleDelays() == s.GetSamples() && s.GetEstimator() == "rda" && s.GetDecoded() && s.GetUnusableBuckets() == 0 && tr.Epoch != last {
			whole++
			if !s.GetStddevExact() {
				t.Errorf("epoch %d: every one of %d delays sampled, standard deviation not exact", tr.Epoch, s.GetSamples())
			}
		}
		sent, trueLost = sent+tr.Sent, trueLost+tr.Lost
		if s != nil {
			lost += s.GetLost()
		}
		msg := exactEpoch(s, tr, tr.Epoch == last)
		if rl := repeated[tr.Epoch]; msg != "" && rl.lost > 0 {
			// Which of identical copies was lost is unknown when the
			// delay is longer than their spacing (their buckets are
			// left out), and both lost stall peeling: loss is then off
			// by at most those copies, and the mean is that of the
			// packets kept, off by at most the share left out times
			// the epoch's spread of delays.
			near++
			msg = ""
			n := float64(tr.Sent - tr.Lost)
			bound := max(n-float64(s.GetSamples()), 0) / n * rl.spreadNS
			if s == nil || math.Abs(s.GetMeanNs()-tr.AllMeanNS) > bound || math.Abs(s.GetLost()-float64(tr.Lost)) > float64(rl.lost) {
				msg = fmt.Sprintf("%d lost copies of repeated IDs (mean bound %.0f ns), and %v", rl.lost, bound, s)
			}
		}
		if msg != "" {
			if wrong++; wrong <= 10 {
				t.Errorf("epoch %d: %s", tr.Epoch, msg)
			}
		}
	}
	t.Logf("%d epochs, %d packets sent, %.0f lost (truth %d), %d not exact, %d not exact but within bounds where a copy of a repeated ID was lost; probes done in %v (CPU %v, %v); collector peak %.0f MiB",
		len(truths), sent, lost, trueLost, wrong, near, replayed.Round(time.Millisecond), a.CPUTime().Round(time.Millisecond),
		b.CPUTime().Round(time.Millisecond), float64(peak)/(1<<20))
	// The bound is the collector's, as users run it. A race-built
	// collector holds the race runtime's shadow of every heap and global
	// byte (Go documents 5–10× the memory): on 2026-11-23 this replay
	// peaked at 105 MiB built normally, before and after the percentile
	// work, and race-built at 288–293 MiB before it and 301–306 after
	// (293 with only gonum linked into the old collector). The normal
	// build, run by the same CI, keeps the bound.
	// Where an epoch was sampled at rate 1 its standard deviation is
	// exact, unless copies of a repeated ID could have overtaken each
	// other (which delay is whose is then unknown, and they are left
	// out): the real capture repeats identical packets in nearly every
	// epoch. Its 815-packet epochs sit among epochs of ~5,000, so the
	// collector samples them at the busier ones' rate (1/4), and the
	// first ones, at rate 1, are narrowed to the next epoch's rate when
	// its sample was halved (max_entries): since sample keys shrank
	// (2026-11-26) those are synopses, not lists, and the run has no
	// epoch sampled whole. Each exact one claimed is checked above.
	t.Logf("%d epochs with an exact standard deviation, %d sampled whole", exactStd, whole)
	if peak > collectorPeakBound && os.Getenv("OWL_E2E_RACE") != "1" {
		t.Errorf("collector peak memory %.0f MiB, bound %d MiB", float64(peak)/(1<<20), collectorPeakBound>>20)
	}
	if err := coll.Stop(10 * time.Second); err != nil {
		t.Errorf("collector shutdown: %v\n%s", err, tail(coll.Log()))
	}
}

// repeated is what the truth says of an epoch that lost packets it sent
// more than once (identical IDs): those lost copies, and the spread
// (largest less smallest) of its delivered packets' delays.
type repeated struct {
	lost     int
	spreadNS float64
}

// repeatedLoss is repeated per epoch, for the epochs that lost such a
// packet.
func repeatedLoss(truth []sim.Record) map[int64]repeated {
	type key struct {
		epoch int64
		id    uint64
	}
	copies, lost := map[key]int{}, map[key]int{}
	lo, hi := map[int64]int64{}, map[int64]int64{}
	ep := epoch.DefaultConfig()
	for _, r := range truth {
		e, _ := ep.Of(r.UpNS)
		k := key{e, r.ID}
		copies[k]++
		if r.Lost {
			lost[k]++
			continue
		}
		d := r.DelayNS()
		if l, ok := lo[e]; !ok || d < l {
			lo[e] = d
		}
		if h, ok := hi[e]; !ok || d > h {
			hi[e] = d
		}
	}
	out := map[int64]repeated{}
	for k, n := range lost {
		if copies[k] > 1 {
			rl := out[k.epoch]
			rl.lost += n
			rl.spreadNS = float64(hi[k.epoch] - lo[k.epoch])
			out[k.epoch] = rl
		}
	}
	return out
}

// exactEpoch says what is wrong with an epoch's result against its
// truth: nothing ("") when it is RDA's, every bucket repaired, with the
// true mean and (but in the last epoch, whose crossers have no next
// epoch) the true loss.
func exactEpoch(s *owlv1.PathStats, tr sim.EpochTruth, last bool) string {
	switch {
	case s == nil:
		return "no result"
	case s.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK:
		return fmt.Sprintf("status %v (%s)", s.GetStatus(), s.GetDetail())
	case s.GetEstimator() != "rda" || !s.GetDecoded() || s.GetUnusableBuckets() != 0:
		return fmt.Sprintf("estimator %s, decoded %t, %d buckets left out", s.GetEstimator(), s.GetDecoded(), s.GetUnusableBuckets())
	case math.Abs(s.GetMeanNs()-tr.AllMeanNS) > 1e-9*tr.AllMeanNS:
		return fmt.Sprintf("mean %.3f ns, truth %.3f ns", s.GetMeanNs(), tr.AllMeanNS)
	case !last && s.GetLost() != float64(tr.Lost):
		return fmt.Sprintf("lost %.0f, truth %d", s.GetLost(), tr.Lost)
	case s.GetStddevExact() && math.Abs(s.GetStddevNs()-tr.AllStddevNS) > 1e-6*tr.AllStddevNS:
		return fmt.Sprintf("exact stddev %.3f ns, truth %.3f ns", s.GetStddevNs(), tr.AllStddevNS)
	}
	return ""
}

// TestReplayEndsWithoutWaiting replays 2 s of synthetic traffic whose
// last packets reach op-b after the epoch's end: the epoch after has a
// downstream side only, op-a having seen nothing of it. op-a, its file
// read and its reports acknowledged, tells the collector so
// (SourcesDone); the collector gives that epoch its missing-upstream
// result at once and releases op-b's cache, and both probes exit within
// seconds. Before, op-b waited for the epoch's pair_timeout (30 s here,
// the default) and as long again, op-a being gone.
func TestReplayEndsWithoutWaiting(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	env := newEnv(t)
	out := sim.OutputsFor(filepath.Join(env.Dir, "trace"))
	start := time.Unix(1_700_000_000, 0)
	synth := sim.SynthConfig{Flows: 20_000, ParetoShape: 1.1, MaxPackets: 3000, Start: start, Span: 2 * time.Second, Seed: 5}
	if _, err := sim.GenerateSynthetic(synth, sim.Shape{}, out, capture.DefaultIdentityConfig(), lossOnly); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out.Truth)
	if err != nil {
		t.Fatal(err)
	}
	truth, err := sim.ReadTruth(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	last := start.Add(2 * time.Second).Unix() // the epoch op-b alone sees
	crossed := 0
	for _, r := range truth {
		if !r.Lost && r.DownNS >= last*1e9 {
			crossed++
		}
	}
	if crossed == 0 {
		t.Fatalf("no packet reaches op-b after %d s: the trace does not test this", last)
	}
	coll, addrs := startReplayCollector(t, env)
	began := time.Now()
	_, b := runProbes(t, env, addrs.GRPC, out, "-replay-speed", "0")
	took := time.Since(began)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stats, err := harness.WaitStats(ctx, query(t, addrs.GRPC), "a-to-b", 3)
	if err != nil {
		t.Fatalf("%v\n%s", err, tail(coll.Log()))
	}
	var res *owlv1.PathStats
	for _, s := range stats {
		if s.GetEpoch() == last {
			res = s
		}
	}
	if res.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_MISSING_UPSTREAM {
		t.Errorf("epoch %d (%d packets of it reached op-b only): status %v, want missing upstream", last, crossed, res.GetStatus())
	}
	t.Logf("%d packets reached op-b after %d s; both probes done in %v", crossed, last, took.Round(time.Millisecond))
	if took > 15*time.Second || strings.Contains(b.Log(), "exiting before the collector released") {
		t.Errorf("the probes took %v (pair_timeout 30 s): op-b waited for the side op-a could not send\n%s", took.Round(time.Millisecond), tail(b.Log()))
	}
}
