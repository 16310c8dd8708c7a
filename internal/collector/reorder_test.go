package collector

import (
	"context"
	"errors"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/synopsis/reorder"
)

// flowStats are the Stats of flows of n packets, o of them reordered
// and r retransmitted, each.
func flowStats(flows int, n, o, r uint64) reorder.Stats {
	f := float64(flows)
	return reorder.Stats{Packets: uint64(flows) * n, Reordered: uint64(flows) * o, Retransmitted: uint64(flows) * r, Flows: uint64(flows),
		SumSqReordered: f * float64(o*o), SumReorderedPackets: f * float64(o*n), SumSqPackets: f * float64(n*n)}
}

// reorderEpoch is a probe's report of one epoch: 198.51.100.0/24 at 5%
// (4 flows of 100 packets), 203.0.113.0/24 at 1% (20 flows of 100),
// 2001:db8::/48 never reordered (50 packets), 192.0.2.0/24 at 50% of 10
// packets, and others.
func reorderEpoch(e int64) *owlv1.ReorderReport {
	pf := func(s string, st reorder.Stats) reorder.PrefixStats {
		return reorder.PrefixStats{Prefix: netip.MustParsePrefix(s), Stats: st}
	}
	// 198.51.100.0/24's flows differ: 2, 4, 6 and 8 reordered.
	a := flowStats(1, 100, 2, 0)
	for _, o := range []uint64{4, 6, 8} {
		a.Add(flowStats(1, 100, o, 1))
	}
	r := &reorder.Report{Prefixes: []reorder.PrefixStats{
		pf("203.0.113.0/24", flowStats(20, 100, 1, 0)), pf("198.51.100.0/24", a),
		pf("2001:db8::/48", flowStats(1, 50, 0, 0)), pf("192.0.2.0/24", flowStats(1, 10, 5, 0))},
		Other: flowStats(3, 7, 0, 0), PrefixesFolded: 2, Counters: reorder.Counters{Packets: 3000, Segments: 2581, Windows: 30}}
	return r.Proto(e)
}

