package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/owl-latency/owl/internal/synopsis"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// Side names one of a path's two observation points.
type Side uint8

// The two sides of a path.
const (
	Upstream Side = iota
	Downstream
)

func (s Side) String() string {
	if s == Downstream {
		return "downstream"
	}
	return "upstream"
}

// Entry is one packet as a probe's per-epoch cache holds it: its timestamp
// offset in the epoch (to repair the RDA) and its LDS flow hash and weight
// (to repair the LDS; zero when the probe did not say).
type Entry struct {
	OffsetNS int64
	Flow     uint64
	Weight   uint64
}

// Packet is one packet of a side: its ID and what its cache holds of it.
type Packet struct {
	ID uint64
	Entry
}

// Repairs asks a path's two probes for what reconciling an epoch needs
// beyond the two RDAs they reported. Epoch calls it for one side at a
// time or for both sides at once (from two goroutines); every call may
// block until ctx ends.
type Repairs interface {
	// Rebuild returns the side's RDA of the epoch rebuilt at buckets per
	// bank from its cache, with the same hashing.
	Rebuild(ctx context.Context, s Side, buckets int) (*rda.RDA, error)
	// Fetch returns every cached entry of each of ids (an ID missing
	// from the answer was not seen by the side).
	Fetch(ctx context.Context, s Side, ids []uint64) (map[uint64][]Entry, error)
	// Repeated returns every cached entry of each ID the side saw more
	// than once in the epoch.
	Repeated(ctx context.Context, s Side) (map[uint64][]Entry, error)
}

// Limits bound how far Epoch sizes RDAs and how often it rebuilds them.
type Limits struct {
	MinBuckets, MaxBuckets, MaxRebuilds int
}

// Input is one epoch of a path as the two probes reported it.
type Input struct {
	Up, Down *rda.RDA
	// StartNS is the epoch's start (absolute ns): boundary times are
	// absolute.
	StartNS int64
	// DownCopies are the packets the downstream probe saw in the first
	// moments of the epoch and in the last of the epoch before (its
	// report's boundary_copies): one of them the downstream side alone
	// saw in the epoch is the later copy of a duplicate, not reordered.
	DownCopies []uint64
	// UpCopies are the upstream probe's boundary copies: a packet it saw
	// just before the epoch and again in it (duplicated before the
	// upstream point) whose copies the downstream side both saw in the
	// epoch had its first copy cross the boundary: the extra downstream
	// copy is kept for matching with the epoch before's loss.
	UpCopies []uint64
	// Log takes the policy's warnings and debug lines (nil: none).
	Log *slog.Logger
}

// Outcome is what Epoch found. Fields are filled step by step: after an
// error, those of the steps that ran are set.
type Outcome struct {
	// Rebuilds counts the rebuild rounds asked of the probes.
	Rebuilds int
	// Peeled is set once peeling is over; Diff and Buckets then hold its
	// set difference and the RDAs' final size.
	Peeled  bool
	Diff    Difference
	Buckets int
	// Repaired says the decoded packets' timestamps were fetched and
	// removed; without them their buckets were left out.
	Repaired bool
	// RepairErr says why the timestamps could not be fetched, when they
	// could not.
	RepairErr error
	// Computed is set once the estimate was attempted; the counts below
	// are then set, and Estimate when Epoch returns no error.
	Computed   bool
	Estimate   Estimate
	Lost       int    // packets seen upstream only
	Duplicates uint64 // extra copies of a delivered packet
	Reordered  uint64 // packets seen downstream only that are no copies
	// Remove lists, per side, the packets taken out of its RDA, to take
	// out of its other synopses too.
	Remove [2][]Packet
	// BoundaryLost and BoundaryExtra are the lost (upstream time) and
	// extra (downstream time) packets with their absolute times, for
	// matching with the neighbouring epochs. Set when Repaired.
	BoundaryLost, BoundaryExtra map[uint64]int64
	// BoundaryCopies are the packets of BoundaryExtra counted among the
	// duplicates (Input.DownCopies): should the epoch before turn out
	// to have lost one, it was a late copy after all.
	BoundaryCopies map[uint64]bool
	// Unresolved counts decoded packets that had no usable timestamp.
	Unresolved int
}

