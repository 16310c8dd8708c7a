package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// killPlan is -kill: which spawned member to kill, and after how many
// epochs sent.
type killPlan struct {
	name  string // "c1" … ; "" for none
	after int    // epochs sent before the kill
}

// parseKill reads -kill's "NAME@K" for a cluster of spawn members and
// a run of epochs epochs.
func parseKill(s string, spawn, epochs int) (killPlan, error) {
	if s == "" {
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
	}
	return killPlan{name: name, after: after}, nil
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
	at        time.Time
	lastEpoch int64
	mid, then probeCounts
	results   int
	survivors snapshot // the other members' CPU then
}

// killMember kills member name with SIGKILL (no leaving the cluster, no closing
// its store: as a crash or a power cut) after epoch e was sent.
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
	if err := p.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("killing collector %s: %w", name, err)
	}
	<-p.exited
	k.at = time.Now()
	l.killed = k
	k.survivors = l.snapshot()
	k.results = k.survivors.results
	fmt.Fprintf(os.Stderr, "killed collector %s (SIGKILL) after epoch %d\n", name, e)
	return nil
}

// killSummary is what followed a -kill.
type killSummary struct {
	Member     string `json:"member"`
	AfterEpoch int64  `json:"after_epoch"` // the last epoch sent before the kill
	// InFlight counts the path-epochs up to AfterEpoch whose first result
	// came after the kill, InFlightMax the longest of their latencies.
	InFlight    int     `json:"in_flight"`
	InFlightMax float64 `json:"in_flight_latency_max_seconds"`
	// Latency of the epochs sent after the kill.
	LatencyP50 float64 `json:"latency_p50_seconds"`
	LatencyP99 float64 `json:"latency_p99_seconds"`
	LatencyMax float64 `json:"latency_max_seconds"`
	// The probes' reports and rebuilds over the second half of the
	// epochs before the kill, and after it: a new owner that told the
	// probes other synopsis sizes shows in both.
	BytesPerReportBefore    float64 `json:"bytes_per_report_before"`
	BytesPerReportAfter     float64 `json:"bytes_per_report_after"`
	RebuildsPerReportBefore float64 `json:"rebuilds_per_report_before"`
	RebuildsPerReportAfter  float64 `json:"rebuilds_per_report_after"`
	SurvivorsMsPerPathEpoch float64 `json:"survivors_ms_per_path_epoch_after"`
}

// summarizeKill sums up what followed the kill, up to after.
func (l *loadRun) summarizeKill(s *summary, after snapshot) *killSummary {
	k := l.killed
	if k == nil {
		return nil
	}
	ks := &killSummary{Member: k.proc.name, AfterEpoch: k.lastEpoch}
	r := l.res
	r.outcomesMu.Lock()
	var later []time.Duration
	for _, x := range r.latencies {
		switch {
		case x.epoch > k.lastEpoch:
			later = append(later, x.d)
		case x.at.After(k.at):
			ks.InFlight++
			ks.InFlightMax = max(ks.InFlightMax, x.d.Seconds())
		}
	}
	r.outcomesMu.Unlock()
	ks.LatencyP50, ks.LatencyP99, ks.LatencyMax = quantile(later, 0.5), quantile(later, 0.99), quantile(later, 1)
	if n := k.then.reports - k.mid.reports; n > 0 {
		ks.BytesPerReportBefore = float64(k.then.bytes-k.mid.bytes) / float64(n)
		ks.RebuildsPerReportBefore = float64(k.then.rebuilds-k.mid.rebuilds) / float64(n)
	}
	if n := s.Reports - k.then.reports; n > 0 {
		ks.BytesPerReportAfter = float64(s.ReportBytes-k.then.bytes) / float64(n)
		ks.RebuildsPerReportAfter = float64(s.Rebuilds-k.then.rebuilds) / float64(n)
	}
	var cpu time.Duration
	for i, p := range l.procs {
		if p != k.proc && k.survivors.procs[i].ok && after.procs[i].ok {
			cpu += after.procs[i].cpu - k.survivors.procs[i].cpu
		}
	}
	if n := after.results - k.results; n > 0 {
		ks.SurvivorsMsPerPathEpoch = cpu.Seconds() * 1000 / float64(n)
	}
	return ks
}
