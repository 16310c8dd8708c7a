package probe

import (
	"log/slog"
	"math"
	"sync"

	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// spool keeps closed epochs' reports and COLATE vectors (and RTT and
// reordering reports) until the collector acknowledges them. It holds the
// messages of at most max epochs (one report per path, and a COLATE
// vector, RTT and reordering report, each) and maxBytes of them: when a
// new message would pass either bound, the oldest epoch's messages are
// dropped, logged and counted, and the count travels in every later
// report. With a data directory every message is kept on disk too, until
// acknowledged or dropped, and a restarted probe takes them up again.
// Safe for concurrent use.
type spool struct {
	mu       sync.Mutex
	max      int
	maxBytes int64
	items    []spooled     // reports and vectors, ascending seq
	epochs   map[int64]int // messages held per epoch
	bytes    int64         // of the held messages
	nextSeq  uint64
	dropped  uint64
	// notTaken counts messages dropped because the collector they were
	// routed to does not take their kind.
	notTaken uint64
	changed  chan struct{} // closed (and replaced) on every add and ack
	// finished: nothing more will be added (the capture files are read).
	finished bool
	disk     *disk        // nil: memory only
	log      *slog.Logger // nil: drops are counted, not logged
}

// spooled is a held message and its size.
type spooled struct {
	m    *owlv1.ProbeMessage
	size int64
}

func newSpool(max int, maxBytes int64) *spool {
	return &spool{max: max, maxBytes: maxBytes, nextSeq: 1, changed: make(chan struct{}), epochs: map[int64]int{}}
}

// load takes up the messages a previous run of the probe left in d, and
// keeps every later one there too. Their seqs go on from the highest.
func (s *spool) load(d *disk) (int, error) {
	msgs, err := d.messages()
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.disk = d
	var gone []*owlv1.ProbeMessage
	for _, m := range msgs {
		size := int64(proto.Size(m))
		gone = append(gone, s.makeRoom(epochOf(m), size)...)
		s.hold(m, size)
		s.nextSeq = max(s.nextSeq, seqOf(m)+1)
	}
	s.mu.Unlock()
	s.logDropped(gone)
	return len(msgs) - len(gone), nil
}

// logDropped says which messages a full spool dropped (unacknowledged,
// never to be sent).
func (s *spool) logDropped(gone []*owlv1.ProbeMessage) {
	if s.log == nil {
		return
	}
	for _, m := range gone {
		if r := m.GetReport(); r != nil {
			s.log.Warn("spool full: dropped an unacknowledged epoch report", "path", r.GetPath(), "epoch", r.GetEpoch(), "spool_max_epochs", s.max, "spool_max_bytes", s.maxBytes)
		} else if v := m.GetRtt(); v != nil {
			s.log.Warn("spool full: dropped an unacknowledged RTT report", "epoch", v.GetEpoch(), "spool_max_epochs", s.max, "spool_max_bytes", s.maxBytes)
		} else if v := m.GetReorder(); v != nil {
			s.log.Warn("spool full: dropped an unacknowledged reordering report", "epoch", v.GetEpoch(), "spool_max_epochs", s.max, "spool_max_bytes", s.maxBytes)
		} else {
			s.log.Warn("spool full: dropped an unacknowledged COLATE vector", "epoch", m.GetColate().GetEpoch(), "spool_max_epochs", s.max, "spool_max_bytes", s.maxBytes)
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

// finish says nothing more will be added: the probe's capture files are
// read and their last epochs reported.
func (s *spool) finish() {
	s.mu.Lock()
	s.finished = true
	s.mu.Unlock()
	s.signal()
}

// drained says that nothing more will be added and every message was
// acknowledged (or dropped).
func (s *spool) drained() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finished && len(s.items) == 0
}

// wait is closed at the next change.
func (s *spool) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// add numbers a report and keeps it.
func (s *spool) add(r *owlv1.EpochReport) {
	if r.Counters == nil {
		r.Counters = &owlv1.Counters{}
	}
	s.put(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: r}}, func(seq, dropped uint64) {
		r.Seq, r.Counters.SpoolDropped = seq, dropped
	})
}

// addVector numbers a COLATE vector and keeps it.
func (s *spool) addVector(v *owlv1.ColateVector) {
	s.put(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Colate{Colate: v}}, func(seq, _ uint64) { v.Seq = seq })
}

// addRTT numbers an RTT report and keeps it.
func (s *spool) addRTT(v *owlv1.RTTReport) {
	s.put(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Rtt{Rtt: v}}, func(seq, _ uint64) { v.Seq = seq })
}

// addReorder numbers a reordering report and keeps it.
func (s *spool) addReorder(v *owlv1.ReorderReport) {
	s.put(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Reorder{Reorder: v}}, func(seq, _ uint64) { v.Seq = seq })
}

