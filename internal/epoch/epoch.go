// Package epoch cuts time into the measurement intervals both observation
// points of a path agree on: epoch e covers [t0 + e·δ, t0 + (e+1)·δ) of the
// synchronized clock (RDA §III-A, §VIII). A packet belongs to the epoch of its
// own capture timestamp, and timestamps inside an epoch are kept as integer
// nanoseconds since the epoch's start, so that sums of them stay small.
//
// Window runs the pipeline: while epoch e fills, epoch e−1 stays open for a
// grace period to take packets that reach the capture late, then is closed and
// handed to a sink. Time advances with packet timestamps (replay of capture
// files) and with a Clock (live capture, via Advance).
package epoch

import (
	"errors"
	"fmt"
	"time"
)

// MaxLength bounds the epoch length: sums of up to 2^33 offsets within an
// epoch must fit an int64 (2^33 · 10^9 ns ≈ 2^63 at δ = 1 s; a tighter bound
// on δ keeps headroom for many more packets per counter).
const MaxLength = time.Hour

// Config fixes the epoch grid.
type Config struct {
	// Start is t0. The zero value means the Unix epoch, so that epochs are
	// aligned on multiples of Length and two probes agree without talking.
	Start time.Time `yaml:"start"`
	// Length is δ (default 1s).
	Length time.Duration `yaml:"length"`
	// Grace is how long an epoch stays open after its end for packets that
	// reach the capture late (default 100ms).
	Grace time.Duration `yaml:"grace"`
}

// DefaultConfig returns δ = 1s, grace 100ms, t0 = Unix epoch.
func DefaultConfig() Config {
	return Config{Length: time.Second, Grace: 100 * time.Millisecond}
}

// Validate reports an unusable grid.
func (c Config) Validate() error {
	if c.Length <= 0 || c.Length > MaxLength {
		return fmt.Errorf("epoch length %v out of range (0, %v]", c.Length, MaxLength)
	}
	if c.Grace < 0 || c.Grace >= 10*c.Length {
		return fmt.Errorf("epoch grace %v out of range [0, 10×length)", c.Grace)
	}
	return nil
}

// CopyWindow is how near a boundary the two copies of a packet
// duplicated in flight must each arrive, one on either side, for a probe
// to name the later one a copy (EpochReport.boundary_copies): 10 ms, or a
// quarter of a shorter epoch. The copies of a duplicate come microseconds
// apart.
func (c Config) CopyWindow() time.Duration { return min(10*time.Millisecond, c.Length/4) }

// ErrMismatch says two epoch grids differ.
var ErrMismatch = errors.New("epoch grids differ")

// Compatible returns an error wrapping ErrMismatch when o cuts time differently.
// The grace period may differ: it only decides how long each side waits.
func (c Config) Compatible(o Config) error {
	if c.startNS() != o.startNS() || c.Length != o.Length {
		return fmt.Errorf("%w: start %v length %v vs start %v length %v", ErrMismatch,
			c.Start, c.Length, o.Start, o.Length)
	}
	return nil
}

func (c Config) startNS() int64 {
	if c.Start.IsZero() {
		return 0
	}
	return c.Start.UnixNano()
}

// Of returns the epoch of a timestamp and the timestamp's offset from the
// epoch's start, both from nanoseconds since the Unix epoch.
func (c Config) Of(tsNS int64) (e int64, offsetNS int64) {
	d := tsNS - c.startNS()
	l := int64(c.Length)
	e = d / l
	if d%l < 0 {
		e--
	}
	return e, d - e*l
}

// StartNS returns the start of epoch e in nanoseconds since the Unix epoch.
func (c Config) StartNS(e int64) int64 { return c.startNS() + e*int64(c.Length) }

// EndNS returns the end (exclusive) of epoch e.
func (c Config) EndNS(e int64) int64 { return c.StartNS(e + 1) }
