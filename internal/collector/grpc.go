package collector

import (
	"context"
	"errors"
	"math"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// probeService serves ProbeService.
type probeService struct {
	owlv1.UnimplementedProbeServiceServer
	c *Collector
}

// Connect handles one probe stream: Hello, then reports, each acknowledged
// once stored. Reports are handled in order on the stream's goroutine.
func (s probeService) Connect(stream owlv1.ProbeService_ConnectServer) error {
	c := s.c
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	h := first.GetHello()
	if h == nil {
		return status.Error(codes.InvalidArgument, "the first message of a stream must be a Hello")
	}
	addr := ""
	if p, ok := peer.FromContext(stream.Context()); ok {
		addr = p.Addr.String()
	}
	sess := newSession(h.GetProbeId(), stream)
	defer close(sess.done)
	pc, err := c.hello(h, addr, sess)
	var rej *rejection
	if errors.As(err, &rej) {
		_ = stream.Send(&owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Reject{Reject: &owlv1.Reject{Reason: rej.reason}}})
		return nil
	}
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	defer c.goodbye(h.GetProbeId(), sess)
	if err := sess.send(&owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Paths{Paths: pc}}); err != nil {
		return err
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			return err
		}
		switch a := m.GetMsg().(type) {
		case *owlv1.ProbeMessage_FetchReply:
			sess.deliver(a.FetchReply.GetRequestId(), m)
			continue
		case *owlv1.ProbeMessage_RebuildReply:
			sess.deliver(a.RebuildReply.GetRequestId(), m)
			continue
		}
		r := m.GetReport()
		if r == nil {
			return status.Errorf(codes.InvalidArgument, "unexpected %T after Hello", m.GetMsg())
		}
		err = c.report(h.GetProbeId(), r)
		if errors.As(err, &rej) {
			c.log.Warn("report rejected", "probe", h.GetProbeId(), "path", r.GetPath(), "epoch", r.GetEpoch(), "reason", rej.reason)
			if err := sess.send(&owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Reject{Reject: &owlv1.Reject{Path: r.GetPath(), Reason: rej.reason}}}); err != nil {
				return err
			}
		} else if err != nil {
			// Not acknowledged: the probe keeps the report and sends it again.
			c.log.Error("handling report", "probe", h.GetProbeId(), "path", r.GetPath(), "epoch", r.GetEpoch(), "err", err)
			return status.Error(codes.Unavailable, err.Error())
		}
		ack := &owlv1.Ack{Seq: r.GetSeq(), Path: r.GetPath(), Epoch: r.GetEpoch()}
		if err := sess.send(&owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_Ack{Ack: ack}}); err != nil {
			return err
		}
	}
}

// queryService serves QueryService.
type queryService struct {
	owlv1.UnimplementedQueryServiceServer
	c *Collector
}

func (s queryService) ListProbes(ctx context.Context, _ *owlv1.ListProbesRequest) (*owlv1.ListProbesResponse, error) {
	return &owlv1.ListProbesResponse{Probes: s.c.probeInfos()}, nil
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
	ep := s.c.cfg.Params.Epoch
	from, to := int64(math.MinInt64/2), int64(math.MaxInt64/2)
	if req.GetFrom() != nil {
		if err := req.GetFrom().CheckValid(); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "from: %v", err)
		}
		e, off := ep.Of(req.GetFrom().AsTime().UnixNano())
		from = e
		if off > 0 {
			from++ // epochs that start at or after from
		}
	}
	if req.GetTo() != nil {
		if err := req.GetTo().CheckValid(); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "to: %v", err)
		}
		to, _ = ep.Of(req.GetTo().AsTime().UnixNano())
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
	return &owlv1.GetPathStatsResponse{Stats: res}, nil
}

func (s queryService) WatchPathStats(req *owlv1.WatchPathStatsRequest, stream owlv1.QueryService_WatchPathStatsServer) error {
	if req.GetPath() != "" && s.c.paths[req.GetPath()] == nil {
		return status.Errorf(codes.NotFound, "path %q is not configured", req.GetPath())
	}
	ch := s.c.watch(req.GetPath())
	defer s.c.unwatch(ch)
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case r, ok := <-ch:
			if !ok {
				return status.Error(codes.ResourceExhausted, "watcher fell behind and was cut off; watch again")
			}
			if err := stream.Send(r); err != nil {
				return err
			}
		}
	}
}
