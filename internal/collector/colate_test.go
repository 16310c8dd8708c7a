package collector

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/synopsis/colate"
)

func colateTestConfig(t *testing.T) Config {
	cfg := testConfig(t)
	cfg.Params.Colate.Enabled = true
	cfg.Params.Colate.Counters = 1 << 16
	cfg.Params.Colate.Subvector = 8
	cfg.Colate.Gamma = 200
	return cfg
}

// colateTraffic records, for epochs [0, epochs), flows that cross a then b
// with per-flow delays, and traffic seen at one point only, and returns
// the vectors of each point and the true per-flow delay sums.
type colateTruth struct {
	key      capture.FlowKey
	n        int
	sum, sq  float64
	perEpoch int
}

func colateTraffic(t *testing.T, c *Collector, epochs, oneSided int) (map[string][]*owlv1.ColateVector, []*colateTruth) {
	t.Helper()
	rng := rand.New(rand.NewPCG(11, 12))
	grid := c.cfg.Params.Epoch
	cfg := c.cfg.Params.ColateConfig()
	var flows []*colateTruth
	for i := range 40 {
		k := capture.FlowKey{Src: netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), Dst: netip.MustParseAddr("10.9.9.9"), SrcPort: uint16(1000 + i), DstPort: 443, Proto: 6}
		flows = append(flows, &colateTruth{key: k, perEpoch: 50 + rng.IntN(200)})
	}
	// Vectors of epochs [0, epochs] at each point: packets sent in the
	// last epochs arrive in the next one (boundary crossers).
	vecs := map[string][]*colate.Vector{}
	for _, name := range []string{"a", "b"} {
		for e := range int64(epochs + 1) {
			v, _ := colate.New(cfg, grid.StartNS(e))
			vecs[name] = append(vecs[name], v)
		}
	}
	insert := func(name string, fh, id uint64, ts int64) {
		e, _ := grid.Of(ts)
		vecs[name][e].Insert(fh, id, ts)
	}
	length := int64(grid.Length)
	for e := range int64(epochs) {
		start := grid.StartNS(e)
		for fi, f := range flows {
			fh := f.key.Hash(c.cfg.Params.LDS.Seed)
			base := 200e3 + 50e3*float64(fi%5)
			for range f.perEpoch {
				ts := start + rng.Int64N(length)
				d := int64(base * (0.5 + 0.5*rng.ExpFloat64()))
				id := rng.Uint64()
				insert("a", fh, id, ts)
				insert("b", fh, id, ts+d)
				f.n++
				f.sum += float64(d)
				f.sq += float64(d) * float64(d)
			}
		}
		// Traffic to or from a third point: seen by one of the two only.
		for range oneSided {
			name := []string{"a", "b"}[rng.IntN(2)]
			insert(name, rng.Uint64(), rng.Uint64(), start+rng.Int64N(length))
		}
	}
	out := map[string][]*owlv1.ColateVector{}
	for name, vs := range vecs {
		for e, v := range vs {
			raw, _ := v.MarshalBinary()
			first, last := v.Span()
			out[name] = append(out[name], &owlv1.ColateVector{Epoch: int64(e), Packets: v.Packets(), FirstUnixNs: first, LastUnixNs: last, Vector: raw})
		}
	}
	return out, flows
}

// TestColateHistoricQuery stores the vectors of two points over five
// epochs (40 flows crossing both, packets crossing epoch boundaries, and
// traffic that only one point sees) and checks each flow's answer against
// its true mean, with the robust estimator and the paper's.
func TestColateHistoricQuery(t *testing.T) {
	for _, oneSided := range []int{0, 1000} {
		t.Run(fmt.Sprintf("one-sided=%d", oneSided), func(t *testing.T) { colateHistoric(t, oneSided) })
	}
}

