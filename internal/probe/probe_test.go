package probe

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/ptp"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/colate"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rda"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

func TestSpoolBoundedAndAcked(t *testing.T) {
	s := newSpool(3, 1<<30)
	for e := int64(1); e <= 5; e++ {
		s.add(&owlv1.EpochReport{Epoch: e})
	}
	if s.len() != 3 || s.droppedTotal() != 2 {
		t.Fatalf("len %d dropped %d, want 3 and 2", s.len(), s.droppedTotal())
	}
	got := s.after(0)
	if got[0].GetReport().Epoch != 3 || seqOf(got[0]) != 3 || seqOf(got[2]) != 5 {
		t.Fatalf("kept %v", got)
	}
	if got[2].GetReport().Counters.SpoolDropped != 2 {
		t.Errorf("report does not carry the drop count: %v", got[2].GetReport().Counters)
	}
	s.ack(4)
	if s.len() != 2 || len(s.after(3)) != 1 || seqOf(s.after(3)[0]) != 5 {
		t.Fatalf("after ack: %v", s.after(0))
	}
	s.ack(99) // unknown seq: nothing happens
	if s.len() != 2 {
		t.Fatal("unknown ack removed a report")
	}
	// COLATE vectors share the numbering and the bound.
	s.addVector(&owlv1.ColateVector{Epoch: 6})
	s.add(&owlv1.EpochReport{Epoch: 7})
	got = s.after(5)
	if len(got) != 2 || got[0].GetColate().GetSeq() != 6 || seqOf(got[1]) != 7 || s.len() != 3 {
		t.Fatalf("with a vector: %v", got)
	}
	s.ack(6)
	if s.len() != 2 || seqOf(s.after(0)[1]) != 7 {
		t.Fatalf("vector not acknowledged: %v", s.after(0))
	}
}

