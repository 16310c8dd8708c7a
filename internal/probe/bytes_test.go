package probe

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/sim"
)

// BenchmarkReportBytes is what one side of a path ships per packet in its
// epoch report (LDA, RDA, LDS, top flows, packet sample, or the exact list
// in their place, and the rest) at 100 to 1 M packets/s, one epoch each
// (oneEpochReports), with exact lists off and on. Metrics: bytes/packet
// of both sides (twice one side's report), the same gzipped, and each
// part's bytes. Run with -benchtime 1x: each iteration is one epoch of
// packets.
func BenchmarkReportBytes(b *testing.B) {
	for _, rate := range []int{100, 1_000, 10_000, 100_000, 1_000_000} {
		for _, lists := range []bool{false, true} {
			b.Run(fmt.Sprintf("packets/s=%d/lists=%v", rate, lists), func(b *testing.B) {
				var reports []*owlv1.EpochReport
				n := 0
				for b.Loop() {
					reports, n = oneEpochReports(b, rate, lists)
				}
				var size, lda, rda, lds, smp, list, zipped int
				for _, r := range reports {
					raw, _ := proto.Marshal(r)
					size += len(raw)
					lda, rda, lds, smp, list = lda+len(r.GetLda()), rda+len(r.GetRda()), lds+len(r.GetLds()), smp+len(r.GetSample()), list+len(r.GetList())
					var z bytes.Buffer
					w := gzip.NewWriter(&z)
					_, _ = w.Write(raw)
					_ = w.Close()
					zipped += z.Len()
				}
				b.ReportMetric(2*float64(size)/float64(n), "bytes/packet")
				b.ReportMetric(2*float64(zipped)/float64(n), "gzip-bytes/packet")
				b.ReportMetric(float64(lda), "lda-bytes")
				b.ReportMetric(float64(rda), "rda-bytes")
				b.ReportMetric(float64(lds), "lds-bytes")
				b.ReportMetric(float64(smp), "sample-bytes")
				b.ReportMetric(float64(list), "list-bytes")
				b.ReportMetric(float64(len(reports)), "reports")
			})
		}
	}
}

// oneEpochReports runs one epoch of rate packets of synthetic traffic
// (Pareto flow sizes) through an upstream probe's pipeline, as the
// collector would set it in steady state: the RDA at rda.min_buckets (256,
// a path with little loss) and the sample at the rate for
// params.sample.target; lists lets reports carry exact lists. It returns
// the reports and the packets.
func oneEpochReports(tb testing.TB, rate int, lists bool) ([]*owlv1.EpochReport, int) {
	p := params.Default()
	start := p.Epoch.StartNS(1_800_000_000)
	link, frames, err := sim.Synthesize(sim.SynthConfig{Flows: max(1, rate/7), ParetoShape: 1.1, MaxPackets: 20_000,
		Start: time.Unix(0, start), Span: p.Epoch.Length - time.Millisecond, Seed: 9})
	if err != nil {
		tb.Fatal(err)
	}
	frames = frames[:min(len(frames), rate)]
	shift := 0
	for uint64(len(frames))>>shift > 2*uint64(p.Sample.Target) {
		shift++
	}
	var reports []*owlv1.EpochReport
	clock := func(int64, int64) *owlv1.ClockStatus { return &owlv1.ClockStatus{} }
	rep := &reporter{caches: newCacheStore(4, 1<<24), topFlows: 20, clock: clock, grid: p.Epoch, exactLists: lists,
		emit: func(r *owlv1.EpochReport) { reports = append(reports, r) }}
	var stats counters
	pl, _ := newPipeline(p, 1<<22, 20, rep.report, &stats)
	set, _ := newPathSet(&owlv1.PathConfig{Paths: []*owlv1.PathAssignment{{Path: &owlv1.Path{Name: "all", Upstream: "a", Downstream: "b"},
		Role: owlv1.Role_ROLE_UPSTREAM, RdaBuckets: 256, SampleShift: uint32(shift)}}})
	pl.setPaths(set)
	_ = pl.setLink(link)
	for _, f := range frames {
		pl.frame(f.Data, f.TimeNS)
	}
	pl.flush()
	return reports, len(frames)
}
