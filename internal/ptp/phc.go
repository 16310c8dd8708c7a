package ptp

import (
	"context"
	"fmt"
	"time"

	"github.com/facebook/time/phc"
)

// PHC is a NIC's PTP hardware clock, disciplined by ptp4l or sptp. Software
// timestamps are moved onto the PHC's time scale by the measured offset
// between the system clock and the PHC (PTP_SYS_OFFSET_EXTENDED, read
// through facebook/time/phc); each reading is bracketed by two system clock
// reads, so its error is at most half the bracket.
type PHC struct {
	tracker
	read func() (phc.SysoffResult, error)
}

// NewPHC returns the PHC source of cfg (Device, or Interface's PHC). read
// replaces the device in tests; nil reads the device.
func NewPHC(cfg Config, read func() (phc.SysoffResult, error)) (*PHC, error) {
	dev := cfg.Device
	if read == nil {
		if dev == "" {
			d, err := phc.IfaceToPHCDevice(cfg.Interface)
			if err != nil {
				return nil, fmt.Errorf("finding the PHC of %s: %w", cfg.Interface, err)
			}
			dev = d
		}
		read = func() (phc.SysoffResult, error) {
			return phc.TimeAndOffsetFromDevice(dev, phc.MethodIoctlSysOffsetExtended)
		}
		if _, err := read(); err != nil {
			return nil, fmt.Errorf("reading PHC %s: %w", dev, err)
		}
	}
	if dev == "" {
		dev = "phc"
	}
	p := &PHC{tracker: newTracker(cfg, "phc", dev), read: read}
	p.extraNS = int64(cfg.ReferenceError)
	p.start()
	return p, nil
}

// Run reads the PHC every interval until ctx ends.
func (p *PHC) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	p.measure()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.measure()
		}
	}
}

func (p *PHC) measure() {
	r, err := p.read()
	if err != nil {
		p.missed(p.local(p.now().UnixNano()), fmt.Errorf("reading %s: %w", p.reference, err))
		return
	}
	at := p.local(r.SysTime.UnixNano())
	p.measured(sample{atNS: at, offsetNS: int64(r.Offset) + p.faultNS, boundNS: int64(r.Delay+1) / 2}, int64(r.Delay))
}
