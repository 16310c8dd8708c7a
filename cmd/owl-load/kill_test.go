package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestParseKill: -kill names a member other than c0 of a spawned cluster
// and a count of epochs inside the run; anything else is refused with
// the reason.
func TestParseKill(t *testing.T) {
	if p, err := parseKill("c2@10", 3, 30); err != nil || p != (killPlan{name: "c2", after: 10}) {
		t.Errorf("c2@10: %+v, %v", p, err)
	}
	if p, err := parseKill("", 1, 30); err != nil || p.name != "" {
		t.Errorf("no -kill: %+v, %v", p, err)
	}
	for _, c := range []struct {
		s            string
		spawn, epoch int
		want         string
	}{
		{"c1@5", 1, 30, "-spawn 2 or more"},
		{"c0@5", 3, 30, "c1 to c2"},
		{"c3@5", 3, 30, "c1 to c2"},
		{"x1@5", 3, 30, "c1 to c2"},
		{"c1", 3, 30, "NAME@EPOCHS"},
		{"c1@x", 3, 30, "NAME@EPOCHS"},
		{"c1@0", 3, 30, "1 to 29"},
		{"c1@30", 3, 30, "1 to 29"},
	} {
		if _, err := parseKill(c.s, c.spawn, c.epoch); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with -spawn %d: %v, want an error saying %q", c.s, c.spawn, err, c.want)
		}
	}
}

// TestSummarizeKill: results of epochs up to the kill that came after it
// count as in flight, later epochs' latencies are summed apart, the
// probes' counters are compared over the epochs before and after it, and
// the survivors' CPU is taken over the results after it.
func TestSummarizeKill(t *testing.T) {
	at := time.Unix(1000, 0)
	victim, other := &collectorProc{name: "c1"}, &collectorProc{name: "c0"}
	l := &loadRun{procs: []*collectorProc{other, victim}, res: &results{}}
	l.res.latencies = []latencySample{
		{epoch: 9, at: at.Add(-time.Second), d: 100 * time.Millisecond}, // before the kill
		{epoch: 10, at: at.Add(2 * time.Second), d: 3 * time.Second},    // in flight
		{epoch: 11, at: at.Add(4 * time.Second), d: 4 * time.Second},
		{epoch: 12, at: at.Add(5 * time.Second), d: 2 * time.Second},
	}
	l.killed = &killed{proc: victim, at: at, lastEpoch: 10, results: 1000,
		mid:       probeCounts{reports: 100, bytes: 1000, rebuilds: 1},
		then:      probeCounts{reports: 200, bytes: 3000, rebuilds: 3},
		survivors: snapshot{procs: []procStats{{cpu: time.Second, ok: true}, {cpu: time.Second, ok: true}}}}
	s := &summary{Reports: 300, ReportBytes: 7000, Rebuilds: 13}
	after := snapshot{results: 1500, procs: []procStats{{cpu: 2 * time.Second, ok: true}, {ok: false}}}
	k := l.summarizeKill(s, after)
	switch {
	case k.Member != "c1" || k.AfterEpoch != 10:
		t.Errorf("member %s after epoch %d, want c1 after 10", k.Member, k.AfterEpoch)
	case k.InFlight != 1 || k.InFlightMax != 3:
		t.Errorf("%d in flight, longest %v s; want 1, 3", k.InFlight, k.InFlightMax)
	case k.LatencyP50 != 2 || k.LatencyMax != 4:
		t.Errorf("after the kill p50 %v, max %v; want 2, 4", k.LatencyP50, k.LatencyMax)
	case k.BytesPerReportBefore != 20 || k.BytesPerReportAfter != 40:
		t.Errorf("bytes per report %v before, %v after; want 20, 40", k.BytesPerReportBefore, k.BytesPerReportAfter)
	case k.RebuildsPerReportBefore != 0.02 || k.RebuildsPerReportAfter != 0.1:
		t.Errorf("rebuilds per report %v before, %v after; want 0.02, 0.1", k.RebuildsPerReportBefore, k.RebuildsPerReportAfter)
	case math.Abs(k.SurvivorsMsPerPathEpoch-2) > 1e-9:
		t.Errorf("survivors %v ms per path-epoch, want 2 (1 s over 500 results)", k.SurvivorsMsPerPathEpoch)
	}
	l.killed = nil
	if l.summarizeKill(s, after) != nil {
		t.Error("a summary of a kill that did not happen")
	}
}