func colateHistoric(t *testing.T, oneSided int) {
	cfg := colateTestConfig(t)
	c := newTest(t, cfg)
	vecs, flows := colateTraffic(t, c, 5, oneSided)
	for probe, vs := range vecs {
		for _, v := range vs {
			if err := c.colates.put(probe, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx := context.Background()
	type tally struct {
		within5, within1, inInterval int
		relErrs                      []float64
		msRatio                      float64
	}
	results := map[string]*tally{}
	for _, est := range []string{"robust", "paper"} {
		tl := &tally{}
		results[est] = tl
		for _, f := range flows {
			res, err := c.colates.historic(ctx, &owlv1.GetFlowLatencyHistoricRequest{Flow: netpath.FlowToProto(f.key), Upstream: "a", Downstream: "b", Estimator: est})
			if err != nil {
				t.Fatal(err)
			}
			mu := f.sum / float64(f.n)
			sd := math.Sqrt(f.sq/float64(f.n) - mu*mu)
			if res.GetPackets() != uint64(f.n) || res.GetDownstreamPackets() != uint64(f.n) || res.GetVectors() < 5 || res.GetStddevEpochs() < 1 || res.GetEstimator() != est {
				t.Fatalf("flow %v: packets %d/%d (want %d), vectors %d, stddev epochs %d, estimator %s", f.key, res.GetPackets(), res.GetDownstreamPackets(), f.n, res.GetVectors(), res.GetStddevEpochs(), res.GetEstimator())
			}
			if !strings.Contains(res.GetPacketCountSource(), "exact") || res.GetBitsPerPacket() <= 0 || res.GetHalfWidthNs() <= 0 {
				t.Errorf("response %v", res)
			}
			rel := math.Abs(res.GetMeanNs()-mu) / mu
			tl.relErrs = append(tl.relErrs, rel)
			if rel <= 0.05 {
				tl.within5++
			}
			if rel <= 0.01 {
				tl.within1++
			}
			if math.Abs(res.GetMeanNs()-mu) <= res.GetHalfWidthNs() {
				tl.inInterval++
			}
			tl.msRatio += res.GetMeanSquareNs2() / (sd*sd + mu*mu)
		}
		slices.Sort(tl.relErrs)
		tl.msRatio /= float64(len(flows))
		t.Logf("%s: %d of %d flows within 5%% of the true mean, %d within 1%%, %d within the reported 95%% interval; relative error median %.4f, worst %.4f; E[D²] estimate / truth %.3f on average",
			est, tl.within5, len(flows), tl.within1, tl.inInterval, tl.relErrs[len(flows)/2], tl.relErrs[len(flows)-1], tl.msRatio)
	}
	r, p := results["robust"], results["paper"]
	if r.within5 < len(flows)*95/100 {
		t.Errorf("robust: only %d of %d flows within 5%%", r.within5, len(flows))
	}
	if r.inInterval < len(flows)*85/100 {
		t.Errorf("robust: only %d of %d flows within the reported 95%% interval", r.inInterval, len(flows))
	}
	if r.within5 < p.within5 {
		t.Errorf("robust: %d flows within 5%%, the paper's estimator %d", r.within5, p.within5)
	}
	// Where one point sees traffic the other does not, the paper's
	// estimate is off for most flows; the robust one is not.
	if oneSided > 0 && 3*r.relErrs[len(flows)/2] > p.relErrs[len(flows)/2] {
		t.Errorf("with one-sided traffic: robust median error %.4f, the paper's %.4f", r.relErrs[len(flows)/2], p.relErrs[len(flows)/2])
	}
	// One flow's E[D²] is noisy (m/2 pair differences per epoch), but
	// over flows the estimate must be right on average (the other flows'
	// delays in the counters push it up a little).
	if r.msRatio < 0.8 || r.msRatio > 1.5 {
		t.Errorf("E[D²] estimate / truth %.3f on average", r.msRatio)
	}

	// A range that holds no vector, and an unknown flow.
	res, err := c.colates.historic(ctx, &owlv1.GetFlowLatencyHistoricRequest{Flow: netpath.FlowToProto(flows[0].key), Upstream: "a", Downstream: "b",
		From: timestamppb.New(time.Unix(0, c.cfg.Params.Epoch.StartNS(100)))})
	if err != nil || res.GetVectors() != 0 || !strings.Contains(res.GetNote(), "no packets") {
		t.Errorf("empty range: %v %v", res, err)
	}
	for _, bad := range []*owlv1.GetFlowLatencyHistoricRequest{
		{Flow: netpath.FlowToProto(flows[0].key), Upstream: "a", Downstream: "a"},
		{Flow: netpath.FlowToProto(flows[0].key), Upstream: "a", Downstream: "b", Estimator: "magic"},
		{Upstream: "a", Downstream: "b"},
	} {
		if _, err := c.colates.historic(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v", bad, err)
		}
	}
	list, err := c.colates.list(&owlv1.ListColateVectorsRequest{ProbeId: "a"})
	if err != nil || len(list.GetVectors()) != 6 || list.GetVectors()[0].GetFlows() < 40 || list.GetStoredBytes() == 0 {
		t.Errorf("list: %v %v", list, err)
	}
}

func TestColateVectorRejected(t *testing.T) {
	cfg := colateTestConfig(t)
	c := newTest(t, cfg)
	other := cfg.Params.ColateConfig()
	other.Counters = 1 << 10
	v, _ := colate.New(other, 0)
	raw, _ := v.MarshalBinary()
	var rej *rejection
	if err := c.colates.put("a", &owlv1.ColateVector{Epoch: 0, Vector: raw}); err == nil || !errors.As(err, &rej) {
		t.Errorf("vector of another shape: %v", err)
	}
	good, _ := colate.New(cfg.Params.ColateConfig(), 0)
	raw, _ = good.MarshalBinary()
	if err := c.colates.put("a", &owlv1.ColateVector{Epoch: 3, Vector: raw}); err == nil || !strings.Contains(err.Error(), "starts at") {
		t.Errorf("vector filed under another epoch: %v", err)
	}
	off := testConfig(t)
	c2 := newTest(t, off)
	if err := c2.colates.put("a", &owlv1.ColateVector{Vector: raw}); err == nil {
		t.Error("collector without COLATE took a vector")
	}
}
