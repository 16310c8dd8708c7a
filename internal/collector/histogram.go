package collector

import (
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// weightedHistogramVec is a histogram by labels, classic and native
// buckets at once, that takes a value with a weight: a sketch's bin as
// many times as it holds packets. client_golang's histograms take one
// observation a call, and the collector made about 1,250 calls a
// path-epoch for the delays of its sample alone (a tenth of its CPU).
// It exposes what a client_golang histogram of the same buckets,
// schema and zero threshold would after as many Observe calls.
type weightedHistogramVec struct {
	desc    *prometheus.Desc
	bounds  []float64 // classic upper bounds, ascending
	schema  int32
	nbounds []float64 // fractions at which native buckets end, as math.Frexp gives them

	// byName are the indexes of the labels in the order of their names,
	// the order the registry compares series in.
	byName []int

	mu     sync.Mutex
	series map[string]*weightedSeries
	bins   binSlots // guarded by mu
}

// binSlots keep, for the positive bins of sketches of one index mapping
// and unit (ObserveSketch), each bin's value and buckets: a path's
// delay sketch is observed every epoch, and finding a bin's buckets (two
// binary searches) and its value (an exponential) took most of it.
type binSlots struct {
	mapping mapping.IndexMapping
	unit    float64
	slots   []binSlot // by index, from 0
}

type binSlot struct {
	value           float64
	classic, native int
	known           bool
}

// maxCachedBin is the highest bin index whose slot is kept: a bin of a
// delay sketch (1% relative accuracy, ns) holds about 1.02^index ns.
const maxCachedBin = 4096

type weightedSeries struct {
	labels    []string
	count     uint64
	sum       float64
	classic   []uint64 // by bucket (not cumulative); the last is above every bound
	pos, neg  map[int]int64
	zero      uint64
	createdAt time.Time
}

// newWeightedHistogramVec makes a histogram of the given classic upper
// bounds and native schema (1 to 8) by the given labels.
func newWeightedHistogramVec(name, help string, bounds []float64, schema int32, labels ...string) *weightedHistogramVec {
	n := 1 << schema
	nb := make([]float64, n)
	for i := range nb {
		nb[i] = math.Exp2(float64(i)/float64(n) - 1)
	}
	byName := make([]int, len(labels))
	for i := range byName {
		byName[i] = i
	}
	slices.SortFunc(byName, func(a, b int) int { return strings.Compare(labels[a], labels[b]) })
	return &weightedHistogramVec{
		desc:   prometheus.NewDesc(name, help, labels, nil),
		bounds: bounds, schema: schema, nbounds: nb, byName: byName,
		series: map[string]*weightedSeries{},
	}
}

// Observe adds value n times to the series of labelValues. NaN and
// infinite values are left out.
func (v *weightedHistogramVec) Observe(value float64, n uint64, labelValues ...string) {
	v.ObserveAll(func(add func(float64, uint64)) { add(value, n) }, labelValues...)
}

// ObserveAll is Observe of each value and count that each hands to add,
// under one lock and one look-up of the series (a sketch's bins, one
// call: per bin, the look-up's joined labels cost more than the rest).
func (v *weightedHistogramVec) ObserveAll(each func(add func(value float64, n uint64)), labelValues ...string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var s *weightedSeries
	each(func(value float64, n uint64) {
		if n == 0 || math.IsNaN(value) || math.IsInf(value, 0) {
			return
		}
		if s == nil {
			s = v.seriesOf(labelValues)
		}
		v.add(s, value, n)
	})
}

// ObserveSketch adds each bin of sk to the series of labelValues: the
// bin's value over unit, as many times as its count times weight
// (rounded) says, as ObserveAll of every bin would.
func (v *weightedHistogramVec) ObserveSketch(sk *ddsketch.DDSketch, unit, weight float64, labelValues ...string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var s *weightedSeries
	series := func() *weightedSeries {
		if s == nil {
			s = v.seriesOf(labelValues)
		}
		return s
	}
	add := func(value, count float64) {
		if n := uint64(math.Round(count * weight)); n > 0 && !math.IsNaN(value) && !math.IsInf(value, 0) {
			v.add(series(), value, n)
		}
	}
	if z := sk.GetZeroCount(); z > 0 {
		add(0, z)
	}
	b := &v.bins
	if b.mapping == nil || !b.mapping.Equals(sk.IndexMapping) || b.unit != unit {
		*b = binSlots{mapping: sk.IndexMapping, unit: unit}
	}
	// Consecutive bins mostly share a native bucket (a sketch's bins
	// are narrower): their counts go in together.
	native, pending := 0, int64(0)
	sk.GetPositiveValueStore().ForEach(func(index int, count float64) bool {
		if index < 0 || index > maxCachedBin {
			add(sk.IndexMapping.Value(index)/unit, count)
			return false
		}
		if index >= len(b.slots) {
			b.slots = append(b.slots, make([]binSlot, index+1-len(b.slots))...)
		}
		sl := &b.slots[index]
		if !sl.known {
			value := sk.IndexMapping.Value(index) / unit
			sl.value, sl.known = value, true
			sl.classic, _ = slices.BinarySearch(v.bounds, value)
			sl.native = math.MinInt // not above the zero threshold: add() takes it
			if value > prometheus.DefNativeHistogramZeroThreshold && !math.IsInf(value, 0) {
				sl.native = v.nativeKey(value)
			}
		}
		n := uint64(math.Round(count * weight))
		if n == 0 {
			return false
		}
		if sl.native == math.MinInt {
			add(sl.value, count)
			return false
		}
		s := series()
		s.count += n
		s.sum += sl.value * float64(n)
		s.classic[sl.classic] += n
		if sl.native != native && pending != 0 {
			s.pos[native] += pending
			pending = 0
		}
		native, pending = sl.native, pending+int64(n)
		return false
	})
	if pending != 0 {
		s.pos[native] += pending
	}
	sk.GetNegativeValueStore().ForEach(func(index int, count float64) bool {
		add(-sk.IndexMapping.Value(index)/unit, count)
		return false
	})
}

// add adds value n times to series s.
func (v *weightedHistogramVec) add(s *weightedSeries, value float64, n uint64) {
	s.count += n
	s.sum += value * float64(n)
	i, _ := slices.BinarySearch(v.bounds, value) // the first bound ≥ value
	s.classic[i] += n
	switch {
	case value > prometheus.DefNativeHistogramZeroThreshold:
		s.pos[v.nativeKey(value)] += int64(n)
	case value < -prometheus.DefNativeHistogramZeroThreshold:
		s.neg[v.nativeKey(-value)] += int64(n)
	default:
		s.zero += n
	}
}

// nativeKey is the index of the native bucket of a positive value:
// bucket k holds (2^((k-1)/2^schema), 2^(k/2^schema)].
func (v *weightedHistogramVec) nativeKey(x float64) int {
	frac, exp := math.Frexp(x)
	i, _ := slices.BinarySearch(v.nbounds, frac)
	return i + (exp-1)*len(v.nbounds)
}

func (v *weightedHistogramVec) seriesOf(labelValues []string) *weightedSeries {
	key := strings.Join(labelValues, "\xff")
	s := v.series[key]
	if s == nil {
		s = &weightedSeries{
			labels:  slices.Clone(labelValues),
			classic: make([]uint64, len(v.bounds)+1),
			pos:     map[int]int64{}, neg: map[int]int64{},
			createdAt: time.Now(),
		}
		v.series[key] = s
	}
	return s
}

// Describe implements prometheus.Collector.
func (v *weightedHistogramVec) Describe(ch chan<- *prometheus.Desc) { ch <- v.desc }

// Collect implements prometheus.Collector: client_golang's constant
// histograms, a native one and a classic one of each series, put
// together as one metric, sorted by their labels as the registry sorts
// them (pathSeries.Collect).
func (v *weightedHistogramVec) Collect(ch chan<- prometheus.Metric) {
	v.mu.Lock()
	defer v.mu.Unlock()
	series := slices.SortedFunc(maps.Values(v.series), func(a, b *weightedSeries) int {
		for _, i := range v.byName {
			if c := strings.Compare(a.labels[i], b.labels[i]); c != 0 {
				return c
			}
		}
		return 0
	})
	for _, s := range series {
		native, err := prometheus.NewConstNativeHistogram(v.desc, s.count, s.sum, s.pos, s.neg, s.zero,
			v.schema, prometheus.DefNativeHistogramZeroThreshold, s.createdAt, s.labels...)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(v.desc, err)
			continue
		}
		cum := make(map[float64]uint64, len(v.bounds))
		var below uint64
		for i, b := range v.bounds {
			below += s.classic[i]
			cum[b] = below
		}
		classic, err := prometheus.NewConstHistogramWithCreatedTimestamp(v.desc, s.count, s.sum, cum, s.createdAt, s.labels...)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(v.desc, err)
			continue
		}
		ch <- bothHistograms{native, classic}
	}
}

// bothHistograms is a native histogram with the buckets of a classic
// one; both are made for one Collect.
type bothHistograms struct{ native, classic prometheus.Metric }

func (b bothHistograms) Desc() *prometheus.Desc { return b.native.Desc() }

func (b bothHistograms) Write(out *dto.Metric) error {
	var c dto.Metric
	if err := b.classic.Write(&c); err != nil {
		return err
	}
	if err := b.native.Write(out); err != nil {
		return err
	}
	out.Histogram.Bucket = c.GetHistogram().GetBucket()
	return nil
}
