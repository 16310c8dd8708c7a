package collector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	lru "github.com/hashicorp/golang-lru/v2"
	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/store"
	"github.com/owl-latency/owl/internal/synopsis/colate"
)

// colates keeps the probes' COLATE vectors and answers the queries over
// them. Safe for concurrent use (the store and the cache are).
type colates struct {
	cfg   Config
	store *store.Store
	m     *metrics
	now   func() time.Time
	pairs *lru.Cache[pairKey, *colate.PairStats] // statistics of pairs of vectors, kept between queries
}

func newColates(cfg Config, st *store.Store, m *metrics, now func() time.Time) *colates {
	pairs, _ := lru.New[pairKey, *colate.PairStats](pairStatsCache) // size > 0: no error
	return &colates{cfg: cfg, store: st, m: m, now: now, pairs: pairs}
}

// packetCountSource names where GetFlowLatencyHistoric's p_f comes from.
const packetCountSource = "probe flow table: exact per-vector packet counts of every flow"

// put checks and stores a probe's COLATE vector.
func (c *colates) put(probe string, v *owlv1.ColateVector) error {
	if !c.cfg.Params.Colate.Enabled {
		c.m.rejected.WithLabelValues("colate_off").Inc()
		return &rejection{"the collector does not take COLATE vectors (params.colate.enabled is false)"}
	}
	cfg := c.cfg.Params.ColateConfig()
	vec, err := colate.Unmarshal(v.GetVector(), cfg)
	if err == nil {
		err = vec.Check()
	}
	if err != nil {
		c.m.rejected.WithLabelValues("colate_malformed").Inc()
		return &rejection{fmt.Sprintf("COLATE vector of epoch %d: %v", v.GetEpoch(), err)}
	}
	if start := c.cfg.Params.Epoch.StartNS(v.GetEpoch()); vec.StartNS() != start {
		c.m.rejected.WithLabelValues("colate_malformed").Inc()
		return &rejection{fmt.Sprintf("COLATE vector of epoch %d starts at %d, the epoch at %d", v.GetEpoch(), vec.StartNS(), start)}
	}
	kept := &owlv1.ColateVector{Epoch: v.GetEpoch(), FirstUnixNs: v.GetFirstUnixNs(), LastUnixNs: v.GetLastUnixNs(),
		Packets: vec.Packets(), Vector: v.GetVector(), Clock: v.GetClock()}
	minEpoch := int64(math.MinInt64)
	if r := c.cfg.Colate.Retention; r > 0 {
		minEpoch, _ = c.cfg.Params.Epoch.Of(c.now().Add(-r).UnixNano())
	}
	pruned, err := c.store.PutColate(probe, kept, c.cfg.Colate.MaxBytes, minEpoch)
	if err != nil {
		return fmt.Errorf("storing COLATE vector: %w", err)
	}
	c.m.colateVectors.WithLabelValues(probe).Inc()
	c.m.colatePackets.WithLabelValues(probe).Add(float64(vec.Packets()))
	c.m.colateBytesIn.WithLabelValues(probe).Add(float64(len(v.GetVector())))
	c.m.colatePruned.Add(float64(pruned))
	c.m.colateStored.Set(float64(c.store.ColateBytes()))
	if vec.Overflowed() {
		c.m.colateOverflow.WithLabelValues(probe).Inc()
	}
	if vec.FlowsFull() {
		c.m.colateFullTables.WithLabelValues(probe).Inc()
	}
	return nil
}

// pairKey names two probes' vectors of one epoch.
type pairKey struct {
	up, down string
	epoch    int64
}

// pairStatsCache is how many pairs' statistics are kept between queries
// (about 50 bytes each).
const pairStatsCache = 1 << 18

// pairStats returns the statistics of two stored vectors, computed once
// (reading both whole) and then kept: the next flow asked for over the
// same range reads only its own counters.
func (c *colates) pairStats(up, down string, epoch int64, s, r *colate.Vector) *colate.PairStats {
	k := pairKey{up, down, epoch}
	if st, ok := c.pairs.Get(k); ok {
		return st
	}
	st := colate.NewPairStats(s, r)
	c.pairs.Add(k, st)
	return st
}

