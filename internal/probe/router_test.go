package probe

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// fakeCollector is a ProbeService that answers Hello with its current path
// configuration, acknowledges the reports of the paths it owns, refuses
// the others naming their owner, and records what it stored.
type fakeCollector struct {
	owlv1.UnimplementedProbeServiceServer
	addr string

	mu      sync.Mutex
	config  *owlv1.PathConfig
	streams []owlv1.ProbeService_ConnectServer
	stored  map[string][]int64 // path → epochs acknowledged
	refused int
	dups    int // sent again (after a session restart), acknowledged, not stored again
	// strict ends a stream on a message of a kind the configuration does
	// not list in accepts, as a collector older than that kind does;
	// others counts those it took (acknowledged, not stored).
	strict bool
	others int
}

func startFake(t *testing.T) *fakeCollector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeCollector{addr: ln.Addr().String(), stored: map[string][]int64{}}
	gs := grpc.NewServer()
	owlv1.RegisterProbeServiceServer(gs, f)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return f
}

func (f *fakeCollector) Connect(stream owlv1.ProbeService_ConnectServer) error {
	if _, err := stream.Recv(); err != nil { // Hello
		return err
	}
	f.mu.Lock()
	f.streams = append(f.streams, stream)
	pc := f.config
	err := stream.Send(&owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Paths{Paths: pc}})
	f.mu.Unlock()
	if err != nil {
		return err
	}
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		r := m.GetReport()
		if r == nil {
			if err := f.other(stream, m); err != nil {
				return err
			}
			continue
		}
		f.mu.Lock()
		owner := ""
		for _, a := range f.config.GetPaths() {
			if a.GetPath().GetName() == r.GetPath() {
				owner = a.GetCollector()
			}
		}
		var reply *owlv1.CollectorMessage
		if owner != "" && owner != f.addr {
			f.refused++
			reply = &owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Reject{Reject: &owlv1.Reject{Kind: owlv1.Reject_KIND_REPORT, Path: r.GetPath(), Reason: "not mine", Owner: owner}}}
		} else {
			if slices.Contains(f.stored[r.GetPath()], r.GetEpoch()) {
				f.dups++
			} else {
				f.stored[r.GetPath()] = append(f.stored[r.GetPath()], r.GetEpoch())
			}
			reply = &owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Ack{Ack: &owlv1.Ack{Seq: r.GetSeq(), Path: r.GetPath(), Epoch: r.GetEpoch()}}}
		}
		err = stream.Send(reply)
		f.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// other takes a message other than a report: RTT and reordering reports
// are acknowledged when the configuration accepts them; when strict, one
// of a kind not accepted ends the stream.
func (f *fakeCollector) other(stream owlv1.ProbeService_ConnectServer, m *owlv1.ProbeMessage) error {
	if kindOf(m) == owlv1.Reject_KIND_UNSPECIFIED {
		return nil // clock status
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Contains(f.config.GetAccepts(), kindOf(m)) {
		if f.strict {
			return status.Errorf(codes.InvalidArgument, "unexpected %T after Hello", m.GetMsg())
		}
		return nil
	}
	f.others++
	return stream.Send(&owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Ack{Ack: &owlv1.Ack{Seq: seqOf(m)}}})
}

// setConfig changes the owners and pushes them to the open streams.
func (f *fakeCollector) setConfig(pc *owlv1.PathConfig, push bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.config = pc
	if push {
		for _, s := range f.streams {
			_ = s.Send(&owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Paths{Paths: pc}})
		}
	}
}

func (f *fakeCollector) epochs(path string) []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.stored[path]...)
}

func owners(p1, p2 string) *owlv1.PathConfig {
	return &owlv1.PathConfig{Paths: []*owlv1.PathAssignment{
		{Path: &owlv1.Path{Name: "p1"}, Role: owlv1.Role_ROLE_UPSTREAM, Collector: p1},
		{Path: &owlv1.Path{Name: "p2"}, Role: owlv1.Role_ROLE_UPSTREAM, Collector: p2},
	}}
}

