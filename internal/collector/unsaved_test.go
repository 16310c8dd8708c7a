package collector

import (
	"io"
	"log/slog"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// newIdle makes a collector whose path workers do not run (the test
// starts them with startWorkers).
func newIdle(t testing.TB, cfg Config) *Collector {
	t.Helper()
	c, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pendingRoles lists the roles of the pending rows stored for a path's
// epoch.
func pendingRoles(t testing.TB, c *Collector, path string, epoch int64) []owlv1.Role {
	t.Helper()
	pend, _, err := c.store.AllPending()
	if err != nil {
		t.Fatal(err)
	}
	var roles []owlv1.Role
	for _, p := range pend {
		if p.Report.GetPath() == path && p.Report.GetEpoch() == epoch {
			roles = append(roles, p.Report.GetRole())
		}
	}
	return roles
}

// sweepEvery runs the collector's sweep every d until the test ends, as
// Run does.
func sweepEvery(t testing.TB, c *Collector, d time.Duration) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(d):
				c.sweep()
			}
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
}

// sendReport sends a report on a probe stream.
func sendReport(t testing.TB, st owlv1.ProbeService_ConnectClient, r *owlv1.EpochReport) {
	t.Helper()
	if err := st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: r}}); err != nil {
		t.Fatal(err)
	}
}

// heldConfig is testConfig with reports held in memory for their other
// side (the default).
func heldConfig(t testing.TB) Config {
	cfg := testConfig(t)
	cfg.WriteLoneAfter = 300 * time.Millisecond
	return cfg
}

// acksOf forwards the acknowledgements of a probe's stream.
func acksOf(st owlv1.ProbeService_ConnectClient) <-chan *owlv1.Ack {
	acks := make(chan *owlv1.Ack, 16)
	go func() {
		defer close(acks)
		for {
			m, err := st.Recv()
			if err != nil {
				return
			}
			if ack := m.GetAck(); ack != nil {
				acks <- ack
			}
		}
	}()
	return acks
}

// noAck fails when an acknowledgement comes within d.
func noAck(t testing.TB, acks <-chan *owlv1.Ack, d time.Duration, what string) {
	t.Helper()
	select {
	case ack := <-acks:
		t.Fatalf("%s acknowledged: %v", what, ack)
	case <-time.After(d):
	}
}

