package e2e

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/e2e/harness"
	"github.com/owl-latency/owl/internal/cli"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/sim"
)

// TestChaos replays a minute of synthetic traffic (1% loss) through four
// paths to a cluster of three collectors while collectors and probes are
// killed (SIGKILL) and restarted at random: a collector on its data, the
// first time with its data directory deleted; a probe on its data
// directory, replaying its capture again at full speed. c0, the probes'
// seed, stays. Then every epoch of every path must be answered by the
// cluster, exactly (or, where a probe was down when the collector asked
// it for the lost packets' timestamps, as an unrepaired estimate that
// says so, in at most a tenth of the epochs); and again after one member
// is gone for good with its data. OWL_CHAOS_SEED replays a run's choices, OWL_CHAOS_SPAN sets the
// traffic's length.
func TestChaos(t *testing.T) {
	if os.Getenv("OWL_E2E_RACE") == "1" {
		t.Skip("too long for race-built binaries on two cores")
	}
	span := 60 * time.Second
	if d, err := time.ParseDuration(os.Getenv("OWL_CHAOS_SPAN")); err == nil {
		span = d
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("OWL_CHAOS_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("OWL_CHAOS_SEED=%d OWL_CHAOS_SPAN=%v", seed, span)
	rng := rand.New(rand.NewPCG(seed, 1))
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	env := newEnv(t)
	out, truths := chaosTrace(t, env, span)
	names, paths := clusterPaths(4)
	ch := &chaos{t: t, env: env, paths: paths}
	// Members are restarted on their gossip address: ports from below
	// the ephemeral range (cli.FreePort).
	for i := range 3 {
		bind, err := cli.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		join := ""
		if i > 0 {
			join = ch.addrs[0].Gossip
		}
		ch.start(i, bind, join)
	}
	q0 := query(t, ch.addrs[0].GRPC)
	waitCluster(t, []owlv1.QueryServiceClient{q0}, 3, ch.logs)

	files := map[string]string{"op-a": out.Up, "op-b": out.Down}
	probes := map[string]*harness.Proc{}
	for id, f := range files {
		probes[id] = ch.probe(id, f, "1")
	}
	end := time.Now().Add(span)
	var actions []string
	for deleted := false; time.Now().Before(end); {
		time.Sleep(time.Duration(3000+rng.IntN(3000)) * time.Millisecond)
		if rng.IntN(2) == 0 {
			i := 1 + rng.IntN(2)
			actions = append(actions, ch.restartMember(i, !deleted, q0))
			deleted = true
			continue
		}
		id := []string{"op-a", "op-b"}[rng.IntN(2)]
		if probes[id].Exited() {
			continue
		}
		probes[id].Kill()
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		probes[id] = ch.probe(id, files[id], "0")
		actions = append(actions, fmt.Sprintf("%s: probe %s killed and restarted", time.Now().Format("15:04:05.0"), id))
	}
	t.Logf("chaos:\n%s", strings.Join(actions, "\n"))
	for _, p := range probes {
		if err := p.Wait(3 * time.Minute); err != nil {
			t.Fatalf("%s: %v\n%s\n%s", p.Name, err, tail(p.Log()), ch.logs())
		}
	}

	before := ch.table(q0, names, truths, "after the chaos")
	// One member goes for good, its data with it.
	ch.procs[2].Kill()
	os.RemoveAll(ch.dataDir(2))
	waitCluster(t, []owlv1.QueryServiceClient{q0}, 2, ch.logs)
	after := ch.table(query(t, ch.addrs[1].GRPC), names, truths, "with c2 gone for good")
	for n, rs := range before {
		for e, r := range rs {
			if a := after[n][e]; a == nil || a.GetMeanNs() != r.GetMeanNs() || a.GetLost() != r.GetLost() || a.GetStatus() != r.GetStatus() {
				t.Errorf("%s epoch %d: %v before c2 went, %v after", n, e, r, a)
			}
		}
	}
}

// chaosTrace makes the two captures of span of synthetic traffic across
// a path with 1% loss, and their truth per epoch.
func chaosTrace(t *testing.T, env *harness.Env, span time.Duration) (sim.Outputs, []sim.EpochTruth) {
	start := time.Unix(1_700_000_000, 0)
	link, frames, err := sim.Synthesize(sim.SynthConfig{Flows: 4000, ParetoShape: 1.1, MaxPackets: 3000, Start: start, Span: span, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(env.Dir, "synth.pcap")
	f, err := os.Create(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.WritePcap(f, link, frames); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, truth := makeTraceFrom(t, env, in, lossOnly)
	t.Logf("%d packets over %v", len(frames), span)
	return out, sim.EpochTruths(truth, epoch.DefaultConfig(), 0)
}

// chaos runs the collectors and probes of TestChaos.
type chaos struct {
	t     *testing.T
	env   *harness.Env
	paths string
	procs [3]*harness.Proc
	addrs [3]harness.Addrs
	runs  int
}

func (ch *chaos) dataDir(i int) string { return filepath.Join(ch.env.Dir, fmt.Sprintf("data-c%d", i)) }

// start runs collector i, its gossip bound to bind, joining join.
func (ch *chaos) start(i int, bind, join string) {
	ch.t.Helper()
	if join != "" {
		join = ", join: [" + join + "]"
	}
	cfg := collectorYAML(ch.dataDir(i), "127.0.0.1:0", ch.paths) + fmt.Sprintf("cluster: {bind: %q, name: c%d%s}\n", bind, i, join)
	ch.runs++
	p, a, err := ch.env.StartCollector(fmt.Sprintf("c%d-%d", i, ch.runs), cfg)
	if err != nil {
		ch.t.Fatalf("%v\n%s", err, ch.logs())
	}
	ch.procs[i], ch.addrs[i] = p, a
}

// restartMember kills collector i, waits until c0 has seen it go, and
// starts it again on the same gossip address (and its data, unless
// wipe).
func (ch *chaos) restartMember(i int, wipe bool, q0 owlv1.QueryServiceClient) string {
	ch.t.Helper()
	ch.procs[i].Kill()
	if wipe {
		os.RemoveAll(ch.dataDir(i))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := q0.ListCollectors(context.Background(), &owlv1.ListCollectorsRequest{})
		if err == nil && len(r.GetCollectors()) == 2 {
			break
		}
		if time.Now().After(deadline) {
			ch.t.Fatalf("c0 still lists %v (%v) 30 s after c%d was killed\n%s", r, err, i, ch.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	ch.start(i, ch.addrs[i].Gossip, ch.addrs[0].Gossip)
	what := "on its data"
	if wipe {
		what = "with its data directory deleted"
	}
	return fmt.Sprintf("%s: collector c%d killed and restarted %s", time.Now().Format("15:04:05.0"), i, what)
}

// probe runs probe id on its capture file at the given replay speed, on
// its data directory.
func (ch *chaos) probe(id, file, speed string) *harness.Proc {
	ch.t.Helper()
	ch.runs++
	p, err := ch.env.Start(fmt.Sprintf("%s-%d", id, ch.runs), "probe", "-id", id, "-collector", ch.addrs[0].GRPC, "-file", file,
		"-replay-speed", speed, "-reconnect-max", "200ms", "-release-timeout", "90s", "-data-dir", filepath.Join(ch.env.Dir, id))
	if err != nil {
		ch.t.Fatal(err)
	}
	return p
}

// epochLog is what every run of every collector and probe logged of a path's
// epoch, run by run.
func (ch *chaos) epochLog(path string, epoch int64) string {
	logs, _ := filepath.Glob(filepath.Join(ch.env.Dir, "*.log"))
	var b strings.Builder
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		var lines []string
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line+" ", "path="+path+" ") && strings.Contains(line+" ", fmt.Sprintf("epoch=%d ", epoch)) {
				lines = append(lines, line)
			}
		}
		if len(lines) > 0 {
			fmt.Fprintf(&b, "--- %s\n%s\n", filepath.Base(l), strings.Join(lines, "\n"))
		}
	}
	return b.String()
}

func (ch *chaos) logs() string {
	var b strings.Builder
	for _, p := range ch.procs {
		if p != nil {
			fmt.Fprintf(&b, "--- %s\n%s\n", p.Name, tail(p.Log()))
		}
	}
	return b.String()
}

// table waits (up to a minute) until q answers every epoch of every path,
// checks each against the truth, logs a table of epochs expected,
// answered and exact, and returns the results.
func (ch *chaos) table(q owlv1.QueryServiceClient, names []string, truths []sim.EpochTruth, when string) map[string]map[int64]*owlv1.PathStats {
	t := ch.t
	t.Helper()
	all := map[string]map[int64]*owlv1.PathStats{}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "path\texpected\tanswered\texact\tcrossers unmatched\tunrepaired\t\n")
	deadline := time.Now().Add(time.Minute)
	for _, n := range names {
		by := waitAnswered(q, n, truths, deadline)
		all[n] = by
		answered, exact, unmatched, unrepaired := 0, 0, 0, 0
		for _, tr := range truths {
			s := by[tr.Epoch]
			if s == nil || s.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK {
				t.Errorf("%s epoch %d %s: %v", n, tr.Epoch, when, s)
				t.Logf("what the collectors and probes logged of %s epoch %d:\n%s", n, tr.Epoch, ch.epochLog(n, tr.Epoch))
				continue
			}
			answered++
			switch ok, crossers := exactFor(s, tr, tr.Epoch == truths[len(truths)-1].Epoch); {
			case ok && crossers:
				unmatched++
				exact++
			case ok:
				exact++
			case unrepairedFor(s, tr):
				unrepaired++
				t.Logf("%s epoch %d %s: unrepaired: %s", n, tr.Epoch, when, s.GetDetail())
			default:
				t.Errorf("%s epoch %d %s: mean %.3f ns lost %.0f matched %d (estimator %s, %d unusable buckets, %d rebuilds, %q, stddev %.0f ns over %d); truth %.3f ns (%.3f within the epoch) lost %d crossed %d",
					n, tr.Epoch, when, s.GetMeanNs(), s.GetLost(), s.GetBoundaryMatched(), s.GetEstimator(), s.GetUnusableBuckets(), s.GetRebuilds(), s.GetDetail(), s.GetStddevNs(), s.GetSamples(),
					tr.AllMeanNS, tr.MeanNS, tr.Lost, tr.Crossed)
				t.Logf("what the collectors and probes logged of %s epoch %d:\n%s", n, tr.Epoch, ch.epochLog(n, tr.Epoch))
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", n, len(truths), answered, exact, unmatched, unrepaired)
		if unmatched > len(truths)/10 {
			t.Errorf("%s: %d epochs with their crossers unmatched %s", n, unmatched, when)
		}
		if unrepaired > len(truths)/10 {
			t.Errorf("%s: %d epochs unrepaired %s", n, unrepaired, when)
		}
	}
	tw.Flush()
	t.Logf("%s:\n%s", when, b.String())
	return all
}

// waitAnswered polls q until every epoch of the truth has an OK result of
// path, or the deadline passes; it returns the results by epoch.
func waitAnswered(q owlv1.QueryServiceClient, path string, truths []sim.EpochTruth, deadline time.Time) map[int64]*owlv1.PathStats {
	for {
		r, err := q.GetPathStats(context.Background(), &owlv1.GetPathStatsRequest{Path: path, Limit: 10_000})
		by := map[int64]*owlv1.PathStats{}
		complete := err == nil && r.GetNote() == ""
		for _, s := range r.GetStats() {
			by[s.GetEpoch()] = s
		}
		for _, tr := range truths {
			if s := by[tr.Epoch]; s == nil || s.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK {
				complete = false
			}
		}
		if complete || time.Now().After(deadline) {
			return by
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// unrepairedFor says whether a result is an unrepaired RDA estimate that
// says so and holds: the collector could not reach a probe for the lost
// packets' timestamps within its timeouts (it was being killed and
// restarted), left their buckets out, and the mean of the packets in the
// other buckets is within 4 of its standard errors of the truth, with
// the loss exact. Its crossers may have gone unmatched, as exactFor
// allows: then they count lost and the truth is the mean within the
// epoch. Such an epoch is an estimate, not exact: the chaos test bounds
// how many there are.
func unrepairedFor(s *owlv1.PathStats, tr sim.EpochTruth) bool {
	if s.GetEstimator() != "rda-unrepaired" || s.GetDetail() == "" || s.GetSamples() == 0 {
		return false
	}
	want := tr.AllMeanNS
	switch {
	case s.GetLost() == float64(tr.Lost):
	case tr.Crossed > 0 && s.GetBoundaryMatched() == 0 && s.GetLost() == float64(tr.Lost+tr.Crossed):
		want = tr.MeanNS
	default:
		return false
	}
	return math.Abs(s.GetMeanNs()-want) <= 4*s.GetStddevNs()/math.Sqrt(float64(s.GetSamples()))
}

// exactFor says whether a result is exact against its truth: the mean of
// every delivered packet (to 1e-9 when every bucket was used, else 1%)
// and the loss (but in the last epoch, whose crossers have no next). An
// epoch whose crossers went on to an epoch another member reconciled
// counts them lost and measures without them: exact too, crossers says
// so.
func exactFor(s *owlv1.PathStats, tr sim.EpochTruth, last bool) (ok, crossers bool) {
	within := func(got, want float64) bool {
		rel := math.Abs(got-want) / want
		return rel <= 1e-9 || s.GetUnusableBuckets() > 0 && rel <= 0.01
	}
	if tr.Crossed > 0 && s.GetBoundaryMatched() == 0 && s.GetLost() == float64(tr.Lost+tr.Crossed) {
		return within(s.GetMeanNs(), tr.MeanNS), true
	}
	return within(s.GetMeanNs(), tr.AllMeanNS) && (last || s.GetLost() == float64(tr.Lost)), false
}