func frame(t *testing.T, src, dst string, sport, dport uint16) []byte {
	buf := gopacket.NewSerializeBuffer()
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst)}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	_ = udp.SetNetworkLayerForChecksum(ip)
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload([]byte{byte(sport), byte(dport)})); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestPipelineSortsPacketsIntoPaths(t *testing.T) {
	p := params.Default()
	var reports []*owlv1.EpochReport
	var stats counters
	rep := &reporter{caches: newCacheStore(4, 1<<20), topFlows: 5, emit: func(r *owlv1.EpochReport) { reports = append(reports, r) },
		grid: p.Epoch, clock: func(from, to int64) *owlv1.ClockStatus {
			return &owlv1.ClockStatus{Source: "test", MeasuredUnixNs: from, UncertaintyNs: to - from}
		}}
	pl, err := newPipeline(p, 1000, 5, rep.report, &stats)
	if err != nil {
		t.Fatal(err)
	}
	if err := pl.setLink(layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	set, err := newPathSet(&owlv1.PathConfig{Paths: []*owlv1.PathAssignment{
		{Path: &owlv1.Path{Name: "dns", Upstream: "a", Downstream: "b", Selector: &owlv1.Selector{Protocol: 17, DstPorts: []string{"53"}}}, Role: owlv1.Role_ROLE_UPSTREAM},
		{Path: &owlv1.Path{Name: "net10", Upstream: "a", Downstream: "c", Selector: &owlv1.Selector{DstCidrs: []string{"10.0.0.0/8"}}}, Role: owlv1.Role_ROLE_UPSTREAM},
	}})
	if err != nil {
		t.Fatal(err)
	}
	pl.setPaths(set)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	ms := int64(time.Millisecond)
	pl.frame(frame(t, "192.0.2.1", "10.1.1.1", 4000, 53), base+10*ms)   // both paths
	pl.frame(frame(t, "192.0.2.1", "192.0.2.9", 4000, 53), base+20*ms)  // dns only
	pl.frame(frame(t, "192.0.2.1", "10.1.1.1", 4000, 80), base+30*ms)   // net10 only
	pl.frame(frame(t, "192.0.2.1", "192.0.2.9", 4000, 80), base+40*ms)  // neither
	pl.frame([]byte{1, 2, 3}, base+50*ms)                               // not decodable
	pl.frame(frame(t, "192.0.2.1", "10.1.1.1", 4000, 53), base+1200*ms) // next epoch, closes the first
	if len(reports) != 2 {
		t.Fatalf("%d reports after the first epoch closed, want 2", len(reports))
	}
	for _, r := range reports {
		l, err := lda.Decode(r.Lda)
		if err != nil {
			t.Fatal(err)
		}
		if r.Counters.Packets != 2 || l.Packets() != 2 {
			t.Errorf("path %s: %d packets (LDA %d), want 2", r.Path, r.Counters.Packets, l.Packets())
		}
		if r.Counters.OutsidePaths != 1 || r.Counters.DecodeFailures["truncated"] != 1 {
			t.Errorf("path %s counters %v", r.Path, r.Counters)
		}
		if r.Role != owlv1.Role_ROLE_UPSTREAM || r.Clock.GetSource() != "test" {
			t.Errorf("report %v", r)
		}
		// The clock status is the one over the report's epoch.
		if r.Clock.GetMeasuredUnixNs() != p.Epoch.StartNS(r.Epoch) || r.Clock.GetUncertaintyNs() != int64(p.Epoch.Length) {
			t.Errorf("epoch %d stamped with the clock over [%d, +%d)", r.Epoch, r.Clock.GetMeasuredUnixNs(), r.Clock.GetUncertaintyNs())
		}
	}
	// A new path set applies from the next epoch on.
	pl.setPaths(&pathSet{})
	pl.frame(frame(t, "192.0.2.1", "10.1.1.1", 4000, 53), base+1300*ms)
	pl.frame(frame(t, "192.0.2.1", "10.1.1.1", 4000, 53), base+2300*ms)
	pl.flush()
	if len(reports) != 4 || reports[2].Epoch != reports[0].Epoch+1 || reports[2].Counters.Packets != 2 {
		t.Fatalf("reports %v", reports)
	}
}

// TestPipelineCorrectsTimestamps: a clock 300 ms ahead moves packets into
// the epoch of their corrected time.
func TestPipelineCorrectsTimestamps(t *testing.T) {
	p := params.Default()
	var reports []*owlv1.EpochReport
	var stats counters
	rep := &reporter{caches: newCacheStore(4, 1<<20), topFlows: 5, grid: p.Epoch, emit: func(r *owlv1.EpochReport) { reports = append(reports, r) },
		clock: func(int64, int64) *owlv1.ClockStatus { return &owlv1.ClockStatus{} }}
	pl, err := newPipeline(p, 1000, 5, rep.report, &stats)
	if err != nil {
		t.Fatal(err)
	}
	clock := ptp.NewFixed(ptp.Status{Source: "test"}, -300*time.Millisecond)
	pl.correct = clock.Correct
	if err := pl.setLink(layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	set, _ := newPathSet(&owlv1.PathConfig{Paths: []*owlv1.PathAssignment{
		{Path: &owlv1.Path{Name: "all", Upstream: "a", Downstream: "b"}, Role: owlv1.Role_ROLE_UPSTREAM}}})
	pl.setPaths(set)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	ms := int64(time.Millisecond)
	pl.frame(frame(t, "192.0.2.1", "10.1.1.1", 4000, 53), base+1100*ms) // epoch 0 once corrected
	pl.frame(frame(t, "192.0.2.1", "10.1.1.2", 4000, 53), base+1400*ms) // epoch 1
	pl.flush()
	e0, _ := p.Epoch.Of(base)
	if len(reports) != 2 || reports[0].Epoch != e0 || reports[0].Counters.Packets != 1 || reports[1].Epoch != e0+1 {
		t.Fatalf("reports %v", reports)
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	good.ID, good.Insecure = "op-a", true
	good.Sources = []SourceConfig{{File: "x.pcap"}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Config){
		"no id":        func(c *Config) { c.ID = "" },
		"bad id":       func(c *Config) { c.ID = "a b" },
		"no source":    func(c *Config) { c.Sources = nil },
		"no file":      func(c *Config) { c.Sources = []SourceConfig{{}} },
		"bad speed":    func(c *Config) { c.Sources[0].ReplaySpeed = -1 },
		"bad params":   func(c *Config) { c.Params.LDA.Rows = 3 },
		"no spool":     func(c *Config) { c.SpoolMaxEpochs = 0 },
		"no collector": func(c *Config) { c.Collector = "" },
	} {
		c := good
		c.Sources = append([]SourceConfig(nil), good.Sources...)
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestMergedWorkersEqualOne feeds the same packets to one pipeline and,
// split by flow as fanout hashing does, to three pipelines merged: every
// report must be the same.
func TestMergedWorkersEqualOne(t *testing.T) {
	p := params.Default()
	clock := func(int64, int64) *owlv1.ClockStatus { return &owlv1.ClockStatus{} }
	collect := func(out *[]*owlv1.EpochReport) *reporter {
		return &reporter{caches: newCacheStore(4, 1<<24), topFlows: 5, clock: clock, emit: func(r *owlv1.EpochReport) { *out = append(*out, r) }}
	}
	set, _ := newPathSet(&owlv1.PathConfig{Paths: []*owlv1.PathAssignment{
		{Path: &owlv1.Path{Name: "all", Upstream: "a", Downstream: "b"}, Role: owlv1.Role_ROLE_UPSTREAM}}})
	var single, merged []*owlv1.EpochReport
	var stats counters
	one, _ := newPipeline(p, 1<<20, 5, collect(&single).report, &stats)
	one.setPaths(set)
	_ = one.setLink(layers.LinkTypeEthernet)
	m := newMerger(3, p.Epoch, p.Sample.MaxEntries, collect(&merged).report)
	var shards []*pipeline
	for w := 0; w < 3; w++ {
		pl, _ := newPipeline(p, 1<<20, 5, func(ce closedEpoch) { m.add(w, ce) }, &stats)
		pl.setPaths(set)
		_ = pl.setLink(layers.LinkTypeEthernet)
		shards = append(shards, pl)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for i := 0; i < 3000; i++ {
		ts := base + int64(i)*1_000_000 // three epochs
		sport := uint16(1000 + i%7)
		f := frame(t, "10.0.0.1", "10.0.0.2", sport, 53)
		binary.BigEndian.PutUint32(f[len(f)-4:], uint32(i)) // distinct packets
		one.frame(f, ts)
		shards[int(sport)%3].frame(f, ts)
	}
	one.flush()
	for w, pl := range shards {
		pl.flush()
		m.watermark(w, base+int64(10*time.Second))
	}
	if len(single) != 3 || len(merged) != 3 {
		t.Fatalf("%d single reports, %d merged", len(single), len(merged))
	}
	for i := range single {
		a, b := single[i], merged[i]
		if a.Epoch != b.Epoch || string(a.Lda) != string(b.Lda) || string(a.Rda) != string(b.Rda) || string(a.Lds) != string(b.Lds) ||
			a.Counters.Packets != b.Counters.Packets || a.CacheEntries != b.CacheEntries {
			t.Errorf("epoch %d: merged report differs from the single one", a.Epoch)
		}
		if len(a.Sample) == 0 || string(a.Sample) != string(b.Sample) {
			sa, _ := sample.Decode(a.Sample)
			sb, _ := sample.Decode(b.Sample)
			t.Errorf("epoch %d: merged sample (%d at rate %g) differs from the single one (%d at rate %g)", a.Epoch,
				sb.Len(), sb.Config().Rate(), sa.Len(), sa.Config().Rate())
		}
		if len(a.TopFlows) != len(b.TopFlows) || a.TopFlows[0].Packets != b.TopFlows[0].Packets {
			t.Errorf("epoch %d: top flows %v vs %v", a.Epoch, a.TopFlows, b.TopFlows)
		}
	}
}

// BenchmarkPipeline measures everything a probe does per packet from an
// in-memory capture on one core: decode, identity, path selection, epoch,
// LDA, RDA, cache, flow hash, LDS, RAP and the packet sample (off in
// sample=false), round-trip matching in rtt=true and the reordering
// tracker in reorder=true (the looped trace's flows start over each
// loop: the tracker sees them as retransmitted, at the same cost).
func BenchmarkPipeline(b *testing.B) {
	src, err := capture.OpenFile("../../testdata/trace.pcap")
	if err != nil {
		b.Fatal(err)
	}
	var frames [][]byte
	var times []int64
	for {
		f, err := src.Next()
		if err != nil {
			break
		}
		frames = append(frames, append([]byte(nil), f.Data...))
		times = append(times, f.TimeNS)
	}
	src.Close()
	for _, run := range []struct {
		colateCounters int
		sample, rtt    bool
		reorder        bool
	}{{0, false, false, false}, {0, true, false, false}, {0, true, true, false}, {0, true, false, true}, {0, true, true, true},
		{1 << 16, true, false, false}, {1 << 20, true, false, false}} {
		colateCounters := run.colateCounters
		name := "colate=off"
		if colateCounters > 0 {
			name = fmt.Sprintf("colate=%d", colateCounters)
		}
		name += fmt.Sprintf("/sample=%t/rtt=%t/reorder=%t", run.sample, run.rtt, run.reorder)
		b.Run(name, func(b *testing.B) {
			p := params.Default()
			p.Colate.Enabled, p.Colate.Counters = colateCounters > 0, max(colateCounters, 4)
			if !run.sample {
				p.Sample.Target = 0
			}
			// Time moves as on a link at 5 M packets/s: an epoch per
			// 5 M packets, its synopses made once per epoch, as live.
			runPipeline(b, p, 0, frames, times[0], 200, run.rtt, run.reorder)
		})
	}
}

// BenchmarkPipelineDense is BenchmarkPipeline with every synopsis on, on
// traffic as dense in flows as the replays of docs/benchmarks.md (150,000
// flows, 900,000 packets an epoch): its tables are past a core's caches,
// where the bundled trace's few flows stay in them.
func BenchmarkPipelineDense(b *testing.B) {
	_, synth, err := sim.Synthesize(sim.SynthConfig{Flows: 150_000, ParetoShape: 1.1, MaxPackets: 3000, Start: time.Unix(1_700_000_000, 0), Span: time.Second, Seed: 5})
	if err != nil {
		b.Fatal(err)
	}
	start := synth[0].TimeNS
	// In one block, in time order, as a capture file's buffer holds them.
	var block []byte
	for _, f := range synth {
		block = append(block, f.Data...)
	}
	frames := make([][]byte, len(synth))
	for i, f := range synth {
		frames[i], block = block[:len(f.Data):len(f.Data)], block[len(f.Data):]
	}
	synth = nil
	// One pass over the frames is one epoch; its RDA is of the size a
	// collector asks for at 1% loss (2.5 × 9,000 buckets a bank, 1.4 MB).
	runPipeline(b, params.Default(), 22_500, frames, start, int64(time.Second)/int64(len(frames)), true, true)
}

// runPipeline puts frames through a pipeline of one path (RDAs of
// rdaBuckets a bank; 0: the parameters'), over and over, frame i at
// base + i × stepNS.
func runPipeline(b *testing.B, p params.Params, rdaBuckets uint32, frames [][]byte, base, stepNS int64, withRTT, withReorder bool) {
	var stats counters
	// Epochs are handed to a sink that drops them: reporting is per
	// epoch, not per packet.
	pl, _ := newPipeline(p, 1<<22, 20, func(closedEpoch) {}, &stats)
	if withRTT {
		c := DefaultRTTConfig()
		pl.rtt, _ = newRTTMatcher(c, c.Fridges.Seed, p.Epoch.Length.Seconds())
	}
	if withReorder {
		pl.reorder, _ = newReorderTracker(DefaultReorderConfig())
	}
	set, _ := newPathSet(&owlv1.PathConfig{Paths: []*owlv1.PathAssignment{
		{Path: &owlv1.Path{Name: "all", Upstream: "a", Downstream: "b"}, Role: owlv1.Role_ROLE_UPSTREAM, RdaBuckets: rdaBuckets}}})
	pl.setPaths(set)
	_ = pl.setLink(layers.LinkTypeEthernet)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pl.frame(frames[i%len(frames)], base+int64(i)*stepNS)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "packets/s")
}

func TestCacheRepeated(t *testing.T) {
	c := &epochCache{complete: true}
	for i, id := range []uint64{5, 2, 9, 2, 7, 9, 9} {
		c.add(newEntry(id, 0, int64(i), 1), 100)
	}
	got := map[uint64][]int64{}
	for _, e := range c.repeated() {
		got[e.id] = append(got[e.id], e.offsetNS())
	}
	if len(got) != 2 || len(got[2]) != 2 || len(got[9]) != 3 {
		t.Errorf("repeated: %v", got)
	}
	if n := len(c.lookup([]uint64{5, 9})); n != 4 {
		t.Errorf("lookup after repeated: %d entries", n)
	}
}

// TestPipelineRecordsColate: with COLATE on, every decoded packet goes
// into the epoch's vector, whatever its path, and the vector of each
// capture worker merges into one.
func TestPipelineRecordsColate(t *testing.T) {
	p := params.Default()
	p.Colate.Enabled = true
	p.Colate.Counters = 4096
	var vecs []*owlv1.ColateVector
	var stats counters
	rep := &reporter{caches: newCacheStore(4, 1<<20), topFlows: 5, emit: func(*owlv1.EpochReport) {},
		emitVector: func(v *owlv1.ColateVector) { vecs = append(vecs, v) },
		grid:       p.Epoch, clock: func(from, to int64) *owlv1.ClockStatus { return &owlv1.ClockStatus{} }}
	merge := newMerger(2, p.Epoch, p.Sample.MaxEntries, rep.report)
	var pls [2]*pipeline
	for w := range pls {
		pl, err := newPipeline(p, 1000, 5, func(ce closedEpoch) { merge.add(w, ce) }, &stats)
		if err != nil {
			t.Fatal(err)
		}
		if err := pl.setLink(layers.LinkTypeEthernet); err != nil {
			t.Fatal(err)
		}
		pls[w] = pl
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	ms := int64(time.Millisecond)
	for i := range 10 {
		pls[i%2].frame(frame(t, "192.0.2.1", "10.1.1.1", uint16(4000+i%2), 53), base+int64(10*i)*ms)
	}
	pls[0].frame([]byte{1, 2, 3}, base+500*ms) // not decodable: not recorded
	for _, pl := range pls {
		pl.flush()
	}
	if len(vecs) != 1 {
		t.Fatalf("%d vectors, want 1", len(vecs))
	}
	v, err := colate.Unmarshal(vecs[0].Vector, p.ColateConfig())
	if err != nil {
		t.Fatal(err)
	}
	var b [capture.FlowKeySize]byte
	key := capture.FlowKey{Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("10.1.1.1"), SrcPort: 4001, DstPort: 53, Proto: 17}
	fh := lds.FlowHash(key.AppendBinary(b[:0]), p.LDS.Seed)
	if v.Packets() != 10 || vecs[0].Packets != 10 || v.Flows() != 2 || v.FlowPackets(fh) != 5 || v.StartNS() != base {
		t.Errorf("vector: %d packets (%d sent), %d flows, %d of the flow, start %d", v.Packets(), vecs[0].Packets, v.Flows(), v.FlowPackets(fh), v.StartNS())
	}
	first, last := v.Span()
	if first != base || last != base+90*ms || vecs[0].FirstUnixNs != first {
		t.Errorf("span %d..%d", first-base, last-base)
	}
}

// TestMissingCaptureFile: a capture file that is not there is refused
// when the probe is made, before it connects anywhere.
func TestMissingCaptureFile(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID, cfg.Insecure = "a", true
	cfg.Sources = []SourceConfig{{File: filepath.Join(t.TempDir(), "missing.pcap")}}
	_, err := New(cfg, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "missing.pcap") {
		t.Fatalf("missing capture file: %v", err)
	}
}

// TestSpoolCountsEpochs: the spool's bound is in epochs, whatever the
// number of paths: three paths' reports of two epochs fit a spool of two,
// and a third epoch drops the whole oldest one.
func TestSpoolCountsEpochs(t *testing.T) {
	s := newSpool(2, 1<<30)
	for e := int64(1); e <= 2; e++ {
		for _, p := range []string{"p1", "p2", "p3"} {
			s.add(&owlv1.EpochReport{Path: p, Epoch: e})
		}
		s.addVector(&owlv1.ColateVector{Epoch: e})
	}
	if s.len() != 8 || s.droppedTotal() != 0 {
		t.Fatalf("two epochs of three paths and a vector: len %d, dropped %d", s.len(), s.droppedTotal())
	}
	s.add(&owlv1.EpochReport{Path: "p1", Epoch: 3})
	if s.len() != 5 || s.droppedTotal() != 4 || epochOf(s.after(0)[0]) != 2 {
		t.Fatalf("a third epoch: len %d, dropped %d, first %v", s.len(), s.droppedTotal(), s.after(0)[0])
	}
	// A late message of an older epoch still keeps the bound.
	s.addVector(&owlv1.ColateVector{Epoch: 1})
	if len(s.epochs) != 2 || s.droppedTotal() != 8 {
		t.Fatalf("a late older epoch: %d epochs held, dropped %d", len(s.epochs), s.droppedTotal())
	}
}

// randomChunks are n cache entries with random IDs (every tenth one
// repeated) in chunks as a cache fills them.
func randomChunks(n int, seed uint64) [][]entry {
	r := rand.New(rand.NewPCG(seed, 1))
	c := &epochCache{complete: true}
	var last uint64
	for i := range n {
		id := r.Uint64()
		if i%10 == 9 {
			id = last
		}
		last = id
		c.add(newEntry(id, uint64(i), int64(i), 1), n)
	}
	return c.chunks
}

func TestSortByID(t *testing.T) {
	for _, n := range []int{0, 1, 1000, radixMin, 3 * radixMin} {
		chunks := randomChunks(n, uint64(n))
		got := sortByID(chunks, n)
		var want []entry
		for _, ch := range chunks {
			want = append(want, ch...)
		}
		slices.SortFunc(want, func(a, b entry) int { return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.offW, b.offW)) })
		if len(got) != n || !slices.IsSortedFunc(got, func(a, b entry) int { return cmp.Compare(a.id, b.id) }) {
			t.Fatalf("n %d: %d entries, sorted %t", n, len(got), slices.IsSortedFunc(got, func(a, b entry) int { return cmp.Compare(a.id, b.id) }))
		}
		slices.SortStableFunc(got, func(a, b entry) int { return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.offW, b.offW)) })
		if !slices.Equal(got, want) {
			t.Errorf("n %d: the entries differ from the input's", n)
		}
	}
}

// BenchmarkSortCache compares sortByID with a comparison sort of a
// million-entry cache (an epoch of a 1 M packets/s link).
func BenchmarkSortCache(b *testing.B) {
	const n = 1 << 20
	chunks := randomChunks(n, 1)
	b.Run("sortByID", func(b *testing.B) {
		for b.Loop() {
			sortByID(chunks, n)
		}
	})
	b.Run("comparison", func(b *testing.B) {
		for b.Loop() {
			out := make([]entry, 0, n)
			for _, ch := range chunks {
				out = append(out, ch...)
			}
			slices.SortFunc(out, func(a, b entry) int { return cmp.Compare(a.id, b.id) })
		}
	})
}

// TestCacheFind: an unsorted cache's find returns, for IDs asked for
// (present, absent, 0, asked twice, sharing their low bits), every entry
// of each and nothing else, as the sorted cache's does.
func TestCacheFind(t *testing.T) {
	const n = 50_000
	chunks := randomChunks(n, 7)
	c := &epochCache{complete: true, chunks: chunks, n: n}
	var all []entry
	for _, ch := range chunks {
		all = append(all, ch...)
	}
	all = append(all, newEntry(0, 1, 5, 1))
	c.chunks = append(c.chunks, all[len(all)-1:])
	c.n++
	rng := rand.New(rand.NewPCG(8, 9))
	for _, k := range []int{0, 1, 7, 900, 20_000} {
		var ids []uint64
		for range k {
			ids = append(ids, all[rng.IntN(len(all))].id, rng.Uint64(), rng.Uint64()<<20)
		}
		if k > 0 {
			ids = append(ids, ids[0], 0)
		}
		want := map[uint64]bool{}
		for _, id := range ids {
			want[id] = true
		}
		var wantN int
		for _, e := range all {
			if want[e.id] {
				wantN++
			}
		}
		got := c.find(ids)
		for _, e := range got {
			if !want[e.id] {
				t.Fatalf("%d IDs asked: found %x, not asked", len(ids), e.id)
			}
		}
		if len(got) != wantN {
			t.Errorf("%d IDs asked: %d entries found, want %d", len(ids), len(got), wantN)
		}
	}
}

// BenchmarkCacheFind looks up the 9,000 lost packets of a dense epoch
// (900,000 entries) in its unsorted cache.
func BenchmarkCacheFind(b *testing.B) {
	const n = 900_000
	chunks := randomChunks(n, 3)
	c := &epochCache{complete: true, chunks: chunks, n: n}
	rng := rand.New(rand.NewPCG(4, 5))
	var ids []uint64
	for range 9000 {
		ids = append(ids, chunks[0][rng.IntN(len(chunks[0]))].id)
	}
	for b.Loop() {
		c.find(ids)
	}
}

// TestCacheRebuildAgrees: a cache's rebuilt RDA (inserted in batches) is
// the one its entries give inserted one by one, for two banks and three.
func TestCacheRebuildAgrees(t *testing.T) {
	for _, banks := range []int{2, 3} {
		cfg := rda.Config{Banks: banks, Buckets: 700, Seed: 9, Check: true}
		c := &epochCache{complete: true, rda: cfg, chunks: randomChunks(1000, 5), n: 1000}
		got, err := c.rebuild(512)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Buckets = 512
		want, _ := rda.New(cfg)
		c.each(func(e entry) { want.Insert(e.id, e.offsetNS()) })
		g, _ := got.MarshalBinary()
		w, _ := want.MarshalBinary()
		if !bytes.Equal(g, w) {
			t.Errorf("%d banks: the rebuilt RDA differs from the entries inserted one by one", banks)
		}
	}
}

// BenchmarkCacheRebuild rebuilds a dense epoch's RDA (900,000 entries)
// at twice the 23,000 buckets its 1% loss asks for.
func BenchmarkCacheRebuild(b *testing.B) {
	c := &epochCache{complete: true, rda: rda.Config{Banks: 2, Buckets: 1024, Seed: 9, Check: true}, chunks: randomChunks(900_000, 6), n: 900_000}
	for b.Loop() {
		if _, err := c.rebuild(46_000); err != nil {
			b.Fatal(err)
		}
	}
}
