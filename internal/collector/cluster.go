package collector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/cluster"
	"github.com/owl-latency/owl/internal/codec"
)

// In a cluster every path has one owner, the collector that pairs its
// reports, stores its results and keeps its per-flow state; the COLATE
// vectors of all probes have one owner too (a query needs the vectors of
// two probes side by side). The member ranked next for a path keeps a
// copy of its state (replication.go). Probes learn the owners from the
// path configuration and send each report there; a collector refuses,
// without acknowledging, a report it does not own, naming the owner.
// Queries may go to any collector: results are gathered from every member
// (so that results stored by a path's earlier owners and its replica are
// found too), per-flow and COLATE queries go to the current owner.

// colateKey is the cluster key whose owner stores the COLATE vectors (no
// path is named so: a path name has no space).
const colateKey = "colate vectors"

// forwardedKey marks a query one collector passes to another, which then
// answers from its own state only.
const forwardedKey = "owl-forwarded-by"

// notOwner says that another collector of the cluster owns a report's
// path (or the COLATE vectors).
type notOwner struct {
	key   string
	owner cluster.Member
}

func (e *notOwner) Error() string {
	return fmt.Sprintf("%q is owned by collector %s (%s) in the cluster", e.key, e.owner.Name, e.owner.GRPC)
}

// owner is key's owner, and whether it is this collector (always, without
// a cluster).
func (c *Collector) owner(key string) (cluster.Member, bool) {
	if c.cl == nil {
		return cluster.Member{}, true
	}
	m := c.cl.Owner(key)
	return m, m.Name == "" || m.Self
}

// startCluster joins the cluster and, once joined and on every change of
// its members, takes the sizes of paths it came to own from the members
// that hold them (takeOverSizes), sends each connected probe its path
// configuration again (the owners may have moved), takes the copies of
// lone sides of the paths it owns now (promote), and asks for a round of
// catch-up.
func (c *Collector) startCluster(ctx context.Context, grpcAddr string) error {
	adv := c.cfg.Cluster.GRPCAdvertise
	if adv == "" {
		host, _, err := net.SplitHostPort(grpcAddr)
		if err != nil || host == "" || net.ParseIP(host).IsUnspecified() {
			return fmt.Errorf("cluster: gRPC listens on %q, which names no host the others can reach: set cluster.grpc_advertise", c.cfg.GRPCListen)
		}
		adv = grpcAddr
	}
	cl, err := cluster.Start(c.cfg.Cluster, adv, c.log)
	if err != nil {
		return err
	}
	c.cl = cl
	c.takeOverSizes(ctx)
	go func() {
		c.promote()
		c.requestCatchUp()
		for {
			select {
			case <-ctx.Done():
				return
			case <-cl.Changed():
				c.m.clusterChanges.Inc()
				c.pathsGen.Add(1)
				c.takeOverSizes(ctx)
				c.resendPaths()
				c.peers.prune(cl.Members())
				c.askAgain()
				c.promote()
				c.requestCatchUp()
			}
		}
	}()
	return nil
}

// resendPaths sends every open probe stream its path configuration.
func (c *Collector) resendPaths() {
	for _, s := range c.probes.allSessions() {
		_ = c.sendPaths(s)
	}
}

// members are the cluster's live members; without a cluster, this
// collector alone.
func (c *Collector) members() []cluster.Member {
	if c.cl == nil {
		return []cluster.Member{{Name: "self", Self: true}}
	}
	return c.cl.Members()
}

// forwarded says whether a query came from another collector.
func forwarded(ctx context.Context) bool {
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(forwardedKey)) > 0
}

// peerMaxBackoff bounds the wait between attempts to reconnect to a
// member.
const peerMaxBackoff = 2 * time.Second

// peerConns are the gRPC connections to the other collectors.
type peerConns struct {
	maxMessageBytes int
	creds           func(addr string) credentials.TransportCredentials

	connsMu sync.Mutex // guards conns
	conns   map[string]*grpc.ClientConn
}