// put numbers a message (number sets its seq and the drop count), makes
// room for it, and keeps it, on disk first when there is one.
func (s *spool) put(m *owlv1.ProbeMessage, number func(seq, dropped uint64)) {
	size := int64(proto.Size(m)) + 16 // with room for the seq and count
	s.mu.Lock()
	gone := s.makeRoom(epochOf(m), size)
	number(s.nextSeq, s.dropped) // the drops just made count too
	s.nextSeq++
	var err error
	if s.disk != nil {
		err = s.disk.putMessage(m)
	}
	s.hold(m, size)
	s.mu.Unlock()
	if err != nil && s.log != nil {
		s.log.Error("spooling a message to disk: a restart before it is acknowledged loses it", "seq", seqOf(m), "err", err)
	}
	s.logDropped(gone)
	s.signal()
}

// hold appends a numbered message. s.mu is held.
func (s *spool) hold(m *owlv1.ProbeMessage, size int64) {
	s.items = append(s.items, spooled{m, size})
	s.epochs[epochOf(m)]++
	s.bytes += size
}

// makeRoom drops the oldest epochs' messages until one of size bytes and
// the given epoch fits: max epochs held, epoch not among them, or more
// than maxBytes with it. The message's own epoch is never dropped. It
// returns what it dropped. s.mu is held.
func (s *spool) makeRoom(epoch int64, size int64) []*owlv1.ProbeMessage {
	var gone []*owlv1.ProbeMessage
	for {
		full := s.epochs[epoch] == 0 && len(s.epochs) >= s.max
		if !full && s.bytes+size <= s.maxBytes {
			return gone
		}
		oldest := int64(math.MaxInt64)
		for e := range s.epochs {
			if e != epoch {
				oldest = min(oldest, e)
			}
		}
		if oldest == math.MaxInt64 {
			return gone // only the message's own epoch is held
		}
		gone = append(gone, s.dropEpoch(oldest)...)
	}
}

// dropEpoch forgets every held message of an epoch. s.mu is held.
func (s *spool) dropEpoch(epoch int64) []*owlv1.ProbeMessage {
	var gone []*owlv1.ProbeMessage
	kept := s.items[:0]
	for _, it := range s.items {
		if epochOf(it.m) != epoch {
			kept = append(kept, it)
			continue
		}
		gone = append(gone, it.m)
		s.bytes -= it.size
		if s.disk != nil {
			s.disk.removeMessage(seqOf(it.m))
		}
	}
	clear(s.items[len(kept):])
	s.items = kept
	delete(s.epochs, epoch)
	s.dropped += uint64(len(gone))
	return gone
}

// epochOf is a spooled message's epoch.
func epochOf(m *owlv1.ProbeMessage) int64 {
	if r := m.GetReport(); r != nil {
		return r.GetEpoch()
	}
	if v := m.GetRtt(); v != nil {
		return v.GetEpoch()
	}
	if v := m.GetReorder(); v != nil {
		return v.GetEpoch()
	}
	return m.GetColate().GetEpoch()
}

// seqOf is a spooled message's seq.
func seqOf(m *owlv1.ProbeMessage) uint64 {
	if r := m.GetReport(); r != nil {
		return r.Seq
	}
	if v := m.GetRtt(); v != nil {
		return v.GetSeq()
	}
	if v := m.GetReorder(); v != nil {
		return v.GetSeq()
	}
	return m.GetColate().GetSeq()
}

// ack forgets the message with this seq.
func (s *spool) ack(seq uint64) {
	s.mu.Lock()
	for i, it := range s.items {
		if seqOf(it.m) == seq {
			if e := epochOf(it.m); s.epochs[e] > 1 {
				s.epochs[e]--
			} else {
				delete(s.epochs, e)
			}
			s.bytes -= it.size
			s.items = append(s.items[:i], s.items[i+1:]...)
			if s.disk != nil {
				s.disk.removeMessage(seq)
			}
			break
		}
		if seqOf(it.m) > seq {
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
	for _, it := range s.items {
		if seqOf(it.m) > seq {
			out = append(out, it.m)
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

// size is the bytes of the unacknowledged messages.
func (s *spool) size() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// drop forgets the message with this seq, which no collector will take.
func (s *spool) drop(seq uint64) {
	s.ack(seq)
	s.mu.Lock()
	s.notTaken++
	s.mu.Unlock()
}

// notTakenTotal is the number of messages dropped because their collector
// does not take their kind.
func (s *spool) notTakenTotal() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notTaken
}

// droppedTotal is the number of messages dropped for lack of room.
func (s *spool) droppedTotal() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}