// historic is one GetFlowLatencyHistoric query on its way.
type historic struct {
	req      *owlv1.GetFlowLatencyHistoricRequest
	fh       uint64 // the flow's hash
	from, to int64  // epochs
	q        *colate.Query
	out      *owlv1.GetFlowLatencyHistoricResponse
	// What the vectors that entered the estimate hold.
	storedBits, storedPackets float64
	first, last               int64 // ns
}

// historic answers GetFlowLatencyHistoric from the stored
// vectors of the two points, one epoch's pair at a time.
func (c *colates) historic(ctx context.Context, req *owlv1.GetFlowLatencyHistoricRequest) (*owlv1.GetFlowLatencyHistoricResponse, error) {
	h, err := c.newHistoric(req)
	if err != nil {
		return nil, err
	}
	err = c.store.ColatePairs(req.GetUpstream(), req.GetDownstream(), h.from, h.to, func(e int64, va, vb *owlv1.ColateVector) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		return true, c.addHistoricPair(h, e, va, vb)
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Internal, "reading COLATE vectors: %v", err)
	}
	return c.finishHistoric(h)
}

// newHistoric checks a request and fills in its defaults.
func (c *colates) newHistoric(req *owlv1.GetFlowLatencyHistoricRequest) (*historic, error) {
	if !c.cfg.Params.Colate.Enabled {
		return nil, status.Error(codes.FailedPrecondition, "COLATE is off: set params.colate.enabled (and -colate on the probes)")
	}
	if req.GetUpstream() == "" || req.GetDownstream() == "" || req.GetUpstream() == req.GetDownstream() {
		return nil, status.Error(codes.InvalidArgument, "upstream and downstream must name two different probes")
	}
	key, err := netpath.FlowFromProto(req.GetFlow())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "flow: %v", err)
	}
	gamma := cmp.Or(int(req.GetGamma()), c.cfg.Colate.Gamma)
	if gamma > 1_000_000 {
		return nil, status.Errorf(codes.InvalidArgument, "gamma %d exceeds 1000000", gamma)
	}
	beta := cmp.Or(req.GetBeta(), c.cfg.Colate.Beta)
	if beta < 0 || beta > 1 {
		return nil, status.Errorf(codes.InvalidArgument, "beta %v out of range (0, 1]", beta)
	}
	h := &historic{req: req, fh: key.Hash(c.cfg.Params.LDS.Seed),
		out: &owlv1.GetFlowLatencyHistoricResponse{Beta: beta, PacketCountSource: packetCountSource, Estimator: "paper"}}
	if h.from, h.to, err = epochRange(c.cfg.Params.Epoch, req.GetFrom(), req.GetTo()); err != nil {
		return nil, err
	}
	h.q = colate.NewQuery(h.fh, gamma, rand.New(rand.NewPCG(h.fh, 1)))
	switch req.GetEstimator() {
	case "", "robust":
		h.q.Robust()
		h.out.Estimator = "robust"
	case "paper":
	default:
		return nil, status.Errorf(codes.InvalidArgument, "estimator %q: want robust or paper", req.GetEstimator())
	}
	return h, nil
}

// addHistoricPair adds one epoch's vectors of the two points (either may
// be missing) to the query.
func (c *colates) addHistoricPair(h *historic, e int64, va, vb *owlv1.ColateVector) error {
	cfg := c.cfg.Params.ColateConfig()
	var s, r *colate.Vector
	var err error
	if va != nil {
		if s, err = colate.Unmarshal(va.GetVector(), cfg); err != nil {
			return fmt.Errorf("%s epoch %d: %w", h.req.GetUpstream(), e, err)
		}
	}
	if vb != nil {
		if r, err = colate.Unmarshal(vb.GetVector(), cfg); err != nil {
			return fmt.Errorf("%s epoch %d: %w", h.req.GetDownstream(), e, err)
		}
	}
	before := h.q.Vectors()
	var st *colate.PairStats
	if s != nil && r != nil && s.FlowPackets(h.fh) > 0 && r.FlowPackets(h.fh) > 0 {
		st = c.pairStats(h.req.GetUpstream(), h.req.GetDownstream(), e, s, r)
	}
	if err := h.q.AddPair(s, r, st); err != nil {
		return err
	}
	if h.q.Vectors() > before {
		if h.first == 0 {
			h.first = c.cfg.Params.Epoch.StartNS(e)
		}
		h.last = c.cfg.Params.Epoch.EndNS(e)
		for _, v := range []*owlv1.ColateVector{va, vb} {
			if v != nil {
				h.storedBits += 8 * float64(len(v.GetVector()))
				h.storedPackets += float64(v.GetPackets())
			}
		}
	}
	return nil
}

