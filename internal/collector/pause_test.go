package collector

import (
	"io"
	"log/slog"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// pausingSession is the session of a probe that honours Pause, whose
// messages go out at once; it keeps what was sent.
func pausingSession(t *testing.T, probe string) (*session, *gatedStream) {
	st := &gatedStream{gate: make(chan struct{})}
	close(st.gate)
	s := newSession(probe, st, 1)
	s.pauses = true
	received := make(chan error)
	pumped := make(chan error, 1)
	go func() { pumped <- s.serve(received) }()
	t.Cleanup(func() {
		received <- nil
		<-pumped
	})
	return s, st
}

// pauses lists the Pause messages the stream got: true for a pause,
// false for a resume.
func pauses(st *gatedStream) []bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []bool
	for _, m := range st.sent {
		if p := m.GetPause(); p != nil {
			out = append(out, p.GetPaused())
		}
	}
	return out
}

// TestPausedWhileWorkersBehind: with its workers stopped, a collector
// whose complete pairs pass max_pending_bytes pauses the probe whose
// report completed a pair, at the bound and not at pausePaired times it;
// once the workers have reconciled the pairs, it resumes both probes
// without waiting for maxPause, though sides waiting for their other side
// keep the whole backlog over resumeAt of the bound.
func TestPausedWhileWorkersBehind(t *testing.T) {
	c, err := New(testConfig(t), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Cleanup(func() { checkHeld(t, c) })
	now := time.Now()
	c.now = func() time.Time { return now } // maxPause never passes
	up, down := ldaPair(t, c.cfg.Params.LDA, 50, 1000, 1)
	upR := func(e int64) *owlv1.EpochReport { return report("p", e, owlv1.Role_ROLE_UPSTREAM, up) }
	downR := func(e int64) *owlv1.EpochReport { return report("p", e, owlv1.Role_ROLE_DOWNSTREAM, down) }
	pair := heldBytes(t, c, "a", upR(1)) + heldBytes(t, c, "b", downR(1))
	c.cfg.MaxPendingBytes = int64(2*pair + pair/2)
	c.cfg.Limits.MaxPendingShare = 1 // the bound of all probes
	a, aStream := pausingSession(t, "a")
	b, bStream := pausingSession(t, "b")
	send := func(s *session, r *owlv1.EpochReport) {
		t.Helper()
		if _, err := c.reportReplicated(s, r); err != nil {
			t.Fatalf("%s's report of epoch %d: %v", s.probe, r.GetEpoch(), err)
		}
		c.measureBacklog()
	}
	for e := int64(1); e <= 4; e++ {
		send(a, upR(e)) // 4 sides waiting: under the bound
	}
	for e := int64(1); e <= 4; e++ {
		// Each completes a pair. Before b's fourth, the three pairs
		// are over the bound, the whole backlog under pausePaired
		// times it.
		send(b, downR(e))
		if paused := b.paused.Load(); paused != (e == 4) {
			t.Fatalf("b's report of epoch %d paired, %d of %d bytes in pairs before it: b paused %t, want %t", e, c.pairedBytes.Load(), c.cfg.MaxPendingBytes, paused, e == 4)
		}
	}
	if a.paused.Load() || !b.pausedForWork.Load() {
		t.Errorf("a paused %t (its reports under the bound), b paused for the workers %t", a.paused.Load(), b.pausedForWork.Load())
	}
	send(a, upR(5))
	if !a.paused.Load() || !a.pausedForWork.Load() {
		t.Error("a's next report, with the workers behind, did not pause it for them")
	}
	for e := int64(6); e <= 9; e++ {
		send(a, upR(e)) // sent before the pause reached a
	}
	stop := startWorkers(c)
	defer stop()
	for e := int64(1); e <= 4; e++ {
		waitResult(t, c, "p", e, anyResult)
	}
	waitFor(t, "the pairs to leave the table", func() bool { c.measureBacklog(); return c.pairedBytes.Load() == 0 })
	if !c.overBound("a", resumeAt) {
		t.Fatalf("a's lone sides hold %d bytes, want over %v of the bound: the resumes would not tell the pairs' rule", c.pendingBytes.Load(), resumeAt)
	}
	c.resumePaused()
	if a.paused.Load() || b.paused.Load() {
		t.Errorf("after the workers caught up: a paused %t, b paused %t; want both resumed", a.paused.Load(), b.paused.Load())
	}
	waitFor(t, "the pauses and resumes sent", func() bool {
		return len(pauses(aStream)) == 2 && len(pauses(bStream)) == 2
	})
	for _, p := range [][]bool{pauses(aStream), pauses(bStream)} {
		if !p[0] || p[1] {
			t.Errorf("pause messages %v, want a pause then a resume", p)
		}
	}
}
