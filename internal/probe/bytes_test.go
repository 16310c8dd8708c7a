package probe

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/collector"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/reconcile"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rda"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// BenchmarkReportBytes is what one side of a path ships per packet in its
// epoch report (LDA, RDA, LDS, top flows, packet sample, or the exact list
// in their place, and the rest) at 100 to 1 M packets/s, one epoch each
// (oneEpochReports), with exact lists off and on, and with the LDS at its
// largest (fixedLDSReports). Metrics: bytes/packet
// of both sides (twice one side's report), the same gzipped, and each
// part's bytes, and the LDS's cells per row. Run with -benchtime 1x: each iteration is one epoch of
// packets.
func BenchmarkReportBytes(b *testing.B) {
	fc := collector.DefaultConfig().Flows
	wire := lds.Wire{DigestBytes: fc.LDSDigestBytes, Packed: fc.LDSPacked}
	for _, rate := range []int{100, 1_000, 10_000, 20_000, 50_000, 100_000, 1_000_000} {
		for _, mode := range []string{"before", "plain", "lda=full", "lds=always", "lists=false", "lists=true", "lds=fixed", "digest=2", "rows=1"} {
			b.Run(fmt.Sprintf("packets/s=%d/%s", rate, mode), func(b *testing.B) {
				var reports []*owlv1.EpochReport
				n := 0
				for b.Loop() {
					switch mode {
					case "lds=fixed":
						reports, n = fixedLDSReports(b, rate)
					case "digest=2":
						reports, n = oneEpochReports(b, rate, false, lds.Wire{DigestBytes: 2, Packed: fc.LDSPacked}, fc.LDSMinRows, true)
					case "before":
						reports, n = oneEpochReports(b, rate, false, lds.Wire{DigestBytes: fc.LDSDigestBytes}, 0, false)
					case "plain":
						reports, n = oneEpochReports(b, rate, false, lds.Wire{DigestBytes: fc.LDSDigestBytes}, -fc.LDSMinRows, false)
					case "lda=full":
						reports, n = oneEpochReports(b, rate, false, wire, -fc.LDSMinRows, false)
					case "lds=always":
						reports, n = oneEpochReports(b, rate, false, wire, fc.LDSMinRows, false)
					case "rows=1":
						reports, n = oneEpochReports(b, rate, false, wire, 1, true)
					default:
						reports, n = oneEpochReports(b, rate, mode == "lists=true", wire, fc.LDSMinRows, true)
					}
				}
				var size, ldaB, rdaB, ldsB, smp, list, zipped, cols, rows, top, keys int
				for _, r := range reports {
					for _, tf := range r.GetTopFlows() {
						top += proto.Size(tf)
						keys += proto.Size(tf.GetFlow()) + len(tf.GetKey())
					}
					raw, _ := proto.Marshal(r)
					size += len(raw)
					ldaB, rdaB, ldsB, smp, list = ldaB+len(r.GetLda()), rdaB+len(r.GetRda()), ldsB+len(r.GetLds()), smp+len(r.GetSample()), list+len(r.GetList())
					if cfg, err := lds.Check(r.GetLds()); err == nil {
						cols, rows = cfg.Cols, cfg.Rows
					}
					var z bytes.Buffer
					w := gzip.NewWriter(&z)
					_, _ = w.Write(raw)
					_ = w.Close()
					zipped += z.Len()
				}
				b.ReportMetric(2*float64(size)/float64(n), "bytes/packet")
				b.ReportMetric(2*float64(zipped)/float64(n), "gzip-bytes/packet")
				b.ReportMetric(float64(ldaB), "lda-bytes")
				b.ReportMetric(float64(rdaB), "rda-bytes")
				b.ReportMetric(float64(ldsB), "lds-bytes")
				b.ReportMetric(float64(cols), "lds-cols")
				b.ReportMetric(float64(rows), "lds-rows")
				b.ReportMetric(float64(smp), "sample-bytes")
				b.ReportMetric(float64(top), "topflow-bytes")
				b.ReportMetric(float64(keys), "flowkey-bytes")
				b.ReportMetric(float64(list), "list-bytes")
				b.ReportMetric(float64(len(reports)), "reports")
			})
		}
	}
}

