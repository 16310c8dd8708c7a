package collector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/cluster"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/store"
)

// queryService serves QueryService.
type queryService struct {
	owlv1.UnimplementedQueryServiceServer
	c *Collector
}

func (s queryService) ListProbes(ctx context.Context, _ *owlv1.ListProbesRequest) (*owlv1.ListProbesResponse, error) {
	others, note := fromEach(ctx, s.c, func(ctx context.Context, q owlv1.QueryServiceClient) ([]*owlv1.ProbeInfo, error) {
		r, err := q.ListProbes(ctx, &owlv1.ListProbesRequest{})
		return r.GetProbes(), err
	})
	resp := &owlv1.ListProbesResponse{Probes: mergeProbes(append(others, s.c.probes.infos())), Note: note}
	if s.c.cfg.Insecure {
		resp.Warning = insecureWarning
	}
	return resp, nil
}

func (s queryService) ListCollectors(context.Context, *owlv1.ListCollectorsRequest) (*owlv1.ListCollectorsResponse, error) {
	return &owlv1.ListCollectorsResponse{Collectors: s.c.collectorInfos()}, nil
}

// toOwner passes a query to the owner of key when that is another
// collector of the cluster; handled is false when this one answers.
func toOwner[T any](ctx context.Context, c *Collector, key string, call func(context.Context, owlv1.QueryServiceClient) (T, error)) (res T, handled bool, err error) {
	owner, self := c.owner(key)
	if self || forwarded(ctx) {
		return res, false, nil
	}
	q, qctx, err := c.peer(ctx, owner.GRPC)
	if err == nil {
		res, err = call(qctx, q)
	}
	return res, true, err
}

func (s queryService) ListPaths(ctx context.Context, _ *owlv1.ListPathsRequest) (*owlv1.ListPathsResponse, error) {
	out := &owlv1.ListPathsResponse{}
	for _, p := range s.c.pathList {
		out.Paths = append(out.Paths, p.ToProto())
	}
	return out, nil
}

// maxResults caps one GetPathStats answer.
const maxResults = 100_000

func (s queryService) GetPathStats(ctx context.Context, req *owlv1.GetPathStatsRequest) (*owlv1.GetPathStatsResponse, error) {
	if s.c.paths[req.GetPath()] == nil {
		return nil, status.Errorf(codes.NotFound, "path %q is not configured", req.GetPath())
	}
	from, to, err := epochRange(s.c.cfg.Params.Epoch, req.GetFrom(), req.GetTo())
	if err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = 1000
	}
	limit = min(limit, maxResults)
	res, err := s.c.store.Results(req.GetPath(), from, to, limit)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	// In a cluster, earlier owners of the path hold its older results.
	others, note := fromEach(ctx, s.c, func(ctx context.Context, q owlv1.QueryServiceClient) ([]*owlv1.PathStats, error) {
		r, err := q.GetPathStats(ctx, req)
		return r.GetStats(), err
	})
	if len(others) > 0 {
		res = mergeResults(append(others, res), limit)
	}
	if !req.GetIncludeSketch() {
		for _, r := range res {
			r.DelaySketch = nil
		}
	}
	return &owlv1.GetPathStatsResponse{Stats: res, Note: note}, nil
}

func (s queryService) WatchPathStats(req *owlv1.WatchPathStatsRequest, stream owlv1.QueryService_WatchPathStatsServer) error {
	if req.GetPath() != "" && s.c.paths[req.GetPath()] == nil {
		return status.Errorf(codes.NotFound, "path %q is not configured", req.GetPath())
	}
	if !s.c.watchers.admit() {
		s.c.m.watchersRefused.Inc()
		return status.Errorf(codes.ResourceExhausted, "%d WatchPathStats streams are open already (limits.max_watchers): watch again later", s.c.cfg.Limits.MaxWatchers)
	}
	defer s.c.watchers.leave()
	if err := req.GetSince().CheckValid(); req.GetSince() != nil && err != nil {
		return status.Errorf(codes.InvalidArgument, "since: %v", err)
	}
	ch := s.c.watchers.watch(req.GetPath())
	defer s.c.watchers.unwatch(ch)
	if s.c.cl != nil && !forwarded(stream.Context()) {
		// Results are computed by each path's owner: watch them all.
		go s.c.forwardWatches(stream.Context(), req, ch)
	}
	// sent are the stored results sent for since, by path and epoch, with
	// their computed times: the same result coming new is not sent again.
	sent := map[store.EpochRef]int64{}
	if req.GetSince() != nil {
		err := s.c.storedSince(req.GetPath(), req.GetSince().AsTime(), func(r *owlv1.PathStats) error {
			sent[store.EpochRef{Path: r.GetPath(), Epoch: r.GetEpoch()}] = r.GetComputed().AsTime().UnixNano()
			return stream.Send(r)
		})
		if err != nil {
			return err
		}
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case r, ok := <-ch:
			if !ok {
				return status.Error(codes.ResourceExhausted, "watcher fell behind and was cut off; watch again")
			}
			if at, ok := sent[store.EpochRef{Path: r.GetPath(), Epoch: r.GetEpoch()}]; ok && at == r.GetComputed().AsTime().UnixNano() {
				continue
			}
			if err := stream.Send(r); err != nil {
				return err
			}
		}
	}
}