// Epoch is the per-epoch reconciliation policy that the collector runs on
// every paired epoch and the offline evaluator runs on captures: size both
// RDAs alike (late binding, RDA §VIII), peel the difference and rebuild
// larger while peeling fails (within lim), take repeated copies out when
// peeling stalls, fetch the decoded packets' timestamps, repair both sides
// and compute the mean and standard deviation.
func Epoch(ctx context.Context, in Input, r Repairs, lim Limits) (Outcome, error) {
	log := in.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st := &epochState{in: in, r: r, lim: lim, log: log, up: in.Up, down: in.Down}
	if err := st.peel(ctx); err != nil {
		return st.out, err
	}
	st.down = st.adjust(st.down)
	st.out.Peeled, st.out.Diff, st.out.Buckets = true, st.diff, st.up.Config().Buckets
	upTS, downTS, err := st.fetchTimestamps(ctx)
	if err != nil {
		log.Warn("cannot fetch timestamps; leaving the decoded packets' buckets out", "err", err)
		st.out.RepairErr = err
	}
	return st.out, st.compute(upTS, downTS, err == nil)
}

// epochState is one run of Epoch.
type epochState struct {
	in   Input
	r    Repairs
	lim  Limits
	log  *slog.Logger
	out  Outcome
	up   *rda.RDA
	down *rda.RDA
	diff Difference
	// pre are the downstream copies of repeated packets taken out before
	// peeling: copies of one packet seen only downstream cancel in the ID
	// xor and stop peeling.
	pre []Packet
	// delivered are the downstream copies of lost packets the upstream
	// side sent more than once, to tell which copy was lost.
	delivered map[uint64][]Entry
}

// adjust returns the downstream RDA without the copies in pre.
func (st *epochState) adjust(r *rda.RDA) *rda.RDA {
	if len(st.pre) == 0 {
		return r
	}
	r = r.Clone()
	for _, x := range st.pre {
		r.Remove(x.ID, x.OffsetNS)
	}
	return r
}

// peel brings both sides to one size, large enough for their count
// difference, peels, and rebuilds both larger while peeling fails. When
// a side cannot be rebuilt (its probe lost the epoch's cache), it peels
// at that side's size, the other side rebuilt at it where the sizes
// differ: a difference a little past the size's bound still decodes most
// of the time.
func (st *epochState) peel(ctx context.Context) error {
	lim := st.lim
	askedRepeated := false
	leftBefore := false // an earlier peel left buckets
	var stuck error     // the rebuild that failed
	for {
		m := max(st.up.Config().Buckets, st.down.Config().Buckets)
		if dLow := int(absDiff(st.up.Packets(), st.down.Packets())); Size(dLow, 1, rda.MaxBuckets) > m {
			m = Size(dLow, lim.MinBuckets, lim.MaxBuckets)
		}
		if stuck == nil && (m != st.up.Config().Buckets || m != st.down.Config().Buckets) {
			if st.out.Rebuilds >= lim.MaxRebuilds {
				return fmt.Errorf("RDA sizes %d and %d differ and no rebuild is left", st.up.Config().Buckets, st.down.Config().Buckets)
			}
			if err := st.rebuildBoth(ctx, m); err != nil {
				if st.up.Config().Buckets != st.down.Config().Buckets && !st.matchSizes(ctx) {
					return err
				}
				st.log.Warn("cannot rebuild the RDAs larger; peeling at the size reported", "buckets", st.up.Config().Buckets, "err", err)
				stuck = err
			}
		}
		var err error
		if st.diff, err = Peel(st.up, st.adjust(st.down)); err != nil {
			return err
		}
		size := st.up.Config().Buckets
		canRebuild := stuck == nil && size < lim.MaxBuckets && st.out.Rebuilds < lim.MaxRebuilds
		// Copies of an ID are taken out first; a residual without them
		// is rebuilt larger first, as copies are then unlikely: asking
		// for them made each probe sort its whole cache.
		if !st.diff.Complete() && !askedRepeated && (st.diff.Copies > 0 || leftBefore || !canRebuild) {
			askedRepeated = true
			if err := st.takeOutRepeated(ctx); err != nil {
				return err
			}
		}
		if st.diff.Complete() || size >= lim.MaxBuckets || st.out.Rebuilds >= lim.MaxRebuilds {
			return nil
		}
		leftBefore = true
		if stuck != nil {
			return fmt.Errorf("peeling at %d buckets incomplete (%v) and %w", size, st.diff, stuck)
		}
		residual := 0
		for _, r := range st.diff.Residual {
			residual += len(r)
		}
		next := max(2*size, Size(st.diff.Size()+residual, lim.MinBuckets, lim.MaxBuckets))
		next = min(next, lim.MaxBuckets)
		st.log.Debug("peeling incomplete; rebuilding larger", "buckets", size, "next", next, "diff", st.diff.String())
		if err := st.rebuildBoth(ctx, next); err != nil {
			return err
		}
	}
}

