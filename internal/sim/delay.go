// Package sim turns a single-point capture into what two observation points
// of a path would have recorded, with a known delay, loss, reordering and
// duplication, and keeps the ground truth of every packet. It is how owl's
// estimators are checked, and how users try parameters on their own traffic
// (the LDA and RDA papers evaluate the same way).
package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// DelayModel draws one-way delays.
type DelayModel interface {
	// SampleNS draws a delay in nanoseconds.
	SampleNS(r *rand.Rand) int64
	// String renders the model in the syntax ParseDelay reads.
	String() string
}

// Weibull is a base delay plus a Weibull-distributed queueing delay with
// P(X ≤ x) = 1 − exp(−(x/Scale)^Shape), as in the LDA and RDA evaluations
// (shape 0.6–0.7).
type Weibull struct {
	Shape float64
	Scale time.Duration
	Base  time.Duration
}

// SampleNS draws Base + Scale·(−ln U)^(1/Shape).
func (w Weibull) SampleNS(r *rand.Rand) int64 {
	u := 1 - r.Float64() // (0, 1]
	return int64(w.Base) + int64(float64(w.Scale)*math.Pow(-math.Log(u), 1/w.Shape))
}

func (w Weibull) String() string {
	return fmt.Sprintf("weibull:shape=%g,scale=%v,base=%v", w.Shape, w.Scale, w.Base)
}

// Constant is a fixed delay.
type Constant struct{ Delay time.Duration }

// SampleNS returns the constant.
func (c Constant) SampleNS(*rand.Rand) int64 { return int64(c.Delay) }

func (c Constant) String() string { return fmt.Sprintf("const:%v", c.Delay) }

// Bimodal draws from two modes, as a path that sometimes takes a slower
// route: with probability P the delay is near High, otherwise near Low.
// Each mode has a Weibull jitter (shape 0.65) of a tenth of the mode.
type Bimodal struct {
	P         float64
	Low, High time.Duration
}

// SampleNS draws from one of the two modes.
func (b Bimodal) SampleNS(r *rand.Rand) int64 {
	m := b.Low
	if r.Float64() < b.P {
		m = b.High
	}
	return Weibull{Shape: 0.65, Scale: m / 10, Base: m}.SampleNS(r)
}

func (b Bimodal) String() string {
	return fmt.Sprintf("bimodal:p=%g,low=%v,high=%v", b.P, b.Low, b.High)
}

// ParseDelay reads a delay model:
//
//	weibull:shape=0.65,scale=50us,base=20us
//	const:100us
//	bimodal:p=0.2,low=50us,high=400us
func ParseDelay(s string) (DelayModel, error) {
	kind, args, _ := strings.Cut(s, ":")
	kv := map[string]string{}
	if args != "" {
		for _, f := range strings.Split(args, ",") {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				if kind == "const" && len(kv) == 0 {
					k, v = "delay", f
				} else {
					return nil, fmt.Errorf("delay model %q: %q is not key=value", s, f)
				}
			}
			kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	dur := func(k string, def time.Duration) (time.Duration, error) {
		v, ok := kv[k]
		if !ok {
			return def, nil
		}
		delete(kv, k)
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("delay model %q: %s=%q is not a non-negative duration", s, k, v)
		}
		return d, nil
	}
	num := func(k string, def, lo, hi float64) (float64, error) {
		v, ok := kv[k]
		if !ok {
			return def, nil
		}
		delete(kv, k)
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < lo || f > hi {
			return 0, fmt.Errorf("delay model %q: %s=%q is not a number in [%g, %g]", s, k, v, lo, hi)
		}
		return f, nil
	}
	var m DelayModel
	var errs [3]error
	switch kind {
	case "weibull":
		var w Weibull
		w.Shape, errs[0] = num("shape", 0.65, 0.05, 20)
		w.Scale, errs[1] = dur("scale", 50*time.Microsecond)
		w.Base, errs[2] = dur("base", 20*time.Microsecond)
		m = w
	case "const":
		var c Constant
		c.Delay, errs[0] = dur("delay", 100*time.Microsecond)
		m = c
	case "bimodal":
		var b Bimodal
		b.P, errs[0] = num("p", 0.2, 0, 1)
		b.Low, errs[1] = dur("low", 50*time.Microsecond)
		b.High, errs[2] = dur("high", 400*time.Microsecond)
		m = b
	default:
		return nil, fmt.Errorf("unknown delay model %q (weibull, const, bimodal)", kind)
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	for k := range kv {
		return nil, fmt.Errorf("delay model %q: unknown parameter %q", s, k)
	}
	return m, nil
}
