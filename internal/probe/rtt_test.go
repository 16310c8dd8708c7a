package probe

import (
	"math"
	"net/netip"
	"runtime"
	"slices"
	"testing"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/gopacket/gopacket/layers"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/rtt"
	"github.com/owl-latency/owl/internal/synopsis/delays"
)

// traceRTT runs the bundled trace through a probe's pipeline with
// round-trip matching on (cfg) and returns its RTT reports' sketches merged
// by kind, and the frames.
func traceRTT(t *testing.T, cfg RTTConfig) (map[string]*ddsketch.DDSketch, map[string]uint64, []capture.Frame) {
	t.Helper()
	src, err := capture.OpenFile("../../testdata/trace.pcap")
	if err != nil {
		t.Fatal(err)
	}
	var frames []capture.Frame
	for {
		f, err := src.Next()
		if err != nil {
			break
		}
		frames = append(frames, capture.Frame{Data: append([]byte(nil), f.Data...), TimeNS: f.TimeNS})
	}
	src.Close()
	p := params.Default()
	var reports []*owlv1.RTTReport
	clock := func(int64, int64) *owlv1.ClockStatus { return &owlv1.ClockStatus{} }
	rep := &reporter{caches: newCacheStore(4, 1<<24), clock: clock, grid: p.Epoch,
		emit: func(*owlv1.EpochReport) {}, emitRTT: func(r *owlv1.RTTReport) { reports = append(reports, r) }}
	var stats counters
	pl, _ := newPipeline(p, 1<<22, 20, rep.report, &stats)
	if pl.rtt, err = newRTTMatcher(cfg, cfg.Fridges.Seed, p.Epoch.Length.Seconds()); err != nil {
		t.Fatal(err)
	}
	_ = pl.setLink(layers.LinkTypeEthernet)
	for _, f := range frames {
		pl.frame(f.Data, f.TimeNS)
	}
	pl.flush()
	kinds, samples := map[string]*ddsketch.DDSketch{}, map[string]uint64{}
	size := 0
	for _, r := range reports {
		size += proto.Size(r)
		for _, k := range r.GetKinds() {
			s, err := delays.Decode(k.GetSketch())
			if err != nil {
				t.Fatal(err)
			}
			if kinds[k.GetKind()] == nil {
				kinds[k.GetKind()] = delays.New()
			}
			_ = kinds[k.GetKind()].MergeWith(s)
			samples[k.GetKind()] += k.GetSamples()
		}
	}
	t.Logf("%d RTT reports, %d bytes each on average", len(reports), size/max(len(reports), 1))
	return kinds, samples, frames
}

