package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// clockEvery is how often a connected probe tells the collector its clock
// status.
const clockEvery = 2 * time.Second

// RejectedError says the collector refused the probe.
type RejectedError struct{ Reason string }

func (e *RejectedError) Error() string { return "collector rejected the probe: " + e.Reason }

// client keeps one Connect stream to the collector open, reconnecting with
// backoff, and sends every spooled report that the collector has not
// acknowledged, again after each reconnect.
type client struct {
	conn         *grpc.ClientConn
	log          *slog.Logger
	spool        *spool
	hello        func() *owlv1.Hello
	clock        func() *owlv1.ClockStatus // the clock now, sent every clockEvery
	onPaths      func(*owlv1.PathConfig) error
	onSize       func(*owlv1.RDASize) error
	fetch        func(*owlv1.FetchRequest) *owlv1.FetchReply
	rebuild      func(*owlv1.RebuildRequest) *owlv1.RebuildReply
	release      func(path string, epoch int64)
	reconnectMax time.Duration
	// addr is the collector's address; keep, when set, picks the spooled
	// messages this client sends (in a cluster, those routed to addr).
	addr string
	keep func(*owlv1.ProbeMessage) bool
	// misrouted is told when the collector names another owner of a
	// report's path; restart ends the session so that a new one sends
	// every unacknowledged message routed here again.
	misrouted func(path, owner string)
	restart   chan struct{}

	connected atomic.Bool
	sessions  atomic.Uint64
}

// run keeps sessions going until ctx ends or the collector rejects the probe.
func (c *client) run(ctx context.Context) error {
	const minBackoff = 100 * time.Millisecond
	backoff := minBackoff
	for {
		start := time.Now()
		err := c.session(ctx)
		c.connected.Store(false)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errRestart) {
			continue
		}
		var rej *RejectedError
		if errors.As(err, &rej) {
			return err
		}
		if time.Since(start) > 10*time.Second {
			backoff = minBackoff
		}
		c.log.Warn("collector stream ended; reconnecting", "err", err, "in", backoff, "unacked", c.spool.len())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, c.reconnectMax)
	}
}

// errRestart ends a session whose messages were routed anew.
var errRestart = errors.New("routes changed")

// session runs one Connect stream.
func (c *client) session(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	stream, err := owlv1.NewProbeServiceClient(c.conn).Connect(ctx)
	if err != nil {
		return fmt.Errorf("opening stream: %w", err)
	}
	// Reports go out from this goroutine, answers to requests from
	// handler goroutines: Send is serialised.
	var sendMu sync.Mutex
	send := func(m *owlv1.ProbeMessage) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}
	if err := stream.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Hello{Hello: c.hello()}}); err != nil {
		return fmt.Errorf("sending hello: %w", err)
	}
	first, err := stream.Recv()
	if err != nil {
		return fmt.Errorf("waiting for path configuration: %w", err)
	}
	switch m := first.Msg.(type) {
	case *owlv1.CollectorMessage_Reject:
		return &RejectedError{Reason: m.Reject.GetReason()}
	case *owlv1.CollectorMessage_Paths:
		if err := c.onPaths(m.Paths); err != nil {
			return &RejectedError{Reason: "unusable path configuration: " + err.Error()}
		}
	default:
		return fmt.Errorf("collector sent %T before the path configuration", first.Msg)
	}
	c.connected.Store(true)
	c.sessions.Add(1)
	c.log.Info("connected to collector", "collector", c.addr, "paths", len(first.GetPaths().GetPaths()), "unacked", c.spool.len())

	errc := make(chan error, 1)
	wg.Go(func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				errc <- fmt.Errorf("receiving: %w", err)
				return
			}
			switch m := m.Msg.(type) {
			case *owlv1.CollectorMessage_Ack:
				c.spool.ack(m.Ack.GetSeq())
			case *owlv1.CollectorMessage_Paths:
				if err := c.onPaths(m.Paths); err != nil {
					c.log.Error("ignoring unusable path configuration", "err", err)
				}
			case *owlv1.CollectorMessage_Reject:
				if m.Reject.GetPath() == "" {
					errc <- &RejectedError{Reason: m.Reject.GetReason()}
					return
				}
				if o := m.Reject.GetOwner(); o != "" && c.misrouted != nil {
					c.log.Info("collector names another owner; sending there", "path", m.Reject.GetPath(), "owner", o)
					c.misrouted(m.Reject.GetPath(), o)
					continue
				}
				c.log.Error("collector rejected a report", "path", m.Reject.GetPath(), "reason", m.Reject.GetReason())
			case *owlv1.CollectorMessage_RdaSize:
				if err := c.onSize(m.RdaSize); err != nil {
					c.log.Error("ignoring RDA size", "path", m.RdaSize.GetPath(), "err", err)
				}
			case *owlv1.CollectorMessage_Release:
				for _, e := range m.Release.GetEpochs() {
					c.release(e.GetPath(), e.GetEpoch())
				}
			case *owlv1.CollectorMessage_Fetch:
				// Sorting a cache or rebuilding an RDA takes a while:
				// answer on a goroutine so acknowledgements keep flowing.
				wg.Go(func() {
					_ = send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_FetchReply{FetchReply: c.fetch(m.Fetch)}})
				})
			case *owlv1.CollectorMessage_Rebuild:
				wg.Go(func() {
					_ = send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_RebuildReply{RebuildReply: c.rebuild(m.Rebuild)}})
				})
			}
		}
	})

	var sent uint64 // highest seq sent on this stream
	clockTick := time.NewTicker(clockEvery)
	defer clockTick.Stop()
	for {
		changed := c.spool.wait()
		for _, m := range c.spool.after(sent) {
			if c.keep == nil || c.keep(m) {
				if err := send(m); err != nil {
					return fmt.Errorf("sending report %d: %w", seqOf(m), err)
				}
			}
			sent = seqOf(m)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			return err
		case <-c.restart:
			return errRestart
		case <-changed:
		case <-clockTick.C:
			if err := send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Clock{Clock: c.clock()}}); err != nil {
				return fmt.Errorf("sending clock status: %w", err)
			}
		}
	}
}
