package harness

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/store"
	"github.com/owl-latency/owl/internal/synopsis/delays"
)

// History describes results to write straight into a collector's data
// directory, as if its paths had been measured for a while: for testing
// what reads many results (the web page) without running probes for as
// long.
type History struct {
	// Paths name the paths; each gets a result for every epoch.
	Paths []string
	// First and Last are the epochs, inclusive.
	First, Last int64
	// Grid is the epoch grid (epoch.DefaultConfig when zero).
	Grid epoch.Config
	// Packets is the delivered packets sampled per result (100 when 0).
	Packets int
	// Seed makes the delays repeatable.
	Seed uint64
}

// WriteHistory writes h's results into the store in dataDir (creating
// it) and closes it. Each result is what a reconciled epoch of a
// loss-and-delay path looks like: exact delays of every packet (sample
// rate 1), their mean, deviation, p50 and p99 and sketch, some loss and
// reordering, and synchronized clocks; each path has its own base delay
// and a slow swing over the hour.
func WriteHistory(dataDir string, h History) error {
	if h.Grid.Length == 0 {
		h.Grid = epoch.DefaultConfig()
	}
	if h.Packets == 0 {
		h.Packets = 100
	}
	st, err := store.Open(dataDir)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(h.Seed, 0x0b5e7e))
	const batch = 1000
	var w store.Write
	for i, path := range h.Paths {
		baseNS := 20_000 + 15_000*float64(i)
		for e := h.First; e <= h.Last; e++ {
			swing := 1 + 0.5*math.Sin(2*math.Pi*float64(e-h.First)/3600)
			w.Results = append(w.Results, historyResult(rng, h, path, e, baseNS*swing))
			if len(w.Results) == batch {
				if err := st.Apply(w); err != nil {
					st.Close()
					return fmt.Errorf("writing results of %s: %w", path, err)
				}
				w.Results = w.Results[:0]
			}
		}
	}
	if len(w.Results) > 0 {
		if err := st.Apply(w); err != nil {
			st.Close()
			return fmt.Errorf("writing results: %w", err)
		}
	}
	return st.Close()
}

// historyResult is one epoch's result of a path whose delays are
// baseNS plus exponential queueing.
func historyResult(rng *rand.Rand, h History, path string, e int64, baseNS float64) *owlv1.PathStats {
	ds := make([]int64, h.Packets)
	var sum, sq float64
	for i := range ds {
		ds[i] = int64(baseNS + rng.ExpFloat64()*baseNS/4)
		sum += float64(ds[i])
	}
	mean := sum / float64(len(ds))
	for _, d := range ds {
		sq += (float64(d) - mean) * (float64(d) - mean)
	}
	std := math.Sqrt(sq / float64(len(ds)))
	slices.Sort(ds)
	quantile := func(q float64) *owlv1.DelayQuantile {
		v := float64(ds[max(0, int(math.Ceil(q*float64(len(ds))))-1)])
		return &owlv1.DelayQuantile{Q: q, ValueNs: v, LoNs: v, HiNs: v, Exact: true, Confidence: 1}
	}
	lost := uint64(rng.IntN(3)) * uint64(rng.IntN(2))
	start := h.Grid.StartNS(e)
	clock := &owlv1.ClockStatus{Source: "system", Synchronized: true, UncertaintyNs: 200, State: owlv1.ClockState_CLOCK_STATE_SYNCHRONIZED, Reference: "kernel"}
	return &owlv1.PathStats{
		Path: path, Epoch: e, Status: owlv1.ResultStatus_RESULT_STATUS_OK, Estimator: "rda", Decoded: true,
		Start: timestamppb.New(time.Unix(0, start)), Length: durationpb.New(h.Grid.Length),
		Computed: timestamppb.New(time.Unix(0, h.Grid.EndNS(e)).Add(h.Grid.Grace)),
		MeanNs:   mean, StddevNs: std, Samples: uint64(len(ds)), Lost: float64(lost),
		UpstreamPackets: uint64(len(ds)) + lost, DownstreamPackets: uint64(len(ds)),
		Reordered: uint64(rng.IntN(2)), StddevExact: true, SampleMeanNs: mean, SampleStddevNs: std,
		SampleRate: 1, SampleDelays: uint64(len(ds)), DelayMinNs: float64(ds[0]), DelayMaxNs: float64(ds[len(ds)-1]),
		Quantiles:   []*owlv1.DelayQuantile{quantile(0.5), quantile(0.99)},
		DelaySketch: delays.Of(ds, 1), UpstreamClock: clock, DownstreamClock: clock, ClockUncertaintyNs: 400,
		LdaMeanNs: mean, LdaStddevNs: std, LdaSamples: uint64(len(ds)),
	}
}
