package reorder

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// TestWireRoundTrip: a tracker's report read back from its wire form is
// the same report.
func TestWireRoundTrip(t *testing.T) {
	pkts := stream(200, 30, 60, 0.03, 0.01, 7)
	c := DefaultConfig()
	c.Prefixes.Max = 20
	tr, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	for i := range pkts {
		tr.Add(&pkts[i])
	}
	r := tr.Report()
	if len(r.Prefixes) != 20 || r.PrefixesFolded != 10 || r.Total().Reordered == 0 {
		t.Fatalf("report of %d prefixes, %d folded, %+v", len(r.Prefixes), r.PrefixesFolded, r.Total())
	}
	b, _ := proto.Marshal(r.Proto(42))
	var m owlv1.ReorderReport
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	got, err := FromProto(&m)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetEpoch() != 42 || got.Other != r.Other || got.PrefixesFolded != r.PrefixesFolded || got.Counters != r.Counters || len(got.Prefixes) != len(r.Prefixes) {
		t.Fatalf("read back %+v, sent %+v", got, r)
	}
	for i := range got.Prefixes {
		if got.Prefixes[i] != r.Prefixes[i] {
			t.Errorf("prefix %d: read back %+v, sent %+v", i, got.Prefixes[i], r.Prefixes[i])
		}
	}
	t.Logf("%d prefixes in %d bytes", len(r.Prefixes), len(b))
}

// TestFromProtoRefuses: reports no tracker makes are refused, saying why.
func TestFromProtoRefuses(t *testing.T) {
	good := func() *owlv1.ReorderReport {
		return &owlv1.ReorderReport{Epoch: 1, Prefixes: []*owlv1.ReorderStats{
			{Prefix: "192.0.2.0/24", Packets: 100, Reordered: 5, Retransmitted: 2, Flows: 2, SumSqReordered: 13, SumReorderedPackets: 250, SumSqPackets: 5000},
			{Prefix: "2001:db8::/48", Packets: 10, Flows: 1, SumSqPackets: 100}},
			Other: &owlv1.ReorderStats{Packets: 3, Flows: 1, SumSqPackets: 9}}
	}
	if _, err := FromProto(good()); err != nil {
		t.Fatalf("good report refused: %v", err)
	}
	if _, err := FromProto(&owlv1.ReorderReport{}); err != nil {
		t.Fatalf("empty report refused: %v", err)
	}
	for _, tc := range []struct {
		name, want string
		mod        func(*owlv1.ReorderReport)
	}{
		{"unreadable prefix", "unreadable", func(m *owlv1.ReorderReport) { m.Prefixes[0].Prefix = "192.0.2/24" }},
		{"not masked", "not masked", func(m *owlv1.ReorderReport) { m.Prefixes[0].Prefix = "192.0.2.7/24" }},
		{"repeated", "repeated", func(m *owlv1.ReorderReport) { m.Prefixes[1].Prefix = m.Prefixes[0].Prefix }},
		{"named other", "other prefixes named", func(m *owlv1.ReorderReport) { m.Other.Prefix = "10.0.0.0/8" }},
		{"too many", "over 4096", func(m *owlv1.ReorderReport) {
			m.Prefixes = make([]*owlv1.ReorderStats, MaxPrefixes+1)
		}},
		{"reordered past packets", "reordered", func(m *owlv1.ReorderReport) { m.Prefixes[0].Reordered = 101 }},
		{"sum past packets", "retransmitted", func(m *owlv1.ReorderReport) { m.Prefixes[0].Retransmitted = 96 }},
		{"wrapping sum", "retransmitted", func(m *owlv1.ReorderReport) { m.Prefixes[0].Retransmitted = math.MaxUint64 }},
		{"no flows", "flows", func(m *owlv1.ReorderReport) { m.Prefixes[1].Flows = 0 }},
		{"flows past packets", "flows", func(m *owlv1.ReorderReport) { m.Prefixes[1].Flows = 11 }},
		{"huge", "over", func(m *owlv1.ReorderReport) { m.Other.Packets, m.Other.Flows = 1<<41, 1 }},
		{"NaN", "not numbers", func(m *owlv1.ReorderReport) { m.Prefixes[0].SumSqPackets = math.NaN() }},
		{"infinite", "negative, not numbers", func(m *owlv1.ReorderReport) { m.Prefixes[0].SumSqReordered = math.Inf(1) }},
		{"negative", "negative", func(m *owlv1.ReorderReport) { m.Prefixes[0].SumReorderedPackets = -1 }},
		{"squares unfit", "do not fit", func(m *owlv1.ReorderReport) { m.Prefixes[0].SumSqReordered = 26 }},
		{"squares too small", "do not fit", func(m *owlv1.ReorderReport) { m.Prefixes[0].SumSqPackets = 4000 }},
		{"huge counter", "counter", func(m *owlv1.ReorderReport) { m.Counters = &owlv1.ReorderCounters{Refused: 1 << 50} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := good()
			tc.mod(m)
			_, err := FromProto(m)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// FuzzFromProto: any bytes that unmarshal into a report are read or
// refused; a report read has rates and standard errors that are numbers
// in [0, 1] and [0, ∞), alone and merged.
func FuzzFromProto(f *testing.F) {
	pkts := stream(50, 8, 40, 0.05, 0.02, 9)
	tr, _ := New(DefaultConfig())
	for i := range pkts {
		tr.Add(&pkts[i])
	}
	b, _ := proto.Marshal(tr.Report().Proto(7))
	f.Add(b)
	b, _ = proto.Marshal(&owlv1.ReorderReport{Prefixes: []*owlv1.ReorderStats{{Prefix: "10.0.0.0/8", Packets: 1, Flows: 1, SumSqPackets: 1}}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var m owlv1.ReorderReport
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		r, err := FromProto(&m)
		if err != nil {
			return
		}
		for _, s := range append([]Stats{r.Other, r.Total()}, statsOf(Merge(MaxPrefixes, r, r))...) {
			if rate, se := s.Rate(), s.RateSE(); !(rate >= 0 && rate <= 1) || !(se >= 0) || math.IsInf(se, 0) {
				t.Fatalf("stats %+v: rate %v, SE %v", s, rate, se)
			}
		}
	})
}

func statsOf(r *Report) []Stats {
	out := make([]Stats, len(r.Prefixes))
	for i, p := range r.Prefixes {
		out[i] = p.Stats
	}
	return out
}

// TestWireCarriesEveryField: a field added to Stats or Counters must be
// added to the wire form (Proto, FromProto and owl.proto) too; this counts
// them.
func TestWireCarriesEveryField(t *testing.T) {
	if n := reflect.TypeFor[Stats]().NumField(); n != 7 {
		t.Errorf("Stats has %d fields, the wire form carries 7", n)
	}
	if n := reflect.TypeFor[Counters]().NumField(); n != 8 {
		t.Errorf("Counters has %d fields, the wire form carries 8", n)
	}
}