// TestRTTOnTheBundledTrace: the probe's round-trip times of the bundled
// trace (HTTP and DNS, no path configured: RTT covers every flow) against
// the exact matcher on the same packets. With fridges that hold all the
// trace's requests (1.5 MiB), nearly every pair is found (a request whose
// slot another takes before its answer is lost); each fridge takes a
// share of the requests and scales its own up by 1/p, so the weighted
// count and the quantiles still vary by a few percent (the combination's
// variance, not a bias). With the default 96 KiB, unanswered
// requests (delayed ACKs answer every other segment) evict waiting ones:
// the corrections keep the weighted count and the quantiles near the
// truth; with 64 entries, far too few, nearer than chance would.
func TestRTTOnTheBundledTrace(t *testing.T) {
	for _, tc := range []struct {
		name           string
		bytes          int
		countTol, qTol float64
	}{{"1.5 MiB", 1 << 16 * 24, 0.05, 0.05}, {"96 KiB", 0, 0.05, 0.15}, {"64 entries", 64 * 24, 0.25, 0.25}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultRTTConfig()
			if tc.bytes > 0 {
				cfg.Fridges.MemoryBytes, cfg.Fridges.Fridges = tc.bytes, 2
			}
			kinds, samples, frames := traceRTT(t, cfg)
			truth := exactRTT(frames, cfg.Fridges.Seed)
			for kind, ds := range truth {
				slices.Sort(ds)
				got := kinds[kind]
				if got == nil {
					t.Errorf("%s: no sketch, %d true pairs", kind, len(ds))
					continue
				}
				n := float64(len(ds))
				t.Logf("%s: %d true pairs; %d matched, standing for %.0f", kind, len(ds), samples[kind], got.GetCount())
				if tc.bytes > 1<<20 && float64(samples[kind]) < 0.999*n {
					t.Errorf("%s: %d matched, truth %d", kind, samples[kind], len(ds))
				}
				// Each fridge's count estimates the whole, scaled by 1/p: over
				// a few tens of pairs its variance is wide, so the count is
				// held to the bar from 500 pairs on.
				if n >= 500 && math.Abs(got.GetCount()-n) > tc.countTol*n {
					t.Errorf("%s: %d matched standing for %.1f, truth %d", kind, samples[kind], got.GetCount(), len(ds))
				}
				// Where evictions lose many pairs, the corrected count must be
				// nearer the truth than the pairs matched (where they lose few,
				// the corrections' variance is the larger error; over a few
				// tens of pairs one run is a coin toss: TestRTTCorrectionOverSeeds).
				if lost := n - float64(samples[kind]); n >= 500 && lost > 0.05*n && math.Abs(got.GetCount()-n) >= lost {
					t.Errorf("%s: weighted count %.1f no nearer the truth %d than the %d matched", kind, got.GetCount(), len(ds), samples[kind])
				}
				if len(ds) < 50 {
					continue
				}
				for _, q := range []float64{0.5, 0.95, 0.99} {
					v, _ := got.GetValueAtQuantile(q)
					want := float64(ds[int(math.Ceil(q*n))-1])
					t.Logf("  p%g: %.0f ns, truth %.0f ns", q*100, v, want)
					if math.Abs(v-want) > tc.qTol*want {
						t.Errorf("%s p%g: %.0f ns, truth %.0f ns", kind, q*100, v, want)
					}
				}
			}
			if len(truth) < 2 {
				t.Errorf("the trace gave pairs of %d kinds", len(truth))
			}
		})
	}
}

// exactRTT is the exact matcher's delays of frames by kind.
func exactRTT(frames []capture.Frame, seed uint64) map[string][]int64 {
	d, _ := capture.NewDecoder(layers.LinkTypeEthernet, params.Default().Identity)
	x := rtt.NewExact(seed)
	truth := map[string][]int64{}
	for _, f := range frames {
		var p capture.Packet
		if d.Decode(f.Data, f.TimeNS, &p) != nil {
			continue
		}
		if s, ok := x.Add(&p); ok {
			truth[s.Kind.String()] = append(truth[s.Kind.String()], s.DelayNS)
		}
	}
	return truth
}

// TestRTTCorrectionOverSeeds: with 64 fridge entries, far too few for
// the bundled trace, most pairs are lost to evictions; over 12 seeds the
// corrected counts average nearer the truth than the pairs matched, for
// the 22 handshakes as for the 4,271 data pairs. (One seed's handshake
// count, over 8–10 matched pairs each weighed up about twofold, misses
// by more than the pairs lost in one run in four or so.)
func TestRTTCorrectionOverSeeds(t *testing.T) {
	const seeds = 12
	weighted, matched := map[string]float64{}, map[string]float64{}
	var truth map[string][]int64
	for seed := uint64(1); seed <= seeds; seed++ {
		cfg := DefaultRTTConfig()
		cfg.Fridges.MemoryBytes, cfg.Fridges.Fridges, cfg.Fridges.Seed = 64*24, 2, seed
		kinds, samples, frames := traceRTT(t, cfg)
		if truth == nil {
			truth = exactRTT(frames, seed)
		}
		for kind, sk := range kinds {
			weighted[kind] += sk.GetCount() / seeds
			matched[kind] += float64(samples[kind]) / seeds
		}
	}
	if len(truth) < 2 {
		t.Fatalf("the trace gave pairs of %d kinds", len(truth))
	}
	for kind, ds := range truth {
		n := float64(len(ds))
		t.Logf("%s: %d true pairs; over %d seeds %.1f matched, standing for %.1f", kind, len(ds), seeds, matched[kind], weighted[kind])
		if math.Abs(weighted[kind]-n) >= n-matched[kind] {
			t.Errorf("%s: corrected count %.1f on average no nearer the truth %d than the %.1f matched", kind, weighted[kind], len(ds), matched[kind])
		}
	}
}