// TestRouterSendsToOwners: with the probe configured with collector A, the
// reports of the path B owns go to B; when the owners change (pushed by A)
// the next reports follow; a report refused by a non-owner reaches the
// owner it names; nothing is lost.
func TestRouterSendsToOwners(t *testing.T) {
	a, b := startFake(t), startFake(t)
	both := owners(a.addr, b.addr)
	a.setConfig(both, false)
	b.setConfig(both, false)

	sp := newSpool(100, 1<<30)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var r *router
	r = newRouter(a.addr, nil, log, func() *client {
		return &client{log: log, spool: sp, reconnectMax: 100 * time.Millisecond, h: routingOnly{r}}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: A has p1 %v p2 %v, B has p1 %v p2 %v; %d in the spool", what, a.epochs("p1"), a.epochs("p2"), b.epochs("p1"), b.epochs("p2"), sp.len())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for e := int64(1); e <= 3; e++ {
		sp.add(&owlv1.EpochReport{Path: "p1", Epoch: e})
		sp.add(&owlv1.EpochReport{Path: "p2", Epoch: e})
	}
	waitFor("first epochs", func() bool { return sp.len() == 0 })
	if len(a.epochs("p1")) != 3 || len(b.epochs("p2")) != 3 || len(a.epochs("p2")) != 0 || len(b.epochs("p1")) != 0 {
		t.Fatalf("A has p1 %v p2 %v, B has p1 %v p2 %v", a.epochs("p1"), a.epochs("p2"), b.epochs("p1"), b.epochs("p2"))
	}
	if !r.connected() {
		t.Error("router not connected to both")
	}

	// B takes p1 too; A says so on its open stream.
	bOnly := owners(b.addr, b.addr)
	b.setConfig(bOnly, false)
	a.setConfig(bOnly, true)
	waitFor("owners pushed", func() bool {
		return r.dest(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: &owlv1.EpochReport{Path: "p1"}}}) == b.addr
	})
	sp.add(&owlv1.EpochReport{Path: "p1", Epoch: 4})
	waitFor("epoch 4 to B", func() bool { return sp.len() == 0 })
	if got := b.epochs("p1"); len(got) != 1 || got[0] != 4 {
		t.Errorf("B has p1 %v, want [4]", got)
	}

	// A takes p1 back, but the probe hears it from nobody: B refuses
	// the next report, naming A, and the probe sends it there.
	aFirst := owners(a.addr, b.addr)
	a.setConfig(aFirst, false)
	b.setConfig(aFirst, false)
	sp.add(&owlv1.EpochReport{Path: "p1", Epoch: 5})
	waitFor("epoch 5 to A", func() bool { return sp.len() == 0 })
	if got := a.epochs("p1"); len(got) != 4 || got[3] != 5 {
		t.Errorf("A has p1 %v, want [1 2 3 5]", got)
	}
	b.mu.Lock()
	refused := b.refused
	b.mu.Unlock()
	if refused != 1 {
		t.Errorf("B refused %d reports, want 1", refused)
	}
}

// TestInsecureWarns: a probe that connects in plaintext (-insecure) says
// so at start, at level WARN; one with credentials does not.
func TestInsecureWarns(t *testing.T) {
	for _, tc := range []struct {
		name  string
		creds credsFor
		want  bool
	}{
		{"insecure", nil, true},
		{"tls", func(string) credentials.TransportCredentials { return insecure.NewCredentials() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logged bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logged, nil))
			var r *router
			r = newRouter(startFake(t).addr, tc.creds, log, func() *client {
				return &client{log: quiet, spool: newSpool(100, 1<<30), reconnectMax: 100 * time.Millisecond, h: routingOnly{r}}
			})
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := r.run(ctx); err != nil {
				t.Fatal(err)
			}
			got := strings.Contains(logged.String(), "level=WARN msg=\"INSECURE: "+insecureWarning)
			if got != tc.want {
				t.Errorf("warned %v, want %v; logged:\n%s", got, tc.want, logged.String())
			}
		})
	}
}

// routingOnly is a probe that takes path configurations (for its router)
// and nothing else.
type routingOnly struct{ r *router }

