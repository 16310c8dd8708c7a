package probe

import (
	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/synopsis/reorder"
)

// ReorderConfig sets the TCP reordering a probe measures on its own, by
// prefix, of every TCP flow it sees whatever its paths
// (internal/synopsis/reorder): each capture worker has a tracker of
// MemoryBytes, and their reports of an epoch merge into one.
type ReorderConfig struct {
	// Enabled switches the tracker on.
	Enabled bool `yaml:"enabled"`
	// Config is the tracker of each capture worker: its memory, the
	// prefixes flows are counted in (/24 and /48 of the source, the 64
	// with the most packets reported per epoch), its windows and long
	// flows.
	reorder.Config `yaml:",inline"`
}

// DefaultReorderConfig is on, 256 KiB per capture worker, /24 and /48
// source prefixes.
func DefaultReorderConfig() ReorderConfig {
	return ReorderConfig{Enabled: true, Config: reorder.DefaultConfig()}
}

// Validate checks the tracker's configuration when it is on.
func (c ReorderConfig) Validate() error {
	if !c.Enabled {
		return nil
	}
	return c.Config.Validate()
}

// newReorderTracker is a capture worker's tracker, or nil when off.
func newReorderTracker(c ReorderConfig) (*reorder.Tracker, error) {
	if !c.Enabled {
		return nil, nil
	}
	return reorder.New(c.Config)
}

// reorderReport is an epoch's reordering report, the workers' reports
// merged into at most maxPrefixes prefixes (nil when no TCP segment was
// seen).
func reorderReport(r *reorder.Report, epoch int64, clock *owlv1.ClockStatus, maxPrefixes int) *owlv1.ReorderReport {
	if r == nil || r.Counters.Segments == 0 && r.Total().Packets == 0 {
		return nil
	}
	if len(r.Prefixes) > maxPrefixes {
		r = reorder.Merge(maxPrefixes, r)
	}
	m := r.Proto(epoch)
	m.Clock = clock
	return m
}