// BenchmarkRTTMatcher measures round-trip matching alone per packet, on
// the bundled trace's packets decoded beforehand and replayed as on a
// 5 M packets/s link, a new epoch every 5 M packets as in the pipeline.
func BenchmarkRTTMatcher(b *testing.B) {
	src, err := capture.OpenFile("../../testdata/trace.pcap")
	if err != nil {
		b.Fatal(err)
	}
	d, _ := capture.NewDecoder(layers.LinkTypeEthernet, params.Default().Identity)
	var pkts []capture.Packet
	for {
		f, err := src.Next()
		if err != nil {
			break
		}
		var p capture.Packet
		if d.Decode(f.Data, f.TimeNS, &p) == nil {
			pkts = append(pkts, p)
		}
	}
	src.Close()
	cfg := DefaultRTTConfig()
	m, err := newRTTMatcher(cfg, cfg.Fridges.Seed, 1)
	if err != nil {
		b.Fatal(err)
	}
	sum := m.newEpoch()
	base := pkts[0].TimeNS
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%5_000_000 == 0 {
			sum = m.newEpoch()
		}
		p := pkts[i%len(pkts)]
		p.TimeNS = base + int64(i)*200
		m.packet(&p, sum)
	}
	b.StopTimer()
	b.ReportMetric(float64(sum.Counters.Matched)/float64(max(sum.Counters.Responses, 1)), "matched/response")
}

// refPacket is the matcher's rules in their plainest form (a look-up in
// the current set, then in the previous one, then the request offered),
// for TestMatcherShortcutsChangeNothing.
func refPacket(m *rttMatcher, p *capture.Packet, sum *rtt.Summary) {
	ev := rtt.Classify(p, m.seed)
	if ev.Response {
		sum.Counters.Responses++
		set := m.cur
		d, x, ok := set.Take(ev.ResponseKey, p.TimeNS)
		if !ok && m.old != nil {
			set = m.old
			d, x, ok = set.Take(ev.ResponseKey, p.TimeNS)
		}
		if ok {
			sum.Counters.Matched++
			sum.Add(rtt.Sample{DelayNS: d, Kind: ev.ResponseKind, Responder: ev.Responder, Weight: set.PooledCorr(x)})
		}
	}
	if ev.Request {
		sum.Counters.Requests++
		m.requests++
		if m.cur.Offer(ev.RequestKey, p.TimeNS) {
			sum.Counters.Ambiguous++
		}
	}
}

// TestMatcherShortcutsChangeNothing: the matcher's shortcuts (a response
// and a request looked up at once, responses known to find nothing not
// looked up) give the reports of the plain rules, byte for byte, over
// epochs where the fridges are resized and the replayed trace's segments
// come again as retransmissions.
func TestMatcherShortcutsChangeNothing(t *testing.T) {
	_, _, frames := traceRTT(t, DefaultRTTConfig())
	d, _ := capture.NewDecoder(layers.LinkTypeEthernet, params.Default().Identity)
	var pkts []capture.Packet
	for _, f := range frames {
		var p capture.Packet
		if d.Decode(f.Data, f.TimeNS, &p) == nil {
			pkts = append(pkts, p)
		}
	}
	for _, memBytes := range []int{64 * 24, 4096 * 24} {
		cfg := DefaultRTTConfig()
		cfg.Fridges.MemoryBytes = memBytes
		m, _ := newRTTMatcher(cfg, cfg.Fridges.Seed, 0.01)
		ref, _ := newRTTMatcher(cfg, cfg.Fridges.Seed, 0.01)
		sum, refSum := m.newEpoch(), ref.newEpoch()
		// Epochs of changing lengths in packets make the request rate
		// change, and the fridges resized.
		resizes, epochs, next, lengths := 0, 0, 0, []int{20_000, 3000, 30_000, 1000, 40_000}
		var total rtt.Counters
		for i := range 8 * len(pkts) {
			if i == next {
				next += lengths[epochs%len(lengths)]
				epochs++
				total.Matched += sum.Counters.Matched
				total.Ambiguous += sum.Counters.Ambiguous
				a, b := sum.Report(int64(i)), refSum.Report(int64(i))
				if !proto.Equal(a, b) {
					t.Fatalf("%d bytes, packet %d: reports differ:\n%v\n%v", memBytes, i, a, b)
				}
				cur := m.cur
				sum, refSum = m.newEpoch(), ref.newEpoch()
				if m.cur != cur {
					resizes++
				}
			}
			p := pkts[i%len(pkts)]
			p.TimeNS = int64(i) * 500
			m.packet(&p, sum)
			refPacket(ref, &p, refSum)
		}
		if resizes < 3 || total.Matched < 1000 || total.Ambiguous == 0 {
			t.Errorf("%d bytes: %d resizes, %d matched, %d ambiguous: the replay does not test what it should",
				memBytes, resizes, total.Matched, total.Ambiguous)
		}
		t.Logf("%d bytes: %d epochs, %d resizes, %d matched, %d ambiguous", memBytes, epochs, resizes, total.Matched, total.Ambiguous)
	}
}

