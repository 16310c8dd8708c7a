package collector

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/DataDog/sketches-go/ddsketch"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/synopsis/delays"
)

// Limits of one GetPathDelayDistribution request.
const (
	maxDistQuantiles = 100
	maxDistPoints    = 1000
)

// encodeDelaySketch is the sketch of delays (ns), each counted weight
// times (1/rate: the packets a sampled one stands for).

// decodeDelaySketch reads a sketch of a stored or a peer's result.
func decodeDelaySketch(b []byte) (*ddsketch.DDSketch, error) { return delays.Decode(b) }

// checkDistributionAsk refuses quantiles and CDF points a distribution
// query cannot answer.
func checkDistributionAsk(qs, cdfAtNS []float64) error {
	if len(qs) > maxDistQuantiles || len(cdfAtNS) > maxDistPoints {
		return status.Errorf(codes.InvalidArgument, "at most %d quantiles and %d CDF points", maxDistQuantiles, maxDistPoints)
	}
	for _, q := range qs {
		if !(q > 0 && q < 1) {
			return status.Errorf(codes.InvalidArgument, "quantile %v out of (0, 1)", q)
		}
	}
	for _, x := range cdfAtNS {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return status.Errorf(codes.InvalidArgument, "CDF point %v is not a number of nanoseconds", x)
		}
	}
	return nil
}

func (s queryService) GetPathDelayDistribution(ctx context.Context, req *owlv1.GetPathDelayDistributionRequest) (*owlv1.GetPathDelayDistributionResponse, error) {
	qs := req.GetQuantiles()
	if len(qs) == 0 {
		qs = quantilesAsked
	}
	if err := checkDistributionAsk(qs, req.GetCdfAtNs()); err != nil {
		return nil, err
	}
	stats, err := s.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: req.GetPath(), From: req.GetFrom(), To: req.GetTo(),
		Limit: maxResults, IncludeSketch: true})
	if err != nil {
		return nil, err
	}
	out := &owlv1.GetPathDelayDistributionResponse{RelativeAccuracy: delays.Accuracy}
	var notes []string
	if n := stats.GetNote(); n != "" {
		notes = append(notes, n)
	}
	merged, unreadable := delays.New(), 0
	for _, r := range stats.GetStats() {
		out.Epochs++
		if len(r.GetDelaySketch()) == 0 {
			continue
		}
		d, err := decodeDelaySketch(r.GetDelaySketch())
		if err == nil {
			err = merged.MergeWith(d)
		}
		if err != nil {
			unreadable++
			continue
		}
		out.SketchedEpochs++
	}
	if unreadable > 0 {
		notes = append(notes, fmt.Sprintf("%d epochs' delay sketches could not be read", unreadable))
	}
	if merged.IsEmpty() {
		out.Note = strings.Join(append(notes, "no epoch in the range has sampled delays"), "; ")
		return out, nil
	}
	d := readSketch(merged, qs, req.GetCdfAtNs())
	out.Packets, out.MinNs, out.MaxNs, out.Quantiles, out.Cdf = d.count, d.minNS, d.maxNS, d.quantiles, d.cdf
	out.Note = strings.Join(notes, "; ")
	return out, nil
}

// sketchReading is what a distribution query reads off a merged,
// non-empty sketch.
type sketchReading struct {
	count, minNS, maxNS float64
	quantiles           []*owlv1.DelayQuantile
	cdf                 []*owlv1.CDFPoint
}

// readSketch reads quantiles qs and CDF points at of a non-empty sketch.
func readSketch(s *ddsketch.DDSketch, qs, at []float64) sketchReading {
	d := sketchReading{count: s.GetCount()}
	d.minNS, _ = s.GetMinValue() // not empty: no error
	d.maxNS, _ = s.GetMaxValue()
	for _, q := range delays.Quantiles(s, qs) {
		d.quantiles = append(d.quantiles, &owlv1.DelayQuantile{Q: q.Q, ValueNs: q.Value, LoNs: q.Lo, HiNs: q.Hi})
	}
	for i, f := range delays.CDF(s, at) {
		d.cdf = append(d.cdf, &owlv1.CDFPoint{AtNs: at[i], Fraction: f})
	}
	return d
}