// peer is a query client for the collector at addr, and a context that
// marks the call as forwarded.
func (c *Collector) peer(ctx context.Context, addr string) (owlv1.QueryServiceClient, context.Context, error) {
	conn, err := c.peers.get(addr)
	if err != nil {
		return nil, nil, err
	}
	return owlv1.NewQueryServiceClient(conn), metadata.AppendToOutgoingContext(ctx, forwardedKey, c.cl.Name()), nil
}

// get is the connection to the collector at addr, made once.
func (p *peerConns) get(addr string) (*grpc.ClientConn, error) {
	p.connsMu.Lock()
	defer p.connsMu.Unlock()
	if conn := p.conns[addr]; conn != nil {
		return conn, nil
	}
	// Members restart in seconds: reconnect within peerMaxBackoff, not
	// gRPC's default of up to two minutes.
	bo := backoff.DefaultConfig
	bo.MaxDelay = peerMaxBackoff
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(p.creds(addr)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: peerMaxBackoff}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(p.maxMessageBytes), grpc.ForceCodecV2(codec.New())),
		experimental.WithBufferPool(codec.Buffers))
	if err != nil {
		return nil, fmt.Errorf("collector %s: %w", addr, err)
	}
	if p.conns == nil {
		p.conns = map[string]*grpc.ClientConn{}
	}
	p.conns[addr] = conn
	return conn, nil
}

// prune closes the connections to collectors no longer members.
func (p *peerConns) prune(members []cluster.Member) {
	live := map[string]bool{}
	for _, m := range members {
		live[m.GRPC] = true
	}
	p.connsMu.Lock()
	defer p.connsMu.Unlock()
	for addr, conn := range p.conns {
		if !live[addr] {
			conn.Close()
			delete(p.conns, addr)
		}
	}
}

// close closes every connection.
func (p *peerConns) close() {
	p.connsMu.Lock()
	defer p.connsMu.Unlock()
	for _, conn := range p.conns {
		conn.Close()
	}
	p.conns = nil
}

// peerTimeout bounds a query passed to another collector when the caller
// set no deadline.
const peerTimeout = 30 * time.Second

// fromEach runs ask on every other live member (in parallel) and returns
// the answers, and a note naming the members that did not answer.
func fromEach[T any](ctx context.Context, c *Collector, ask func(context.Context, owlv1.QueryServiceClient) (T, error)) ([]T, string) {
	if c.cl == nil || forwarded(ctx) {
		return nil, ""
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, peerTimeout)
		defer cancel()
	}
	var (
		mu     sync.Mutex
		out    []T
		failed []string
		wg     sync.WaitGroup
	)
	for _, m := range c.cl.Members() {
		if m.Self {
			continue
		}
		wg.Go(func() {
			q, qctx, err := c.peer(ctx, m.GRPC)
			var r T
			if err == nil {
				r, err = ask(qctx, q)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s (%s): %v", m.Name, m.GRPC, err))
				return
			}
			out = append(out, r)
		})
	}
	wg.Wait()
	note := ""
	if len(failed) > 0 {
		slices.Sort(failed)
		note = fmt.Sprintf("%d collector(s) of the cluster did not answer, their results are missing: %v", len(failed), failed)
		c.log.Warn("cluster query incomplete", "failed", failed)
	}
	return out, note
}

// mergeResults joins per-epoch results of a path from several collectors:
// one per epoch, a complete one (both sides paired) before one missing a
// side, then the one whose boundary matching went furthest, then the
// newest computed; the last limit epochs.
func mergeResults(lists [][]*owlv1.PathStats, limit int) []*owlv1.PathStats {
	best := map[int64]*owlv1.PathStats{}
	for _, l := range lists {
		for _, r := range l {
			b := best[r.GetEpoch()]
			if b == nil || better(r, b) {
				best[r.GetEpoch()] = r
			}
		}
	}
	out := make([]*owlv1.PathStats, 0, len(best))
	for _, r := range best {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *owlv1.PathStats) int { return cmp.Compare(a.GetEpoch(), b.GetEpoch()) })
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out
}