// TestRTTMemoryBoundedUnderFlood: a flood of SYNs from a million spoofed
// sources, none answered, and a scan of a million responders, each in a
// /24 of its own and each answering its SYN, leave the matcher's and the
// epoch summary's memory bounded: the fridges are fixed arrays, the
// summary tracks at most 4 × rtt.prefixes.max prefixes and counts the
// ones it folds into "other" in a fixed kilobyte, and the report stays
// small. (A set of the folded prefixes took about 100 MB here.)
func TestRTTMemoryBoundedUnderFlood(t *testing.T) {
	const flows = 1_000_000
	cfg := DefaultRTTConfig()
	m, err := newRTTMatcher(cfg, cfg.Fridges.Seed, 1)
	if err != nil {
		t.Fatal(err)
	}
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	sum := m.newEpoch()
	before := heap()
	server, scanner := netip.MustParseAddr("192.0.2.80"), netip.MustParseAddr("198.51.100.7")
	syn := func(tNS int64, src, dst netip.Addr, sport uint16, seq uint32) capture.Packet {
		return capture.Packet{TimeNS: tNS, Flow: capture.FlowKey{Src: src, Dst: dst, SrcPort: sport, DstPort: 443, Proto: 6},
			L4: capture.Transport{Seq: seq, TCPFlags: capture.TCPSyn}}
	}
	for i := range flows {
		// The flood: a spoofed source each, never answered.
		src := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		p := syn(int64(4*i), src, server, uint16(i), uint32(i))
		m.packet(&p, sum)
		// The scan: a responder in a /24 of its own answers in 1 µs.
		dst := netip.AddrFrom4([4]byte{byte(1 + i>>16), byte(i >> 8), byte(i), 1})
		p = syn(int64(4*i+1), scanner, dst, 40000, uint32(i))
		m.packet(&p, sum)
		p = capture.Packet{TimeNS: int64(4*i) + 1001, Flow: capture.FlowKey{Src: dst, Dst: scanner, SrcPort: 443, DstPort: 40000, Proto: 6},
			L4: capture.Transport{Seq: 7, Ack: uint32(i) + 1, TCPFlags: capture.TCPSyn | capture.TCPAck}}
		m.packet(&p, sum)
	}
	grew := int64(heap()) - int64(before)
	r := sum.Report(0)
	t.Logf("heap grew %d KiB; %d requests, %d matched; %d prefixes reported, %d folded; report %d bytes",
		grew>>10, sum.Counters.Requests, sum.Counters.Matched, len(r.GetPrefixes()), r.GetCounters().GetPrefixesFolded(), proto.Size(r))
	if grew > 4<<20 {
		t.Errorf("the matcher's memory grew by %d KiB under the flood", grew>>10)
	}
	if sum.Counters.Requests != 3*flows || sum.Counters.Matched < flows/2 {
		t.Errorf("counters %+v", sum.Counters)
	}
	if f := float64(r.GetCounters().GetPrefixesFolded()); math.Abs(f-flows) > 0.1*flows {
		t.Errorf("%v prefixes folded, want about %d", f, flows)
	}
	if n := proto.Size(r); n > 200<<10 {
		t.Errorf("report of %d bytes", n)
	}
}
