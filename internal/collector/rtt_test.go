package collector

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/rtt"
)

// TestRTTStoredAndQueried: a probe's RTT reports over ten epochs are
// stored and merged: GetRTTDistribution's quantiles of all kinds, of one
// kind and of one prefix lie within the sketch's accuracy of the true
// ones, TopRTTPrefixes orders the prefixes by p99 and by count, and a
// report with an unreadable sketch or an unknown kind is refused.
func TestRTTStoredAndQueried(t *testing.T) {
	c := newTest(t, testConfig(t))
	rng := rand.New(rand.NewPCG(3, 4))
	slow, fast := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("203.0.113.9")
	var all, data, slowOnes []int64
	for e := int64(1); e <= 10; e++ {
		s := rtt.NewSummary(rtt.DefaultPrefixConfig())
		for i := range 500 {
			sm := rtt.Sample{Kind: rtt.TCPData, Responder: fast, DelayNS: 100_000 + rng.Int64N(50_000), Weight: 1}
			switch {
			case i%5 == 0:
				sm.Responder, sm.DelayNS = slow, 20_000_000+rng.Int64N(5_000_000)
				slowOnes = append(slowOnes, sm.DelayNS)
			case i%7 == 0:
				sm.Kind = rtt.DNS
			}
			if sm.Kind == rtt.TCPData {
				data = append(data, sm.DelayNS)
			}
			all = append(all, sm.DelayNS)
			s.Add(sm)
		}
		if err := c.takeRTT("a", s.Report(e)); err != nil {
			t.Fatal(err)
		}
	}
	q := queryService{c: c}
	for _, tc := range []struct {
		kind, prefix string
		truth        []int64
	}{{"", "", all}, {"tcp-data", "", data}, {"", "198.51.100.0/24", slowOnes}} {
		got, err := q.GetRTTDistribution(context.Background(), &owlv1.GetRTTDistributionRequest{Probe: "a", Kind: tc.kind, Prefix: tc.prefix,
			From: timestamppb.New(epochTime(1, 0)), To: timestamppb.New(epochTime(10, 0))})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(tc.truth)
		if got.GetEpochs() != 10 || got.GetPairs() != float64(len(tc.truth)) {
			t.Errorf("kind %q prefix %q: %d epochs, %v pairs, want 10 and %d", tc.kind, tc.prefix, got.GetEpochs(), got.GetPairs(), len(tc.truth))
		}
		for _, qu := range got.GetQuantiles() {
			want := float64(tc.truth[int(math.Ceil(qu.GetQ()*float64(len(tc.truth))))-1])
			if math.Abs(qu.GetValueNs()-want) > 0.011*want {
				t.Errorf("kind %q prefix %q: p%v %v ns, truth %v", tc.kind, tc.prefix, qu.GetQ()*100, qu.GetValueNs(), want)
			}
		}
	}
	top, err := q.TopRTTPrefixes(context.Background(), &owlv1.TopRTTPrefixesRequest{Probe: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(top.GetPrefixes()) != 2 || top.GetPrefixes()[0].GetPrefix() != "198.51.100.0/24" {
		t.Errorf("by p99: %v", top.GetPrefixes())
	}
	top, _ = q.TopRTTPrefixes(context.Background(), &owlv1.TopRTTPrefixesRequest{Probe: "a", OrderBy: owlv1.TopRTTPrefixesRequest_ORDER_COUNT})
	if len(top.GetPrefixes()) != 2 || top.GetPrefixes()[0].GetPrefix() != "203.0.113.0/24" {
		t.Errorf("by count: %v", top.GetPrefixes())
	}
	bad := rtt.NewSummary(rtt.DefaultPrefixConfig())
	bad.Add(rtt.Sample{Kind: rtt.DNS, Responder: fast, DelayNS: 5, Weight: 1})
	r := bad.Report(11)
	r.Kinds[0].Sketch = []byte{0xff, 0x01, 0x02}
	r2 := bad.Report(12)
	r2.Kinds[0].Kind = "ftp"
	for _, r := range []*owlv1.RTTReport{r, r2} {
		var rej *rejection
		if err := c.takeRTT("a", r); err == nil || !errors.As(err, &rej) {
			t.Errorf("epoch %d: %v, want a rejection", r.GetEpoch(), err)
		}
	}
	if _, err := q.GetRTTDistribution(context.Background(), &owlv1.GetRTTDistributionRequest{Probe: "a", Kind: "dns", Prefix: "x"}); err == nil || !strings.Contains(err.Error(), "together") {
		t.Errorf("kind and prefix together: %v", err)
	}
}
