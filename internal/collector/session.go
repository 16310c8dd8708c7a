package collector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/reconcile"
)

// outboxMin is the least bound of the messages waiting to go out on one
// stream; outboxPerPath raises it by each path the probe is on (about two
// messages a path and epoch: the report's acknowledgement and its
// release). A probe that falls that far behind in reading is cut off: it
// reconnects and sends again what was not acknowledged. The bound is not
// smaller because the collector's own goroutines can hold the stream's
// writer back for a second or more when it is far behind on a core: a
// bound of 4,096 then cut off probes that read well.
const (
	outboxMin     = 4096
	outboxPerPath = 8
)

// releaseBatch bounds the epochs one Release message names (about 30
// bytes each on the wire).
const releaseBatch = 4096

// session is a probe's open Connect stream. The collector sends on it from
// several goroutines (acknowledgements, requests of path workers, size
// hints, releases): send queues a message without ever blocking, and the
// stream's handler goroutine sends the queue in order (pump). Answers to
// requests come back through the stream's receive loop and are handed to
// the waiting caller.
type session struct {
	probe  string
	stream owlv1.ProbeService_ConnectServer

	// The outbox: messages in order, and the epochs to release, sent
	// together as few Release messages. bound caps the two together;
	// wake tells the pump that something waits.
	outMu    sync.Mutex
	queue    []*owlv1.CollectorMessage
	releases []*owlv1.EpochRef
	bound    int
	wake     chan struct{}

	done    chan struct{} // closed when the stream ends
	cut     chan struct{} // closed when the outbox overflowed
	cutOnce sync.Once

	pathsMu sync.Mutex // held while a path configuration is made and queued

	waitingMu sync.Mutex // guards waiting
	waiting   map[uint64]chan *owlv1.ProbeMessage

	// pauses says the probe honours Pause (its Hello); paused is set
	// while it is asked to hold its reports, since pausedAt (unix ns).
	pauses   bool
	paused   atomic.Bool
	pausedAt atomic.Int64
	// pausedForWork says the pause was because the workers were behind
	// (pauseIfBehind), not the sides waiting for their other side.
	pausedForWork atomic.Bool
}

var requestIDs atomic.Uint64

// ErrProbeGone says a probe's stream ended before it answered.
var ErrProbeGone = errors.New("probe disconnected")

// errSlowProbe says a probe did not read its stream and was cut off.
var errSlowProbe = errors.New("probe does not read its stream")

// newSession opens a session of a probe that is on paths paths.
func newSession(probe string, stream owlv1.ProbeService_ConnectServer, paths int) *session {
	return &session{probe: probe, stream: stream, bound: outboxMin + outboxPerPath*paths, wake: make(chan struct{}, 1),
		done: make(chan struct{}), cut: make(chan struct{}), waiting: map[uint64]chan *owlv1.ProbeMessage{}}
}

// send queues a message for the probe. It never blocks: with the outbox
// full, the session is cut off and send fails.
func (s *session) send(m *owlv1.CollectorMessage) error {
	return s.enqueue(func() { s.queue = append(s.queue, m) })
}

// release queues the release of epochs of a path; the releases waiting
// go out together.
func (s *session) release(path string, epochs ...int64) error {
	return s.enqueue(func() {
		for _, e := range epochs {
			s.releases = append(s.releases, &owlv1.EpochRef{Path: path, Epoch: e})
		}
	})
}

// enqueue adds to the outbox with add, under its lock, unless the stream
// ended or the outbox is full: then the session is cut off.
func (s *session) enqueue(add func()) error {
	select {
	case <-s.done:
		return fmt.Errorf("sending to %s: %w", s.probe, ErrProbeGone)
	default:
	}
	s.outMu.Lock()
	if len(s.queue)+len(s.releases) >= s.bound {
		s.outMu.Unlock()
		s.cutOnce.Do(func() { close(s.cut) })
		return fmt.Errorf("sending to %s: %w", s.probe, errSlowProbe)
	}
	add()
	s.outMu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// take empties the outbox: its messages in order, then its releases in
// messages of at most releaseBatch epochs.
func (s *session) take() []*owlv1.CollectorMessage {
	s.outMu.Lock()
	out, rel := s.queue, s.releases
	s.queue, s.releases = nil, nil
	s.outMu.Unlock()
	for len(rel) > 0 {
		n := min(len(rel), releaseBatch)
		out = append(out, &owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Release{Release: &owlv1.Release{Epochs: rel[:n:n]}}})
		rel = rel[n:]
	}
	return out
}

// serve sends the queued messages until receiving ends (its error comes
// on received), a send fails, or the probe is cut off. It runs on the
// stream's handler goroutine; the sending itself (pump) runs on a
// goroutine of its own, so that a cut ends the stream at once even while
// a send waits on a probe that does not read: the handler's return
// cancels the stream, and the waiting send returns.
func (s *session) serve(received <-chan error) error {
	stop := make(chan struct{})
	defer close(stop)
	pumped := make(chan error, 1)
	go func() { pumped <- s.pump(stop) }()
	select {
	case err := <-received:
		return err
	case err := <-pumped:
		return err
	case <-s.cut:
		return s.cutError()
	}
}

