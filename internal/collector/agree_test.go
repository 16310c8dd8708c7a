package collector

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/reconcile"
	"github.com/owl-latency/owl/internal/synopsis/exact"
	"github.com/owl-latency/owl/internal/synopsis/lda"
)

// playCaches plays a probe on a stream whose caches are reconcile.Local
// sides, one per epoch: it answers fetches, repeated fetches and rebuilds
// the way the offline evaluator's Repairs do, and hands on the
// acknowledgements.
func playCaches(st owlv1.ProbeService_ConnectClient, side reconcile.Side, caches map[int64]*reconcile.Local, acks chan<- *owlv1.Ack) {
	defer close(acks)
	ctx := context.Background()
	for {
		m, err := st.Recv()
		if err != nil {
			return
		}
		if caches == nil { // a probe that has nothing to answer with
			switch m := m.Msg.(type) {
			case *owlv1.CollectorMessage_Ack:
				acks <- m.Ack
			case *owlv1.CollectorMessage_Fetch, *owlv1.CollectorMessage_Rebuild:
				panic(fmt.Sprintf("the %s probe, which sent lists, was asked %T", side, m))
			}
			continue
		}
		switch m := m.Msg.(type) {
		case *owlv1.CollectorMessage_Ack:
			acks <- m.Ack
		case *owlv1.CollectorMessage_Fetch:
			f := m.Fetch
			rep := &owlv1.FetchReply{RequestId: f.GetRequestId()}
			var got map[uint64][]reconcile.Entry
			if f.GetRepeated() {
				got, _ = caches[f.GetEpoch()].Repeated(ctx, side)
			} else {
				got, _ = caches[f.GetEpoch()].Fetch(ctx, side, f.GetPacketIds())
			}
			for id, es := range got {
				for _, e := range es {
					rep.PacketIds = append(rep.PacketIds, id)
					rep.OffsetsNs = append(rep.OffsetsNs, e.OffsetNS)
				}
			}
			_ = st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_FetchReply{FetchReply: rep}})
		case *owlv1.CollectorMessage_Rebuild:
			r := m.Rebuild
			rep := &owlv1.RebuildReply{RequestId: r.GetRequestId()}
			if x, err := caches[r.GetEpoch()].Rebuild(ctx, side, int(r.GetBuckets())); err != nil {
				rep.Error = err.Error()
			} else {
				rep.Rda, _ = x.MarshalBinary()
			}
			_ = st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_RebuildReply{RebuildReply: rep}})
		}
	}
}

// agreeEpoch makes one epoch's traffic: common packets with delays, lost
// ones, ones that crossed in from the epoch before (seen downstream only)
// and duplicated ones (a second copy downstream).
func agreeEpoch(rng *rand.Rand, common, lost, crossed, dups int) *reconcile.Local {
	l := &reconcile.Local{}
	add := func(s reconcile.Side, id uint64, off int64) {
		l.Packets[s] = append(l.Packets[s], reconcile.Packet{ID: id, Entry: reconcile.Entry{OffsetNS: off}})
	}
	for i := range common + lost {
		id, at := rng.Uint64(), rng.Int64N(900_000_000)
		add(reconcile.Upstream, id, at)
		if i >= common {
			continue
		}
		delay := 20_000 + rng.Int64N(80_000)
		add(reconcile.Downstream, id, at+delay)
		if i < dups {
			add(reconcile.Downstream, id, at+delay+5_000)
		}
	}
	for range crossed {
		add(reconcile.Downstream, rng.Uint64(), rng.Int64N(60_000))
	}
	return l
}

// TestServiceAgreesWithLocal runs epochs through the collector, whose
// repairs go to probes over gRPC, and through reconcile.Epoch with
// reconcile.Local, as cmd/evaluate does: both run the one policy, so
// their results must be the same to the last bit. The epochs need
// rebuilds (a set difference larger than the RDAs), duplicate removal and
// repairs on both sides; they are far apart, so that no boundary matching
// changes the service's results.
func TestServiceAgreesWithLocal(t *testing.T) {
	// Each side sends its synopses or, in their place, its exact list:
	// the collector rebuilds the synopses from a list and answers that
	// side's repairs from it, so every mode gives the same results.
	for _, mode := range []struct {
		name   string
		listed [2]bool
	}{{"synopses", [2]bool{}}, {"lists", [2]bool{true, true}}, {"upstream list", [2]bool{true, false}}, {"downstream list", [2]bool{false, true}}} {
		t.Run(mode.name, func(t *testing.T) { agreeRun(t, mode.listed) })
	}
}

