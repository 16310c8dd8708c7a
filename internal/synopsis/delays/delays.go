// Package delays is the delay sketch owl's results and round-trip times
// carry: a DDSketch (DataDog/sketches-go) of delays in nanoseconds at 1%
// relative accuracy with bounded stores, mergeable over any range, its
// wire form, and a decoder safe on bytes from outside.
package delays

import (
	"errors"
	"fmt"
	"math"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"
)

// Accuracy is the sketches' relative accuracy: a quantile's value is
// within this share of the true one (of the values sketched).
const Accuracy = 0.01

// Bins bounds a sketch's bins per sign. At 1% accuracy, 2,048 bins span
// values a factor e^41 apart, more than any delay's range; a sketch from
// outside that spans more has its lowest bins collapsed instead of
// growing.
const Bins = 2048

// MaxBytes bounds an encoded sketch: Bins bins per sign at up to 10
// bytes each, and room for the header.
const MaxBytes = 2*Bins*10 + 64

var indexMapping = func() mapping.IndexMapping {
	m, err := mapping.NewLogarithmicMapping(Accuracy)
	if err != nil {
		panic(err) // a constant accuracy in range
	}
	return m
}()

// Bin indexes a sketch may use: values from a picosecond to about three
// hours, in ns, of either sign.
var minIndex, maxIndex = indexMapping.Index(1e-3), indexMapping.Index(1e13)

func newStore() store.Store { return store.NewCollapsingLowestDenseStore(Bins) }

// New returns an empty sketch.
func New() *ddsketch.DDSketch {
	return ddsketch.NewDDSketch(indexMapping, newStore(), newStore())
}

// Encode is the sketch's wire form.
func Encode(s *ddsketch.DDSketch) []byte {
	var b []byte
	s.Encode(&b, false)
	return b
}

// Of is the wire form of the sketch of delays (ns), each counted weight
// times.
func Of(delaysNS []int64, weight float64) []byte { return Encode(Sketch(delaysNS, weight)) }

// Sketch is the sketch of delays (ns), each counted weight times. Sorted
// delays cost one logarithm a bin rather than one a delay: a bin takes
// the run of delays within its bounds (about a dozen of a sample's 1,250
// delays of an epoch, which span about a hundred bins).
func Sketch(delaysNS []int64, weight float64) *ddsketch.DDSketch {
	s := New()
	pos := s.GetPositiveValueStore()
	minV, maxV := indexMapping.MinIndexableValue(), indexMapping.MaxIndexableValue()
	for i := 0; i < len(delaysNS); {
		d := float64(delaysNS[i])
		if !(d > minV && d <= maxV) {
			_ = s.AddWithCount(d, weight) // fails only on a negative or NaN count
			i++
			continue
		}
		index := indexMapping.Index(d)
		lo, hi := indexMapping.LowerBound(index), min(indexMapping.LowerBound(index+1), maxV)
		j := i + 1
		for j < len(delaysNS) && float64(delaysNS[j]) >= lo && float64(delaysNS[j]) < hi {
			j++
		}
		pos.AddWithCount(index, weight*float64(j-i))
		i = j
	}
	return s
}

// Decode reads a sketch from outside. The library's dense stores index
// arrays by what the bytes say (a bin index far out panics in them), so
// the bytes are read into sparse stores, whose size follows the bytes,
// and checked (bins, indexes, counts) before they go into a sketch of
// bounded stores.
func Decode(b []byte) (*ddsketch.DDSketch, error) {
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("delay sketch of %d bytes, over %d", len(b), MaxBytes)
	}
	sparse, err := ddsketch.DecodeDDSketch(b, func() store.Store { return store.NewSparseStore() }, indexMapping)
	if err != nil {
		return nil, fmt.Errorf("delay sketch: %w", err)
	}
	if z := sparse.GetZeroCount(); !(z >= 0 && z <= math.MaxFloat64) {
		return nil, errors.New("delay sketch: zero count not finite and positive")
	}
	out := New()
	for sign, st := range map[float64]store.Store{1: sparse.GetPositiveValueStore(), -1: sparse.GetNegativeValueStore()} {
		bins := 0
		var bad error
		st.ForEach(func(index int, count float64) bool {
			switch bins++; {
			case bins > 2*Bins:
				bad = fmt.Errorf("more than %d bins", 2*Bins)
			case index < minIndex || index > maxIndex:
				bad = fmt.Errorf("bin index %d outside [%d, %d]", index, minIndex, maxIndex)
			case !(count >= 0 && count <= math.MaxFloat64):
				bad = fmt.Errorf("bin count %v not finite and positive", count)
			default:
				_ = out.AddWithCount(sign*indexMapping.Value(index), count) // count checked
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

// Quantile is a quantile of a sketch with the bounds the sketch's
// accuracy puts on it.
type Quantile struct {
	Q, Value, Lo, Hi float64
}

// Quantiles reads quantiles qs (each in (0, 1)) of a non-empty sketch.
func Quantiles(s *ddsketch.DDSketch, qs []float64) []Quantile {
	out := make([]Quantile, 0, len(qs))
	for _, q := range qs {
		v, _ := s.GetValueAtQuantile(q)
		lo, hi := v/(1+Accuracy), v/(1-Accuracy)
		if v < 0 {
			lo, hi = hi, lo
		}
		out = append(out, Quantile{Q: q, Value: v, Lo: lo, Hi: hi})
	}
	return out
}

// CDF is the share of the sketch's count at or below each of at: 1 from
// the largest value on, and never above 1 (the bins' counts, summed in
// another order than the total, can add up to a little more).
func CDF(s *ddsketch.DDSketch, at []float64) []float64 {
	out := make([]float64, len(at))
	total := s.GetCount()
	if total == 0 {
		return out
	}
	maxNS, _ := s.GetMaxValue() // not empty: no error
	for i, x := range at {
		if x >= maxNS {
			out[i] = 1
			continue
		}
		var below float64
		s.ForEach(func(value, count float64) bool {
			if value <= x {
				below += count
			}
			return false
		})
		out[i] = min(below/total, 1)
	}
	return out
}
