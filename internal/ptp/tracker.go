package ptp

import (
	"fmt"
	"sync"
	"time"
)

// minAcquire is how many measurements a source needs before it calls itself
// synchronized.
const minAcquire = 4

// tracker is what the measuring sources (phc, ptp) share: the filter, the
// correction it yields, and the state machine acquiring → synchronized →
// holdover → unsynchronized.
type tracker struct {
	base
	cfg       Config
	source    string
	reference string
	// extraNS is added to every bound: the reference's own error (phc).
	extraNS int64

	mu      sync.Mutex
	filt    *filter
	lastNS  int64 // local time of the last measurement
	lastFit fit
	delayNS int64
	have    bool
	startNS int64 // local time the source started
}

func newTracker(cfg Config, source, reference string) tracker {
	return tracker{
		base:      newBase(cfg.Fault),
		cfg:       cfg,
		source:    source,
		reference: reference,
		filt:      newFilter(cfg.Window, int64(4*cfg.Interval)),
	}
}

// start publishes the status before the first measurement.
func (t *tracker) start() {
	t.startNS = t.local(t.now().UnixNano())
	t.publish(Status{Source: t.source, Reference: t.reference, State: StateAcquiring, Corrected: t.cfg.Correct,
		AtNS: t.Now(), Detail: "waiting for the first measurement"})
}

// measured takes one measurement, refits and publishes the new status.
// delayNS is reported as the status's delay.
func (t *tracker) measured(s sample, delayNS int64) {
	t.mu.Lock()
	t.filt.add(s)
	f, ok := t.filt.estimate()
	if !ok {
		t.mu.Unlock()
		return
	}
	t.lastNS, t.lastFit, t.delayNS, t.have = s.atNS, f, delayNS, true
	n := t.filt.len()
	t.mu.Unlock()
	if t.cfg.Correct {
		c := f.corr
		t.corr.Store(&c)
	}
	st := t.status(s.atNS, f, delayNS)
	if n < minAcquire {
		st.State = StateAcquiring
		st.Detail = fmt.Sprintf("%d of %d measurements", n, minAcquire)
	} else {
		st.State = StateSynchronized
		st.Detail = fmt.Sprintf("fit of %d of the last %d measurements", f.used, n)
	}
	t.publish(st)
}

// missed records a failed measurement at local time nowNS: the clock holds
// over on its last fit, then loses synchronization.
func (t *tracker) missed(nowNS int64, err error) {
	t.mu.Lock()
	have, last, f, d := t.have, t.lastNS, t.lastFit, t.delayNS
	t.mu.Unlock()
	if !have {
		st := Status{Source: t.source, Reference: t.reference, State: StateAcquiring, Corrected: t.cfg.Correct,
			AtNS: t.Now(), Detail: err.Error()}
		if nowNS-t.startNS > int64(t.cfg.Holdover) {
			st.State = StateUnsynchronized
			st.Detail = fmt.Sprintf("no measurement in %v: %v", durationNS(nowNS-t.startNS), err)
		}
		t.publish(st)
		return
	}
	st := t.status(nowNS, f, d)
	if nowNS-last > int64(t.cfg.Holdover) {
		st.State = StateUnsynchronized
	} else {
		st.State = StateHoldover
	}
	st.Detail = fmt.Sprintf("no measurement for %v: %v", durationNS(nowNS-last), err)
	t.publish(st)
}

// status describes the fit f at local time nowNS.
func (t *tracker) status(nowNS int64, f fit, delayNS int64) Status {
	offset := f.corr.at(nowNS)
	// The model is used up to one interval past now, by then drifting
	// from the truth by the slope's own error and the configured drift.
	age := nowNS - f.corr.atNS + int64(t.cfg.Interval)
	bound := f.boundNS + t.extraNS + drift(t.cfg.DriftPPM+f.slopeErr*1e6, age)
	if !t.cfg.Correct {
		// Timestamps keep the whole offset.
		bound += abs(offset)
	}
	return Status{
		Source:        t.source,
		Reference:     t.reference,
		OffsetNS:      offset,
		Corrected:     t.cfg.Correct,
		DelayNS:       delayNS,
		UncertaintyNS: bound,
		AtNS:          t.Correct(nowNS - t.faultNS),
	}
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

func durationNS(ns int64) time.Duration { return time.Duration(ns).Round(time.Millisecond) }

// measurements is how many measurements the filter holds.
func (t *tracker) measurements() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.filt.len()
}