// awaitAck waits for the next acknowledgement and checks its seq.
func awaitAck(t testing.TB, acks <-chan *owlv1.Ack, seq uint64, what string) {
	t.Helper()
	select {
	case ack, ok := <-acks:
		if !ok || ack.GetSeq() != seq {
			t.Fatalf("%s: ack %v, want seq %d", what, ack, seq)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s never acknowledged", what)
	}
}

// Two sides that meet in memory are never written as pending reports:
// both probes are acknowledged once the epoch's result is stored, and
// not before (a copy sent again meanwhile waits for the same result).
func TestSidesAckedWithResult(t *testing.T) {
	cfg := heldConfig(t)
	cfg.WriteLoneAfter = 10 * time.Second
	cfg.PairTimeout = time.Minute
	c := newIdle(t, cfg)
	defer c.Close()
	sweepEvery(t, c, 20*time.Millisecond)
	conn := serve(t, c)
	a := probeStream(t, conn, "a", cfg.Params)
	b := probeStream(t, conn, "b", cfg.Params)
	acksA, acksB := acksOf(a), acksOf(b)
	up, down := ldaPair(t, cfg.Params.LDA, 300, 4321, 5)
	r := report("p", 10, owlv1.Role_ROLE_UPSTREAM, up)
	r.Seq = 1
	sendReport(t, a, r)
	r = report("p", 10, owlv1.Role_ROLE_DOWNSTREAM, down)
	r.Seq = 7
	sendReport(t, b, r)
	sendReport(t, b, r) // a copy, as after a reconnect
	noAck(t, acksA, 300*time.Millisecond, "first side, epoch not reconciled")
	noAck(t, acksB, 0, "second side, epoch not reconciled")
	if got := pendingRoles(t, c, "p", 10); len(got) != 0 {
		t.Fatalf("pending rows written: %v", got)
	}

	t.Cleanup(startWorkers(c))
	for _, w := range []struct {
		acks <-chan *owlv1.Ack
		seq  uint64
	}{{acksA, 1}, {acksB, 7}, {acksB, 7}} {
		awaitAck(t, w.acks, w.seq, "side")
		res, err := c.store.Result("p", 10)
		if err != nil || res.GetMeanNs() != 4321 {
			t.Fatalf("result when a side was acknowledged: %v, %v", res, err)
		}
	}
	if got := pendingRoles(t, c, "p", 10); len(got) != 0 {
		t.Errorf("pending rows after the result: %v", got)
	}
}

// A side whose other side does not come is written as a pending report
// after write_lone_after, and acknowledged then; its other side, coming
// later, makes the epoch.
func TestLoneSideWrittenAfterWait(t *testing.T) {
	cfg := heldConfig(t)
	c := newTest(t, cfg)
	defer c.Close()
	sweepEvery(t, c, 20*time.Millisecond)
	conn := serve(t, c)
	a := probeStream(t, conn, "a", cfg.Params)
	acksA := acksOf(a)
	up, down := ldaPair(t, cfg.Params.LDA, 300, 77, 8)
	r := report("p", 20, owlv1.Role_ROLE_UPSTREAM, up)
	r.Seq = 3
	start := time.Now()
	sendReport(t, a, r)
	awaitAck(t, acksA, 3, "lone side")
	if waited := time.Since(start); waited < cfg.WriteLoneAfter {
		t.Errorf("lone side acknowledged after %v, before write_lone_after %v", waited, cfg.WriteLoneAfter)
	}
	if got := pendingRoles(t, c, "p", 20); len(got) != 1 || got[0] != owlv1.Role_ROLE_UPSTREAM {
		t.Fatalf("pending rows when the lone side was acknowledged: %v", got)
	}
	b := probeStream(t, conn, "b", cfg.Params)
	acksB := acksOf(b)
	r = report("p", 20, owlv1.Role_ROLE_DOWNSTREAM, down)
	r.Seq = 4
	sendReport(t, b, r)
	awaitAck(t, acksB, 4, "second side")
	if res, err := c.store.Result("p", 20); err != nil || res.GetMeanNs() != 77 {
		t.Fatalf("result %v, %v", res, err)
	}
	if got := pendingRoles(t, c, "p", 20); len(got) != 0 {
		t.Errorf("pending rows after the result: %v", got)
	}
}

// storedThenHeld sends path p's epoch (n packets of a constant delay, an
// ldaPair seed) as a stored upstream side and a downstream side from a
// stream, held in memory: it returns the second side's wait.
func storedThenHeld(t testing.TB, c *Collector, epoch int64, n int, delayNS int64, seed uint64) *saveWait {
	t.Helper()
	up, down := ldaPair(t, c.cfg.Params.LDA, n, delayNS, seed)
	if err := c.report("a", report("p", epoch, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	_, unsaved, err := c.takeReport("b", report("p", epoch, owlv1.Role_ROLE_DOWNSTREAM, down), true, false, 1)
	if err != nil || unsaved == nil {
		t.Fatalf("second side: wait %v, err %v", unsaved, err)
	}
	return unsaved
}

// A collector that stops between taking the second side and storing the
// result has not acknowledged it: the probe sends it again to the
// restarted collector, which finds the first side stored, and the epoch
// comes out exact.
func TestUnsavedSideSentAgainAfterRestart(t *testing.T) {
	cfg := heldConfig(t)
	c := newIdle(t, cfg)
	_, down := ldaPair(t, cfg.Params.LDA, 300, 999, 6)
	unsaved := storedThenHeld(t, c, 11, 300, 999, 6)
	select {
	case <-unsaved.done:
		t.Fatal("second side's wait ended with no result stored")
	default:
	}
	c.Close()

	c2 := newTest(t, cfg)
	defer c2.Close()
	if got := pendingRoles(t, c2, "p", 11); len(got) != 1 || got[0] != owlv1.Role_ROLE_UPSTREAM {
		t.Fatalf("pending rows after restart: %v", got)
	}
	_, unsaved, err := c2.takeReport("b", report("p", 11, owlv1.Role_ROLE_DOWNSTREAM, down), true, false, 1)
	if err != nil || unsaved == nil {
		t.Fatalf("second side again: wait %v, err %v", unsaved, err)
	}
	select {
	case <-unsaved.done:
	case <-time.After(5 * time.Second):
		t.Fatal("no result")
	}
	if res, err := c2.store.Result("p", 11); err != nil || res.GetMeanNs() != 999 || missingSide(res) {
		t.Fatalf("result %v, %v", res, err)
	}
}

// An epoch that fails to reconcile writes its unsaved side as a pending
// report and lets its probe be acknowledged, as if it had come first.
func TestUnsavedSideSavedWhenReconcileFails(t *testing.T) {
	cfg := heldConfig(t)
	c := newIdle(t, cfg)
	defer c.Close()
	unsaved := storedThenHeld(t, c, 12, 200, 50, 7)
	saveUnsaved(c.store, c.repl, c.paths["p"], 12, false)
	select {
	case <-unsaved.done:
		if unsaved.err != nil {
			t.Fatal(unsaved.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not end")
	}
	if got := pendingRoles(t, c, "p", 12); len(got) != 2 {
		t.Fatalf("pending rows: %v (want both sides)", got)
	}
}