// TestReorderStoredAndQueried: a probe's reordering reports over ten
// epochs are stored and summed: ListReorderedPrefixes orders the
// prefixes by rate, with their counts, flows, epochs and the rate's
// standard error over the range; min_rate, min_packets, the limit and
// the range narrow it; bad requests are InvalidArgument, and reports no
// tracker makes are refused.
func TestReorderStoredAndQueried(t *testing.T) {
	c := newTest(t, testConfig(t))
	for e := int64(1); e <= 10; e++ {
		if err := c.takeReorder("a", reorderEpoch(e)); err != nil {
			t.Fatal(err)
		}
	}
	q := queryService{c: c}
	ask := func(req *owlv1.ListReorderedPrefixesRequest) *owlv1.ListReorderedPrefixesResponse {
		t.Helper()
		req.Probe = "a"
		got, err := q.ListReorderedPrefixes(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	prefixes := func(r *owlv1.ListReorderedPrefixesResponse) string {
		var s []string
		for _, p := range r.GetPrefixes() {
			s = append(s, p.GetPrefix())
		}
		return strings.Join(s, " ")
	}
	all := ask(&owlv1.ListReorderedPrefixesRequest{})
	if want := "192.0.2.0/24 198.51.100.0/24 203.0.113.0/24 2001:db8::/48"; prefixes(all) != want || all.GetEpochs() != 10 || all.GetMatched() != 4 {
		t.Fatalf("%d epochs, %d matched: %s, want 10, 4: %s", all.GetEpochs(), all.GetMatched(), prefixes(all), want)
	}
	// 198.51.100.0/24 over the ten epochs: 40 flows of 100 packets, 200
	// reordered; its rate's standard error from the spread between flows.
	var sum reorder.Stats
	for range 10 {
		for _, o := range []uint64{2, 4, 6, 8} {
			sum.Add(flowStats(1, 100, o, 0))
		}
	}
	p := all.GetPrefixes()[1]
	if p.GetPackets() != 4000 || p.GetReordered() != 200 || p.GetRetransmitted() != 30 || p.GetFlows() != 40 || p.GetEpochs() != 10 ||
		p.GetRate() != 0.05 || math.Abs(p.GetRateSe()-sum.RateSE()) > 1e-12 || !(p.GetRateSe() > 0.003) {
		t.Errorf("198.51.100.0/24: %v; standard error want %v", p, sum.RateSE())
	}
	if o, tot := all.GetOther(), all.GetTotal(); o.GetPackets() != 210 || o.GetFlows() != 30 || tot.GetPackets() != 10*(2000+400+50+10+21) ||
		all.GetCounters().GetSegments() != 25810 {
		t.Errorf("other %v, total %v, counters %v", o, tot, all.GetCounters())
	}
	for _, tc := range []struct {
		name string
		req  *owlv1.ListReorderedPrefixesRequest
		want string
	}{
		{"min_packets", &owlv1.ListReorderedPrefixesRequest{MinPackets: 1000}, "198.51.100.0/24 203.0.113.0/24"},
		{"min_rate", &owlv1.ListReorderedPrefixesRequest{MinRate: 0.02}, "192.0.2.0/24 198.51.100.0/24"},
		{"both", &owlv1.ListReorderedPrefixesRequest{MinRate: 0.02, MinPackets: 1000}, "198.51.100.0/24"},
		{"rate 1", &owlv1.ListReorderedPrefixesRequest{MinRate: 1}, ""},
		{"limit", &owlv1.ListReorderedPrefixesRequest{MinPackets: 200, Limit: 1}, "198.51.100.0/24"},
		{"range", &owlv1.ListReorderedPrefixesRequest{MinPackets: 1000, From: timestamppb.New(epochTime(3, 0)), To: timestamppb.New(epochTime(5, 0))},
			"198.51.100.0/24 203.0.113.0/24"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ask(tc.req); prefixes(got) != tc.want {
				t.Errorf("%s, want %s", prefixes(got), tc.want)
			}
		})
	}
	if r := ask(&owlv1.ListReorderedPrefixesRequest{MinPackets: 200, Limit: 1}); r.GetMatched() != 3 {
		t.Errorf("limit 1: %d matched, want 3", r.GetMatched())
	}
	if r := ask(&owlv1.ListReorderedPrefixesRequest{From: timestamppb.New(epochTime(3, 0)), To: timestamppb.New(epochTime(5, 0))}); r.GetEpochs() != 3 ||
		r.GetPrefixes()[1].GetPackets() != 1200 {
		t.Errorf("epochs 3 to 5: %d epochs, %v", r.GetEpochs(), r.GetPrefixes())
	}
	if r := ask(&owlv1.ListReorderedPrefixesRequest{From: timestamppb.New(epochTime(30, 0))}); len(r.GetPrefixes()) != 0 || !strings.Contains(r.GetNote(), "no reordering report") {
		t.Errorf("an empty range: %v", r)
	}
	for _, req := range []*owlv1.ListReorderedPrefixesRequest{
		{}, {Probe: "a", MinRate: 1.5}, {Probe: "a", MinRate: -0.1}, {Probe: "a", MinRate: math.NaN()},
		{Probe: "a", From: &timestamppb.Timestamp{Nanos: -1}},
	} {
		if _, err := q.ListReorderedPrefixes(context.Background(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", req, err)
		}
	}
	bad := reorderEpoch(11)
	bad.Prefixes[0].Reordered = bad.Prefixes[0].Packets + 1
	bad2 := reorderEpoch(12)
	bad2.Prefixes[1].Prefix = "198.51.100.7/24"
	for _, r := range []*owlv1.ReorderReport{bad, bad2} {
		var rej *rejection
		if err := c.takeReorder("a", r); err == nil || !errors.As(err, &rej) {
			t.Errorf("epoch %d: %v, want a rejection", r.GetEpoch(), err)
		}
	}
	if r := ask(&owlv1.ListReorderedPrefixesRequest{}); r.GetEpochs() != 10 {
		t.Errorf("%d epochs after two refused reports, want 10", r.GetEpochs())
	}
}

// TestReorderRetention: a probe's reports further back than
// reorder.retention from its newest go.
func TestReorderRetention(t *testing.T) {
	cfg := testConfig(t)
	cfg.Reorder.Retention = 5 * time.Second
	c := newTest(t, cfg)
	for e := int64(1); e <= 10; e++ {
		if err := c.takeReorder("a", reorderEpoch(e)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := queryService{c: c}.ListReorderedPrefixes(context.Background(), &owlv1.ListReorderedPrefixesRequest{Probe: "a"})
	if err != nil || r.GetEpochs() != 6 {
		t.Errorf("%d epochs kept (%v), want 6", r.GetEpochs(), err)
	}
}

// TestReorderMetrics: the series name each probe's worst prefixes over
// its latest window, among those with enough packets, and a prefix that
// falls out of the top loses its series.
func TestReorderMetrics(t *testing.T) {
	cfg := testConfig(t)
	cfg.Reorder.MetricsTop, cfg.Reorder.MetricsWindow = 1, 3*time.Second
	c := newTest(t, cfg)
	for e := int64(1); e <= 5; e++ {
		if err := c.takeReorder("a", reorderEpoch(e)); err != nil {
			t.Fatal(err)
		}
	}
	// Three epochs: 198.51.100.0/24 has 1,200 packets, 192.0.2.0/24 too
	// few.
	want := `# HELP owl_probe_reordered_prefix_packets TCP segments of the prefix measured over the window, behind owl_probe_reordered_prefix_rate.
# TYPE owl_probe_reordered_prefix_packets gauge
owl_probe_reordered_prefix_packets{prefix="198.51.100.0/24",probe="a"} 1200
`
	if err := testutil.GatherAndCompare(c.m.reg, strings.NewReader(want), "owl_probe_reordered_prefix_packets"); err != nil {
		t.Error(err)
	}
	// 198.51.100.0/24 stops reordering: 203.0.113.0/24 is the worst
	// once the window holds its epochs only.
	for e := int64(6); e <= 8; e++ {
		r := reorderEpoch(e)
		r.Prefixes[1] = reorder.StatsProto("198.51.100.0/24", flowStats(4, 100, 0, 0))
		if err := c.takeReorder("a", r); err != nil {
			t.Fatal(err)
		}
	}
	want = `# HELP owl_probe_reordered_prefix_rate Share of the TCP segments of a prefix that came reordered at a probe, over its latest reorder.metrics_window; the reorder.metrics_top worst prefixes of each probe with reorder.metrics_min_packets packets measured or more.
# TYPE owl_probe_reordered_prefix_rate gauge
owl_probe_reordered_prefix_rate{prefix="203.0.113.0/24",probe="a"} 0.01
`
	if err := testutil.GatherAndCompare(c.m.reg, strings.NewReader(want), "owl_probe_reordered_prefix_rate"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c.reorders.se); n != 1 {
		t.Errorf("%d standard error series, want 1", n)
	}
}

func TestReorderConfigValidate(t *testing.T) {
	for name, mod := range map[string]func(*ReorderConfig){
		"retention": func(c *ReorderConfig) { c.Retention = time.Millisecond },
		"top":       func(c *ReorderConfig) { c.MetricsTop = 1001 },
		"window":    func(c *ReorderConfig) { c.MetricsWindow = 2 * time.Hour },
	} {
		cfg := testConfig(t)
		mod(&cfg.Reorder)
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), "reorder: ") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestReorderEmptyOther: a range whose reports fold nothing into other
// leaves other out (an empty sum has no rate).
func TestReorderEmptyOther(t *testing.T) {
	c := newTest(t, testConfig(t))
	r := reorderEpoch(1)
	r.Other, r.PrefixesFolded = nil, 0
	if err := c.takeReorder("a", r); err != nil {
		t.Fatal(err)
	}
	got, err := queryService{c: c}.ListReorderedPrefixes(context.Background(), &owlv1.ListReorderedPrefixesRequest{Probe: "a"})
	if err != nil || got.GetOther() != nil || got.GetTotal().GetPackets() != 2460 {
		t.Errorf("other %v, total %v (%v); want none and 2460 packets", got.GetOther(), got.GetTotal(), err)
	}
}
