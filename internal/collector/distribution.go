package collector

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// delaySketchAccuracy is the relative accuracy of the delay sketches: a
// quantile's value is within this share of the true one (of the values
// sketched).
const delaySketchAccuracy = 0.01

// delaySketchBins bounds a sketch's bins per sign. At 1% accuracy, 2,048
// bins span values a factor e^41 apart, more than any delay's range; a
// sketch from outside that spans more has its lowest bins collapsed
// instead of growing.
const delaySketchBins = 2048

// maxSketchBytes bounds an encoded sketch: 2,048 bins per sign at up to
// 10 bytes each, and room for the header.
const maxSketchBytes = 2*delaySketchBins*10 + 64

// Limits of one GetPathDelayDistribution request.
const (
	maxDistQuantiles = 100
	maxDistPoints    = 1000
)

var delayMapping = func() mapping.IndexMapping {
	m, err := mapping.NewLogarithmicMapping(delaySketchAccuracy)
	if err != nil {
		panic(err) // a constant accuracy in range
	}
	return m
}()

func newDelayStore() store.Store { return store.NewCollapsingLowestDenseStore(delaySketchBins) }

func newDelaySketch() *ddsketch.DDSketch {
	return ddsketch.NewDDSketch(delayMapping, newDelayStore(), newDelayStore())
}

// encodeDelaySketch is the sketch of delays (ns), each counted weight
// times (1/rate: the packets a sampled one stands for).
func encodeDelaySketch(delays []int64, weight float64) []byte {
	s := newDelaySketch()
	for _, d := range delays {
		_ = s.AddWithCount(float64(d), weight) // fails only on a negative or NaN count
	}
	var b []byte
	s.Encode(&b, false)
	return b
}

// Bin indexes a delay sketch may use: values from a picosecond to about
// three hours, in ns, of either sign.
var minDelayIndex, maxDelayIndex = delayMapping.Index(1e-3), delayMapping.Index(1e13)

// decodeDelaySketch reads a sketch of a stored or a peer's result. The
// library's dense stores index arrays by what the bytes say (a bin index
// far out panics in them), so the bytes are read into sparse stores,
// whose size follows the bytes, and checked (bins, indexes, counts)
// before they go into a sketch of bounded stores.
func decodeDelaySketch(b []byte) (*ddsketch.DDSketch, error) {
	if len(b) > maxSketchBytes {
		return nil, fmt.Errorf("delay sketch of %d bytes, over %d", len(b), maxSketchBytes)
	}
	sparse, err := ddsketch.DecodeDDSketch(b, func() store.Store { return store.NewSparseStore() }, delayMapping)
	if err != nil {
		return nil, fmt.Errorf("delay sketch: %w", err)
	}
	if z := sparse.GetZeroCount(); !(z >= 0 && z <= math.MaxFloat64) {
		return nil, errors.New("delay sketch: zero count not finite and positive")
	}
	out := newDelaySketch()
	for sign, st := range map[float64]store.Store{1: sparse.GetPositiveValueStore(), -1: sparse.GetNegativeValueStore()} {
		bins := 0
		var bad error
		st.ForEach(func(index int, count float64) bool {
			switch bins++; {
			case bins > 2*delaySketchBins:
				bad = fmt.Errorf("more than %d bins", 2*delaySketchBins)
			case index < minDelayIndex || index > maxDelayIndex:
				bad = fmt.Errorf("bin index %d outside [%d, %d]", index, minDelayIndex, maxDelayIndex)
			case !(count >= 0 && count <= math.MaxFloat64):
				bad = fmt.Errorf("bin count %v not finite and positive", count)
			default:
				_ = out.AddWithCount(sign*delayMapping.Value(index), count) // count checked
			}
			return bad != nil
		})
		if bad != nil {
			return nil, fmt.Errorf("delay sketch: %w", bad)
		}
	}
	_ = out.AddWithCount(0, sparse.GetZeroCount())
	return out, nil
}

func (s queryService) GetPathDelayDistribution(ctx context.Context, req *owlv1.GetPathDelayDistributionRequest) (*owlv1.GetPathDelayDistributionResponse, error) {
	qs := req.GetQuantiles()
	if len(qs) == 0 {
		qs = quantilesAsked
	}
	if len(qs) > maxDistQuantiles || len(req.GetCdfAtNs()) > maxDistPoints {
		return nil, status.Errorf(codes.InvalidArgument, "at most %d quantiles and %d CDF points", maxDistQuantiles, maxDistPoints)
	}
	for _, q := range qs {
		if !(q > 0 && q < 1) {
			return nil, status.Errorf(codes.InvalidArgument, "quantile %v out of (0, 1)", q)
		}
	}
	for _, x := range req.GetCdfAtNs() {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, status.Errorf(codes.InvalidArgument, "CDF point %v is not a number of nanoseconds", x)
		}
	}
	stats, err := s.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: req.GetPath(), From: req.GetFrom(), To: req.GetTo(),
		Limit: maxResults, IncludeSketch: true})
	if err != nil {
		return nil, err
	}
	out := &owlv1.GetPathDelayDistributionResponse{RelativeAccuracy: delaySketchAccuracy}
	var notes []string
	if n := stats.GetNote(); n != "" {
		notes = append(notes, n)
	}
	merged, unreadable := newDelaySketch(), 0
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
	out.Packets = merged.GetCount()
	out.MinNs, _ = merged.GetMinValue() // not empty: no error
	out.MaxNs, _ = merged.GetMaxValue()
	for _, q := range qs {
		v, _ := merged.GetValueAtQuantile(q)
		lo, hi := v/(1+delaySketchAccuracy), v/(1-delaySketchAccuracy)
		if v < 0 {
			lo, hi = hi, lo
		}
		out.Quantiles = append(out.Quantiles, &owlv1.DelayQuantile{Q: q, ValueNs: v, LoNs: lo, HiNs: hi})
	}
	for _, at := range req.GetCdfAtNs() {
		var below float64
		merged.ForEach(func(value, count float64) bool {
			if value <= at {
				below += count
			}
			return false
		})
		out.Cdf = append(out.Cdf, &owlv1.CDFPoint{AtNs: at, Fraction: below / out.Packets})
	}
	out.Note = strings.Join(notes, "; ")
	return out, nil
}
