package probe

import (
	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/rtt"
	"github.com/owl-latency/owl/internal/synopsis/fridge"
)

// RTTConfig sets the round-trip times a probe measures on its own: of
// every request/response pair it sees pass (TCP data and the ACK of its
// end, SYN and SYN/ACK, DNS), in both directions of every flow, whatever
// its paths. Requests wait in fridges (internal/synopsis/fridge) that
// always take a new request, each sample weighted for the pairs that
// evictions lost.
type RTTConfig struct {
	// Enabled switches matching on.
	Enabled bool `yaml:"enabled"`
	// Fridges sizes the request memory of each capture worker: bytes,
	// fridges, and the range of delays to measure well (10 µs to 10 s).
	Fridges fridge.Sizing `yaml:"fridges"`
	// Prefixes groups responders: /24 and /48, the 64 heaviest per epoch
	// reported.
	Prefixes rtt.PrefixConfig `yaml:"prefixes"`
}

// DefaultRTTConfig is on, 96 KiB of fridges per worker.
func DefaultRTTConfig() RTTConfig {
	return RTTConfig{Enabled: true, Fridges: fridge.DefaultSizing(), Prefixes: rtt.DefaultPrefixConfig()}
}

// Validate checks each part.
func (c RTTConfig) Validate() error {
	if !c.Enabled {
		return nil
	}
	if err := c.Fridges.Validate(); err != nil {
		return err
	}
	return c.Prefixes.Validate()
}

// resizeFactor is how far the request rate must move from the one the
// fridges were sized for before they are sized again.
const resizeFactor = 2

// rttMatcher is one capture worker's request/response matching. Requests
// wait in a fridge set sized at each epoch for the previous epoch's
// request rate; after a resize, the previous set still answers the
// responses to its requests for two epochs. A matched pair is weighted at
// once by its set's pooled correction (fridge.Set.PooledCorr: one over
// the chance that the set reports a pair whose request was followed by x
// others) and goes into its epoch's summary: nothing per pair is kept.
type rttMatcher struct {
	cfg        RTTConfig
	seed       uint64
	classifier *rtt.Classifier
	epochSec   float64
	cur, old   *fridge.Set
	oldLeft    int     // epochs old still answers
	sizedFor   float64 // requests/s
	// requests offered during the current epoch, for the next sizing
	requests uint64
	// absent holds response keys that found no request, each in a slot
	// by absentSlot. A key stays absent until a request with it is
	// offered: requests enter no other way (a resize's new set is empty,
	// the old one takes no more). So a response with an absent key needs
	// no look-up: the ACK that every data segment of a one-way transfer
	// carries, looked up once. On the bundled trace, three responses in
	// four.
	absent [absentKeys]uint64
}

// absentKeys is the size of rttMatcher's cache of absent response keys.
const absentKeys = 1 << 8 // absentSlot takes the top 8 bits

func newRTTMatcher(cfg RTTConfig, seed uint64, epochSec float64) (*rttMatcher, error) {
	set, err := fridge.NewSized(cfg.Fridges, 0)
	if err != nil {
		return nil, err
	}
	return &rttMatcher{cfg: cfg, seed: seed, classifier: rtt.NewClassifier(seed), epochSec: epochSec, cur: set}, nil
}

// newEpoch sizes the fridges for the rate of the epoch just past, when it
// moved far from the one they were sized for, and returns the new epoch's
// empty summary.
func (m *rttMatcher) newEpoch() *rtt.Summary {
	rate := float64(m.requests) / m.epochSec
	m.requests = 0
	if m.oldLeft--; m.oldLeft <= 0 {
		m.old = nil
	}
	if rate > m.sizedFor*resizeFactor || rate < m.sizedFor/resizeFactor {
		if set, err := fridge.NewSized(m.cfg.Fridges, rate); err == nil { // validated with the configuration
			m.old, m.oldLeft, m.cur, m.sizedFor = m.cur, 2, set, rate
		}
	}
	return rtt.NewSummary(m.cfg.Prefixes)
}

// packet matches one packet; its pair goes to sum, the summary of the
// response's epoch.
func (m *rttMatcher) packet(p *capture.Packet, sum *rtt.Summary) {
	var ev rtt.Event
	m.classifier.Classify(&ev, p)
	if ev.Response {
		sum.Counters.Responses++
		ev.Response = !m.isAbsent(ev.ResponseKey) // else no look-up can find it
	}
	var delayNS int64
	var x uint64
	var ok bool
	switch {
	case ev.Request:
		sum.Counters.Requests++
		m.requests++
		// A request already waiting is a retransmission: neither copy
		// gives a sample (Karn's rule). A response and a request in one
		// packet are looked up at once.
		var again bool
		if ev.Response {
			delayNS, x, ok, again = m.cur.Exchange(ev.ResponseKey, ev.RequestKey, p.TimeNS)
		} else {
			again = m.cur.Offer(ev.RequestKey, p.TimeNS)
		}
		if again {
			sum.Counters.Ambiguous++
		}
	case ev.Response:
		delayNS, x, ok = m.cur.Take(ev.ResponseKey, p.TimeNS)
	}
	if ev.Response {
		m.respond(&ev, delayNS, x, ok, p.TimeNS, sum)
	}
	if ev.Request {
		m.present(ev.RequestKey)
	}
}

// respond adds a response's pair to sum if the current set held its
// request (ok), else looks in the previous set, and remembers a key that
// neither holds.
func (m *rttMatcher) respond(ev *rtt.Event, delayNS int64, x uint64, ok bool, tNS int64, sum *rtt.Summary) {
	set := m.cur
	if !ok && m.old != nil {
		set = m.old
		delayNS, x, ok = set.Take(ev.ResponseKey, tNS)
	}
	if !ok {
		m.absent[absentSlot(ev.ResponseKey)] = ev.ResponseKey
		return
	}
	sum.Counters.Matched++
	sum.Add(rtt.Sample{DelayNS: delayNS, Kind: ev.ResponseKind, Responder: ev.Responder, Weight: set.PooledCorr(x)})
}

// isAbsent says whether key is known to wait in neither set.
func (m *rttMatcher) isAbsent(key uint64) bool { return key != 0 && m.absent[absentSlot(key)] == key }

// absentSlot is key's slot in rttMatcher.absent, from its high bits
// multiplied: a flow's keys differ in their low bits only.
func absentSlot(key uint64) uint64 { return key * 0x9e3779b97f4a7c15 >> 56 }

// present forgets that key was absent: a request with it was offered.
func (m *rttMatcher) present(key uint64) {
	if a := &m.absent[absentSlot(key)]; *a == key {
		*a = 0
	}
}

// rttReport is an epoch's RTT report (nil when nothing was seen).
func rttReport(sum *rtt.Summary, epoch int64, clock *owlv1.ClockStatus) *owlv1.RTTReport {
	if sum == nil || sum.Empty() {
		return nil
	}
	r := sum.Report(epoch)
	r.Clock = clock
	return r
}
