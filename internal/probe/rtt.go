package probe

import (
	"net/netip"

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
	cfg      RTTConfig
	seed     uint64
	epochSec float64
	cur, old *fridge.Set
	oldLeft  int     // epochs old still answers
	sizedFor float64 // requests/s
	// requests offered during the current epoch, for the next sizing
	requests uint64
}

func newRTTMatcher(cfg RTTConfig, seed uint64, epochSec float64) (*rttMatcher, error) {
	set, err := fridge.NewSized(cfg.Fridges, 0)
	if err != nil {
		return nil, err
	}
	return &rttMatcher{cfg: cfg, seed: seed, epochSec: epochSec, cur: set}, nil
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
	rtt.ClassifyInto(&ev, p, m.seed)
	if ev.Response {
		sum.Counters.Responses++
		m.respond(ev.ResponseKey, ev.ResponseKind, ev.Responder, p.TimeNS, sum)
	}
	if ev.Request {
		sum.Counters.Requests++
		m.requests++
		// A request already waiting is a retransmission: neither copy
		// gives a sample (Karn's rule).
		if m.cur.Offer(ev.RequestKey, p.TimeNS) {
			sum.Counters.Ambiguous++
		}
	}
}

// respond finds the request a response answers in the current set, then
// the previous, and adds the pair to sum weighted by the pooled
// correction of the set that held it. It takes the event's fields, not a
// pointer to it: the event would have to be copied to memory, and read
// back wider than written, which stalls.
func (m *rttMatcher) respond(key uint64, kind rtt.Kind, responder netip.Addr, tNS int64, sum *rtt.Summary) {
	set := m.cur
	delayNS, x, ok := set.Take(key, tNS)
	if !ok && m.old != nil {
		set = m.old
		delayNS, x, ok = set.Take(key, tNS)
	}
	if !ok {
		return
	}
	sum.Counters.Matched++
	sum.Add(rtt.Sample{DelayNS: delayNS, Kind: kind, Responder: responder, Weight: set.PooledCorr(x)})
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
