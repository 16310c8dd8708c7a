package collector

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// gatedStream is a probe's stream whose sends wait until the gate opens,
// as they wait when the connection's writer does not run or the probe
// does not read; it keeps what was sent.
type gatedStream struct {
	grpc.ServerStream
	gate chan struct{}
	mu   sync.Mutex
	sent []*owlv1.CollectorMessage
}

func (g *gatedStream) Send(m *owlv1.CollectorMessage) error {
	<-g.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sent = append(g.sent, m)
	return nil
}

func (g *gatedStream) Recv() (*owlv1.ProbeMessage, error) { return nil, errors.New("not used") }
func (g *gatedStream) Context() context.Context           { return context.Background() }

// TestOutboxOutlastsStalledWriter: while the stream's writer is held
// back, a probe on 1,000 paths gets three epochs' acknowledgements and
// releases (6,000 messages, more than the 4,096 that once cut probes off)
// queued; once it runs, every acknowledgement goes out in order and the
// releases in one or two messages.
func TestOutboxOutlastsStalledWriter(t *testing.T) {
	const paths, epochs = 1000, 3
	st := &gatedStream{gate: make(chan struct{})}
	s := newSession("a", st, paths)
	received := make(chan error, 1)
	pumped := make(chan error, 1)
	go func() { pumped <- s.serve(received) }()
	for e := range int64(epochs) {
		for p := range paths {
			path := fmt.Sprintf("p%d", p)
			seq := uint64(e)*paths + uint64(p)
			if err := s.send(&owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Ack{Ack: &owlv1.Ack{Seq: seq, Path: path, Epoch: e}}}); err != nil {
				t.Fatalf("ack %d: %v", seq, err)
			}
			if err := s.release(path, e); err != nil {
				t.Fatalf("release of %s epoch %d: %v", path, e, err)
			}
		}
	}
	close(st.gate)
	deadline := time.Now().Add(10 * time.Second)
	var acks []uint64
	released := map[string]bool{}
	releases := 0
	for len(acks) < paths*epochs || len(released) < paths*epochs {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %d acknowledgements and %d releases sent, want %d of each", len(acks), len(released), paths*epochs)
		}
		time.Sleep(10 * time.Millisecond)
		st.mu.Lock()
		acks, releases = acks[:0], 0
		clear(released)
		for _, m := range st.sent {
			if a := m.GetAck(); a != nil {
				acks = append(acks, a.GetSeq())
			}
			if r := m.GetRelease(); r != nil {
				releases++
				for _, ref := range r.GetEpochs() {
					k := fmt.Sprintf("%s/%d", ref.GetPath(), ref.GetEpoch())
					if released[k] {
						t.Errorf("%s released twice", k)
					}
					released[k] = true
				}
			}
		}
		st.mu.Unlock()
	}
	for i, seq := range acks {
		if seq != uint64(i) {
			t.Fatalf("acknowledgement %d is of report %d: out of order", i, seq)
		}
	}
	if releases > 2 {
		t.Errorf("the releases went out in %d messages, want at most 2 (one that came before the writer stalled, the rest together)", releases)
	}
	received <- nil
	if err := <-pumped; err != nil {
		t.Errorf("pump: %v", err)
	}
}

// TestOutboxCutsProbeThatDoesNotRead: a probe that never reads is cut off
// once its outbox holds its bound, and its stream ends with
// ResourceExhausted at once, while the send it blocks still waits.
func TestOutboxCutsProbeThatDoesNotRead(t *testing.T) {
	st := &gatedStream{gate: make(chan struct{})}
	defer close(st.gate) // the blocked send returns, as one does once the stream ends
	s := newSession("a", st, 10)
	served := make(chan error, 1)
	go func() { served <- s.serve(make(chan error)) }()
	n := 0
	var err error
	for ; n < 10*s.bound; n++ {
		if err = s.send(&owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Ack{Ack: &owlv1.Ack{Seq: uint64(n)}}}); err != nil {
			break
		}
	}
	if !errors.Is(err, errSlowProbe) {
		t.Fatalf("after %d messages: %v, want %v", n, err, errSlowProbe)
	}
	// Besides the bound, the pump holds what it took before the stream
	// blocked: at most the bound again.
	if n < s.bound || n > 2*s.bound {
		t.Errorf("cut off after %d messages, want %d (the bound) to twice as many", n, s.bound)
	}
	if err := s.release("p", 1); !errors.Is(err, errSlowProbe) {
		t.Errorf("a release after the cut: %v, want %v", err, errSlowProbe)
	}
	select {
	case err := <-served:
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("the stream ended with %v, want ResourceExhausted", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream still open 10 s after the cut, its send blocked")
	}
}

// TestStreamEndsWhenProbeStopsReading: over a real socket, a probe that
// keeps sending reports and never reads what comes back fills its
// outbox; its stream then ends at once, while the collector's send still
// waits on the probe's flow-control window, and the probe learns why
// once it reads.
func TestStreamEndsWhenProbeStopsReading(t *testing.T) {
	cfg := testConfig(t)
	cfg.Limits.ReportsPerSecond = 0
	c := newTest(t, cfg)
	defer c.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	owlv1.RegisterProbeServiceServer(srv, probeService{c: c})
	go srv.Serve(l)
	defer srv.Stop()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := probeStreamCtx(t, ctx, conn, "a", cfg.Params)
	// A report of a path the collector does not have is rejected: two
	// messages back (the rejection and its acknowledgement) for a few
	// bytes sent. The probe's own sends block in the end too (the
	// collector stops reading an ended stream), so they run apart.
	var sent atomic.Int64
	sending := make(chan struct{})
	go func() {
		defer close(sending)
		for {
			r := &owlv1.EpochReport{Path: "nowhere", Epoch: 1, Seq: uint64(sent.Load())}
			if st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: r}}) != nil {
				return // the stream ended
			}
			sent.Add(1)
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for len(c.probes.allSessions()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the stream still open 30 s on, after %d reports unanswered by reads", sent.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Reading now, the probe gets what was sent and then the reason.
	stop := time.AfterFunc(30*time.Second, cancel)
	defer stop.Stop()
	for {
		if _, err := st.Recv(); err != nil {
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), errSlowProbe.Error()) {
				t.Errorf("the stream ended with %v, want ResourceExhausted saying %q", err, errSlowProbe)
			}
			break
		}
	}
	<-sending
	t.Logf("%d reports sent before the stream ended", sent.Load())
}
