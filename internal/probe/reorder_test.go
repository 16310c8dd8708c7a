package probe

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/synopsis/reorder"
)

// traceFrames are the bundled trace's frames.
func traceFrames(t testing.TB) []capture.Frame {
	t.Helper()
	src, err := capture.OpenFile("../../testdata/trace.pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var frames []capture.Frame
	for {
		f, err := src.Next()
		if err != nil {
			break
		}
		frames = append(frames, capture.Frame{Data: append([]byte(nil), f.Data...), TimeNS: f.TimeNS})
	}
	return frames
}

// swapSegments reorders a trace: two frames in a row that are TCP
// segments of the same flow change places (keeping their times) with
// probability rate.
func swapSegments(frames []capture.Frame, rate float64, seed uint64) []capture.Frame {
	out := slices.Clone(frames)
	rng := rand.New(rand.NewPCG(seed, 2))
	d, _ := capture.NewDecoder(layers.LinkTypeEthernet, params.Default().Identity)
	var a, b capture.Packet
	for i := 0; i+1 < len(out); i++ {
		if d.Decode(out[i].Data, 0, &a) != nil || d.Decode(out[i+1].Data, 0, &b) != nil || a.Flow != b.Flow ||
			a.Flow.Proto != 6 || a.L4.PayloadLen == 0 || b.L4.PayloadLen == 0 || rng.Float64() >= rate {
			continue
		}
		out[i].Data, out[i+1].Data = out[i+1].Data, out[i].Data
		i++
	}
	return out
}

// reorderPipelines runs frames through workers pipelines (a frame goes to
// the worker of its flow, as fanout hashing sends it) with reordering
// tracked by cfg, their epochs merged, and returns the reordering
// reports.
func reorderPipelines(t *testing.T, cfg ReorderConfig, workers int, frames []capture.Frame) []*owlv1.ReorderReport {
	t.Helper()
	p := params.Default()
	var reports []*owlv1.ReorderReport
	clock := func(int64, int64) *owlv1.ClockStatus { return &owlv1.ClockStatus{} }
	rep := &reporter{caches: newCacheStore(4, 1<<24), clock: clock, grid: p.Epoch, emit: func(*owlv1.EpochReport) {},
		emitReorder: func(r *owlv1.ReorderReport) { reports = append(reports, r) }, reorderCut: newReorderCutter(cfg.Prefixes.Max)}
	m := newMerger(workers, p.Epoch, p.Sample.MaxEntries, rep.report)
	var stats counters
	var pls []*pipeline
	for w := range workers {
		pl, err := newPipeline(p, 1<<22, 20, func(ce closedEpoch) { m.add(w, ce) }, &stats)
		if err != nil {
			t.Fatal(err)
		}
		if pl.reorder, err = newReorderTracker(cfg); err != nil {
			t.Fatal(err)
		}
		_ = pl.setLink(layers.LinkTypeEthernet)
		pls = append(pls, pl)
	}
	d, _ := capture.NewDecoder(layers.LinkTypeEthernet, p.Identity)
	last := int64(0)
	for _, f := range frames {
		var pk capture.Packet
		w := 0
		if d.Decode(f.Data, f.TimeNS, &pk) == nil {
			w = int(pk.Flow.Hash(1) % uint64(workers))
		}
		pls[w].frame(f.Data, f.TimeNS)
		last = max(last, f.TimeNS)
	}
	for w, pl := range pls {
		pl.flush()
		m.watermark(w, last+int64(10*p.Epoch.Length))
	}
	return reports
}

// TestReorderOnTheBundledTrace: the probe's reordering reports of the
// bundled trace (2% of its pairs of same-flow data segments in a row
// swapped), one a second, summed, count what the exact tracker
// counts on the same packets when the tracker has room for every flow and
// its windows are long enough for whole flows; whether the trace's flows
// go to one capture worker or are spread over three by flow. With the
// default configuration it measures part of the segments, none it should
// not. The reports' size is logged.
func TestReorderOnTheBundledTrace(t *testing.T) {
	frames := swapSegments(traceFrames(t), 0.02, 1)
	roomy := DefaultReorderConfig()
	roomy.MemoryBytes, roomy.WindowPackets, roomy.PrefixPackets, roomy.LongShare = 4<<20, 1<<15, 0, 0
	roomy.Prefixes.Max = reorder.MaxPrefixes
	d, _ := capture.NewDecoder(layers.LinkTypeEthernet, params.Default().Identity)
	x := reorder.NewExact(roomy.Prefixes)
	for _, f := range frames {
		var p capture.Packet
		if d.Decode(f.Data, f.TimeNS, &p) == nil {
			x.Add(&p)
		}
	}
	want := x.Report()
	if w := want.Total(); w.Packets < 1000 || w.Reordered < 50 {
		t.Fatalf("the exact tracker judged %d segments of the trace, %d reordered", w.Packets, w.Reordered)
	}
	for _, p := range want.Prefixes {
		t.Logf("exact: %v: %d segments, %d reordered (%.2f%% ± %.2f%%), %d flows", p.Prefix, p.Packets, p.Reordered, 100*p.Rate(), 100*p.RateSE(), p.Flows)
	}
	for _, tc := range []struct {
		name    string
		cfg     ReorderConfig
		workers int
	}{{"roomy", roomy, 1}, {"roomy, 3 workers", roomy, 3}, {"default", DefaultReorderConfig(), 1}} {
		t.Run(tc.name, func(t *testing.T) {
			reports := reorderPipelines(t, tc.cfg, tc.workers, frames)
			var rs []*reorder.Report
			size := 0
			for _, m := range reports {
				size += proto.Size(m)
				r, err := reorder.FromProto(m)
				if err != nil {
					t.Fatalf("epoch %d: %v", m.GetEpoch(), err)
				}
				rs = append(rs, r)
			}
			got := reorder.Merge(reorder.MaxPrefixes, rs...)
			g, w := got.Total(), want.Total()
			t.Logf("%d reports, %d bytes on average; %d prefixes; %d of %d segments judged, %d reordered (exact %d), %d retransmitted (exact %d)",
				len(reports), size/max(len(reports), 1), len(got.Prefixes), g.Packets, w.Packets, g.Reordered, w.Reordered, g.Retransmitted, w.Retransmitted)
			if len(reports) < 5 {
				t.Errorf("%d reports for 5 s of trace", len(reports))
			}
			if tc.cfg.WindowPackets < 1<<15 {
				if g.Packets == 0 || g.Packets > w.Packets || g.Reordered > w.Reordered {
					t.Errorf("default tracker: %+v, exact %+v", g, w)
				}
				return
			}
			if len(got.Prefixes) != len(want.Prefixes) {
				t.Fatalf("%d prefixes, exact %d", len(got.Prefixes), len(want.Prefixes))
			}
			for i, p := range got.Prefixes {
				q := want.Prefixes[i]
				if p.Prefix != q.Prefix || p.Packets != q.Packets || p.Reordered != q.Reordered || p.Retransmitted != q.Retransmitted {
					t.Errorf("prefix %v: %+v, exact %v %+v", p.Prefix, p.Stats, q.Prefix, q.Stats)
				}
			}
		})
	}
}

// TestReorderReportFolded: a merged report of more prefixes than
// configured is folded to the configured number on its way out, the rest
// counted in other; a report of no segment is not sent.
func TestReorderReportFolded(t *testing.T) {
	r := &reorder.Report{Counters: reorder.Counters{Packets: 10, Segments: 6}}
	for i, s := range []string{"192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"} {
		st := reorder.Stats{Packets: uint64(i + 1), Flows: 1, SumSqPackets: float64((i + 1) * (i + 1))}
		r.Prefixes = append(r.Prefixes, reorder.PrefixStats{Prefix: netip.MustParsePrefix(s), Stats: st})
	}
	m := reorderReport(r, 7, &owlv1.ClockStatus{}, newReorderCutter(2))
	if len(m.GetPrefixes()) != 2 || m.GetPrefixes()[0].GetPrefix() != "203.0.113.0/24" || m.GetOther().GetPackets() != 1 || m.GetPrefixesFolded() != 1 || m.GetEpoch() != 7 {
		t.Errorf("folded report %v", m)
	}
	if m := reorderReport(&reorder.Report{Counters: reorder.Counters{Packets: 5}}, 8, nil, newReorderCutter(2)); m != nil {
		t.Errorf("a report without segments is sent: %v", m)
	}
}

// TestReorderReportWatched: the point's cutter remembers, from one
// epoch's report to the next, the prefixes that reordered: a small
// prefix that reordered in one epoch is sent in the next, though two
// larger ones would fill the report, and the same prefixes are counted
// in other when it is not.
func TestReorderReportWatched(t *testing.T) {
	cut := newReorderCutter(2)
	small := "203.0.113.0/24"
	for e, reordered := range []uint64{3, 0, 0} {
		r := &reorder.Report{Counters: reorder.Counters{Packets: 1000, Segments: 1000}}
		for i, s := range []string{"192.0.2.0/24", "198.51.100.0/24", small} {
			var st reorder.Stats
			if s == small {
				st = reorder.Stats{Packets: 10, Reordered: reordered, Flows: 1, SumSqReordered: float64(reordered * reordered),
					SumReorderedPackets: float64(10 * reordered), SumSqPackets: 100}
			} else {
				st = reorder.Stats{Packets: uint64(500 - i), Flows: 1, SumSqPackets: float64((500 - i) * (500 - i))}
			}
			r.Prefixes = append(r.Prefixes, reorder.PrefixStats{Prefix: netip.MustParsePrefix(s), Stats: st})
		}
		m := reorderReport(r, int64(e), &owlv1.ClockStatus{}, cut)
		sent := slices.ContainsFunc(m.GetPrefixes(), func(p *owlv1.ReorderStats) bool { return p.GetPrefix() == small })
		if want := e > 0; sent != want || len(m.GetPrefixes()) != 2 || m.GetPrefixesFolded() != 1 {
			t.Errorf("epoch %d: %v sent %v (want %v), %d prefixes, %d folded", e, small, sent, want, len(m.GetPrefixes()), m.GetPrefixesFolded())
		}
	}
}

func TestReorderConfigValidate(t *testing.T) {
	good := DefaultConfig()
	good.ID, good.Insecure = "op-a", true
	good.Sources = []SourceConfig{{File: "x.pcap"}}
	for _, tc := range []struct {
		name, want string
		mod        func(*ReorderConfig)
	}{
		{"memory", "reorder: reorder memory 100 bytes out of", func(c *ReorderConfig) { c.MemoryBytes = 100 }},
		{"prefix length", "prefix lengths /33", func(c *ReorderConfig) { c.Prefixes.V4Bits = 33 }},
		{"max prefixes", "max prefixes 5000", func(c *ReorderConfig) { c.Prefixes.Max = 5000 }},
		{"window", "window of 1 packets", func(c *ReorderConfig) { c.WindowPackets = 1 }},
		{"shares", "memory shares", func(c *ReorderConfig) { c.PrefixShare = 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mod(&c.Reorder)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
			c.Reorder.Enabled = false
			if err := c.Validate(); err != nil {
				t.Errorf("switched off: %v", err)
			}
		})
	}
}

// TestReorderConfigYAML: the tracker's keys sit under reorder, the
// defaults stay where the file says nothing, and a key misspelt is an
// error.
func TestReorderConfigYAML(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		name := filepath.Join(dir, "probe.yaml")
		if err := os.WriteFile(name, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return name
	}
	c := DefaultConfig()
	if err := LoadFile(write("reorder:\n  memory_bytes: 1048576\n  prefixes:\n    ipv4_bits: 16\n    by_destination: true\n"), &c); err != nil {
		t.Fatal(err)
	}
	want := DefaultReorderConfig()
	want.MemoryBytes, want.Prefixes.V4Bits, want.Prefixes.ByDestination = 1<<20, 16, true
	if c.Reorder != want {
		t.Errorf("loaded %+v, want %+v", c.Reorder, want)
	}
	c = DefaultConfig()
	if err := LoadFile(write("reorder:\n  enabled: false\n  memory: 5\n"), &c); err == nil || !strings.Contains(err.Error(), "memory") {
		t.Errorf("a misspelt key: %v", err)
	}
}

// TestReorderRoutedWithColate: in a cluster, reordering reports go to the
// owner of the probe's own data, as COLATE vectors and RTT reports do, and
// a refusal naming another owner moves all three.
func TestReorderRoutedWithColate(t *testing.T) {
	r := newRouter("seed:7700", nil, quiet, func() *client { return &client{} })
	msgs := []*owlv1.ProbeMessage{
		{Msg: &owlv1.ProbeMessage_Reorder{Reorder: &owlv1.ReorderReport{Epoch: 1}}},
		{Msg: &owlv1.ProbeMessage_Rtt{Rtt: &owlv1.RTTReport{Epoch: 1}}},
		{Msg: &owlv1.ProbeMessage_Colate{Colate: &owlv1.ColateVector{Epoch: 1}}},
	}
	r.update(&owlv1.PathConfig{ColateCollector: "c2:7700"})
	for _, m := range msgs {
		if d := r.dest(m); d != "c2:7700" {
			t.Errorf("%T goes to %s, want the COLATE owner c2:7700", m.GetMsg(), d)
		}
	}
	routedTo{r, "c2:7700"}.misrouted(owlv1.Reject_KIND_REORDER, "", "c3:7700")
	for _, m := range msgs {
		if d := r.dest(m); d != "c3:7700" {
			t.Errorf("after a refusal naming c3: %T goes to %s", m.GetMsg(), d)
		}
	}
}

// TestReorderReachesCollector: a probe replaying the bundled trace sends
// its reordering reports to a collector, which stores them and answers
// ListReorderedPrefixes with the trace's two prefixes and every segment.
func TestReorderReachesCollector(t *testing.T) {
	addr := startCollector(t, []netpath.Path{{Name: "a-b", Upstream: "a", Downstream: "b"}})
	cfg := fileProbe("a", addr, "../../testdata/trace.pcap")
	cfg.ReleaseTimeout = 100 * time.Millisecond
	p, err := New(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	done, _ := runProbe(t, p)
	if err := waitRun(t, done, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	r, err := queryClient(t, addr).ListReorderedPrefixes(context.Background(), &owlv1.ListReorderedPrefixesRequest{Probe: "a"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range r.GetPrefixes() {
		got = append(got, p.GetPrefix())
	}
	slices.Sort(got)
	if r.GetEpochs() < 5 || r.GetTotal().GetPackets() != 17355 || strings.Join(got, " ") != "10.99.0.0/24 fd99::/48" {
		t.Errorf("%d epochs, %d packets, prefixes %v; want 6, 17355 (the trace's segments), 10.99.0.0/24 and fd99::/48", r.GetEpochs(), r.GetTotal().GetPackets(), got)
	}
}
