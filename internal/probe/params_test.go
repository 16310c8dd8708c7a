package probe

import (
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/cli"
	"github.com/owl-latency/owl/internal/collector"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/lda"
)

// otherParams are a deployment's parameters other than the defaults: 2 s
// epochs and LDAs of 512 rows.
func otherParams() params.Params {
	p := params.Default()
	p.Epoch.Length = 2 * time.Second
	p.LDA.Rows = 512
	return p
}

// withParams sets a collector's parameters.
func withParams(p params.Params) func(*collector.Config) {
	return func(c *collector.Config) { c.Params = p }
}

// synthCaptures writes the two captures of a path with 1 ms of delay and
// 2% loss: synthetic traffic over three 2 s epochs from start (a multiple
// of 2 s).
func synthCaptures(t *testing.T, start time.Time) sim.Outputs {
	t.Helper()
	out := sim.OutputsFor(filepath.Join(t.TempDir(), "trace"))
	traffic := sim.SynthConfig{Flows: 40, ParetoShape: 1.2, MaxPackets: 300, Start: start, Span: 5900 * time.Millisecond, Seed: 5}
	if _, err := sim.GenerateSynthetic(traffic, sim.Shape{}, out, capture.DefaultIdentityConfig(),
		sim.Impairment{Delay: sim.Constant{Delay: time.Millisecond}, Loss: 0.02, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	return out
}

// fileProbe is the configuration of probe id reading file, reporting to
// collector in plaintext, with the default (not explicit) parameters.
func fileProbe(id, collector, file string) Config {
	cfg := DefaultConfig()
	cfg.ID, cfg.Collector, cfg.Insecure = id, collector, true
	cfg.Sources = []SourceConfig{{File: file}}
	cfg.ReconnectMax, cfg.DrainTimeout, cfg.ReleaseTimeout = 200*time.Millisecond, time.Second, 5*time.Second
	return cfg
}

// runProbe runs a probe until it returns or the test ends; its error
// comes on the channel.
func runProbe(t *testing.T, p *Probe) (<-chan error, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done, stopped := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(stopped)
		done <- p.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	return done, cancel
}

// waitRun waits up to d for a probe's Run to return.
func waitRun(t *testing.T, done <-chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("the probe still runs after %v", d)
		return nil
	}
}

// TestProbeTakesCollectorParams: two probes given no parameters, of a
// collector with 2 s epochs and 512-row LDAs, say none in their Hello,
// capture with the collector's, and every epoch of their path pairs and
// comes out on the 2 s grid.
func TestProbeTakesCollectorParams(t *testing.T) {
	want := otherParams()
	addr := startCollector(t, []netpath.Path{{Name: "a-b", Upstream: "a", Downstream: "b"}}, withParams(want))
	start := time.Now().Truncate(2 * time.Second).Add(-20 * time.Second)
	out := synthCaptures(t, start)
	var probes []*Probe
	var dones []<-chan error
	for _, side := range []struct{ id, file string }{{"a", out.Up}, {"b", out.Down}} {
		p, err := New(fileProbe(side.id, addr, side.file), quiet)
		if err != nil {
			t.Fatal(err)
		}
		if h := p.hello(); h.GetParams() != nil {
			t.Errorf("probe %s given no parameters says some in its Hello: %v", side.id, h.GetParams())
		}
		done, _ := runProbe(t, p)
		probes, dones = append(probes, p), append(dones, done)
	}
	for i, done := range dones {
		if err := waitRun(t, done, 30*time.Second); err != nil {
			t.Fatalf("probe %s: %v", probes[i].cfg.ID, err)
		}
	}
	for _, p := range probes {
		if p.inUse == nil || p.inUse.Compatible(want) != nil || p.pipes[0].window.Config().Length != want.Epoch.Length {
			t.Errorf("probe %s captured with %+v, not the collector's parameters", p.cfg.ID, p.inUse)
		}
	}
	got := waitResults(t, queryClient(t, addr), "a-b", 3)
	first, _ := want.Epoch.Of(start.UnixNano())
	for _, r := range got {
		if e := r.GetEpoch(); e < first || e >= first+3 {
			t.Errorf("epoch %d outside the 2 s epochs %d..%d of the traffic", e, first, first+2)
		}
		if r.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK || r.GetUpstreamCounters().GetPackets() == 0 {
			t.Errorf("epoch %d: status %v, %d packets upstream (%s)", r.GetEpoch(), r.GetStatus(), r.GetUpstreamCounters().GetPackets(), r.GetDetail())
		}
		if d := time.Duration(r.GetMeanNs()); d < 999*time.Microsecond || d > 1001*time.Microsecond {
			t.Errorf("epoch %d: mean delay %v, want 1ms", r.GetEpoch(), d)
		}
	}
}

// TestExplicitParamsRefused: a probe given parameters of its own that
// differ from the collector's says them in its Hello and is refused,
// the difference named.
func TestExplicitParamsRefused(t *testing.T) {
	addr := startCollector(t, []netpath.Path{{Name: "a-b", Upstream: "a", Downstream: "b"}}, withParams(otherParams()))
	out := synthCaptures(t, time.Now().Truncate(2*time.Second).Add(-20*time.Second))
	cfg := fileProbe("a", addr, out.Up)
	cfg.ExplicitParams = true // the defaults, pinned
	p, err := New(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if p.hello().GetParams().GetLda().GetRows() != uint32(params.Default().LDA.Rows) {
		t.Errorf("the Hello of a probe given parameters does not carry them: %v", p.hello().GetParams())
	}
	done, _ := runProbe(t, p)
	err = waitRun(t, done, 20*time.Second)
	var rej *RejectedError
	if !errors.As(err, &rej) || !strings.Contains(rej.Reason, "lda rows") {
		t.Fatalf("a probe with other parameters than the collector's: %v, want a rejection naming the LDA rows", err)
	}
}

// TestRestartUsesKeptParams: a probe that took the collector's parameters
// and is restarted while the collector is away captures at once with them
// (kept in its data directory); without them it would wait.
func TestRestartUsesKeptParams(t *testing.T) {
	want := otherParams()
	addr := startCollector(t, []netpath.Path{{Name: "a-b", Upstream: "a", Downstream: "b"}}, withParams(want))
	out := synthCaptures(t, time.Now().Truncate(2*time.Second).Add(-20*time.Second))
	cfg := fileProbe("a", addr, out.Up)
	cfg.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.ExactLists = false // the reports' LDAs show which parameters made them
	cfg.RTT.Enabled, cfg.Reorder.Enabled = false, false
	p, err := New(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := runProbe(t, p)
	select {
	case <-p.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("no path configuration from the collector")
	}
	cancel()
	if err := waitRun(t, done, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	// Restarted, with the collector away (nothing listens there).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Collector = ln.Addr().String()
	ln.Close()
	cfg.ExitWhenDone, cfg.DrainTimeout = false, 0
	p2, err := New(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p2.ready:
	default:
		t.Fatal("a restarted probe waits for the collector's parameters instead of taking the kept ones")
	}
	if p2.inUse == nil || p2.inUse.Compatible(want) != nil {
		t.Fatalf("restarted with %+v, not the kept parameters", p2.inUse)
	}
	for p2.spool.len() > 0 { // forget what the first run left: see what this one makes
		p2.spool.ack(seqOf(p2.spool.after(0)[0]))
	}
	runProbe(t, p2)
	deadline := time.Now().Add(10 * time.Second)
	for p2.spool.len() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted probe spooled %d reports with the collector away, want 3", p2.spool.len())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, m := range p2.spool.after(0)[:3] {
		l, err := lda.Decode(m.GetReport().GetLda())
		if err != nil {
			t.Errorf("epoch %d: %v", m.GetReport().GetEpoch(), err)
		} else if l.Config().Rows != want.LDA.Rows {
			t.Errorf("epoch %d: LDA %v, want %d rows", m.GetReport().GetEpoch(), l.Config(), want.LDA.Rows)
		}
	}
}

// TestParamsChangedEndsProbe: a probe that took the collector's
// parameters stops, with ErrParamsChanged naming the difference, when a
// path configuration brings others; it keeps the new ones for its restart.
func TestParamsChangedEndsProbe(t *testing.T) {
	f := startFake(t)
	pc := func(p params.Params) *owlv1.PathConfig {
		return &owlv1.PathConfig{Params: p.ToProto(), Paths: []*owlv1.PathAssignment{{Role: owlv1.Role_ROLE_UPSTREAM,
			Path: &owlv1.Path{Name: "a-b", Upstream: "a", Downstream: "b"}}}}
	}
	f.setConfig(pc(otherParams()), false)
	out := synthCaptures(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := fileProbe("a", f.addr, out.Up)
	cfg.DataDir, cfg.ExitWhenDone = filepath.Join(t.TempDir(), "data"), false
	p, err := New(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	done, _ := runProbe(t, p)
	deadline := time.Now().Add(10 * time.Second)
	for len(f.epochs("a-b")) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the fake collector stored epochs %v, want 3", f.epochs("a-b"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	changed := otherParams()
	changed.LDS.Cols = 2048
	f.setConfig(pc(changed), true)
	err = waitRun(t, done, 10*time.Second)
	if !errors.Is(err, ErrParamsChanged) || !strings.Contains(err.Error(), "lds") {
		t.Fatalf("the collector's parameters changed: %v, want ErrParamsChanged naming the LDS", err)
	}
	d, err := openDisk(cfg.DataDir, "a", quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if got := d.paths().GetParams().GetLds().GetCols(); got != 2048 {
		t.Errorf("kept parameters have %d LDS columns, want the new 2048", got)
	}
}

// TestExplicitParams: shared parameters given as flags or under params in
// the file pin the probe's parameters; local settings and other keys do
// not.
func TestExplicitParams(t *testing.T) {
	bind := func(fs *flag.FlagSet, c *Config) {
		fs.StringVar(&c.ID, "id", c.ID, "")
		c.Params.BindFlags(fs)
	}
	for _, tc := range []struct {
		name string
		args []string
		yaml string // written to a file given with -config, when set
		want bool
	}{
		{"nothing", nil, "", false},
		{"other flag", []string{"-id", "x"}, "", false},
		{"shared flag", []string{"-lda-rows", "512"}, "", true},
		{"shared bool flag", []string{"-nat-safe"}, "", true},
		{"local flags", []string{"-grace", "1s", "-rda-buckets", "2048", "-flow-tag", "-vxlan-port", "8472"}, "", false},
		{"file without params", nil, "id: x\n", false},
		{"file with empty params", nil, "params:\n", false},
		{"file with shared params", nil, "params:\n  lda:\n    rows: 512\n", true},
		{"file with flow weights", nil, "params:\n  flow_weights: []\n", true},
		{"file with local settings", nil, "params:\n  epoch:\n    grace: 1s\n  identity:\n    flow_tag: true\n", false},
		{"file with local and shared", nil, "params:\n  epoch:\n    grace: 1s\n    length: 2s\n", true},
		{"file and shared flag", []string{"-epoch", "2s"}, "id: x\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.yaml != "" {
				path := filepath.Join(t.TempDir(), "probe.yaml")
				if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
					t.Fatal(err)
				}
				args = append([]string{"-config", path}, args...)
			}
			cfg, _, err := cli.Parse("probe", args, DefaultConfig, bind, LoadFile)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.ExplicitParams != tc.want {
				t.Errorf("explicit %v, want %v", cfg.ExplicitParams, tc.want)
			}
		})
	}
}
