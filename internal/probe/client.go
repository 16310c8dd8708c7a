package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
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

// fatal says whether err ends the probe: the collector rejected it, or
// changed the parameters it took from the collector. Reconnecting would
// not help.
func fatal(err error) bool {
	var rej *RejectedError
	return errors.As(err, &rej) || errors.Is(err, ErrParamsChanged)
}

// handler is the probe's side of a collector stream: what it says, and
// what it does with what the collector sends. hello and clockStatus are
// called on the sending goroutine; the others on the receiving goroutine,
// fetch and rebuild on goroutines of their own, so they may run at once.
type handler interface {
	hello() *owlv1.Hello
	clockStatus() *owlv1.ClockStatus
	setPaths(*owlv1.PathConfig) error
	setRDASize(*owlv1.RDASize) error
	setSampleRate(*owlv1.SampleRate) error
	setLDSSize(*owlv1.LDSSize) error
	setLDASize(*owlv1.LDASize) error
	fetch(*owlv1.FetchRequest) *owlv1.FetchReply
	rebuild(*owlv1.RebuildRequest) *owlv1.RebuildReply
	release(path string, epoch int64)
}

// routes picks, in a cluster of collectors, the messages a client sends,
// and takes a collector's word that another one owns a path (or the
// COLATE vectors).
type routes interface {
	keep(m *owlv1.ProbeMessage) bool
	misrouted(kind owlv1.Reject_Kind, path, owner string)
}

// client keeps one Connect stream to the collector open, reconnecting with
// backoff, and sends every spooled report that the collector has not
// acknowledged, again after each reconnect.
type client struct {
	conn         *grpc.ClientConn
	log          *slog.Logger
	spool        *spool
	h            handler
	reconnectMax time.Duration
	// addr is the collector's address; routes, when set, picks the
	// spooled messages this client sends (in a cluster, those routed to
	// addr). restart ends the session so that a new one sends every
	// unacknowledged message routed here again.
	addr    string
	routes  routes
	restart chan struct{}

	connected atomic.Bool
	sessions  atomic.Uint64
	pauses    atomic.Uint64 // times a collector paused a stream
	// accepts is the kinds of messages the collector takes, from its
	// latest path configuration.
	accepts     atomic.Pointer[map[owlv1.Reject_Kind]bool]
	warnedKinds sync.Map // kinds dropped by notTaken, warned of
	// takesDone: the collector takes SourcesDone (its latest path
	// configuration says); doneSent: it was sent on a stream.
	takesDone atomic.Bool
	doneSent  atomic.Bool
}

// legacyAccepts is what a collector that does not say takes.
var legacyAccepts = map[owlv1.Reject_Kind]bool{owlv1.Reject_KIND_REPORT: true, owlv1.Reject_KIND_COLATE: true}

// noteAccepts keeps what a path configuration says the collector takes.
func (c *client) noteAccepts(pc *owlv1.PathConfig) {
	acc := legacyAccepts
	if ks := pc.GetAccepts(); len(ks) > 0 {
		acc = map[owlv1.Reject_Kind]bool{}
		for _, k := range ks {
			acc[k] = true
		}
	}
	c.accepts.Store(&acc)
	c.takesDone.Store(pc.GetTakesSourcesDone())
}

// takes says whether the collector takes m (before its path configuration
// came: as a collector that does not say).
func (c *client) takes(m *owlv1.ProbeMessage) bool {
	acc := legacyAccepts
	if p := c.accepts.Load(); p != nil {
		acc = *p
	}
	return acc[kindOf(m)]
}

// kindOf is the kind of a spooled message.
func kindOf(m *owlv1.ProbeMessage) owlv1.Reject_Kind {
	switch m.Msg.(type) {
	case *owlv1.ProbeMessage_Report:
		return owlv1.Reject_KIND_REPORT
	case *owlv1.ProbeMessage_Colate:
		return owlv1.Reject_KIND_COLATE
	case *owlv1.ProbeMessage_Rtt:
		return owlv1.Reject_KIND_RTT
	case *owlv1.ProbeMessage_Reorder:
		return owlv1.Reject_KIND_REORDER
	}
	return owlv1.Reject_KIND_UNSPECIFIED
}