// pump sends the queued messages, in order, until stop is closed, a send
// fails, or the probe is cut off. It is the only goroutine that sends on
// the stream once it is served.
func (s *session) pump(stop <-chan struct{}) error {
	for {
		select {
		case <-s.wake:
			for _, m := range s.take() {
				if s.isCut() {
					return s.cutError()
				}
				if err := s.stream.Send(m); err != nil {
					return err
				}
			}
		case <-stop:
			return nil
		case <-s.cut:
			return s.cutError()
		}
	}
}

// isCut says whether the session was cut off.
func (s *session) isCut() bool {
	select {
	case <-s.cut:
		return true
	default:
		return false
	}
}

// cutError ends a stream that was cut off.
func (s *session) cutError() error {
	return status.Errorf(codes.ResourceExhausted, "%v: %d messages waiting; reconnect", errSlowProbe, s.bound)
}

// call sends a request and waits for its answer.
func (s *session) call(ctx context.Context, id uint64, m *owlv1.CollectorMessage) (*owlv1.ProbeMessage, error) {
	ch := make(chan *owlv1.ProbeMessage, 1)
	s.waitingMu.Lock()
	s.waiting[id] = ch
	s.waitingMu.Unlock()
	defer func() {
		s.waitingMu.Lock()
		delete(s.waiting, id)
		s.waitingMu.Unlock()
	}()
	if err := s.send(m); err != nil {
		return nil, fmt.Errorf("asking %s: %w", s.probe, err)
	}
	select {
	case r := <-ch:
		return r, nil
	case <-s.done:
		return nil, fmt.Errorf("asking %s: %w", s.probe, ErrProbeGone)
	case <-ctx.Done():
		return nil, fmt.Errorf("asking %s: %w", s.probe, ctx.Err())
	}
}

// deliver hands an answer to the caller waiting for it; answers nobody
// waits for (late, after a timeout) are dropped.
func (s *session) deliver(id uint64, m *owlv1.ProbeMessage) {
	s.waitingMu.Lock()
	ch := s.waiting[id]
	s.waitingMu.Unlock()
	if ch != nil {
		select {
		case ch <- m:
		default:
		}
	}
}

// fetch asks the probe for cached entries: of the IDs a request names, or
// of every ID seen more than once. It returns them and the bytes exchanged.
func (s *session) fetch(ctx context.Context, req *owlv1.FetchRequest) (map[uint64][]reconcile.Entry, int, error) {
	id := requestIDs.Add(1)
	req.RequestId = id
	r, err := s.call(ctx, id, &owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Fetch{Fetch: req}})
	if err != nil {
		return nil, 0, err
	}
	return fetchEntries(s.probe, req.GetPacketIds(), r.GetFetchReply())
}

// fetchEntries reads probe's answer to a fetch of ids (nil: of its
// repeated IDs): the entries by ID, and the bytes exchanged. rep comes
// from outside: nil (the probe answered with another message) reads as
// an empty answer, and lists of different lengths are an error.
func fetchEntries(probe string, ids []uint64, rep *owlv1.FetchReply) (map[uint64][]reconcile.Entry, int, error) {
	size := 8*len(ids) + 28*len(rep.GetPacketIds())
	if rep.GetError() != "" {
		return nil, size, fmt.Errorf("%s: %s", probe, rep.GetError())
	}
	if len(rep.GetPacketIds()) != len(rep.GetOffsetsNs()) {
		return nil, size, fmt.Errorf("%s: fetch reply with %d ids and %d offsets", probe, len(rep.GetPacketIds()), len(rep.GetOffsetsNs()))
	}
	withFlows := len(rep.GetFlowHashes()) == len(rep.GetPacketIds()) && len(rep.GetWeights()) == len(rep.GetPacketIds())
	// Entries of IDs not asked for are dropped: a probe cannot make the
	// collector hold more than it asked for.
	var asked map[uint64]bool
	if len(ids) > 0 {
		asked = make(map[uint64]bool, len(ids))
		for _, id := range ids {
			asked[id] = true
		}
	}
	out := make(map[uint64][]reconcile.Entry, len(ids))
	// An ID's first entry is a slice of one array, of capacity one: a
	// second entry (a packet seen twice, rare) copies it out.
	all := make([]reconcile.Entry, len(rep.GetPacketIds()))
	for i, pid := range rep.GetPacketIds() {
		if asked != nil && !asked[pid] {
			continue
		}
		e := reconcile.Entry{OffsetNS: rep.GetOffsetsNs()[i]}
		if withFlows {
			e.Flow, e.Weight = rep.GetFlowHashes()[i], uint64(rep.GetWeights()[i])
		}
		if prev, ok := out[pid]; ok {
			out[pid] = append(prev, e)
			continue
		}
		all[i] = e
		out[pid] = all[i : i+1 : i+1]
	}
	return out, size, nil
}

// rebuild asks the probe for a path's epoch RDA at another size; its
// answer is read by rebuiltRDA.
func (s *session) rebuild(ctx context.Context, path string, epoch int64, buckets int) (*owlv1.RebuildReply, error) {
	id := requestIDs.Add(1)
	req := &owlv1.RebuildRequest{RequestId: id, Path: path, Epoch: epoch, Buckets: uint32(buckets)}
	r, err := s.call(ctx, id, &owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Rebuild{Rebuild: req}})
	if err != nil {
		return nil, err
	}
	return r.GetRebuildReply(), nil
}
