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
	"time"

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
	out := map[string][]*owlv1.ColateVector{}
	for e := range int64(epochs) {
		start := grid.StartNS(e)
		a, _ := colate.New(cfg, start)
		b, _ := colate.New(cfg, start)
		length := int64(grid.Length) - int64(5*time.Millisecond)
		for fi, f := range flows {
			fh := c.flowHash(f.key)
			base := 200e3 + 50e3*float64(fi%5)
			for range f.perEpoch {
				ts := start + rng.Int64N(length)
				d := int64(base * (0.5 + 0.5*rng.ExpFloat64()))
				id := rng.Uint64()
				a.Insert(fh, id, ts)
				b.Insert(fh, id, ts+d)
				f.n++
				f.sum += float64(d)
				f.sq += float64(d) * float64(d)
			}
		}
		// Traffic of other paths: seen by one point only.
		for range oneSided {
			v := a
			if rng.IntN(2) == 0 {
				v = b
			}
			v.Insert(rng.Uint64(), rng.Uint64(), start+rng.Int64N(length))
		}
		for name, v := range map[string]*colate.Vector{"a": a, "b": b} {
			raw, _ := v.MarshalBinary()
			first, last := v.Span()
			out[name] = append(out[name], &owlv1.ColateVector{Epoch: e, Packets: v.Packets(), FirstUnixNs: first, LastUnixNs: last, Vector: raw})
		}
	}
	return out, flows
}

func TestColateHistoricQuery(t *testing.T) {
	cfg := colateTestConfig(t)
	c := newTest(t, cfg)
	vecs, flows := colateTraffic(t, c, 5, 0)
	for probe, vs := range vecs {
		for _, v := range vs {
			if err := c.colateVector(probe, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx := context.Background()
	within := 0
	var relErrs []float64
	var msRatio float64
	for _, f := range flows {
		res, err := c.flowLatencyHistoric(ctx, &owlv1.GetFlowLatencyHistoricRequest{Flow: netpath.FlowToProto(f.key), Upstream: "a", Downstream: "b"})
		if err != nil {
			t.Fatal(err)
		}
		mu := f.sum / float64(f.n)
		sd := math.Sqrt(f.sq/float64(f.n) - mu*mu)
		if res.GetPackets() != uint64(f.n) || res.GetDownstreamPackets() != uint64(f.n) || res.GetVectors() != 5 || res.GetStddevEpochs() != 5 {
			t.Fatalf("flow %v: packets %d/%d (want %d), vectors %d, stddev epochs %d", f.key, res.GetPackets(), res.GetDownstreamPackets(), f.n, res.GetVectors(), res.GetStddevEpochs())
		}
		if !strings.Contains(res.GetPacketCountSource(), "exact") || res.GetBitsPerPacket() <= 0 || res.GetHalfWidthNs() <= 0 {
			t.Errorf("response %v", res)
		}
		errNS := math.Abs(res.GetMeanNs() - mu)
		relErrs = append(relErrs, errNS/mu)
		if errNS <= res.GetHalfWidthNs() {
			within++
		}
		msRatio += res.GetMeanSquareNs2() / (sd*sd + mu*mu)
	}
	slices.Sort(relErrs)
	msRatio /= float64(len(flows))
	median := relErrs[len(relErrs)/2]
	t.Logf("%d of %d flows within the reported 95%% half-width; relative error of the mean: median %.4f, worst %.4f; E[D²] estimate / truth %.3f on average over flows",
		within, len(flows), median, relErrs[len(relErrs)-1], msRatio)
	if within < len(flows)*85/100 {
		t.Errorf("only %d of %d flows within the reported 95%% interval", within, len(flows))
	}
	if median > 0.01 {
		t.Errorf("median relative error of the mean %.4f", median)
	}
	// One flow's E[D²] is noisy (m/2 pair differences per epoch), but
	// over flows the estimate must be right on average (the other flows'
	// delays in the counters push it up a little).
	if msRatio < 0.8 || msRatio > 1.5 {
		t.Errorf("E[D²] estimate / truth %.3f on average", msRatio)
	}
	// A range that holds no vector, and an unknown flow.
	res, err := c.flowLatencyHistoric(ctx, &owlv1.GetFlowLatencyHistoricRequest{Flow: netpath.FlowToProto(flows[0].key), Upstream: "a", Downstream: "b",
		From: timestamppb.New(time.Unix(0, c.cfg.Params.Epoch.StartNS(100)))})
	if err != nil || res.GetVectors() != 0 || !strings.Contains(res.GetNote(), "no packets") {
		t.Errorf("empty range: %v %v", res, err)
	}
	if _, err := c.flowLatencyHistoric(ctx, &owlv1.GetFlowLatencyHistoricRequest{Flow: netpath.FlowToProto(flows[0].key), Upstream: "a", Downstream: "a"}); err == nil {
		t.Error("one probe on both ends accepted")
	}
	list, err := c.listColateVectors(&owlv1.ListColateVectorsRequest{ProbeId: "a"})
	if err != nil || len(list.GetVectors()) != 5 || list.GetVectors()[0].GetFlows() < 40 || list.GetStoredBytes() == 0 {
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
	if err := c.colateVector("a", &owlv1.ColateVector{Epoch: 0, Vector: raw}); err == nil || !errors.As(err, &rej) {
		t.Errorf("vector of another shape: %v", err)
	}
	good, _ := colate.New(cfg.Params.ColateConfig(), 0)
	raw, _ = good.MarshalBinary()
	if err := c.colateVector("a", &owlv1.ColateVector{Epoch: 3, Vector: raw}); err == nil || !strings.Contains(err.Error(), "starts at") {
		t.Errorf("vector filed under another epoch: %v", err)
	}
	off := testConfig(t)
	c2 := newTest(t, off)
	if err := c2.colateVector("a", &owlv1.ColateVector{Vector: raw}); err == nil {
		t.Error("collector without COLATE took a vector")
	}
}
