package reconcile

import (
	"context"
	"sync"

	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// Local answers repairs from both sides' packets of one epoch held in
// memory, as the probes' caches would: the offline evaluator and the
// simulations run Epoch with it, the collector with its probe sessions.
type Local struct {
	// Packets lists each side's packets of the epoch (every copy).
	Packets [2][]Packet
	// RDA is the hashing of the path's RDAs (Buckets is set per rebuild).
	RDA rda.Config

	once  [2]sync.Once
	index [2]map[uint64][]Entry
}

var _ Repairs = (*Local)(nil)

func (l *Local) entries(s Side) map[uint64][]Entry {
	l.once[s].Do(func() {
		m := make(map[uint64][]Entry, len(l.Packets[s]))
		for _, p := range l.Packets[s] {
			m[p.ID] = append(m[p.ID], p.Entry)
		}
		l.index[s] = m
	})
	return l.index[s]
}

// Rebuild builds the side's RDA at buckets per bank.
func (l *Local) Rebuild(_ context.Context, s Side, buckets int) (*rda.RDA, error) {
	cfg := l.RDA
	cfg.Buckets = buckets
	r, err := rda.New(cfg)
	if err != nil {
		return nil, err
	}
	for _, p := range l.Packets[s] {
		r.Insert(p.ID, p.OffsetNS)
	}
	return r, nil
}

// Fetch returns the side's entries of ids.
func (l *Local) Fetch(_ context.Context, s Side, ids []uint64) (map[uint64][]Entry, error) {
	all := l.entries(s)
	out := make(map[uint64][]Entry, len(ids))
	for _, id := range ids {
		if e, ok := all[id]; ok {
			out[id] = e
		}
	}
	return out, nil
}

// Repeated returns the side's entries of the IDs it saw more than once.
func (l *Local) Repeated(_ context.Context, s Side) (map[uint64][]Entry, error) {
	out := map[uint64][]Entry{}
	for id, e := range l.entries(s) {
		if len(e) > 1 {
			out[id] = e
		}
	}
	return out, nil
}