// watchSinceMax is how far back WatchPathStats's since reaches.
const watchSinceMax = time.Minute

// storedSince calls fn with each stored result of path ("": of every path)
// computed at or after since (at most watchSinceMax ago), each path's
// oldest first. It reads each path's newest results, as many as there are
// epochs from a pair timeout before since until now, and three more
// (boundary matching changes the epoch before; the newest may be ahead).
func (c *Collector) storedSince(path string, since time.Time, fn func(*owlv1.PathStats) error) error {
	now := c.now()
	since = maxTime(since, now.Add(-watchSinceMax))
	n := int((now.Sub(since)+c.cfg.PairTimeout)/max(c.cfg.Params.Epoch.Length, time.Millisecond)) + 3
	for _, p := range c.pathList {
		if path != "" && p.Name != path {
			continue
		}
		res, err := c.store.Results(p.Name, math.MinInt64/2, math.MaxInt64/2, min(n, maxResults))
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		for _, r := range res {
			if r.GetComputed() == nil || r.GetComputed().AsTime().Before(since) {
				continue
			}
			if err := fn(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// maxTime is the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// watchFollow is how often a watch looks for members it does not watch
// yet.
var watchFollow = time.Second

// forwardWatches relays to ch the results the cluster's other members
// compute, until ctx ends. It follows the members: one that joins, or
// comes back, is watched from then on, and a member's watch that ends is
// opened again while the member is listed. (A watch opened once, on the
// members of its start, missed every result of a member that joined
// later or had restarted.) A member watched again, or first listed after
// the watch began, is asked for the results it stored meanwhile (since):
// from when its last watch ended, or from a follow interval before it
// was first listed, less watchMargin for the members' clocks.
func (c *Collector) forwardWatches(ctx context.Context, req *owlv1.WatchPathStatsRequest, ch chan *owlv1.PathStats) {
	var mu sync.Mutex
	open := map[string]bool{}   // members watched now, by gRPC address
	warned := map[string]bool{} // members not answering, said once
	// from is, by member name, when its results not yet relayed begin:
	// when its last watch ended, or when it was first listed (less a
	// follow interval; the watch's start for those listed then); ended
	// says a watch of it was opened and ended.
	started := c.now()
	from := map[string]time.Time{}
	ended := map[string]bool{}
	tick := time.NewTicker(watchFollow)
	defer tick.Stop()
	for round0 := true; ; round0 = false {
		for _, m := range c.cl.Members() {
			if m.Self {
				continue
			}
			mu.Lock()
			watching := open[m.GRPC]
			open[m.GRPC] = true
			at, known := from[m.Name]
			if !known {
				at = started
				if !round0 {
					at = c.now().Add(-watchFollow)
				}
				from[m.Name] = at
			}
			relayed := ended[m.Name]
			mu.Unlock()
			if watching {
				continue
			}
			r := req
			if known || !round0 {
				r = proto.CloneOf(req)
				since := at.Add(-watchMargin)
				if s := req.GetSince(); s != nil && !relayed && s.AsTime().Before(since) {
					since = s.AsTime() // none relayed yet: from the watcher's since
				}
				r.Since = timestamppb.New(since)
			}
			go func() {
				err := c.forwardWatch(ctx, m, r, ch)
				mu.Lock()
				delete(open, m.GRPC)
				if err == nil {
					from[m.Name], ended[m.Name] = c.now(), true // opened, then ended
				}
				first := err != nil && !warned[m.GRPC]
				warned[m.GRPC] = err != nil
				mu.Unlock()
				if first && ctx.Err() == nil {
					// The others' results still come; this one's do not
					// until it answers again.
					c.log.Warn("watch: a collector of the cluster is not answering", "collector", m.Name, "err", err)
				}
			}()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// watchMargin is how much earlier than it ended a member's watch is
// opened again from (since): the members' clocks differ that much at most.
const watchMargin = time.Second

// forwardWatch relays one member's results to ch until its stream or ctx
// ends. It returns nil if the stream ended after it was opened.
func (c *Collector) forwardWatch(ctx context.Context, m cluster.Member, req *owlv1.WatchPathStatsRequest, ch chan *owlv1.PathStats) error {
	q, qctx, err := c.peer(ctx, m.GRPC)
	if err != nil {
		return err
	}
	ws, err := q.WatchPathStats(qctx, req)
	if err != nil {
		return err
	}
	for {
		r, err := ws.Recv()
		if err != nil {
			return nil
		}
		c.watchers.notifyOne(ch, r)
	}
}

// epochRange turns a request's time range into epochs: those that start
// at or after from, up to the one that holds to (unbounded when unset, or
// beyond the years nanoseconds since 1970 can count). Every query that
// takes a range uses it; lo > hi means no epoch.
func epochRange(ep epoch.Config, from, to *timestamppb.Timestamp) (lo, hi int64, err error) {
	lo, hi = math.MinInt64/2, math.MaxInt64/2
	if from != nil {
		if err := from.CheckValid(); err != nil {
			return 0, 0, status.Errorf(codes.InvalidArgument, "from: %v", err)
		}
		switch t := from.AsTime(); {
		case t.After(lastNS):
			return 1, 0, nil // after every epoch
		case !t.Before(firstNS):
			e, off := ep.Of(t.UnixNano())
			lo = e
			if off > 0 {
				lo++ // epochs that start at or after from
			}
		}
	}
	if to != nil {
		if err := to.CheckValid(); err != nil {
			return 0, 0, status.Errorf(codes.InvalidArgument, "to: %v", err)
		}
		switch t := to.AsTime(); {
		case t.Before(firstNS):
			return 1, 0, nil // before every epoch
		case !t.After(lastNS):
			hi, _ = ep.Of(t.UnixNano())
		}
	}
	return lo, hi, nil
}

// firstNS and lastNS are the first and last times in nanoseconds since
// 1970 that an int64 holds (years 1677 to 2262).
var firstNS, lastNS = time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)

// GetFlowStats estimates one flow in every retained epoch of the range.
func (s queryService) GetFlowStats(ctx context.Context, req *owlv1.GetFlowStatsRequest) (*owlv1.GetFlowStatsResponse, error) {
	if s.c.paths[req.GetPath()] == nil {
		return nil, status.Errorf(codes.NotFound, "path %q is not configured", req.GetPath())
	}
	if r, ok, err := toOwner(ctx, s.c, req.GetPath(), func(ctx context.Context, q owlv1.QueryServiceClient) (*owlv1.GetFlowStatsResponse, error) {
		return q.GetFlowStats(ctx, req)
	}); ok {
		return r, err
	}
	f, err := netpath.FlowFromProto(req.GetFlow())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	lo, hi, err := epochRange(s.c.cfg.Params.Epoch, req.GetFrom(), req.GetTo())
	if err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = 100
	}
	limit = min(limit, maxResults)
	h := f.Hash(s.c.cfg.Params.LDS.Seed)
	// The flow's stored results (a top flow's, also of epochs that sent
	// no sketches), then an estimate from the sketches of the others.
	byEpoch := map[int64]*owlv1.FlowStats{}
	err = s.c.store.FlowResultsOf(req.GetPath(), lo, hi, h, func(fs *owlv1.FlowStats) bool {
		byEpoch[fs.GetEpoch()] = fs
		return ctx.Err() == nil
	})
	var decodeErr error
	if err == nil {
		err = s.c.store.LDSPairs(req.GetPath(), lo, hi, func(p store.LDSPair) bool {
			if ctx.Err() != nil {
				return false
			}
			if byEpoch[p.Epoch] != nil {
				return true
			}
			up, down, err := decodeLDSPair(p)
			if err != nil {
				decodeErr = fmt.Errorf("the sketches of %s epoch %d: %w", p.Path, p.Epoch, err)
				return false
			}
			byEpoch[p.Epoch] = s.c.worker.estimateFlow(req.GetPath(), p.Epoch, up, down, f)
			return true
		})
	}
	if err = errors.Join(err, decodeErr); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	epochs := slices.Sorted(maps.Keys(byEpoch))
	epochs = epochs[max(0, len(epochs)-limit):]
	out := make([]*owlv1.FlowStats, len(epochs))
	for i, e := range epochs {
		out[i] = byEpoch[e]
	}
	return &owlv1.GetFlowStatsResponse{Stats: out}, ctx.Err()
}

// TopFlows sums up the top flows of the epochs in the range.
func (s queryService) TopFlows(ctx context.Context, req *owlv1.TopFlowsRequest) (*owlv1.TopFlowsResponse, error) {
	if s.c.paths[req.GetPath()] == nil {
		return nil, status.Errorf(codes.NotFound, "path %q is not configured", req.GetPath())
	}
	if r, ok, err := toOwner(ctx, s.c, req.GetPath(), func(ctx context.Context, q owlv1.QueryServiceClient) (*owlv1.TopFlowsResponse, error) {
		return q.TopFlows(ctx, req)
	}); ok {
		return r, err
	}
	lo, hi, err := epochRange(s.c.cfg.Params.Epoch, req.GetFrom(), req.GetTo())
	if err != nil {
		return nil, err
	}
	type acc struct {
		fs        *owlv1.FlowStats
		delaySum  float64
		sampleSum float64
	}
	byFlow := map[uint64]*acc{}
	err = s.c.store.FlowResults(req.GetPath(), lo, hi, func(h uint64, f *owlv1.FlowStats) bool {
		a := byFlow[h]
		if a == nil {
			a = &acc{fs: &owlv1.FlowStats{Path: f.GetPath(), Epoch: f.GetEpoch(), Start: f.GetStart(), Flow: f.GetFlow(), Top: true}}
			byFlow[h] = a
		}
		a.fs.Packets += f.GetPackets()
		a.fs.Lost += f.GetLost()
		a.fs.Epochs++
		if f.GetEstimated() {
			a.fs.Estimated = true
			a.delaySum += f.GetMeanNs() * f.GetSamples()
			a.sampleSum += f.GetSamples()
			a.fs.Observed += f.GetObserved()
		}
		return ctx.Err() == nil
	})
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	out := make([]*owlv1.FlowStats, 0, len(byFlow))
	for _, a := range byFlow {
		if a.sampleSum > 0 {
			a.fs.MeanNs, a.fs.Samples = a.delaySum/a.sampleSum, a.sampleSum
		}
		out = append(out, a.fs)
	}
	key := func(f *owlv1.FlowStats) float64 {
		switch req.GetOrderBy() {
		case owlv1.TopFlowsRequest_ORDER_MEAN_DELAY:
			return f.GetMeanNs()
		case owlv1.TopFlowsRequest_ORDER_LOSS:
			return f.GetLost()
		}
		return f.GetPackets()
	}
	slices.SortFunc(out, func(a, b *owlv1.FlowStats) int { return cmp.Compare(key(b), key(a)) })
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = 10
	}
	if limit < len(out) {
		out = out[:limit]
	}
	return &owlv1.TopFlowsResponse{Flows: out}, nil
}

func (s queryService) GetFlowLatencyHistoric(ctx context.Context, req *owlv1.GetFlowLatencyHistoricRequest) (*owlv1.GetFlowLatencyHistoricResponse, error) {
	if r, ok, err := toOwner(ctx, s.c, colateKey, func(ctx context.Context, q owlv1.QueryServiceClient) (*owlv1.GetFlowLatencyHistoricResponse, error) {
		return q.GetFlowLatencyHistoric(ctx, req)
	}); ok {
		return r, err
	}
	return s.c.colates.historic(ctx, req)
}

func (s queryService) ListColateVectors(ctx context.Context, req *owlv1.ListColateVectorsRequest) (*owlv1.ListColateVectorsResponse, error) {
	if r, ok, err := toOwner(ctx, s.c, colateKey, func(ctx context.Context, q owlv1.QueryServiceClient) (*owlv1.ListColateVectorsResponse, error) {
		return q.ListColateVectors(ctx, req)
	}); ok {
		return r, err
	}
	return s.c.colates.list(req)
}
