package probe

import (
	"sync"

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
	// prefixes flows are counted in (/24 and /48 of the source; 64 per
	// epoch in the report, chosen by a reorder.Selector), its windows and
	// long flows.
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

// newReorderTracker is a capture worker's tracker, or nil when off. It
// reports every prefix it holds (up to reorder.MaxPrefixes): the
// reporter's reorderCutter chooses those the point sends, from the
// workers' reports merged.
func newReorderTracker(c ReorderConfig) (*reorder.Tracker, error) {
	if !c.Enabled {
		return nil, nil
	}
	cfg := c.Config
	cfg.Prefixes.Max = reorder.MaxPrefixes
	return reorder.New(cfg)
}

// reorderCutter cuts a point's reordering reports, its workers' merged,
// to the configured number of prefixes: one reorder.Selector for the
// point, which lists first the prefixes that showed reordering in its
// earlier epochs. Safe for concurrent use.
type reorderCutter struct {
	selMu sync.Mutex // guards sel
	sel   *reorder.Selector
}

// newReorderCutter cuts reports to maxPrefixes prefixes.
func newReorderCutter(maxPrefixes int) *reorderCutter {
	return &reorderCutter{sel: reorder.NewSelector(maxPrefixes)}
}

// cut cuts an epoch's report; epochs come in order. A nil cutter keeps
// every prefix.
func (c *reorderCutter) cut(r *reorder.Report) {
	if c == nil {
		return
	}
	c.selMu.Lock()
	defer c.selMu.Unlock()
	c.sel.Cut(r)
}

// reorderReport is an epoch's reordering report, the workers' reports
// merged, cut by cut (nil when no TCP segment was seen).
func reorderReport(r *reorder.Report, epoch int64, clock *owlv1.ClockStatus, cut *reorderCutter) *owlv1.ReorderReport {
	if r == nil || r.Counters.Segments == 0 && r.Total().Packets == 0 {
		return nil
	}
	cut.cut(r)
	m := r.Proto(epoch)
	m.Clock = clock
	return m
}
