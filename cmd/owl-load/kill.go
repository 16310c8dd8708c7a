package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killPlan is -kill, -kill-signal and -restart-after: which spawned
// member to kill, after how many epochs sent, with which signal, and how
// many epochs later to start it again (0: never).
type killPlan struct {
	name    string // "c1" … ; "" for none
	after   int    // epochs sent before the kill
	restart int    // epochs sent after the kill before the restart
	// term stops the member with SIGTERM (it leaves the cluster and
	// closes its store) instead of SIGKILL.
	term bool
}

// parseKill reads -kill's "NAME@K", -kill-signal (KILL or TERM) and
// -restart-after for a cluster of spawn members and a run of epochs
// epochs.
func parseKill(s, signal string, restart, spawn, epochs int) (killPlan, error) {
	if signal != "KILL" && signal != "TERM" {
		return killPlan{}, fmt.Errorf("-kill-signal %q: KILL or TERM", signal)
	}
	if s == "" {
		if restart != 0 {
			return killPlan{}, fmt.Errorf("-restart-after %d without -kill", restart)
		}
		return killPlan{}, nil
	}
	name, k, ok := strings.Cut(s, "@")
	after, err := strconv.Atoi(k)
	if !ok || err != nil {
		return killPlan{}, fmt.Errorf("-kill %q: want NAME@EPOCHS, as c1@20", s)
	}
	i, err := strconv.Atoi(strings.TrimPrefix(name, "c"))
	switch {
	case spawn < 2:
		return killPlan{}, fmt.Errorf("-kill %q needs -spawn 2 or more: a member is killed so that the others take its paths over", s)
	case !strings.HasPrefix(name, "c") || err != nil || i < 1 || i >= spawn:
		return killPlan{}, fmt.Errorf("-kill %q: the member is one of c1 to c%d (c0 is the one owl-load's probes and queries start from)", s, spawn-1)
	case after < 1 || after >= epochs:
		return killPlan{}, fmt.Errorf("-kill %q: kill after 1 to %d epochs sent (of -epochs %d)", s, epochs-1, epochs)
	case restart < 0 || restart > 0 && after+restart >= epochs:
		return killPlan{}, fmt.Errorf("-restart-after %d: 1 to %d epochs after the kill, within -epochs %d", restart, epochs-after-1, epochs)
	}
	return killPlan{name: name, after: after, restart: restart, term: signal == "TERM"}, nil
}

// probeCounts are the emulated probes' counters summed.
type probeCounts struct{ reports, bytes, rebuilds uint64 }

// probeCounts sums the probes' counters now.
func (l *loadRun) probeCounts() probeCounts {
	var c probeCounts
	for _, pr := range l.probes {
		st := pr.Stats()
		c.reports, c.bytes, c.rebuilds = c.reports+st.Reports, c.bytes+st.Bytes, c.rebuilds+st.Rebuilds
	}
	return c
}

// killed is what owl-load saw when it killed a member: when, the epoch
// sent last before it, and the probes' counters then and halfway to it
// (the epochs before the kill, past the first ones, which carry the
// default synopsis sizes).
type killed struct {
	proc      *collectorProc
	signal    string // how: SIGKILL, SIGTERM, or SIGTERM then SIGKILL
	at        time.Time
	lastEpoch int64
	mid, then probeCounts
	results   int
	survivors snapshot // the other members' CPU then
}

// killMember kills member name after epoch e was sent: with SIGKILL (no
// leaving the cluster, no closing its store: as a crash or a power cut),
// or with SIGTERM (-kill-signal TERM: as an operator stopping it), then
// SIGKILL if it has not exited within termWait.
func (l *loadRun) killMember(name string, e int64) error {
	var p *collectorProc
	for _, q := range l.procs {
		if q.name == name {
			p = q
		}
	}
	if p == nil {
		return fmt.Errorf("-kill: no collector %s", name)
	}
	k := &killed{proc: p, lastEpoch: e, mid: l.killMid, then: l.probeCounts()}
	sig := "SIGKILL"
	if l.kill.term {
		sig = "SIGTERM"
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			return fmt.Errorf("stopping collector %s: %w", name, err)
		}
		select {
		case <-p.exited:
		case <-time.After(termWait):
			sig = fmt.Sprintf("SIGTERM, then SIGKILL after %s", termWait)
		}
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing collector %s: %w", name, err)
	}
	<-p.exited
	k.at, k.signal = time.Now(), sig
	l.killed.Store(k)
	k.survivors = l.snapshot()
	k.results = k.survivors.results
	fmt.Fprintf(os.Stderr, "killed collector %s (%s) after epoch %d\n", name, sig, e)
	return nil
}

// termWait is how long a member stopped with SIGTERM may take to exit:
// it leaves the cluster (2 s at most) and stops its servers (5 s for its
// streams to end, 2 s for its HTTP server).
const termWait = 20 * time.Second

// back is what owl-load saw when it started the killed member again.
type back struct {
	proc      *collectorProc // nil when it did not start
	err       error
	lastEpoch int64         // the epoch sent last before the restart
	at        time.Time     // when it was started
	took      time.Duration // until it listened
	then      probeCounts
	done      chan struct{} // closed once it listens or failed to
}

