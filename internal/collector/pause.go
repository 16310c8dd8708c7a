package collector

import (
	"sync"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// Flow control. A collector that falls behind holds more and more reports
// in memory; past max_pending_bytes it used to end the streams of the
// probes that sent them, which cut the repairs in flight on those streams
// and made each probe send again all it had not had acknowledged. A probe
// that says in its Hello that it pauses is instead asked to hold its
// reports (Pause) while the backlog is over the bound, and to send them
// again once it is back under resumeAt of it; it keeps answering requests
// meanwhile. While the backlog is sides waiting for their other side,
// only a probe whose report waits is paused: the probe that is behind
// completes pairs, and pausing it would keep the sides waiting for it in
// memory. Once the complete pairs alone are over the bound, the workers
// are what is behind and every probe that sends is paused, until the
// pairs are back under resumeAt of it. Past pauseSlack times the bound
// (reports sent before the pause arrived, or probes that do not pause),
// reports are turned away as before.
const (
	pauseSlack = 2.0
	// pausePaired is where a probe whose reports complete pairs is
	// paused whatever the backlog is made of (its share of it, say).
	// Lower (1.5 was tried), it paused the probe that was behind while
	// the backlog was the sides waiting for it, and the two probes took
	// turns every maxPause (TestPausedNotCutOff: 7 of 8 results in 20 s).
	// A collector whose workers are behind pauses its probes at the
	// bound (workersBehind): with the pairs let grow to three times it,
	// the heap outgrew the soft memory limit and garbage collection took
	// a quarter of the CPU.
	pausePaired = 3.0
	resumeAt    = 0.8
	// maxPause resumes a probe paused that long even while the backlog
	// stays over the bound: the sides in memory may be waiting for its
	// reports. It is paused again by its next report that waits.
	maxPause = 2 * time.Second
)

// A probe that pauses is turned away past pauseSlack times the bound only
// once it has been paused for pauseGrace and still sends, and past
// hardSlack always: the reports it sent before a pause reached it (a
// collector takes up to 64 of a stream at once) are taken, and are what
// the bound's slack is for. Turning it away ends its stream, and a probe
// that reconnects sends again everything unacknowledged, before any
// pause: TestPausedNotCutOff saw a probe cut off so three times in a row.
const (
	pauseGrace = time.Second
	hardSlack  = 4.0
)

// shedSlack is how many times the backlog's bound a report of sess may
// find before it is turned away: 1 for a probe that does not pause.
func (c *Collector) shedSlack(sess *session) float64 {
	switch {
	case !sess.pauses:
		return 1
	case sess.paused.Load() && c.now().UnixNano()-sess.pausedAt.Load() > int64(pauseGrace):
		return pauseSlack
	}
	return hardSlack
}

// pausedStreams are the streams asked to hold their reports.
type pausedStreams struct {
	mu sync.Mutex
	m  map[*session]struct{}
}

// pauseIfBehind pauses the stream of sess when the complete pairs in
// memory are over the backlog's bound (the workers are behind), when the
// backlog, or its probe's share of it, is over its bound and the report
// just taken (path, epoch) waits for its other side, or when they are
// over pausePaired times the bound whatever the report.
func (c *Collector) pauseIfBehind(sess *session, path string, epoch int64) {
	if !sess.pauses || sess.paused.Load() {
		return
	}
	forWork := c.workersBehind(1)
	if !forWork && (!c.overBound(sess.probe, 1) || c.paired(path, epoch) && !c.overBound(sess.probe, pausePaired)) {
		return
	}
	// The pause is marked, remembered and queued to the probe under the
	// lock resumePaused holds to undo all three: queued apart, a resume
	// could overtake it and leave the probe paused with nothing to resume
	// it (a CI run saw a probe stall so).
	c.paused.mu.Lock()
	defer c.paused.mu.Unlock()
	if sess.paused.Load() {
		return
	}
	sess.pausedAt.Store(c.now().UnixNano())
	sess.pausedForWork.Store(forWork)
	sess.paused.Store(true)
	if c.paused.m == nil {
		c.paused.m = map[*session]struct{}{}
	}
	c.paused.m[sess] = struct{}{}
	c.m.pauses.WithLabelValues(sess.probe).Inc()
	c.log.Debug("pausing a probe: the backlog is over max_pending_bytes", "probe", sess.probe, "pending_bytes", c.pendingBytes.Load(), "paired_bytes", c.pairedBytes.Load())
	_ = sess.send(&owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Pause{Pause: &owlv1.Pause{Paused: true}}})
}

// workersBehind says whether the complete pairs held in memory are over
// scale times the backlog's bound.
func (c *Collector) workersBehind(scale float64) bool {
	max := c.cfg.MaxPendingBytes
	return max > 0 && float64(c.pairedBytes.Load()) > scale*float64(max)
}

// overBound says whether the backlog, or the share of it of probe, is over
// scale times its bound.
func (c *Collector) overBound(probe string, scale float64) bool {
	max := c.cfg.MaxPendingBytes
	return max > 0 && (float64(c.pendingBytes.Load()) > scale*float64(max) || c.shareExceeded(probe, scale))
}

// paired says whether the epoch of path has both sides in.
func (c *Collector) paired(path string, epoch int64) bool {
	ps := c.paths[path]
	if ps == nil {
		return false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	pr := ps.pending[epoch]
	return pr != nil && pr.complete()
}

// resumePaused lets paused streams send again: those whose backlog is
// back under resumeAt of its bound (the complete pairs, for a stream
// paused because the workers were behind), and those paused for
// maxPause.
func (c *Collector) resumePaused() {
	now := c.now().UnixNano()
	c.paused.mu.Lock()
	defer c.paused.mu.Unlock()
	for s := range c.paused.m {
		select {
		case <-s.done:
			delete(c.paused.m, s)
			continue
		default:
		}
		behind := c.overBound(s.probe, resumeAt)
		if s.pausedForWork.Load() {
			behind = c.workersBehind(resumeAt)
		}
		if behind && now-s.pausedAt.Load() < int64(maxPause) {
			continue
		}
		delete(c.paused.m, s)
		s.paused.Store(false)
		_ = s.send(&owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Pause{Pause: &owlv1.Pause{Paused: false}}})
	}
}