// better says whether result a should be shown instead of b for the same
// epoch: the preferred one, else the later computed.
func better(a, b *owlv1.PathStats) bool {
	if preferred(a, b) || preferred(b, a) {
		return preferred(a, b)
	}
	return a.GetComputed().AsTime().After(b.GetComputed().AsTime())
}

// preferred says whether result a of an epoch stands over b: a complete
// result over one missing a side, then the estimate nearer to exact
// (estimatorRank), then the further boundary matching (newerResult). Two
// members can reconcile one epoch while its path changes owner, the
// second without the repairs the first used up: the exact one stays.
func preferred(a, b *owlv1.PathStats) bool {
	if ma, mb := missingSide(a), missingSide(b); ma != mb {
		return !ma
	}
	if ra, rb := estimatorRank(a), estimatorRank(b); ra != rb {
		return ra > rb
	}
	return newerResult(a, b)
}

// estimatorRank orders estimates by how near to exact they are: an RDA
// decoded and repaired, one partly decoded, one unrepaired, the LDA's;
// 0 for none.
func estimatorRank(r *owlv1.PathStats) int {
	switch r.GetEstimator() {
	case "rda":
		return 4
	case "rda-partial":
		return 3
	case "rda-unrepaired":
		return 2
	case "lda":
		return 1
	}
	return 0
}

func missingSide(r *owlv1.PathStats) bool {
	return r.GetStatus() == owlv1.ResultStatus_RESULT_STATUS_MISSING_UPSTREAM || r.GetStatus() == owlv1.ResultStatus_RESULT_STATUS_MISSING_DOWNSTREAM
}

// mergeProbes joins what several collectors know of the probes: a probe is
// connected if it is to any of them, its reports are the sum, the rest is
// from the collector that heard from it last.
func mergeProbes(lists [][]*owlv1.ProbeInfo) []*owlv1.ProbeInfo {
	by := map[string]*owlv1.ProbeInfo{}
	for _, l := range lists {
		for _, p := range l {
			b := by[p.GetProbeId()]
			if b == nil {
				by[p.GetProbeId()] = p
				continue
			}
			m := b
			if p.GetLastSeen().AsTime().After(b.GetLastSeen().AsTime()) {
				m = p
			}
			merged := &owlv1.ProbeInfo{ProbeId: m.GetProbeId(), Connected: b.GetConnected() || p.GetConnected(), Version: m.GetVersion(),
				Address: m.GetAddress(), LastSeen: m.GetLastSeen(), Error: cmp.Or(m.GetError(), b.GetError(), p.GetError()), Clock: m.GetClock(),
				Reports: b.GetReports() + p.GetReports(), Refused: b.GetRefused() + p.GetRefused(), Identity: cmp.Or(m.GetIdentity(), b.GetIdentity(), p.GetIdentity())}
			by[p.GetProbeId()] = merged
		}
	}
	out := make([]*owlv1.ProbeInfo, 0, len(by))
	for _, p := range by {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *owlv1.ProbeInfo) int { return cmp.Compare(a.GetProbeId(), b.GetProbeId()) })
	return out
}

// collectorInfos lists the members and what each owns.
func (c *Collector) collectorInfos() []*owlv1.CollectorInfo {
	ms := c.members()
	var out []*owlv1.CollectorInfo
	for _, m := range ms {
		ci := &owlv1.CollectorInfo{Name: m.Name, GrpcAddress: m.GRPC, GossipAddress: m.Gossip, State: m.State, Self: m.Self}
		if c.cl == nil {
			ci.State = "alive"
		}
		for _, p := range c.pathList {
			if cluster.Owner(ms, p.Name).Name == m.Name {
				ci.Paths = append(ci.Paths, p.Name)
			}
		}
		ci.Colate = cluster.Owner(ms, colateKey).Name == m.Name
		out = append(out, ci)
	}
	return out
}