// restartMember starts the killed member again, with its configuration,
// data directory and gossip address, after epoch e was sent; it returns
// at once, and b.done is closed once the member listens.
func (l *loadRun) restartMember(ctx context.Context, e int64) {
	k := l.killed.Load()
	b := &back{lastEpoch: e, at: time.Now(), then: l.probeCounts(), done: make(chan struct{})}
	l.back.Store(b)
	go func() {
		defer close(b.done)
		if l.cfg.restartEmpty {
			if b.err = os.RemoveAll(filepath.Join(l.dir, k.proc.name+"-data")); b.err != nil {
				b.err = fmt.Errorf("-restart-empty: %w", b.err)
				return
			}
		}
		b.proc, b.err = startCollector(ctx, l.bin, k.proc.name+"-back", l.dir, k.proc.yaml)
		b.took = time.Since(b.at)
		if b.err != nil {
			b.err = fmt.Errorf("-restart-after: %w", b.err)
			return
		}
		fmt.Fprintf(os.Stderr, "started collector %s again after epoch %d (listening after %v)\n", k.proc.name, e, b.took.Round(time.Millisecond))
	}()
}

// killSummary is what followed a -kill (and a -restart-after).
type killSummary struct {
	Member     string `json:"member"`
	Signal     string `json:"signal"`      // SIGKILL, SIGTERM, or SIGTERM then SIGKILL
	AfterEpoch int64  `json:"after_epoch"` // the last epoch sent before the kill
	// InFlight counts the path-epochs up to AfterEpoch whose first result
	// came after the kill, InFlightMax the longest of their latencies.
	InFlight    int     `json:"in_flight"`
	InFlightMax float64 `json:"in_flight_latency_max_seconds"`
	// The probes' reports and rebuilds over the second half of the
	// epochs before the kill: a new owner that told the probes other
	// synopsis sizes shows in both after it.
	BytesPerReportBefore    float64 `json:"bytes_per_report_before"`
	RebuildsPerReportBefore float64 `json:"rebuilds_per_report_before"`
	// After: from the kill to the restart, or to the end.
	After windowSummary `json:"after"`
	// Back (with -restart-after): from the restart to the end.
	Back *windowSummary `json:"back,omitempty"`
	// MsPerPathEpoch is the members' CPU from the kill to the end (the
	// member back: since its start) per result that came in that time.
	MsPerPathEpoch float64 `json:"ms_per_path_epoch_after"`
}

// windowSummary is a stretch of the run after the kill.
type windowSummary struct {
	FromEpoch int64 `json:"from_epoch"` // the first epoch sent in it
	// Latency of its epochs.
	LatencyP50        float64 `json:"latency_p50_seconds"`
	LatencyP99        float64 `json:"latency_p99_seconds"`
	LatencyMax        float64 `json:"latency_max_seconds"`
	BytesPerReport    float64 `json:"bytes_per_report"`
	RebuildsPerReport float64 `json:"rebuilds_per_report"`
	// ListenSeconds (back only) is how long the member took to listen.
	ListenSeconds float64 `json:"listen_seconds,omitempty"`
}

// summarizeKill sums up what followed the kill, up to after.
func (l *loadRun) summarizeKill(s *summary, after snapshot) *killSummary {
	k := l.killed.Load()
	if k == nil {
		return nil
	}
	ks := &killSummary{Member: k.proc.name, Signal: k.signal, AfterEpoch: k.lastEpoch}
	if n := k.then.reports - k.mid.reports; n > 0 {
		ks.BytesPerReportBefore = float64(k.then.bytes-k.mid.bytes) / float64(n)
		ks.RebuildsPerReportBefore = float64(k.then.rebuilds-k.mid.rebuilds) / float64(n)
	}
	end := probeCounts{reports: s.Reports, bytes: s.ReportBytes, rebuilds: s.Rebuilds}
	b := l.back.Load()
	if b == nil || b.proc == nil {
		ks.After = l.window(k.lastEpoch+1, math.MaxInt64, k.then, end)
	} else {
		ks.After = l.window(k.lastEpoch+1, b.lastEpoch, k.then, b.then)
		w := l.window(b.lastEpoch+1, math.MaxInt64, b.then, end)
		w.ListenSeconds = b.took.Seconds()
		ks.Back = &w
	}
	r := l.res
	r.outcomesMu.Lock()
	for _, x := range r.latencies {
		if x.epoch <= k.lastEpoch && x.at.After(k.at) {
			ks.InFlight++
			ks.InFlightMax = max(ks.InFlightMax, x.d.Seconds())
		}
	}
	r.outcomesMu.Unlock()
	// CPU: the members up all along, from the kill to the end, over the
	// results in that time, and the member back since its start.
	var cpu time.Duration
	for i, p := range l.procs {
		if p != k.proc && k.survivors.procs[i].ok && after.procs[i].ok {
			cpu += after.procs[i].cpu - k.survivors.procs[i].cpu
		}
	}
	if after.back.ok {
		cpu += after.back.cpu
	}
	if n := after.results - k.results; n > 0 {
		ks.MsPerPathEpoch = cpu.Seconds() * 1000 / float64(n)
	}
	return ks
}

// window sums up the epochs [from, to] sent after the kill, with the
// probes' counters at their start and end.
func (l *loadRun) window(from, to int64, c0, c1 probeCounts) windowSummary {
	w := windowSummary{FromEpoch: from}
	r := l.res
	r.outcomesMu.Lock()
	var ds []time.Duration
	for _, x := range r.latencies {
		if x.epoch >= from && x.epoch <= to {
			ds = append(ds, x.d)
		}
	}
	r.outcomesMu.Unlock()
	w.LatencyP50, w.LatencyP99, w.LatencyMax = quantile(ds, 0.5), quantile(ds, 0.99), quantile(ds, 1)
	if n := c1.reports - c0.reports; n > 0 {
		w.BytesPerReport = float64(c1.bytes-c0.bytes) / float64(n)
		w.RebuildsPerReport = float64(c1.rebuilds-c0.rebuilds) / float64(n)
	}
	return w
}