// fixedLDSReports is oneEpochReports without lists and with every LDS at
// params.lds.cols (flows.lds_min_cols: 0) and 8-byte digests, as before
// LDS sizing.
func fixedLDSReports(tb testing.TB, rate int) ([]*owlv1.EpochReport, int) {
	p := params.Default()
	link, frames, shift := epochTraffic(tb, p, rate)
	return runEpoch(p, link, frames, shift, epochShape{rda: 256}, lds.DefaultWire, false), len(frames)
}

// epochShape is the synopses' sizes the collector sets for a path: RDA
// buckets, LDS cells per row (0: the parameters') and the mask of the
// parameters' LDS rows (0: all), and LDA rows per bank (0: the
// parameters').
type epochShape struct {
	rda, ldsCols, ldsRows, lda int
	ldsOff                     bool
	keyBits                    int // sample key bits above the rate (0: 48-bit keys)
}

// oneEpochReports runs one epoch of exactly rate packets of synthetic
// traffic (Pareto flow sizes) through an upstream probe's pipeline, as the
// collector would set it in steady state for a path that loses one packet
// in 10,000: the sample at the rate for params.sample.target and the LDS
// at the cells per row the collector settles on for such epochs
// (nextLDSCols) in the LDS wire form wire; lists lets reports carry
// exact lists. minRows above 0 is the collector's sizing since RDAs
// follow the set difference down to the collector's floor and LDS rows the loss
// (lds.RowsFor with flows.lds_min_rows minRows: at this loss, the minRows
// densest rows), and LDAs follow it too (lda.RowsFor within
// rda.lda_min_rows), and sample keys are narrowed to sample_key_bits
// above the rate; −minRows is that with LDAs at params.lda.rows and full
// keys, as
// before 2026-11-25 afternoon; 0 is as before 2026-11-25: RDAs of 256
// buckets, all four LDS rows. ldsAuto turns the LDS off where the
// collector's flows.lds "auto" does (as since 2026-11-26). It returns the
// reports and the packets.
func oneEpochReports(tb testing.TB, rate int, lists bool, wire lds.Wire, minRows int, ldsAuto bool) ([]*owlv1.EpochReport, int) {
	p := params.Default()
	link, frames, shift := epochTraffic(tb, p, rate)
	shape := epochShape{rda: 256, ldsCols: p.LDS.Cols}
	cfg := collector.DefaultConfig()
	if minRows > 0 {
		shape.lda = lda.RowsFor(rate/10_000, cfg.RDA.LDAMinRows, p.LDA.Rows)
	}
	if minRows > 0 {
		shape.keyBits = cfg.SampleKeyBits
	}
	minRows = max(minRows, -minRows)
	if minRows > 0 {
		shape.rda = reconcile.Size(rate/10_000, cfg.MinRDABuckets(), cfg.RDA.MaxBuckets)
		largest := 0.0
		for _, tf := range runEpoch(p, link, frames, shift, shape, wire, false)[0].GetTopFlows() {
			largest = max(largest, float64(tf.GetPackets()))
		}
		shape.ldsRows = int(lds.RowsFor(p.LDS, 2*float64(rate/10_000)/float64(rate), largest, minRows))
	}
	for range 4 { // the collector's resizing, until it settles
		next := nextLDSCols(tb, p, shape, runEpoch(p, link, frames, shift, shape, wire, false)[0].GetLds())
		if next == shape.ldsCols {
			break
		}
		shape.ldsCols = next
	}
	if ldsAuto {
		// What the sized LDS and the sample take, as the collector
		// weighs them (SamplingFor).
		r := runEpoch(p, link, frames, shift, shape, wire, false)[0]
		s, err := sample.Decode(r.GetSample())
		if err != nil {
			tb.Fatal(err)
		}
		cost := collector.SampleCost{EntryBytes: float64(len(r.GetSample())) / float64(max(1, s.Len())), LDSPacketBytes: float64(len(r.GetLds())) / float64(len(frames))}
		shift, shape.ldsOff = cfg.SamplingFor(uint64(len(frames)), shift, cost, false, true, p.Sample.MaxEntries)
	}
	return runEpoch(p, link, frames, shift, shape, wire, lists), len(frames)
}

