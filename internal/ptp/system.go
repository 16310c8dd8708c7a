package ptp

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// KernelTime is what adjtimex(2) says about the system clock.
type KernelTime struct {
	// State is adjtimex's return value (TIME_OK … TIME_ERROR).
	State int
	// Unsync is STA_UNSYNC: no daemon is disciplining the clock.
	Unsync bool
	// MaxError and EstError are the kernel's maximum and estimated error.
	MaxError, EstError time.Duration
}

// ReadKernel reads the system clock's status with adjtimex(2) (read only:
// no mode bits are set, so it needs no privileges and changes nothing).
func ReadKernel() (KernelTime, error) {
	var tx unix.Timex
	state, err := unix.Adjtimex(&tx)
	if err != nil {
		return KernelTime{}, fmt.Errorf("adjtimex: %w", err)
	}
	return KernelTime{
		State:    state,
		Unsync:   tx.Status&unix.STA_UNSYNC != 0,
		MaxError: time.Duration(tx.Maxerror) * time.Microsecond,
		EstError: time.Duration(tx.Esterror) * time.Microsecond,
	}, nil
}

// System is the system clock as an outside daemon (ptp4l with phc2sys,
// sptp, chrony) keeps it: timestamps are used as they are, and the kernel's
// maximum error is the uncertainty.
type System struct {
	base
	interval time.Duration
	read     func() (KernelTime, error)
}

// NewSystem returns the system clock, polled every interval with read
// (ReadKernel in production).
func NewSystem(interval, fault time.Duration, read func() (KernelTime, error)) *System {
	s := &System{base: newBase(fault), interval: interval, read: read}
	s.poll()
	return s
}

// Run polls the kernel until ctx ends.
func (s *System) Run(ctx context.Context) error {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.poll()
		}
	}
}

func (s *System) poll() {
	st := Status{Source: "system", Reference: "kernel", AtNS: s.Now()}
	k, err := s.read()
	switch {
	case err != nil:
		st.State, st.Detail = StateUnknown, err.Error()
	case k.Unsync || k.State == unix.TIME_ERROR:
		st.State = StateUnsynchronized
		st.UncertaintyNS = int64(k.MaxError)
		st.Detail = fmt.Sprintf("kernel reports the clock unsynchronized (state %d, maxerror %v)", k.State, k.MaxError)
	default:
		st.State = StateSynchronized
		st.UncertaintyNS = int64(k.MaxError)
		st.Detail = fmt.Sprintf("kernel maxerror %v, esterror %v", k.MaxError, k.EstError)
	}
	s.publish(st)
}
