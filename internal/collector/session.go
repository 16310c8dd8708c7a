package collector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// session is a probe's open Connect stream. The collector sends on it from
// several goroutines (acknowledgements, requests of path workers, size
// hints), so sends are serialised; answers to requests come back through
// the stream's receive loop and are handed to the waiting caller.
type session struct {
	probe  string
	stream owlv1.ProbeService_ConnectServer
	done   chan struct{} // closed when the stream ends

	sendMu  sync.Mutex
	pathsMu sync.Mutex // held while a path configuration is made and sent

	mu      sync.Mutex
	waiting map[uint64]chan *owlv1.ProbeMessage
}

var requestIDs atomic.Uint64

// ErrProbeGone says a probe's stream ended before it answered.
var ErrProbeGone = errors.New("probe disconnected")

func newSession(probe string, stream owlv1.ProbeService_ConnectServer) *session {
	return &session{probe: probe, stream: stream, done: make(chan struct{}), waiting: map[uint64]chan *owlv1.ProbeMessage{}}
}

func (s *session) send(m *owlv1.CollectorMessage) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.stream.Send(m)
}

// call sends a request and waits for its answer.
func (s *session) call(ctx context.Context, id uint64, m *owlv1.CollectorMessage) (*owlv1.ProbeMessage, error) {
	ch := make(chan *owlv1.ProbeMessage, 1)
	s.mu.Lock()
	s.waiting[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiting, id)
		s.mu.Unlock()
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
	s.mu.Lock()
	ch := s.waiting[id]
	s.mu.Unlock()
	if ch != nil {
		select {
		case ch <- m:
		default:
		}
	}
}

// cached is one packet as a probe's cache holds it.
type cached struct {
	offsetNS int64
	flow     uint64 // LDS flow hash (0 when the probe did not say)
	weight   uint64
}

// fetch asks the probe for the timestamps of ids in a path's epoch. It
// returns every entry the probe has for each id.
func (s *session) fetch(ctx context.Context, path string, epoch int64, ids []uint64) (map[uint64][]cached, int, error) {
	return s.fetchReq(ctx, &owlv1.FetchRequest{Path: path, Epoch: epoch, PacketIds: ids})
}

// fetchRepeated asks for every cached entry of an ID the probe saw more
// than once in the path's epoch.
func (s *session) fetchRepeated(ctx context.Context, path string, epoch int64) (map[uint64][]cached, int, error) {
	return s.fetchReq(ctx, &owlv1.FetchRequest{Path: path, Epoch: epoch, Repeated: true})
}

func (s *session) fetchReq(ctx context.Context, req *owlv1.FetchRequest) (map[uint64][]cached, int, error) {
	id := requestIDs.Add(1)
	req.RequestId = id
	ids := req.GetPacketIds()
	r, err := s.call(ctx, id, &owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Fetch{Fetch: req}})
	if err != nil {
		return nil, 0, err
	}
	rep := r.GetFetchReply()
	size := 8*len(ids) + 28*len(rep.GetPacketIds())
	if rep.GetError() != "" {
		return nil, size, fmt.Errorf("%s: %s", s.probe, rep.GetError())
	}
	if len(rep.GetPacketIds()) != len(rep.GetOffsetsNs()) {
		return nil, size, fmt.Errorf("%s: fetch reply with %d ids and %d offsets", s.probe, len(rep.GetPacketIds()), len(rep.GetOffsetsNs()))
	}
	withFlows := len(rep.GetFlowHashes()) == len(rep.GetPacketIds()) && len(rep.GetWeights()) == len(rep.GetPacketIds())
	out := make(map[uint64][]cached, len(ids))
	for i, pid := range rep.GetPacketIds() {
		e := cached{offsetNS: rep.GetOffsetsNs()[i]}
		if withFlows {
			e.flow, e.weight = rep.GetFlowHashes()[i], uint64(rep.GetWeights()[i])
		}
		out[pid] = append(out[pid], e)
	}
	return out, size, nil
}

// rebuild asks the probe for a path's epoch RDA at another size.
func (s *session) rebuild(ctx context.Context, path string, epoch int64, buckets int) ([]byte, error) {
	id := requestIDs.Add(1)
	req := &owlv1.RebuildRequest{RequestId: id, Path: path, Epoch: epoch, Buckets: uint32(buckets)}
	r, err := s.call(ctx, id, &owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Rebuild{Rebuild: req}})
	if err != nil {
		return nil, err
	}
	rep := r.GetRebuildReply()
	if rep.GetError() != "" {
		return nil, fmt.Errorf("%s: %s", s.probe, rep.GetError())
	}
	return rep.GetRda(), nil
}

// release tells a probe it may drop epochs of a path.
func (c *Collector) release(probe, path string, epochs ...int64) {
	s := c.session(probe)
	if s == nil || len(epochs) == 0 {
		return
	}
	m := &owlv1.Release{}
	for _, e := range epochs {
		m.Epochs = append(m.Epochs, &owlv1.EpochRef{Path: path, Epoch: e})
	}
	_ = s.send(&owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Release{Release: m}})
}

// waitSession returns a probe's newest open session, waiting up to the
// pair timeout for the probe to connect: after a restart of the collector,
// reports stored before it and a report of the other probe pair as soon as
// that one is back, before the first has reconnected.
func (c *Collector) waitSession(ctx context.Context, probe string) *session {
	var timeout <-chan time.Time
	for {
		c.smu.Lock()
		ss, joined := c.sessions[probe], c.joined
		c.smu.Unlock()
		if len(ss) > 0 {
			return ss[len(ss)-1]
		}
		if timeout == nil {
			t := time.NewTimer(c.cfg.PairTimeout)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-joined:
		case <-timeout:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// session returns a probe's newest open session, or nil.
func (c *Collector) session(probe string) *session {
	c.smu.Lock()
	defer c.smu.Unlock()
	if ss := c.sessions[probe]; len(ss) > 0 {
		return ss[len(ss)-1]
	}
	return nil
}
