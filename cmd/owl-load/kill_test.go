package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestParseKill: -kill names a member other than c0 of a spawned cluster
// and a count of epochs inside the run, -restart-after a count of epochs
// after it, still inside the run; anything else is refused with the
// reason.
func TestParseKill(t *testing.T) {
	if p, err := parseKill("c2@10", "KILL", 5, 3, 30); err != nil || p != (killPlan{name: "c2", after: 10, restart: 5}) {
		t.Errorf("c2@10, restart after 5: %+v, %v", p, err)
	}
	if p, err := parseKill("c1@10", "TERM", 0, 3, 30); err != nil || p != (killPlan{name: "c1", after: 10, term: true}) {
		t.Errorf("c1@10, SIGTERM: %+v, %v", p, err)
	}
	if p, err := parseKill("", "KILL", 0, 1, 30); err != nil || p.name != "" {
		t.Errorf("no -kill: %+v, %v", p, err)
	}
	if _, err := parseKill("c1@10", "INT", 0, 3, 30); err == nil || !strings.Contains(err.Error(), "KILL or TERM") {
		t.Errorf("-kill-signal INT: %v, want an error saying KILL or TERM", err)
	}
	for _, c := range []struct {
		s                     string
		restart, spawn, epoch int
		want                  string
	}{
		{"c1@5", 0, 1, 30, "-spawn 2 or more"},
		{"c0@5", 0, 3, 30, "c1 to c2"},
		{"c3@5", 0, 3, 30, "c1 to c2"},
		{"x1@5", 0, 3, 30, "c1 to c2"},
		{"c1", 0, 3, 30, "NAME@EPOCHS"},
		{"c1@x", 0, 3, 30, "NAME@EPOCHS"},
		{"c1@0", 0, 3, 30, "1 to 29"},
		{"c1@30", 0, 3, 30, "1 to 29"},
		{"", 5, 3, 30, "without -kill"},
		{"c1@20", 10, 3, 30, "1 to 9 epochs after"},
		{"c1@20", -1, 3, 30, "1 to 9 epochs after"},
	} {
		if _, err := parseKill(c.s, "KILL", c.restart, c.spawn, c.epoch); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q, restart after %d, -spawn %d: %v, want an error saying %q", c.s, c.restart, c.spawn, err, c.want)
		}
	}
}

// TestSummarizeKill: results of epochs up to the kill that came after it
// count as in flight; the epochs after the kill, and after the restart,
// are summed apart, with the probes' counters over each stretch; the
// members' CPU from the kill on is the survivors' since the kill and the
// member back's since its start, over the results since the kill.
func TestSummarizeKill(t *testing.T) {
	at := time.Unix(1000, 0)
	victim, other := &collectorProc{name: "c1"}, &collectorProc{name: "c0"}
	l := &loadRun{procs: []*collectorProc{other, victim}, res: &results{}}
	l.res.latencies = []latencySample{
		{epoch: 9, at: at.Add(-time.Second), d: 100 * time.Millisecond}, // before the kill
		{epoch: 10, at: at.Add(2 * time.Second), d: 3 * time.Second},    // in flight
		{epoch: 11, at: at.Add(4 * time.Second), d: 4 * time.Second},
		{epoch: 12, at: at.Add(5 * time.Second), d: 2 * time.Second},
		{epoch: 13, at: at.Add(6 * time.Second), d: time.Second}, // after the restart
	}
	l.killed.Store(&killed{proc: victim, at: at, lastEpoch: 10, results: 1000,
		mid:       probeCounts{reports: 100, bytes: 1000, rebuilds: 1},
		then:      probeCounts{reports: 200, bytes: 3000, rebuilds: 3},
		survivors: snapshot{procs: []procStats{{cpu: time.Second, ok: true}, {cpu: time.Second, ok: true}}}})
	s := &summary{Reports: 300, ReportBytes: 7000, Rebuilds: 13}
	after := snapshot{results: 1500, procs: []procStats{{cpu: 2 * time.Second, ok: true}, {ok: false}}}
	k := l.summarizeKill(s, after)
	switch {
	case k.Member != "c1" || k.AfterEpoch != 10:
		t.Errorf("member %s after epoch %d, want c1 after 10", k.Member, k.AfterEpoch)
	case k.InFlight != 1 || k.InFlightMax != 3:
		t.Errorf("%d in flight, longest %v s; want 1, 3", k.InFlight, k.InFlightMax)
	case k.After.FromEpoch != 11 || k.After.LatencyP50 != 2 || k.After.LatencyMax != 4 || k.Back != nil:
		t.Errorf("after the kill %+v, back %+v; want from epoch 11, p50 1, max 4, no restart", k.After, k.Back)
	case k.BytesPerReportBefore != 20 || k.After.BytesPerReport != 40:
		t.Errorf("bytes per report %v before, %v after; want 20, 40", k.BytesPerReportBefore, k.After.BytesPerReport)
	case k.RebuildsPerReportBefore != 0.02 || k.After.RebuildsPerReport != 0.1:
		t.Errorf("rebuilds per report %v before, %v after; want 0.02, 0.1", k.RebuildsPerReportBefore, k.After.RebuildsPerReport)
	case math.Abs(k.MsPerPathEpoch-2) > 1e-9:
		t.Errorf("survivors %v ms per path-epoch, want 2 (1 s over 500 results)", k.MsPerPathEpoch)
	}

	// Back after epoch 12, with the probes' counters then.
	l.back.Store(&back{proc: &collectorProc{name: "c1-back"}, lastEpoch: 12, took: 300 * time.Millisecond,
		then: probeCounts{reports: 250, bytes: 5500, rebuilds: 8}})
	after.back = procStats{cpu: time.Second, ok: true} // since its start
	k = l.summarizeKill(s, after)
	switch b := k.Back; {
	case b == nil:
		t.Fatal("no summary of the restart")
	case k.After.LatencyMax != 4 || k.After.LatencyP50 != 2 || k.After.BytesPerReport != 50 || k.After.RebuildsPerReport != 0.1:
		t.Errorf("from the kill to the restart %+v; want p50 2, max 4, 50 bytes and 0.1 rebuilds a report", k.After)
	case b.FromEpoch != 13 || b.LatencyMax != 1 || b.BytesPerReport != 30 || b.RebuildsPerReport != 0.1 || b.ListenSeconds != 0.3:
		t.Errorf("after the restart %+v; want from epoch 13, max 1 s, 30 bytes and 0.1 rebuilds a report, listening after 0.3 s", b)
	case math.Abs(k.MsPerPathEpoch-4) > 1e-9:
		t.Errorf("members %v ms per path-epoch, want 4 (c0's 1 s and c1's 1 s back over 500 results)", k.MsPerPathEpoch)
	}
	l.killed.Store(nil)
	if l.summarizeKill(s, after) != nil {
		t.Error("a summary of a kill that did not happen")
	}
}

// TestRestartEmptyNeedsRestart: -restart-empty alone is refused.
func TestRestartEmptyNeedsRestart(t *testing.T) {
	c := defaultConfig()
	c.spawn, c.kill, c.restartEmpty = 3, "c1@10", true
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "-restart-after") {
		t.Errorf("-restart-empty without -restart-after: %v", err)
	}
	c.restartAfter = 5
	if err := c.validate(); err != nil {
		t.Errorf("-kill c1@10 -restart-after 5 -restart-empty: %v", err)
	}
}
