package probe

import (
	"sync"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// spool keeps closed epochs' reports until the collector acknowledges them.
// It holds at most max reports: when full, the oldest is dropped and
// counted, and the count travels in every later report. Safe for concurrent
// use.
type spool struct {
	mu      sync.Mutex
	max     int
	items   []*owlv1.EpochReport // ascending seq
	nextSeq uint64
	dropped uint64
	changed chan struct{} // signalled (non-blocking) on Add and Ack
}

func newSpool(max int) *spool {
	return &spool{max: max, nextSeq: 1, changed: make(chan struct{}, 1)}
}

func (s *spool) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// add numbers a report and keeps it.
func (s *spool) add(r *owlv1.EpochReport) {
	s.mu.Lock()
	r.Seq = s.nextSeq
	s.nextSeq++
	if len(s.items) >= s.max {
		n := len(s.items) - s.max + 1
		clear(s.items[:n])
		s.items = s.items[n:]
		s.dropped += uint64(n)
	}
	if r.Counters == nil {
		r.Counters = &owlv1.Counters{}
	}
	r.Counters.SpoolDropped = s.dropped
	s.items = append(s.items, r)
	s.mu.Unlock()
	s.signal()
}

// ack forgets the report with this seq.
func (s *spool) ack(seq uint64) {
	s.mu.Lock()
	for i, r := range s.items {
		if r.Seq == seq {
			s.items = append(s.items[:i], s.items[i+1:]...)
			break
		}
		if r.Seq > seq {
			break
		}
	}
	s.mu.Unlock()
	s.signal()
}

// after returns the kept reports with seq greater than seq, oldest first.
func (s *spool) after(seq uint64) []*owlv1.EpochReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*owlv1.EpochReport
	for _, r := range s.items {
		if r.Seq > seq {
			out = append(out, r)
		}
	}
	return out
}

// len is the number of unacknowledged reports.
func (s *spool) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}

// droppedTotal is the number of reports dropped for lack of room.
func (s *spool) droppedTotal() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}