// agreeRun is TestServiceAgreesWithLocal with the sides listed[i] sending
// exact lists.
func agreeRun(t *testing.T, listed [2]bool) {
	cfg := testConfig(t)
	cfg.Params.RDA.Buckets = 64
	cfg.RDA.MinBuckets, cfg.RDA.MaxBuckets = 64, 1<<14
	c := newTest(t, cfg)
	conn := serve(t, c)
	rng := rand.New(rand.NewPCG(11, 12))
	shapes := map[int64][4]int{ // common, lost, crossed, duplicated
		10: {2000, 20, 10, 0},
		20: {2000, 150, 120, 0}, // needs a rebuild
		30: {3000, 40, 0, 6},    // duplicates stall peeling
		40: {500, 0, 0, 0},
		50: {1000, 600, 500, 30},
	}
	caches := map[int64]*reconcile.Local{}
	for e, s := range shapes {
		caches[e] = agreeEpoch(rng, s[0], s[1], s[2], s[3])
		caches[e].RDA = cfg.Params.RDA
	}
	a, b := probeStream(t, conn, "a", cfg.Params), probeStream(t, conn, "b", cfg.Params)
	aAcks, bAcks := make(chan *owlv1.Ack, 64), make(chan *owlv1.Ack, 64)
	for i, st := range []owlv1.ProbeService_ConnectClient{a, b} {
		play := caches
		if listed[i] {
			play = nil // a listed side's probe must not be asked
		}
		go playCaches(st, reconcile.Side(i), play, []chan *owlv1.Ack{aAcks, bAcks}[i])
	}
	empty, _ := lda.New(cfg.Params.LDA)
	lb, _ := empty.MarshalBinary()
	for e, l := range caches {
		for i, st := range []owlv1.ProbeService_ConnectClient{a, b} {
			rep := report("p", e, []owlv1.Role{owlv1.Role_ROLE_UPSTREAM, owlv1.Role_ROLE_DOWNSTREAM}[i], lb)
			if listed[i] {
				rep.Lda, rep.List = nil, listOf(l.Packets[i])
			} else {
				r, _ := l.Rebuild(context.Background(), reconcile.Side(i), cfg.Params.RDA.Buckets)
				rep.Rda, _ = r.MarshalBinary()
			}
			if err := st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: rep}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for e, l := range caches {
		got := waitResult(t, c, "p", e, func(r *owlv1.PathStats) bool { return strings.HasPrefix(r.GetEstimator(), "rda") })
		want := localResult(t, cfg, e, l)
		// Both sides listed, the collector sizes their RDAs from the
		// path's recent set differences, not at the fixed size the test's
		// probes use: the rebuilds it needs differ. And the two lists
		// joined give every delay: the standard deviation is exact, not
		// RDA's estimate.
		sized := listed == [2]bool{true, true}
		if sized {
			_, std := meanStddev(trueDelays(l))
			if !got.GetStddevExact() || math.Abs(got.GetStddevNs()-std) > 1e-9*std {
				t.Errorf("epoch %d: standard deviation %v (exact %v), truth %v", e, got.GetStddevNs(), got.GetStddevExact(), std)
			}
			want.StddevNs = got.GetStddevNs()
		}
		if got.GetEstimator() != want.GetEstimator() || got.GetMeanNs() != want.GetMeanNs() || got.GetStddevNs() != want.GetStddevNs() ||
			got.GetSamples() != want.GetSamples() || got.GetLost() != want.GetLost() || got.GetReordered() != want.GetReordered() ||
			got.GetDuplicates() != want.GetDuplicates() || !sized && (got.GetRebuilds() != want.GetRebuilds() || got.GetRdaBuckets() != want.GetRdaBuckets()) {
			t.Errorf("epoch %d: service %s mean %v std %v n %d lost %v reordered %d dups %d rebuilds %d buckets %d\n"+
				"                 local %s mean %v std %v n %d lost %v reordered %d dups %d rebuilds %d buckets %d", e,
				got.GetEstimator(), got.GetMeanNs(), got.GetStddevNs(), got.GetSamples(), got.GetLost(), got.GetReordered(), got.GetDuplicates(), got.GetRebuilds(), got.GetRdaBuckets(),
				want.GetEstimator(), want.GetMeanNs(), want.GetStddevNs(), want.GetSamples(), want.GetLost(), want.GetReordered(), want.GetDuplicates(), want.GetRebuilds(), want.GetRdaBuckets())
		}
		if s := shapes[e]; e != 50 && got.GetLost() != float64(s[1]) {
			t.Errorf("epoch %d: lost %v, truth %d", e, got.GetLost(), s[1])
		}
	}
	var rebuilds, dups uint32
	for e := range caches {
		r, _ := c.store.Result("p", e)
		rebuilds += r.GetRebuilds()
		dups += uint32(r.GetDuplicates())
	}
	if rebuilds == 0 || dups == 0 {
		t.Errorf("%d rebuilds, %d duplicates: the test does not exercise late binding and duplicate removal", rebuilds, dups)
	}
}

// trueDelays are the delays of an epoch's delivered packets (the first
// copy of each), sorted.
func trueDelays(l *reconcile.Local) []int64 {
	sent := map[uint64]int64{}
	for _, p := range l.Packets[reconcile.Upstream] {
		sent[p.ID] = p.OffsetNS
	}
	first := map[uint64]int64{}
	for _, p := range l.Packets[reconcile.Downstream] {
		if at, ok := sent[p.ID]; ok {
			if d, seen := first[p.ID]; !seen || p.OffsetNS-at < d {
				first[p.ID] = p.OffsetNS - at
			}
		}
	}
	out := make([]int64, 0, len(first))
	for _, d := range first {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// listOf is the exact list of a side's packets, each its own flow of
// weight 1.
func listOf(ps []reconcile.Packet) []byte {
	l := &exact.List{}
	for _, p := range ps {
		l.Packets = append(l.Packets, exact.Packet{ID: p.ID, OffsetNS: p.OffsetNS, Flow: p.ID, Weight: 1})
	}
	b, _ := l.MarshalBinary()
	return b
}

// localResult is what reconcile.Epoch with reconcile.Local makes of an
// epoch, in the result's fields.
func localResult(t *testing.T, cfg Config, e int64, l *reconcile.Local) *owlv1.PathStats {
	t.Helper()
	ctx := context.Background()
	up, _ := l.Rebuild(ctx, reconcile.Upstream, cfg.Params.RDA.Buckets)
	down, _ := l.Rebuild(ctx, reconcile.Downstream, cfg.Params.RDA.Buckets)
	out, err := reconcile.Epoch(ctx, reconcile.Input{Up: up, Down: down, StartNS: cfg.Params.Epoch.StartNS(e)}, l, cfg.limits())
	if err != nil {
		t.Fatalf("epoch %d offline: %v", e, err)
	}
	res := &owlv1.PathStats{Estimator: "rda", MeanNs: out.Estimate.MeanNS, StddevNs: out.Estimate.StddevNS, Samples: uint64(out.Estimate.Count),
		Lost: float64(out.Lost), Reordered: out.Reordered, Duplicates: out.Duplicates, Rebuilds: uint32(out.Rebuilds), RdaBuckets: uint32(out.Buckets)}
	if !out.Diff.Complete() {
		res.Estimator = "rda-partial"
	}
	return res
}

// TestBlockedStreamDoesNotDelayOthers: probe c stops reading its stream
// while the collector has messages for it (answers to a flood of reports
// it sends, and the release of its path's lone epoch). Path p, between
// probes a and b, must get its results as if c were not there: its lone
// epoch times out on time, and its paired epoch is reconciled.
func TestBlockedStreamDoesNotDelayOthers(t *testing.T) {
	cfg := testConfig(t)
	cfg.PairTimeout = 500 * time.Millisecond
	cfg.Paths = append(cfg.Paths, netpath.Path{Name: "q", Upstream: "c", Downstream: "d"})
	c := newTest(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.sweepLoop(ctx)
	conn := serve(t, c)

	// c: one lone epoch of q, then reports of an unknown path with a long
	// name, each answered with a rejection c never reads.
	st := probeStream(t, conn, "c", cfg.Params)
	up, down := ldaPair(t, cfg.Params.LDA, 200, 3000, 7)
	if err := st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: report("q", 1, owlv1.Role_ROLE_UPSTREAM, up)}}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 4000)
	go func() {
		for i := range 2 * outboxMin {
			if st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: report(long, int64(i), owlv1.Role_ROLE_UPSTREAM, up)}}) != nil {
				return
			}
		}
	}()
	time.Sleep(200 * time.Millisecond) // c's stream fills up

	// p: epoch 1 lone (b never sends it), epoch 2 complete.
	start := time.Now()
	if err := c.report("a", report("p", 1, owlv1.Role_ROLE_UPSTREAM, up)); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		probe string
		role  owlv1.Role
		l     []byte
	}{{"a", owlv1.Role_ROLE_UPSTREAM, up}, {"b", owlv1.Role_ROLE_DOWNSTREAM, down}} {
		if err := c.report(r.probe, report("p", 2, r.role, r.l)); err != nil {
			t.Fatal(err)
		}
	}
	if r := waitResult(t, c, "p", 2, anyResult); r.GetMeanNs() != 3000 {
		t.Errorf("epoch 2: %v", r)
	}
	waitResult(t, c, "p", 1, func(r *owlv1.PathStats) bool {
		return r.GetStatus() == owlv1.ResultStatus_RESULT_STATUS_MISSING_DOWNSTREAM
	})
	if took := time.Since(start); took > cfg.PairTimeout+2*time.Second {
		t.Errorf("path p's results took %v with c blocked (pair timeout %v)", took, cfg.PairTimeout)
	}
	waitResult(t, c, "q", 1, func(r *owlv1.PathStats) bool {
		return r.GetStatus() == owlv1.ResultStatus_RESULT_STATUS_MISSING_DOWNSTREAM
	})
}
