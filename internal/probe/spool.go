package probe

import (
	"sync"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// spool keeps closed epochs' reports and COLATE vectors until the collector
// acknowledges them. It holds at most max messages: when full, the oldest
// is dropped and counted, and the count travels in every later report.
// Safe for concurrent use.
type spool struct {
	mu      sync.Mutex
	max     int
	items   []*owlv1.ProbeMessage // reports and vectors, ascending seq
	nextSeq uint64
	dropped uint64
	changed chan struct{} // closed (and replaced) on every add and ack
}

func newSpool(max int) *spool {
	return &spool{max: max, nextSeq: 1, changed: make(chan struct{})}
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
	r.Seq = s.take()
	if r.Counters == nil {
		r.Counters = &owlv1.Counters{}
	}
	r.Counters.SpoolDropped = s.dropped
	s.items = append(s.items, &owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: r}})
	s.mu.Unlock()
	s.signal()
}

// addVector numbers a COLATE vector and keeps it.
func (s *spool) addVector(v *owlv1.ColateVector) {
	s.mu.Lock()
	v.Seq = s.take()
	s.items = append(s.items, &owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Colate{Colate: v}})
	s.mu.Unlock()
	s.signal()
}

// take returns the next seq and makes room for one more message. s.mu is
// held.
func (s *spool) take() uint64 {
	if len(s.items) >= s.max {
		n := len(s.items) - s.max + 1
		clear(s.items[:n])
		s.items = s.items[n:]
		s.dropped += uint64(n)
	}
	s.nextSeq++
	return s.nextSeq - 1
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