// run keeps sessions going until ctx ends or an error ends the probe (see
// fatal).
func (c *client) run(ctx context.Context) error {
	b := reconnectBackoff{max: c.reconnectMax}
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
		if fatal(err) {
			return err
		}
		wait := b.next(time.Since(start), rand.Float64())
		c.log.Warn("collector stream ended; reconnecting", "err", err, "in", wait, "unacked", c.spool.len())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

const (
	// minBackoff is the back-off of a first reconnect attempt.
	minBackoff = 100 * time.Millisecond
	// backoffResetAfter is how long a session lasts for the back-off to
	// start again from minBackoff: it was up, not failing.
	backoffResetAfter = 10 * time.Second
)

// reconnectBackoff is a client's back-off between sessions: it doubles
// after each session that ends within backoffResetAfter, up to max, and
// starts again from minBackoff after a longer one. Not safe for
// concurrent use.
type reconnectBackoff struct {
	cur, max time.Duration // cur 0: minBackoff
}

// next returns the wait before the next attempt, after a session that
// lasted lasted; rnd in [0, 1) jitters it.
func (b *reconnectBackoff) next(lasted time.Duration, rnd float64) time.Duration {
	if b.cur == 0 || lasted > backoffResetAfter {
		b.cur = minBackoff
	}
	wait := nextWait(b.cur, b.max, rnd)
	b.cur = min(2*b.cur, b.max)
	return wait
}

// nextWait is the wait for a back-off: jittered to 0.75–1.25 times it,
// so that probes cut off together do not come back together, and at
// most maxWait, jitter included.
func nextWait(backoff, maxWait time.Duration, rnd float64) time.Duration {
	return min(time.Duration(float64(backoff)*(0.75+0.5*rnd)), maxWait)
}

// errRestart ends a session whose messages were routed anew.
var errRestart = errors.New("routes changed")

// stream is one Connect stream. Reports go out from the session's
// goroutine, answers to requests from goroutines of their own: sends are
// serialised.
type stream struct {
	owlv1.ProbeService_ConnectClient
	sendMu sync.Mutex
	// paused is set while the collector asks for no more reports on this
	// stream (Pause); pauseChanged wakes the sending loop when it changes.
	paused       atomic.Bool
	pauseChanged chan struct{}
}

func (s *stream) send(m *owlv1.ProbeMessage) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.Send(m)
}

// session runs one Connect stream.
func (c *client) session(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	st, err := c.open(ctx)
	if err != nil {
		return err
	}
	c.connected.Store(true)
	c.sessions.Add(1)
	errc := make(chan error, 1)
	wg.Go(func() {
		for {
			m, err := st.Recv()
			if err != nil {
				errc <- fmt.Errorf("receiving: %w", err)
				return
			}
			if err := c.dispatch(st, m, &wg); err != nil {
				errc <- err
				return
			}
		}
	})
	return c.sendSpooled(ctx, st, errc)
}

// open opens a stream, says hello and takes the path configuration.
func (c *client) open(ctx context.Context) (*stream, error) {
	cs, err := owlv1.NewProbeServiceClient(c.conn).Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("opening stream: %w", err)
	}
	st := &stream{ProbeService_ConnectClient: cs, pauseChanged: make(chan struct{}, 1)}
	hello := c.h.hello()
	hello.Pauses = true
	if err := st.send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Hello{Hello: hello}}); err != nil {
		return nil, fmt.Errorf("sending hello: %w", err)
	}
	first, err := st.Recv()
	if err != nil {
		return nil, fmt.Errorf("waiting for path configuration: %w", err)
	}
	switch m := first.Msg.(type) {
	case *owlv1.CollectorMessage_Reject:
		return nil, &RejectedError{Reason: m.Reject.GetReason()}
	case *owlv1.CollectorMessage_Paths:
		c.noteAccepts(m.Paths)
		err := c.h.setPaths(m.Paths)
		if errors.Is(err, ErrParamsChanged) {
			return nil, err
		}
		if err != nil {
			return nil, &RejectedError{Reason: "unusable path configuration: " + err.Error()}
		}
	default:
		return nil, fmt.Errorf("collector sent %T before the path configuration", first.Msg)
	}
	c.log.Info("connected to collector", "collector", c.addr, "paths", len(first.GetPaths().GetPaths()), "unacked", c.spool.len())
	return st, nil
}

