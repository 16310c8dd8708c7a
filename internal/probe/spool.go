package probe

import (
	"log/slog"
	"math"
	"sync"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// spool keeps closed epochs' reports and COLATE vectors until the collector
// acknowledges them. It holds the messages of at most max epochs (one
// report per path, and a COLATE vector, each): when a new epoch comes with
// max epochs held, the oldest epoch's messages are dropped, logged and
// counted, and the count travels in every later report. Safe for
// concurrent use.
type spool struct {
	mu      sync.Mutex
	max     int
	items   []*owlv1.ProbeMessage // reports and vectors, ascending seq
	epochs  map[int64]int         // messages held per epoch
	nextSeq uint64
	dropped uint64
	changed chan struct{} // closed (and replaced) on every add and ack
	log     *slog.Logger  // nil: drops are counted, not logged
}

func newSpool(max int) *spool {
	return &spool{max: max, nextSeq: 1, changed: make(chan struct{}), epochs: map[int64]int{}}
}

// logDropped says which messages a full spool dropped (unacknowledged,
// never to be sent).
func (s *spool) logDropped(gone []*owlv1.ProbeMessage) {
	if s.log == nil {
		return
	}
	for _, m := range gone {
		if r := m.GetReport(); r != nil {
			s.log.Warn("spool full: dropped an unacknowledged epoch report", "path", r.GetPath(), "epoch", r.GetEpoch(), "spool_max_epochs", s.max)
		} else {
			s.log.Warn("spool full: dropped an unacknowledged COLATE vector", "epoch", m.GetColate().GetEpoch(), "spool_max_epochs", s.max)
		}
	}
}

// signal wakes every waiter: each client of the probe (one per collector
// in a cluster) sends what is routed to it.
func (s *spool) signal() {
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// wait is closed at the next change.
func (s *spool) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// add numbers a report and keeps it.
func (s *spool) add(r *owlv1.EpochReport) {
	s.mu.Lock()
	var gone []*owlv1.ProbeMessage
	r.Seq, gone = s.take(r.GetEpoch())
	if r.Counters == nil {
		r.Counters = &owlv1.Counters{}
	}
	r.Counters.SpoolDropped = s.dropped
	s.items = append(s.items, &owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: r}})
	s.mu.Unlock()
	s.logDropped(gone)
	s.signal()
}

// addVector numbers a COLATE vector and keeps it.
func (s *spool) addVector(v *owlv1.ColateVector) {
	s.mu.Lock()
	var gone []*owlv1.ProbeMessage
	v.Seq, gone = s.take(v.GetEpoch())
	s.items = append(s.items, &owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Colate{Colate: v}})
	s.mu.Unlock()
	s.logDropped(gone)
	s.signal()
}

// take returns the next seq for a message of epoch, making room for it:
// with max epochs held and epoch not among them, the oldest epoch's
// messages go. It returns what it dropped. s.mu is held.
func (s *spool) take(epoch int64) (uint64, []*owlv1.ProbeMessage) {
	var gone []*owlv1.ProbeMessage
	if s.epochs[epoch] == 0 && len(s.epochs) >= s.max {
		oldest := int64(math.MaxInt64)
		for e := range s.epochs {
			oldest = min(oldest, e)
		}
		kept := s.items[:0]
		for _, m := range s.items {
			if epochOf(m) == oldest {
				gone = append(gone, m)
			} else {
				kept = append(kept, m)
			}
		}
		clear(s.items[len(kept):])
		s.items = kept
		delete(s.epochs, oldest)
		s.dropped += uint64(len(gone))
	}
	s.epochs[epoch]++
	s.nextSeq++
	return s.nextSeq - 1, gone
}

// epochOf is a spooled message's epoch.
func epochOf(m *owlv1.ProbeMessage) int64 {
	if r := m.GetReport(); r != nil {
		return r.GetEpoch()
	}
	return m.GetColate().GetEpoch()
}

// seqOf is a spooled message's seq.
func seqOf(m *owlv1.ProbeMessage) uint64 {
	if r := m.GetReport(); r != nil {
		return r.Seq
	}
	return m.GetColate().GetSeq()
}

// ack forgets the report with this seq.
func (s *spool) ack(seq uint64) {
	s.mu.Lock()
	for i, m := range s.items {
		if seqOf(m) == seq {
			if e := epochOf(m); s.epochs[e] > 1 {
				s.epochs[e]--
			} else {
				delete(s.epochs, e)
			}
			s.items = append(s.items[:i], s.items[i+1:]...)
			break
		}
		if seqOf(m) > seq {
			break
		}
	}
	s.mu.Unlock()
	s.signal()
}

// after returns the kept messages with seq greater than seq, oldest first.
func (s *spool) after(seq uint64) []*owlv1.ProbeMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*owlv1.ProbeMessage
	for _, m := range s.items {
		if seqOf(m) > seq {
			out = append(out, m)
		}
	}
	return out
}

// len is the number of unacknowledged messages.
func (s *spool) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// droppedTotal is the number of messages dropped for lack of room.
func (s *spool) droppedTotal() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}