// epochTraffic is one epoch of exactly rate packets of synthetic traffic
// (a flow per 7 packets, or more flows where the Pareto sizes fall short)
// and the sampling shift the collector sets for it.
func epochTraffic(tb testing.TB, p params.Params, rate int) (layers.LinkType, []sim.Frame, int) {
	start := p.Epoch.StartNS(1_800_000_000)
	var link layers.LinkType
	var frames []sim.Frame
	for flows := max(1, rate/7); len(frames) < rate; flows *= 2 {
		var err error
		link, frames, err = sim.Synthesize(sim.SynthConfig{Flows: flows, ParetoShape: 1.1, MaxPackets: 20_000,
			Start: time.Unix(0, start), Span: p.Epoch.Length - time.Millisecond, Seed: 9})
		if err != nil {
			tb.Fatal(err)
		}
	}
	frames = frames[:rate]
	return link, frames, sample.ShiftFor(uint64(len(frames)), uint64(p.Sample.Target))
}

// nextLDSCols is the LDS size a collector with the default flows settings
// asks for after epochs like one whose upstream sketch, of the shape sh,
// is b (as its noteLDSLoad does).
func nextLDSCols(tb testing.TB, p params.Params, sh epochShape, b []byte) int {
	cur := sh.ldsCols
	l, err := lds.Decode(b)
	if err != nil {
		tb.Fatal(err)
	}
	fc := collector.DefaultConfig().Flows
	large, packets := l.Load(float64(fc.LDSLargePackets))
	want := lds.ColsFor(2*large, 2*packets, float64(fc.LDSLargePackets), l.Config().Rows, p.LDS.K, 0.01, fc.LDSMinCols, p.LDS.Cols)
	if want > cur || want <= cur/4 {
		return want
	}
	return cur
}

// runEpoch feeds frames to an upstream probe's pipeline for one path
// whose sample shift, synopses' shape and LDS wire form are set, and
// returns its reports.
func runEpoch(p params.Params, link layers.LinkType, frames []sim.Frame, shift int, sh epochShape, wire lds.Wire, lists bool) []*owlv1.EpochReport {
	pl, reports := reportingPipeline(p, lists)
	set, _ := newPathSet(&owlv1.PathConfig{Paths: []*owlv1.PathAssignment{{Path: &owlv1.Path{Name: "all", Upstream: "a", Downstream: "b"},
		Role: owlv1.Role_ROLE_UPSTREAM, RdaBuckets: uint32(sh.rda), SampleShift: uint32(shift), LdsCols: uint32(sh.ldsCols), LdsRows: uint32(sh.ldsRows), LdaRows: uint32(sh.lda), LdsOff: sh.ldsOff}}, LdsDigestBytes: uint32(wire.DigestBytes), LdsPacked: wire.Packed, PackedFlowKeys: true,
		SampleKeyBits: uint32(sh.keyBits)})
	pl.setPaths(set)
	_ = pl.setLink(link)
	for _, f := range frames {
		pl.frame(f.Data, f.TimeNS)
	}
	pl.flush()
	return *reports
}

// reportingPipeline is a pipeline whose reports go to the slice it
// returns (lists: exact lists where smaller).
func reportingPipeline(p params.Params, lists bool) (*pipeline, *[]*owlv1.EpochReport) {
	reports := new([]*owlv1.EpochReport)
	clock := func(int64, int64) *owlv1.ClockStatus { return &owlv1.ClockStatus{} }
	rep := &reporter{caches: newCacheStore(4, 1<<24), topFlows: 20, clock: clock, grid: p.Epoch, exactLists: lists,
		emit: func(r *owlv1.EpochReport) { *reports = append(*reports, r) }}
	var stats counters
	pl, _ := newPipeline(p, 1<<22, 20, rep.report, &stats)
	return pl, reports
}