// dispatch handles one message of the collector. An error ends the
// session.
func (c *client) dispatch(st *stream, m *owlv1.CollectorMessage, wg *sync.WaitGroup) error {
	switch m := m.Msg.(type) {
	case *owlv1.CollectorMessage_Ack:
		c.spool.ack(m.Ack.GetSeq())
	case *owlv1.CollectorMessage_Paths:
		c.noteAccepts(m.Paths)
		err := c.h.setPaths(m.Paths)
		if errors.Is(err, ErrParamsChanged) {
			return err
		}
		if err != nil {
			c.log.Error("ignoring unusable path configuration", "err", err)
		}
	case *owlv1.CollectorMessage_Reject:
		return c.rejected(m.Reject)
	case *owlv1.CollectorMessage_Pause:
		if m.Pause.GetPaused() {
			c.pauses.Add(1)
		}
		if st.paused.Swap(m.Pause.GetPaused()) != m.Pause.GetPaused() {
			// Debug: a collector that stays behind pauses and resumes
			// every few seconds (owl_probe_collector_pauses_total).
			c.log.Debug("collector asks to pause sending", "collector", c.addr, "paused", m.Pause.GetPaused(), "unacked", c.spool.len())
			select {
			case st.pauseChanged <- struct{}{}:
			default:
			}
		}
	case *owlv1.CollectorMessage_RdaSize:
		if err := c.h.setRDASize(m.RdaSize); err != nil {
			c.log.Error("ignoring RDA size", "path", m.RdaSize.GetPath(), "err", err)
		}
	case *owlv1.CollectorMessage_LdsSize:
		if err := c.h.setLDSSize(m.LdsSize); err != nil {
			c.log.Error("ignoring LDS size", "path", m.LdsSize.GetPath(), "err", err)
		}
	case *owlv1.CollectorMessage_LdaSize:
		if err := c.h.setLDASize(m.LdaSize); err != nil {
			c.log.Error("ignoring LDA size", "path", m.LdaSize.GetPath(), "err", err)
		}
	case *owlv1.CollectorMessage_SampleRate:
		if err := c.h.setSampleRate(m.SampleRate); err != nil {
			c.log.Error("ignoring sampling rate", "path", m.SampleRate.GetPath(), "err", err)
		}
	case *owlv1.CollectorMessage_Release:
		for _, e := range m.Release.GetEpochs() {
			c.h.release(e.GetPath(), e.GetEpoch())
		}
	case *owlv1.CollectorMessage_Fetch:
		// Sorting a cache or rebuilding an RDA takes a while: answer on
		// a goroutine so acknowledgements keep flowing.
		wg.Go(func() {
			_ = st.send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_FetchReply{FetchReply: c.h.fetch(m.Fetch)}})
		})
	case *owlv1.CollectorMessage_Rebuild:
		wg.Go(func() {
			_ = st.send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_RebuildReply{RebuildReply: c.h.rebuild(m.Rebuild)}})
		})
	}
	return nil
}

// rejected takes a refusal: of the whole probe (which ends the session),
// of a message another collector owns (sent there), or of one message
// for good.
func (c *client) rejected(rj *owlv1.Reject) error {
	kind := rj.GetKind()
	if kind == owlv1.Reject_KIND_PROBE || kind == owlv1.Reject_KIND_UNSPECIFIED && rj.GetPath() == "" {
		return &RejectedError{Reason: rj.GetReason()}
	}
	if o := rj.GetOwner(); o != "" && c.routes != nil {
		c.log.Info("collector names another owner; sending there", "kind", kind, "path", rj.GetPath(), "owner", o)
		c.routes.misrouted(kind, rj.GetPath(), o)
		return nil
	}
	c.log.Error("collector rejected a message", "kind", kind, "path", rj.GetPath(), "reason", rj.GetReason())
	return nil
}

// notTaken drops a message the collector would not take (it is older
// than the message's kind: its stream would end on it), with a warning
// at the first of each kind.
func (c *client) notTaken(m *owlv1.ProbeMessage) {
	k := kindOf(m)
	if _, warned := c.warnedKinds.LoadOrStore(k, true); !warned {
		c.log.Warn("the collector does not take this kind of message (it is older than the probe): dropping them; upgrade the collector, or turn the measurement off at the probe",
			"collector", c.addr, "kind", k)
	}
	c.spool.drop(seqOf(m))
}

// sendFailed is the error of a send that failed. A send on a stream the
// collector ended fails with io.EOF, which says nothing: the collector's
// status comes to the receiving side, which is waited for a moment.
func sendFailed(what string, err error, errc <-chan error) error {
	if errors.Is(err, io.EOF) {
		select {
		case rerr := <-errc:
			if rerr != nil {
				return fmt.Errorf("%s: the collector ended the stream: %w", what, rerr)
			}
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// sendSpooled sends every spooled message routed here, as it comes, and
// the clock status every clockEvery, until the session ends. While the
// collector pauses the stream, spooled messages wait. Once the capture
// files are read and every message acknowledged, it tells a collector
// that takes it (SourcesDone), once a stream.
func (c *client) sendSpooled(ctx context.Context, st *stream, errc <-chan error) error {
	var sent uint64 // highest seq sent on this stream
	doneSent := false
	clockTick := time.NewTicker(clockEvery)
	defer clockTick.Stop()
	for {
		changed := c.spool.wait()
		for _, m := range c.spool.after(sent) {
			if st.paused.Load() {
				break
			}
			switch {
			case c.routes != nil && !c.routes.keep(m):
			case !c.takes(m):
				c.notTaken(m)
			default:
				if err := st.send(m); err != nil {
					return sendFailed(fmt.Sprintf("sending report %d", seqOf(m)), err, errc)
				}
			}
			sent = seqOf(m)
		}
		if !doneSent && c.takesDone.Load() && c.spool.drained() {
			if err := st.send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_SourcesDone{SourcesDone: &owlv1.SourcesDone{}}}); err != nil {
				return sendFailed("sending the end of the capture files", err, errc)
			}
			doneSent = true
			c.doneSent.Store(true)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			return err
		case <-c.restart:
			return errRestart
		case <-changed:
		case <-st.pauseChanged:
		case <-clockTick.C:
			if err := st.send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Clock{Clock: c.h.clockStatus()}}); err != nil {
				return sendFailed("sending clock status", err, errc)
			}
		}
	}
}
