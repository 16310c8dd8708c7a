// Package ptp gives a probe its clock: where capture timestamps get their
// time from, how far that time is from the reference (a PTP grandmaster), how
// sure we are of it, and what that means for each epoch.
//
// Three sources, one interface:
//
//   - system: the system clock disciplined by an outside daemon (ptp4l with
//     phc2sys, sptp, chrony); its state and error bound come from the kernel
//     (adjtimex). Timestamps are used as they are.
//   - phc: a NIC's PTP hardware clock disciplined by ptp4l or sptp; the
//     offset between the system clock and the PHC is read with the
//     PTP_SYS_OFFSET ioctls (facebook/time/phc) and subtracted from software
//     timestamps, so that all timestamps are on the PHC's time scale.
//   - ptp: a built-in SPTP client (the stateless unicast exchange of
//     facebook/time's sptp and ptp4u) measures offset and path delay to a
//     grandmaster continuously, filters them, and corrects timestamps in
//     software. No clock is steered and no privileges are needed beyond a
//     UDP socket.
//
// Every source publishes a Status; the probe stamps each epoch with the
// status over that epoch (Over), and the collector turns the two sides'
// uncertainties into a ± on the path mean.
package ptp

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// State says how far a clock can be trusted right now.
type State int

// Clock states, from best to worst.
const (
	// StateSynchronized: measurements are fresh and the error bound holds.
	StateSynchronized State = iota
	// StateHoldover: measurements stopped recently; the last correction is
	// extrapolated and the bound grows with time.
	StateHoldover
	// StateAcquiring: the source has started but has too few measurements.
	StateAcquiring
	// StateUnsynchronized: there is no usable reference.
	StateUnsynchronized
	// StateUnknown: nothing says how good the clock is (replayed files).
	StateUnknown
)

var stateNames = [...]string{"synchronized", "holdover", "acquiring", "unsynchronized", "unknown"}

func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return fmt.Sprintf("state(%d)", int(s))
	}
	return stateNames[s]
}

// Synchronized reports whether timestamps are within their bound of the
// reference (fresh measurements or a holdover that still holds).
func (s State) Synchronized() bool { return s == StateSynchronized || s == StateHoldover }

// Status is a clock's condition at one moment.
type Status struct {
	// Source is "system", "phc", "ptp" or "file".
	Source string
	State  State
	// Reference names what the clock follows: a grandmaster address, a PHC
	// device, "kernel".
	Reference string
	// OffsetNS is the last measured offset of the local clock from the
	// reference (local − reference).
	OffsetNS int64
	// Corrected says whether OffsetNS is subtracted from timestamps.
	Corrected bool
	// DelayNS is the mean path delay to the reference (PTP) or the time a
	// PHC reading took.
	DelayNS int64
	// UncertaintyNS bounds the error of a corrected timestamp: |timestamp −
	// reference time| ≤ UncertaintyNS while the state is synchronized or in
	// holdover. It includes OffsetNS when the offset is not corrected.
	UncertaintyNS int64
	// AtNS is when the status was measured (reference time, ns since the
	// Unix epoch).
	AtNS int64
	// Detail explains the state in words.
	Detail string
}

// Clock maps capture timestamps onto the reference time scale and reports
// its status. Correct and Now are called for every packet and must be cheap
// and safe for concurrent use; so are Status and Over.
type Clock interface {
	// Correct returns the reference time of a timestamp taken on the local
	// (system) clock, both in ns since the Unix epoch.
	Correct(tsNS int64) int64
	// Now is the current reference time in ns since the Unix epoch.
	Now() int64
	// Status is the clock's condition now.
	Status() Status
	// Over summarizes the status over [fromNS, toNS) of reference time: the
	// worst state and the largest uncertainty seen, the latest offset.
	Over(fromNS, toNS int64) Status
}

// correction is an offset model: offset(t) = offsetNS + slope·(t − atNS),
// in local time. Timestamps t map to t − offset(t).
type correction struct {
	atNS     int64
	offsetNS float64
	slope    float64
}

func (c *correction) at(tsNS int64) int64 {
	if c == nil {
		return 0
	}
	return int64(c.offsetNS + c.slope*float64(tsNS-c.atNS))
}

// historyLen is how many statuses a clock keeps for Over: with one status a
// second, several minutes, far more than an epoch and its grace.
const historyLen = 512

// base holds what every source shares: the artificial fault, the correction
// in use, and the status history.
type base struct {
	faultNS int64
	now     func() time.Time
	corr    atomic.Pointer[correction]

	mu      sync.Mutex
	history []Status // ring, oldest first once full
	next    int
	full    bool
}

func newBase(fault time.Duration) base {
	return base{faultNS: int64(fault), now: time.Now}
}

// local is the local clock's reading of a system-clock timestamp: the
// system clock plus the artificial fault.
func (b *base) local(tsNS int64) int64 { return tsNS + b.faultNS }

// Correct implements Clock.
func (b *base) Correct(tsNS int64) int64 {
	l := b.local(tsNS)
	return l - b.corr.Load().at(l)
}

// Now implements Clock.
func (b *base) Now() int64 { return b.Correct(b.now().UnixNano()) }

func (b *base) publish(s Status) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.history == nil {
		b.history = make([]Status, historyLen)
	}
	b.history[b.next] = s
	b.next++
	if b.next == len(b.history) {
		b.next, b.full = 0, true
	}
}

// Status implements Clock.
func (b *base) Status() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.next == 0 && !b.full {
		return Status{State: StateUnknown}
	}
	i := b.next - 1
	if i < 0 {
		i = len(b.history) - 1
	}
	return b.history[i]
}

// Over implements Clock: the status in effect at fromNS and every status
// published before toNS after it.
func (b *base) Over(fromNS, toNS int64) Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.next
	if b.full {
		n = len(b.history)
	}
	if n == 0 {
		return Status{State: StateUnknown}
	}
	var out Status
	found := false
	for k := 0; k < n; k++ {
		i := k
		if b.full {
			i = (b.next + k) % len(b.history)
		}
		s := b.history[i]
		if s.AtNS >= toNS {
			break
		}
		if s.AtNS <= fromNS || !found {
			// The latest status at or before the start is in effect at
			// the start; it replaces whatever came before it.
			out, found = s, true
			continue
		}
		out = worse(out, s)
	}
	if !found {
		// Everything was published after the window: the oldest known
		// status is the best description we have.
		i := 0
		if b.full {
			i = b.next
		}
		return b.history[i]
	}
	return out
}

// worse merges a later status into a summary: the worst state, the largest
// uncertainty, the later offset and reference.
func worse(sum, later Status) Status {
	out := later
	if sum.State > out.State {
		out.State = sum.State
		out.Detail = sum.Detail
	}
	if sum.UncertaintyNS > out.UncertaintyNS {
		out.UncertaintyNS = sum.UncertaintyNS
	}
	return out
}

// Fixed is a clock whose status never changes: replayed capture files carry
// the time of the capture that made them ("file"), and tests use it.
type Fixed struct {
	base
	status Status
}

// NewFixed returns a clock that adds fault to timestamps and always reports
// status.
func NewFixed(status Status, fault time.Duration) *Fixed {
	f := &Fixed{base: newBase(fault), status: status}
	f.publish(status)
	return f
}

// Status implements Clock.
func (f *Fixed) Status() Status { return f.status }

// Over implements Clock.
func (f *Fixed) Over(int64, int64) Status { return f.status }

var (
	_ Clock = (*Fixed)(nil)
	_ Clock = (*System)(nil)
	_ Clock = (*PHC)(nil)
	_ Clock = (*Client)(nil)
)