// A probe sends LDS digests of the width its collector's path
// configuration names (wire version 2 under 8 bytes), full ones (version
// 1, which every collector reads) from a collector that names none, and
// refuses a width LDS cannot carry.
func TestLDSDigestFromCollector(t *testing.T) {
	p := params.Default()
	link, frames, shift := epochTraffic(t, p, 2_000)
	for _, c := range []struct{ asked, want int }{{0, 8}, {8, 8}, {4, 4}, {2, 2}} {
		reports := runEpoch(p, link, frames, shift, epochShape{rda: 256, ldsCols: 256}, lds.Wire{DigestBytes: c.asked}, false)
		b := reports[0].GetLds()
		l, err := lds.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if wantVersion := map[bool]byte{true: 1, false: 2}[c.want == 8]; l.DigestBytes() != c.want || b[4] != wantVersion {
			t.Errorf("asked for %d: %d-byte digests in version %d, want %d in %d", c.asked, l.DigestBytes(), b[4], c.want, wantVersion)
		}
	}
	// Packed (version 3) where the collector reads it, at its width.
	reports := runEpoch(p, link, frames, shift, epochShape{rda: 256, ldsCols: 256}, lds.Wire{DigestBytes: 4, Packed: true}, false)
	b := reports[0].GetLds()
	if l, err := lds.Decode(b); err != nil || b[4] != 3 || l.Wire() != (lds.Wire{DigestBytes: 4, Packed: true}) {
		t.Errorf("asked for packed 4-byte digests: version %d, %v", b[4], err)
	}
	if _, err := newPathSet(&owlv1.PathConfig{LdsDigestBytes: 3}); err == nil {
		t.Error("3-byte digests accepted")
	}
}

// TestNotOwnerKeepsSizes: a path configuration from a member of a
// cluster that does not own a path (not_owner) leaves the sizes its
// owner told the probe; one without the flag, as an older collector
// sends, is taken whole, as before: its zero sample_shift (every packet)
// and false lds_off too.
func TestNotOwnerKeepsSizes(t *testing.T) {
	p := params.Default()
	link, frames, _ := epochTraffic(t, p, 2_000)
	path := &owlv1.Path{Name: "all", Upstream: "a", Downstream: "b"}
	owner := &owlv1.PathConfig{PackedFlowKeys: true, Paths: []*owlv1.PathAssignment{{Path: path, Role: owlv1.Role_ROLE_UPSTREAM,
		RdaBuckets: 256, SampleShift: 3, LdsCols: 256, LdsOff: true}}}
	for _, c := range []struct {
		notOwner bool
		shift    int
		lds      bool
	}{{true, 3, false}, {false, 0, true}} {
		pl, out := reportingPipeline(p, false)
		for _, pc := range []*owlv1.PathConfig{owner, {PackedFlowKeys: true, Paths: []*owlv1.PathAssignment{{Path: path,
			Role: owlv1.Role_ROLE_UPSTREAM, Collector: "other:7700", NotOwner: c.notOwner}}}} {
			set, err := newPathSet(pc)
			if err != nil {
				t.Fatal(err)
			}
			pl.setPaths(set)
		}
		_ = pl.setLink(link)
		for _, f := range frames {
			pl.frame(f.Data, f.TimeNS)
		}
		pl.flush()
		reports := *out
		if len(reports) != 1 {
			t.Fatalf("not_owner %t: %d reports, want 1", c.notOwner, len(reports))
		}
		s, err := sample.Decode(reports[0].GetSample())
		if err != nil {
			t.Fatal(err)
		}
		r, err := rda.Decode(reports[0].GetRda())
		if err != nil {
			t.Fatal(err)
		}
		if s.Config().Shift() != c.shift || (len(reports[0].GetLds()) > 0) != c.lds || r.Config().Buckets != 256 {
			t.Errorf("not_owner %t: rate 1/%d, LDS sent %t, %d RDA buckets; want 1/%d, %t, 256",
				c.notOwner, 1<<s.Config().Shift(), len(reports[0].GetLds()) > 0, r.Config().Buckets, 1<<c.shift, c.lds)
		}
	}
}
