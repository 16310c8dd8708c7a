package collector

import (
	"cmp"
	"context"
	"errors"
	"io"
	"math"
	"slices"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/cluster"
	"github.com/owl-latency/owl/internal/store"
)

// Catch-up repairs what replication missed: after each change of
// members (and once after joining), for every path this member holds
// (owner or replica), it asks each other member for the path's stored
// epochs whose complete results it lacks (ClusterService.Export) and
// stores them like replicated copies. A member that comes back, on its
// data or on none, gets the history it missed; a new replica gets its
// path's history; copies dropped on the way are fetched again. One round
// runs at a time, in the background, bounded by catchUpTimeout.

// catchUpTimeout bounds one round of catch-up.
const catchUpTimeout = 5 * time.Minute

// exportBatch is how many epochs Export reads from the store at a time,
// and catch-up stores in one transaction.
const exportBatch = 64

// catchUpBatchBytes bounds the copies catch-up stores at once.
const catchUpBatchBytes = 4 << 20

// requestCatchUp asks for a round of catch-up; one asked for while
// another is waiting adds nothing.
func (c *Collector) requestCatchUp() {
	select {
	case c.catchUpNow <- struct{}{}:
	default:
	}
}

// catchUpLoop runs a round of catch-up whenever one is asked for, until
// ctx ends.
func (c *Collector) catchUpLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.catchUpNow:
		}
		rctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
		c.catchUp(rctx)
		cancel()
	}
}

// catchUp fetches, for each path this member holds, what the other
// members store and it lacks.
func (c *Collector) catchUp(ctx context.Context) {
	for _, p := range c.pathList {
		members := c.cl.Members()
		if !slices.ContainsFunc(cluster.Holders(members, p.Name, 2), func(m cluster.Member) bool { return m.Self }) {
			continue
		}
		for _, m := range members {
			if m.Self {
				continue
			}
			n, err := c.catchUpFrom(ctx, p.Name, m)
			c.m.caughtUp.Add(float64(n))
			if n > 0 {
				c.log.Info("caught up", "path", p.Name, "epochs", n, "member", m.Name)
			}
			if err != nil {
				c.log.Warn("catch-up: a member did not export a path", "path", p.Name, "member", m.Name, "err", err)
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// catchUpFrom fetches from member m the stored epochs of path whose
// complete results this member lacks, and returns how many results it
// stored.
func (c *Collector) catchUpFrom(ctx context.Context, path string, m cluster.Member) (int, error) {
	held, err := c.store.HeldSpans(path, func(r *owlv1.PathStats) bool { return !missingSide(r) })
	if err != nil {
		return 0, err
	}
	conn, err := c.peers.get(m.GRPC)
	if err != nil {
		return 0, err
	}
	req := &owlv1.ExportRequest{Path: path}
	for _, s := range held {
		req.Held = append(req.Held, &owlv1.EpochSpan{First: s.First, Last: s.Last})
	}
	stream, err := owlv1.NewClusterServiceClient(conn).Export(ctx, req)
	if err != nil {
		return 0, err
	}
	taken, size := 0, 0
	var batch []*owlv1.EpochCopy
	flush := func() error {
		n, err := c.storeCopies(batch)
		taken, batch, size = taken+n, nil, 0
		return err
	}
	for {
		ec, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return taken, errors.Join(err, flush())
		}
		batch, size = append(batch, ec), size+proto.Size(ec)
		if len(batch) >= exportBatch || size >= catchUpBatchBytes {
			if err := flush(); err != nil {
				return taken, err
			}
		}
	}
}

// Export streams the path's stored epochs that the caller does not hold,
// oldest first, each with its per-flow results, sketches and boundary
// record.
func (s clusterService) Export(req *owlv1.ExportRequest, stream owlv1.ClusterService_ExportServer) error {
	if s.c.paths[req.GetPath()] == nil {
		return status.Errorf(codes.NotFound, "path %q is not configured", req.GetPath())
	}
	held := newSpanSet(req.GetHeld())
	from := int64(math.MinInt64)
	for {
		eps, err := s.c.store.StoredEpochs(req.GetPath(), from, exportBatch, held.has)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		for _, se := range eps {
			if err := stream.Send(storedCopy(req.GetPath(), se)); err != nil {
				return err
			}
		}
		if len(eps) < exportBatch {
			return nil
		}
		from = eps[len(eps)-1].Result.GetEpoch() + 1
	}
}

// storedCopy is the copy of a stored epoch. Its sides are used up when
// its result is complete.
func storedCopy(path string, se store.StoredEpoch) *owlv1.EpochCopy {
	r := se.Result
	ec := &owlv1.EpochCopy{Path: path, Epoch: r.GetEpoch(), Result: r, Boundary: se.Boundary, Done: !missingSide(r)}
	for _, f := range se.Flows {
		ec.Flows = append(ec.Flows, &owlv1.StoredFlow{Hash: f.Hash, Stats: f.Stats})
	}
	if se.LDS != nil {
		ec.LdsUp, ec.LdsDown = se.LDS.Up, se.LDS.Down
	}
	return ec
}

// spanSet is a set of epochs as sorted spans that do not overlap.
type spanSet []store.Span

// newSpanSet sorts and joins spans (those with last before first are
// left out).
func newSpanSet(spans []*owlv1.EpochSpan) spanSet {
	var out spanSet
	for _, s := range spans {
		if s.GetFirst() <= s.GetLast() {
			out = append(out, store.Span{First: s.GetFirst(), Last: s.GetLast()})
		}
	}
	slices.SortFunc(out, func(a, b store.Span) int { return cmp.Compare(a.First, b.First) })
	joined := out[:0]
	for _, s := range out {
		if n := len(joined); n > 0 && (s.First <= joined[n-1].Last || s.First-1 == joined[n-1].Last) {
			joined[n-1].Last = max(joined[n-1].Last, s.Last)
			continue
		}
		joined = append(joined, s)
	}
	return joined
}

// has says whether epoch is in the set.
func (ss spanSet) has(epoch int64) bool {
	i := sort.Search(len(ss), func(i int) bool { return ss[i].Last >= epoch })
	return i < len(ss) && ss[i].First <= epoch
}