func (routingOnly) hello() *owlv1.Hello                               { return &owlv1.Hello{ProbeId: "op"} }
func (routingOnly) clockStatus() *owlv1.ClockStatus                   { return &owlv1.ClockStatus{} }
func (h routingOnly) setPaths(pc *owlv1.PathConfig) error             { h.r.update(pc); return nil }
func (routingOnly) setRDASize(*owlv1.RDASize) error                   { return nil }
func (routingOnly) setSampleRate(*owlv1.SampleRate) error             { return nil }
func (routingOnly) setLDSSize(*owlv1.LDSSize) error                   { return nil }
func (routingOnly) setLDASize(*owlv1.LDASize) error                   { return nil }
func (routingOnly) fetch(*owlv1.FetchRequest) *owlv1.FetchReply       { return nil }
func (routingOnly) rebuild(*owlv1.RebuildRequest) *owlv1.RebuildReply { return nil }
func (routingOnly) release(string, int64)                             {}

// TestRouterStartsKnownOwners: owners known before the router runs (the
// path configuration a restarted probe kept) get their streams at once,
// even when the collector's configuration then says the same.
func TestRouterStartsKnownOwners(t *testing.T) {
	a, b := startFake(t), startFake(t)
	both := owners(a.addr, b.addr)
	a.setConfig(both, false)
	b.setConfig(both, false)
	sp := newSpool(100, 1<<30)
	var r *router
	r = newRouter(a.addr, nil, quiet, func() *client {
		return &client{log: quiet, spool: sp, reconnectMax: 100 * time.Millisecond, h: routingOnly{r}}
	})
	r.update(both) // before run, as a kept configuration is
	sp.add(&owlv1.EpochReport{Path: "p2", Epoch: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.Now().Add(10 * time.Second)
	for sp.len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the report of B's path never reached B (B has %v)", b.epochs("p2"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := b.epochs("p2"); len(got) != 1 {
		t.Errorf("B has p2 %v, want [1]", got)
	}
}

// TestOldCollectorGetsNoNewKinds: a collector whose path configuration
// does not list what it accepts (older than the field) ends a stream on
// an RTT report; the probe does not send it one, drops it, counted, and
// its epoch reports go on the one stream. A collector that accepts RTT
// reports gets them.
func TestOldCollectorGetsNoNewKinds(t *testing.T) {
	a := startFake(t)
	a.strict = true
	a.setConfig(owners(a.addr, a.addr), false)
	sp := newSpool(100, 1<<30)
	var r *router
	r = newRouter(a.addr, nil, quiet, func() *client {
		return &client{log: quiet, spool: sp, reconnectMax: 100 * time.Millisecond, h: routingOnly{r}}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	waitEmpty := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); sp.len() > 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d messages still spooled", what, sp.len())
			}
		}
	}
	sp.add(&owlv1.EpochReport{Path: "p1", Epoch: 1})
	sp.addRTT(&owlv1.RTTReport{Epoch: 1})
	sp.add(&owlv1.EpochReport{Path: "p1", Epoch: 2})
	waitEmpty("to the old collector")
	a.mu.Lock()
	streams := len(a.streams)
	a.mu.Unlock()
	if got := a.epochs("p1"); !slices.Equal(got, []int64{1, 2}) || streams != 1 || sp.notTakenTotal() != 1 {
		t.Errorf("old collector: stored %v on %d streams, %d dropped as not taken; want [1 2] on 1 stream, 1 dropped", got, streams, sp.notTakenTotal())
	}

	newer := owners(a.addr, a.addr)
	newer.Accepts = []owlv1.Reject_Kind{owlv1.Reject_KIND_REPORT, owlv1.Reject_KIND_COLATE, owlv1.Reject_KIND_RTT}
	a.setConfig(newer, true)
	time.Sleep(100 * time.Millisecond) // the pushed configuration arrives
	sp.addRTT(&owlv1.RTTReport{Epoch: 2})
	waitEmpty("to the newer collector")
	a.mu.Lock()
	others := a.others
	a.mu.Unlock()
	if others != 1 || sp.notTakenTotal() != 1 {
		t.Errorf("newer collector took %d RTT reports, %d dropped in all; want 1 taken, 1 dropped", others, sp.notTakenTotal())
	}
}
