package ptp

import (
	"math"
	"slices"
)

// sample is one offset measurement: the local clock's offset from the
// reference at local time atNS, with a bound on its error (a PTP exchange's
// path delay; half a PHC reading's window).
type sample struct {
	atNS     int64
	offsetNS int64
	boundNS  int64
}

// maxSlope is the largest frequency error the filter believes: the kernel's
// own limit on clock frequency adjustment (500 ppm).
const maxSlope = 500e-6

// filter keeps the last measurements and fits the offset model to the best
// of them. Measurements with large bounds (queueing on the way to the
// grandmaster, a slow PHC read) are the ones whose offsets are off, so the
// fit takes the half with the smallest bounds ("lucky packets"), and a line
// through them when they span enough time to tell frequency error from noise.
type filter struct {
	size    int
	minSpan int64 // ns of local time the fitted samples must span for a slope
	ring    []sample
	next    int
}

func newFilter(size int, minSpanNS int64) *filter {
	return &filter{size: size, minSpan: minSpanNS}
}

func (f *filter) add(s sample) {
	if len(f.ring) < f.size {
		f.ring = append(f.ring, s)
		return
	}
	f.ring[f.next] = s
	f.next = (f.next + 1) % f.size
}

func (f *filter) len() int { return len(f.ring) }

// fit is the filter's estimate: the offset model anchored at the latest
// measurement, and the bound on its error there.
type fit struct {
	corr    correction
	boundNS int64
	// slopeErr is three standard errors of the fitted slope: how fast the
	// model may drift from the truth away from its anchor.
	slopeErr float64
	used     int
}

func (f *filter) estimate() (fit, bool) {
	if len(f.ring) == 0 {
		return fit{}, false
	}
	var latest int64 = math.MinInt64
	bounds := make([]int64, 0, len(f.ring))
	for _, s := range f.ring {
		latest = max(latest, s.atNS)
		bounds = append(bounds, s.boundNS)
	}
	slices.Sort(bounds)
	cut := bounds[(len(bounds)-1)/2] // the median, lower for even counts
	good := make([]sample, 0, len(f.ring))
	for _, s := range f.ring {
		if s.boundNS <= cut {
			good = append(good, s)
		}
	}
	first, last := good[0].atNS, good[0].atNS
	for _, s := range good {
		first, last = min(first, s.atNS), max(last, s.atNS)
	}
	var out fit
	out.used = len(good)
	out.corr.atNS = latest
	if len(good) >= 4 && last-first >= f.minSpan {
		// Least squares offset = a + b·(t − latest).
		var st, so float64
		for _, s := range good {
			st += float64(s.atNS - latest)
			so += float64(s.offsetNS)
		}
		n := float64(len(good))
		mt, mo := st/n, so/n
		var stt, sto float64
		for _, s := range good {
			dt := float64(s.atNS-latest) - mt
			stt += dt * dt
			sto += dt * (float64(s.offsetNS) - mo)
		}
		b := sto / stt
		b = max(-maxSlope, min(maxSlope, b))
		out.corr.slope = b
		out.corr.offsetNS = mo - b*mt
		var rss float64
		for _, s := range good {
			r := float64(s.offsetNS) - mo - b*(float64(s.atNS-latest)-mt)
			rss += r * r
		}
		if len(good) > 2 {
			out.slopeErr = 3 * math.Sqrt(rss/float64(len(good)-2)/stt)
		}
	} else {
		// Too few or too close together for a slope: the most recent of
		// the best measurements.
		best := good[0]
		for _, s := range good {
			if s.atNS > best.atNS {
				best = s
			}
		}
		out.corr.offsetNS = float64(best.offsetNS)
	}
	// Each used measurement is within its bound of the truth; the model is
	// within the largest of those plus how far it strays from any of them.
	var worst int64
	for _, s := range good {
		resid := math.Abs(float64(s.offsetNS) - (out.corr.offsetNS + out.corr.slope*float64(s.atNS-latest)))
		worst = max(worst, int64(math.Ceil(resid)))
		out.boundNS = max(out.boundNS, s.boundNS)
	}
	out.boundNS += worst
	return out, true
}
