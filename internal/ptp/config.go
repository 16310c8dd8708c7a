package ptp

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Config chooses and tunes a probe's clock.
type Config struct {
	// Source is "system" (default), "phc" or "ptp".
	Source string `yaml:"source"`
	// Interval is how often the source is measured (default 1s).
	Interval time.Duration `yaml:"interval"`
	// Server is the grandmaster (ptp4u or any server that answers SPTP
	// delay requests) for the ptp source: host or IP, with a port when the
	// grandmaster listens on another than 319.
	Server string `yaml:"server"`
	// Interface is the network interface the ptp source talks through
	// (default: the one that routes to Server), or whose PHC the phc
	// source reads.
	Interface string `yaml:"interface"`
	// Device is the PHC device for the phc source (default: Interface's).
	Device string `yaml:"device"`
	// Timestamping is "sw" (default) or "hw" for the ptp source's packets.
	Timestamping string `yaml:"timestamping"`
	// Window is how many measurements the offset filter keeps (default 16).
	Window int `yaml:"window"`
	// Correct subtracts the measured offset from timestamps (default true).
	// Off, the offset is measured and reported only, and counted in the
	// uncertainty.
	Correct bool `yaml:"correct"`
	// ReferenceError is how far the PHC itself may be from the grandmaster
	// (what ptp4l or sptp reports as its offset), added to the phc source's
	// uncertainty (default 1µs).
	ReferenceError time.Duration `yaml:"reference_error"`
	// DriftPPM is how fast the uncertainty grows between and after
	// measurements, in parts per million (default 1).
	DriftPPM float64 `yaml:"drift_ppm"`
	// Holdover is how long after the last measurement the clock still
	// counts as synchronized, its bound growing by DriftPPM (default 30s).
	Holdover time.Duration `yaml:"holdover"`
	// Fault adds an artificial offset to every local timestamp: capture
	// timestamps and the ptp source's own exchange timestamps alike. It is
	// for tests and demonstrations of correction; leave it 0 in production.
	Fault time.Duration `yaml:"fault"`
}

// DefaultConfig returns the system clock, measured every second.
func DefaultConfig() Config {
	return Config{
		Source:         "system",
		Interval:       time.Second,
		Timestamping:   "sw",
		Window:         16,
		Correct:        true,
		ReferenceError: time.Microsecond,
		DriftPPM:       1,
		Holdover:       30 * time.Second,
	}
}

// Validate reports an unusable configuration.
func (c Config) Validate() error {
	switch c.Source {
	case "system", "phc":
	case "ptp":
		if c.Server == "" {
			return errors.New("clock source ptp needs a server (the grandmaster's address)")
		}
		if c.Timestamping != "sw" && c.Timestamping != "hw" {
			return fmt.Errorf("clock timestamping %q: want sw or hw", c.Timestamping)
		}
	default:
		return fmt.Errorf("clock source %q: want system, phc or ptp", c.Source)
	}
	if c.Source == "phc" && c.Interface == "" && c.Device == "" {
		return errors.New("clock source phc needs an interface or a device (/dev/ptpN)")
	}
	if c.Interval < 10*time.Millisecond || c.Interval > time.Minute {
		return fmt.Errorf("clock interval %v out of range [10ms, 1m]", c.Interval)
	}
	if c.Window < 1 || c.Window > 1024 {
		return fmt.Errorf("clock window %d out of range [1, 1024]", c.Window)
	}
	if c.DriftPPM < 0 || c.DriftPPM > 1000 {
		return fmt.Errorf("clock drift %v ppm out of range [0, 1000]", c.DriftPPM)
	}
	if c.Holdover < c.Interval {
		return fmt.Errorf("clock holdover %v is shorter than the interval %v", c.Holdover, c.Interval)
	}
	if c.ReferenceError < 0 {
		return fmt.Errorf("clock reference error %v is negative", c.ReferenceError)
	}
	return nil
}

// Source is a clock that measures itself while Run runs.
type Source interface {
	Clock
	// Run measures until ctx ends; it returns an error only when the
	// source cannot work at all.
	Run(ctx context.Context) error
}

// New builds the configured source. The ptp source opens its socket here,
// so that a wrong server or interface fails at start.
func New(cfg Config) (Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch cfg.Source {
	case "phc":
		return NewPHC(cfg, nil)
	case "ptp":
		return NewClient(cfg)
	default:
		return NewSystem(cfg.Interval, cfg.Fault, ReadKernel), nil
	}
}

// drift is how much a bound grows over age at ppm parts per million.
func drift(ppm float64, ageNS int64) int64 {
	if ageNS <= 0 {
		return 0
	}
	return int64(ppm * 1e-6 * float64(ageNS))
}