// finishHistoric estimates the flow from what the query gathered.
func (c *colates) finishHistoric(h *historic) (*owlv1.GetFlowLatencyHistoricResponse, error) {
	out := h.out
	est, err := h.q.Estimate()
	out.Packets, out.DownstreamPackets, out.Vectors = est.Packets, est.DownPackets, uint32(est.Vectors)
	out.LeftOutCounters, out.UnpairedEpochs = uint32(est.LeftOut), uint32(est.Unpaired)
	if h.storedPackets > 0 {
		out.BitsPerPacket = h.storedBits / h.storedPackets
	}
	if h.first != 0 {
		out.First, out.Last = timestamppb.New(time.Unix(0, h.first)), timestamppb.New(time.Unix(0, h.last))
	}
	if errors.Is(err, colate.ErrNoPackets) {
		out.Note = fmt.Sprintf("the flow has no packets in the stored vectors of %s and %s in this range", h.req.GetUpstream(), h.req.GetDownstream())
		return out, nil
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	out.MeanNs, out.StddevNs, out.StddevEpochs, out.MeanSquareNs2 = est.MeanNS, est.StddevNS, uint32(est.StddevEpochs), est.SecondMomentNS2
	if est.Heavy {
		out.Estimator = "paper"
	}
	out.Alpha = colate.Reliability(est.MeanNS, est.MeanErrNS, out.Beta)
	out.HalfWidthNs = colate.HalfWidth(est.MeanErrNS, c.cfg.Colate.Alpha)
	out.Note = strings.Join(historicNotes(est), "; ")
	return out, nil
}

// historicNotes says what a reader of an estimate should know.
func historicNotes(est colate.FlowEstimate) []string {
	var notes []string
	if est.Heavy {
		notes = append(notes, "the flow's counters each hold over half an epoch of delay: the paper's estimator was used")
	}
	if est.Packets != est.DownPackets {
		notes = append(notes, fmt.Sprintf("%d packets upstream, %d downstream: lost packets (or a range that cuts the flow) bias the mean", est.Packets, est.DownPackets))
	}
	if est.Overflow {
		notes = append(notes, "a vector's counter outgrew its bits: raise colate bits")
	}
	if est.FullTables > 0 {
		notes = append(notes, fmt.Sprintf("%d vectors had a full flow table (over a million flows in an epoch): flows first seen after it filled have no count there and their estimate is off", est.FullTables))
	}
	if est.StddevEpochs == 0 {
		notes = append(notes, "no epoch with the same packet count at both points: no standard deviation")
	}
	return notes
}

// list answers ListColateVectors.
func (c *colates) list(req *owlv1.ListColateVectorsRequest) (*owlv1.ListColateVectorsResponse, error) {
	if req.GetProbeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "probe_id is required")
	}
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = 100
	}
	from, to, err := epochRange(c.cfg.Params.Epoch, req.GetFrom(), req.GetTo())
	if err != nil {
		return nil, err
	}
	cfg := c.cfg.Params.ColateConfig()
	out := &owlv1.ListColateVectorsResponse{StoredBytes: uint64(c.store.ColateBytes())}
	err = c.store.ColateVectors(req.GetProbeId(), from, to, func(e int64, v *owlv1.ColateVector, size int) bool {
		info := &owlv1.ColateVectorInfo{ProbeId: req.GetProbeId(), Epoch: e, Start: timestamppb.New(time.Unix(0, c.cfg.Params.Epoch.StartNS(e))),
			Packets: v.GetPackets(), Bytes: uint64(size)}
		if v.GetPackets() > 0 {
			info.BitsPerPacket = 8 * float64(len(v.GetVector())) / float64(v.GetPackets())
		}
		if vec, err := colate.Unmarshal(v.GetVector(), cfg); err == nil {
			info.Flows, info.Overflowed = uint32(vec.Flows()), vec.Overflowed()
		}
		out.Vectors = append(out.Vectors, info)
		if len(out.Vectors) > limit {
			out.Vectors = out.Vectors[1:]
		}
		return true
	})
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading COLATE vectors: %v", err)
	}
	return out, nil
}