// handOver asks the other members for the missing side of a path's epoch
// that this collector owns: a side acknowledged by an earlier owner
// before the owners changed (a member joined, left, or came back). A side
// found is taken like a report; otherwise the next sweep writes the
// missing-side result.
func (c *Collector) handOver(ps *pathState, epoch int64, role owlv1.Role) {
	defer func() {
		ps.mu.Lock()
		if pr := ps.pending[epoch]; pr != nil {
			pr.asking, pr.asked = false, true
		}
		ps.mu.Unlock()
	}()
	if _, self := c.owner(ps.path.Name); !self {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, m := range c.cl.Members() {
		if m.Self {
			continue
		}
		conn, err := c.peers.get(m.GRPC)
		var r *owlv1.TakePendingResponse
		if err == nil {
			r, err = owlv1.NewClusterServiceClient(conn).TakePending(ctx, &owlv1.TakePendingRequest{Path: ps.path.Name, Epoch: epoch, Role: role})
		}
		if err != nil {
			c.log.Warn("asking a member for a missing side", "member", m.Name, "path", ps.path.Name, "epoch", epoch, "err", err)
			continue
		}
		taken, err := c.takeHandedOver(ps, epoch, role, r)
		if err != nil {
			c.log.Error("taking a side handed over", "member", m.Name, "path", ps.path.Name, "epoch", epoch, "err", err)
			continue
		}
		if !taken {
			continue
		}
		c.m.handedOver.Inc()
		c.log.Info("took a side from an earlier owner", "member", m.Name, "path", ps.path.Name, "epoch", epoch, "role", roleName(role))
		return
	}
}

// errNotAsked says a member handed over another side than the one asked
// for.
var errNotAsked = errors.New("a member handed over another side than the one asked for")

// takeHandedOver takes the side another member handed over when asked
// for the path's epoch and role: like a report of its probe, once it is
// checked to be that side. It reports false when the member had none (no
// probe named).
func (c *Collector) takeHandedOver(ps *pathState, epoch int64, role owlv1.Role, r *owlv1.TakePendingResponse) (bool, error) {
	if r.GetProbe() == "" {
		return false, nil
	}
	rep, want := r.GetReport(), ps.path.Upstream
	if role == owlv1.Role_ROLE_DOWNSTREAM {
		want = ps.path.Downstream
	}
	if rep.GetPath() != ps.path.Name || rep.GetEpoch() != epoch || rep.GetRole() != role || r.GetProbe() != want {
		return false, fmt.Errorf("%w: asked for the %s side (%s) of %q epoch %d, got %q's %v of %q epoch %d",
			errNotAsked, roleName(role), want, ps.path.Name, epoch, r.GetProbe(), rep.GetRole(), rep.GetPath(), rep.GetEpoch())
	}
	if err := c.report(r.GetProbe(), rep); err != nil {
		return false, err
	}
	return true, nil
}

// askAgain makes the owner of each path ask the members again for the
// missing sides of its lone epochs (those still retained): one may have
// come back.
func (c *Collector) askAgain() {
	for _, ps := range c.paths {
		if _, self := c.owner(ps.path.Name); !self {
			continue
		}
		ps.mu.Lock()
		for _, pr := range ps.pending {
			pr.asked = false
		}
		ps.mu.Unlock()
	}
}

// clusterService serves ClusterService.
type clusterService struct {
	owlv1.UnimplementedClusterServiceServer
	c *Collector
}

func (s clusterService) TakePending(_ context.Context, req *owlv1.TakePendingRequest) (*owlv1.TakePendingResponse, error) {
	if r := req.GetRole(); r != owlv1.Role_ROLE_UPSTREAM && r != owlv1.Role_ROLE_DOWNSTREAM {
		return nil, status.Errorf(codes.InvalidArgument, "TakePending of path %q epoch %d names no side (role %v)", req.GetPath(), req.GetEpoch(), r)
	}
	r, err := s.c.takePending(req.GetPath(), req.GetEpoch(), req.GetRole())
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return r, nil
}
