package collector

import (
	"context"
	"errors"
	"io"
	"math"
	"slices"
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
// epochs in the blocks of epochs where their results differ
// (ClusterService.Export: digests of each block of 256 epochs are
// compared) and stores them like replicated copies, keeping the preferred
// of two results of an epoch (preferred): a copy of a result that
// boundary matching changed later may have been dropped. A member that comes back, on its
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

// catchUpFrom fetches from member m the stored epochs of path in the
// blocks where its results differ from this member's, and returns how
// many results it stored (storeCopies keeps the newer of two).
func (c *Collector) catchUpFrom(ctx context.Context, path string, m cluster.Member) (int, error) {
	req, err := c.exportRequest(path)
	if err != nil {
		return 0, err
	}
	conn, err := c.peers.get(m.GRPC)
	if err != nil {
		return 0, err
	}
	stream, err := owlv1.NewClusterServiceClient(conn).Export(ctx, req)
	if err != nil {
		return 0, err
	}
	taken, size := 0, 0
	var batch []*owlv1.EpochCopy
	flush := func() error {
		n, err := c.storeCopies(batch)
		c.m.caughtUp.Add(float64(n))
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

// exportRequest is what this member asks another for of a path: its
// digest of each block of stored results, and of each epoch of its
// newest block, where results still come in.
func (c *Collector) exportRequest(path string) (*owlv1.ExportRequest, error) {
	digests, err := c.store.Digests(path)
	if err != nil {
		return nil, err
	}
	req := &owlv1.ExportRequest{Path: path}
	newest := int64(math.MinInt64)
	for first, d := range digests {
		req.Blocks = append(req.Blocks, &owlv1.EpochBlock{First: first, Digest: d})
		newest = max(newest, first)
	}
	if len(digests) == 0 {
		return req, nil
	}
	fine, err := c.store.EpochDigests(path, newest)
	if err != nil {
		return nil, err
	}
	req.FineFrom = newest
	for e, d := range fine {
		req.Epochs = append(req.Epochs, &owlv1.EpochBlock{First: e, Digest: d})
	}
	return req, nil
}

// Export streams the path's stored epochs in the blocks whose digest
// differs from the caller's (or that the caller does not have), oldest
// first, each with its per-flow results, sketches and boundary record;
// from the caller's fine_from on, only the epochs whose digest differs
// or that the caller does not have.
func (s clusterService) Export(req *owlv1.ExportRequest, stream owlv1.ClusterService_ExportServer) error {
	if s.c.paths[req.GetPath()] == nil {
		return status.Errorf(codes.NotFound, "path %q is not configured", req.GetPath())
	}
	mine, err := s.c.store.Digests(req.GetPath())
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	for _, b := range req.GetBlocks() {
		if mine[b.GetFirst()] == b.GetDigest() {
			delete(mine, b.GetFirst())
		}
	}
	if len(mine) == 0 {
		return nil
	}
	fineFrom, same, err := s.sameEpochs(req)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	skip := func(epoch int64) bool {
		_, send := mine[store.BlockOf(epoch, store.DigestBlock)]
		return !send || epoch >= fineFrom && same[epoch]
	}
	from, first := int64(math.MinInt64), true
	for {
		eps, err := s.c.store.StoredEpochs(req.GetPath(), from, exportBatch, skip)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		for _, se := range eps {
			ec := storedCopy(req.GetPath(), se)
			if first {
				ec.Sizes, ec.SizesSetting = s.c.ownSizes(req.GetPath())
				first = false
			}
			if err := stream.Send(ec); err != nil {
				return err
			}
		}
		if len(eps) < exportBatch {
			return nil
		}
		from = eps[len(eps)-1].Result.GetEpoch() + 1
	}
}

// sameEpochs returns, for a request that names epochs one by one, the
// first epoch of the blocks compared so and those of its epochs there
// whose digest is the caller's; else math.MaxInt64.
func (s clusterService) sameEpochs(req *owlv1.ExportRequest) (int64, map[int64]bool, error) {
	if len(req.GetEpochs()) == 0 {
		return math.MaxInt64, nil, nil
	}
	from := store.BlockOf(req.GetFineFrom(), store.DigestBlock)
	mine, err := s.c.store.EpochDigests(req.GetPath(), from)
	if err != nil {
		return 0, nil, err
	}
	same := map[int64]bool{}
	for _, e := range req.GetEpochs() {
		if d, ok := mine[e.GetFirst()]; ok && d == e.GetDigest() {
			same[e.GetFirst()] = true
		}
	}
	return from, same, nil
}

// newerResult says whether a's boundary matching went further than b's:
// matching only ever adds to a result's boundary-matched packets and
// takes from its reordered ones.
func newerResult(a, b *owlv1.PathStats) bool {
	if a.GetBoundaryMatched() != b.GetBoundaryMatched() {
		return a.GetBoundaryMatched() > b.GetBoundaryMatched()
	}
	return a.GetReordered() < b.GetReordered()
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
		ec.LdsPair, ec.LdsUp, ec.LdsDown = se.LDS.Pair, se.LDS.Up, se.LDS.Down
	}
	return ec
}