// matchSizes brings the two RDAs to one size when one side cannot be
// rebuilt (its probe lost the epoch's cache): the other side, rebuilt at
// the size of the one that cannot be, larger or smaller. It says whether
// the sizes are equal after.
func (st *epochState) matchSizes(ctx context.Context) bool {
	for _, m := range []int{st.down.Config().Buckets, st.up.Config().Buckets} {
		if st.out.Rebuilds >= st.lim.MaxRebuilds {
			return false
		}
		if err := st.rebuildBoth(ctx, m); err == nil {
			return true
		}
	}
	return false
}

// takeOutRepeated fetches the copies the downstream side saw more often
// than the upstream one and peels again without them. Failing to fetch
// them is not an error: peeling goes on without.
func (st *epochState) takeOutRepeated(ctx context.Context) error {
	p, err := extraCopies(ctx, st.r)
	if err != nil {
		st.log.Warn("cannot fetch repeated packets", "err", err)
		return nil
	}
	if len(p) == 0 {
		return nil
	}
	st.pre = p
	st.diff, err = Peel(st.up, st.adjust(st.down))
	return err
}

// rebuildBoth asks both sides for the epoch's RDA at m buckets (only a
// side not at m already).
func (st *epochState) rebuildBoth(ctx context.Context, m int) error {
	st.out.Rebuilds++
	out := [2]*rda.RDA{st.up, st.down}
	g, gctx := errgroup.WithContext(ctx)
	for i, s := range []Side{Upstream, Downstream} {
		if out[i].Config().Buckets == m {
			continue
		}
		g.Go(func() error {
			r, err := st.r.Rebuild(gctx, s, m)
			if err != nil {
				return fmt.Errorf("rebuilding at %d buckets: %w", m, err)
			}
			want := out[i].Config()
			want.Buckets = m
			if err := want.Compatible(r.Config()); err != nil {
				return fmt.Errorf("rebuilt %s RDA has the wrong shape: %w", s, err)
			}
			out[i] = r
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	st.up, st.down = out[0], out[1]
	return nil
}

// fetchTimestamps asks each side for the entries of the packets it alone
// saw, and drops from the downstream answer the copies already taken out.
func (st *epochState) fetchTimestamps(ctx context.Context) (upTS, downTS map[uint64][]Entry, err error) {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		var err error
		upTS, err = fetch(gctx, st.r, Upstream, st.diff.Lost)
		return err
	})
	g.Go(func() error {
		var err error
		downTS, err = fetch(gctx, st.r, Downstream, st.diff.Extra)
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	// A lost packet sent more than once: which copy was lost shows
	// against the copies that arrived.
	var repeated []uint64
	for _, id := range st.diff.Lost {
		if len(upTS[id]) >= 2 {
			repeated = append(repeated, id)
		}
	}
	if len(repeated) > 0 {
		if st.delivered, err = fetch(ctx, st.r, Downstream, repeated); err != nil {
			return nil, nil, err
		}
	}
	for _, x := range st.pre {
		for _, m := range []map[uint64][]Entry{downTS, st.delivered} {
			ts := m[x.ID]
			if i := slices.IndexFunc(ts, func(e Entry) bool { return e.OffsetNS == x.OffsetNS }); i >= 0 {
				m[x.ID] = slices.Delete(ts, i, i+1)
			}
		}
	}
	return upTS, downTS, nil
}

// lostCopy tells which of the copies sent of a packet (up) was lost,
// given the copies that arrived (down, one fewer), by synopsis.LostCopy;
// false (and their buckets are left out) when it cannot tell.
func lostCopy(up, down []Entry) (Entry, bool) {
	up, down = slices.Clone(up), slices.Clone(down)
	slices.SortFunc(up, byOffset)
	slices.SortFunc(down, byOffset)
	i, ok := synopsis.LostCopy(offsets(up), offsets(down))
	if !ok {
		return Entry{}, false
	}
	return up[i], true
}

func offsets(es []Entry) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.OffsetNS
	}
	return out
}

func fetch(ctx context.Context, r Repairs, s Side, ids []uint64) (map[uint64][]Entry, error) {
	if len(ids) == 0 {
		return map[uint64][]Entry{}, nil
	}
	return r.Fetch(ctx, s, ids)
}

// compute repairs copies of both RDAs with the fetched timestamps (or,
// without them, leaves the decoded packets' buckets out) and estimates.
func (st *epochState) compute(upTS, downTS map[uint64][]Entry, repaired bool) error {
	diff := st.diff
	u := NewUsable(st.up.Config(), diff)
	upR, downR := scratchRDA(), scratchRDA()
	defer scratch.Put(upR)
	defer scratch.Put(downR)
	upR.SetCopy(st.up)
	downR.SetCopy(st.down)
	out := &st.out
	out.Repaired = repaired
	out.Duplicates = uint64(len(st.pre))
	out.Remove[Downstream] = append(out.Remove[Downstream], st.pre...)
	if repaired {
		upOff, downOff := st.resolve(upTS, downTS)
		Repair(upR, diff.Lost, upOff, u)
		Repair(downR, diff.Extra, downOff, u)
		if n := len(diff.Lost) - len(upOff) + len(diff.Extra) - len(downOff); n > 0 {
			out.Unresolved = n
			st.log.Debug("decoded packets without a usable timestamp", "unresolved", n,
				"lost", len(diff.Lost), "lost_resolved", len(upOff), "extra", len(diff.Extra), "extra_resolved", len(downOff))
		}
	} else {
		for _, id := range diff.Lost {
			u.Exclude(upR, id)
		}
		for _, id := range diff.Extra {
			u.Exclude(downR, id)
		}
	}
	est, err := Compute(upR, downR, u, StddevCentered)
	out.Computed = true
	out.Estimate = est
	out.Lost = len(diff.Lost)
	// Copies taken out before peeling are not among the extras: only the
	// duplicates found among them are.
	out.Reordered = uint64(len(diff.Extra)) - (out.Duplicates - uint64(len(st.pre)))
	return err
}

// resolve picks the timestamp of each decoded packet: a lost packet the
// upstream side saw once, or the copy lostCopy tells of one it saw more
// often, an extra packet seen once downstream (a duplicate when the
// downstream probe saw its first copy just before the epoch), or the last
// copy of a duplicate (the first copy is the delivery). It fills the
// removals, the boundary records and the duplicate count.
func (st *epochState) resolve(upTS, downTS map[uint64][]Entry) (upOff, downOff map[uint64]int64) {
	out := &st.out
	start := st.in.StartNS
	lost, extra := len(st.diff.Lost), len(st.diff.Extra)
	out.BoundaryLost, out.BoundaryExtra = make(map[uint64]int64, lost), make(map[uint64]int64, extra)
	out.Remove[Upstream] = slices.Grow(out.Remove[Upstream], lost)
	out.Remove[Downstream] = slices.Grow(out.Remove[Downstream], extra)
	upOff = make(map[uint64]int64, lost)
	for _, id := range st.diff.Lost {
		ts := upTS[id]
		if len(ts) >= 2 {
			lost, ok := lostCopy(ts, st.delivered[id])
			if !ok {
				continue
			}
			ts = []Entry{lost}
		}
		if len(ts) == 1 {
			upOff[id] = ts[0].OffsetNS
			out.BoundaryLost[id] = start + ts[0].OffsetNS
			out.Remove[Upstream] = append(out.Remove[Upstream], Packet{id, ts[0]})
		}
	}
	downOff = make(map[uint64]int64, extra)
	copies, upCopies := idSet(st.in.DownCopies), idSet(st.in.UpCopies)
	out.BoundaryCopies = map[uint64]bool{}
	// A copy counted as a duplicate of a packet the upstream side also
	// sent just before the epoch may be that earlier copy, arrived late:
	// it waits among the boundary records for the epoch before's loss.
	crossed := func(p Packet) {
		if upCopies[p.ID] {
			out.BoundaryExtra[p.ID] = start + p.OffsetNS
			out.BoundaryCopies[p.ID] = true
		}
	}
	for _, p := range st.pre {
		crossed(p)
	}
	for _, id := range st.diff.Extra {
		ts := slices.Clone(downTS[id])
		switch {
		case len(ts) == 1:
			downOff[id] = ts[0].OffsetNS
			out.BoundaryExtra[id] = start + ts[0].OffsetNS
			out.Remove[Downstream] = append(out.Remove[Downstream], Packet{id, ts[0]})
			if copies[id] {
				// Its first copy arrived before the epoch began.
				out.BoundaryCopies[id] = true
				out.Duplicates++
			}
		case len(ts) >= 2:
			slices.SortFunc(ts, byOffset)
			last := ts[len(ts)-1]
			downOff[id] = last.OffsetNS
			out.Remove[Downstream] = append(out.Remove[Downstream], Packet{id, last})
			out.Duplicates++
			crossed(Packet{id, last})
		}
	}
	return upOff, downOff
}

func byOffset(a, b Entry) int { return cmp.Compare(a.OffsetNS, b.OffsetNS) }

// idSet is a set of ids.
func idSet(ids []uint64) map[uint64]bool {
	m := make(map[uint64]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// extraCopies finds the packets the downstream side saw more often in the
// epoch than the upstream one (at least once), and returns the extra
// copies to take out of the downstream RDA: all but the earliest, or all
// but as many as went out upstream. A copy taken out is a duplicate.
func extraCopies(ctx context.Context, r Repairs) ([]Packet, error) {
	var upRep, downRep map[uint64][]Entry
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) { upRep, err = r.Repeated(gctx, Upstream); return err })
	g.Go(func() (err error) { downRep, err = r.Repeated(gctx, Downstream); return err })
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if upRep == nil {
		upRep = map[uint64][]Entry{}
	}
	// Only downstream repeats matter; the upstream count of each comes
	// from its repeats or, for an ID sent once or never, a plain fetch.
	var ask []uint64
	for id := range downRep {
		if _, ok := upRep[id]; !ok {
			ask = append(ask, id)
		}
	}
	if len(ask) > 0 {
		once, err := r.Fetch(ctx, Upstream, ask)
		if err != nil {
			return nil, err
		}
		for id, ts := range once {
			upRep[id] = ts
		}
	}
	var out []Packet
	for id, ts := range downRep {
		keep := max(len(upRep[id]), 1)
		if len(ts) <= keep {
			continue
		}
		ts = slices.Clone(ts)
		slices.SortFunc(ts, byOffset)
		for _, e := range ts[keep:] {
			out = append(out, Packet{id, e})
		}
	}
	return out, nil
}

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}
