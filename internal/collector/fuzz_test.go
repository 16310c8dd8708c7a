package collector

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/reconcile"
	"github.com/owl-latency/owl/internal/store"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rda"
	"github.com/owl-latency/owl/internal/synopsis/synopsistest"
)

// The fuzz tests of what the collector takes from outside: probes'
// reports and repair answers, and what the other members of a cluster
// hand over. Every input must end in a clear error or be used, never in
// a panic (also not one the epoch worker recovers), and must leave the
// path working: a valid epoch reported next gets its exact result.

// fuzzConfig is testConfig with small synopses (a report of a few KiB
// fuzzes fast) and repairs that give up at once on a probe that is not
// connected (no probe is).
func fuzzConfig(tb testing.TB) Config {
	cfg := testConfig(tb)
	cfg.Params.LDA.Rows = 64
	cfg.Params.RDA.Buckets = 64
	cfg.Params.LDS = lds.Config{Rows: 2, Cols: 64, K: 2, RowSampleLog2: []uint8{1, 0}, Seed: cfg.Params.LDS.Seed}
	cfg.RDA = RDAConfig{MinBuckets: 16, MaxBuckets: 1024, MaxRebuilds: 2, RequestTimeout: 100 * time.Millisecond}
	cfg.PairTimeout = 2 * time.Millisecond
	return cfg
}

// panicLog is a slog.Handler that keeps the first error logged about a
// recovered panic: the epoch worker recovers a panic (reconcileSafely)
// and logs it, which a fuzz test must see as a failure.
type panicLog struct {
	mu    sync.Mutex
	first string
}

var _ slog.Handler = (*panicLog)(nil)

func (h *panicLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }

func (h *panicLog) Handle(_ context.Context, r slog.Record) error {
	s := r.Message
	r.Attrs(func(a slog.Attr) bool {
		s += " " + a.String()
		return true
	})
	if strings.Contains(s, "panic") {
		h.mu.Lock()
		if h.first == "" {
			h.first = s
		}
		h.mu.Unlock()
	}
	return nil
}

func (h *panicLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *panicLog) WithGroup(string) slog.Handler      { return h }

// take returns the first record of a panic, and forgets it.
func (h *panicLog) take() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.first
	h.first = ""
	return s
}

// fuzzRenew is how many inputs one collector of a fuzz worker takes
// before it is made anew: what hostile inputs leave behind (sides that
// wait forever, results, sketches) would slow the later ones.
const fuzzRenew = 128

// fuzzPathDelayNS and fuzzPathPackets shape the valid epochs.
const (
	fuzzPathDelayNS = 35_000
	fuzzPathPackets = 200
)

// fuzzTarget is the collector a fuzz worker feeds (made in the fuzz
// function's setup, so one per worker process), with its path "p" and
// the valid epochs that check that it still works.
type fuzzTarget struct {
	cfg     Config
	root    string // the collectors' data directories go here
	log     *panicLog
	reports [2]*owlv1.EpochReport // a valid epoch's two sides (epoch unset)
	// fresh is the next epoch to try for a valid pair.
	fresh int64
	// onStart, if set, runs on each new collector (a baseline to keep).
	onStart func(t testing.TB, c *Collector)

	c    *Collector
	uses int
	stop func()
}

func newFuzzTarget(f *testing.F, cfg Config) *fuzzTarget {
	ft := &fuzzTarget{cfg: cfg, root: fuzzDataRoot(f), log: &panicLog{}, fresh: 1_000_000}
	ft.reports = validReports(cfg, fuzzPathPackets, fuzzPathDelayNS)
	f.Cleanup(func() {
		if ft.stop != nil {
			ft.stop()
		}
	})
	return ft
}

// fuzzDataRoot is where a fuzz worker's collectors keep their stores:
// in memory (/dev/shm) where there is such a file system, for an input
// costs a few store commits, whose fsyncs on a disk take longer than
// the rest of the work.
func fuzzDataRoot(f *testing.F) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "owl-fuzz-"); err == nil {
			f.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return f.TempDir()
}

// validReports are both sides of an epoch of n packets with a constant
// delay: LDAs, and RDAs of the same packets, which pair without repairs.
func validReports(cfg Config, n int, delayNS int64) [2]*owlv1.EpochReport {
	lu, _ := lda.New(cfg.Params.LDA)
	ld, _ := lda.New(cfg.Params.LDA)
	ru, _ := rda.New(cfg.Params.RDA)
	rd, _ := rda.New(cfg.Params.RDA)
	rng := rand.New(rand.NewPCG(21, 22))
	for range n {
		id, ts := rng.Uint64(), rng.Int64N(900_000_000)
		lu.Insert(id, ts)
		ld.Insert(id, ts+delayNS)
		ru.Insert(id, ts)
		rd.Insert(id, ts+delayNS)
	}
	var out [2]*owlv1.EpochReport
	for i, s := range []struct {
		role owlv1.Role
		l    *lda.LDA
		r    *rda.RDA
	}{{owlv1.Role_ROLE_UPSTREAM, lu, ru}, {owlv1.Role_ROLE_DOWNSTREAM, ld, rd}} {
		lb, _ := s.l.MarshalBinary()
		rb, _ := s.r.MarshalBinary()
		out[i] = &owlv1.EpochReport{Path: "p", Role: s.role, Lda: lb, Rda: rb, Counters: &owlv1.Counters{}}
	}
	return out
}

// collector returns the worker's collector, made anew every fuzzRenew
// inputs.
func (ft *fuzzTarget) collector(t testing.TB) *Collector {
	t.Helper()
	// After a failure the next input gets a new collector: the
	// failing input alone is to blame for what it finds, and minimizing
	// it works.
	t.Cleanup(func() {
		if t.Failed() {
			ft.uses = fuzzRenew
		}
	})
	if ft.c != nil && ft.uses < fuzzRenew {
		ft.uses++
		return ft.c
	}
	if ft.stop != nil {
		ft.stop()
	}
	dir, err := os.MkdirTemp(ft.root, "c")
	if err != nil {
		t.Fatal(err)
	}
	cfg := ft.cfg
	cfg.DataDir = dir
	c, err := New(cfg, slog.New(ft.log))
	if err != nil {
		t.Fatal(err)
	}
	stopWorkers := startWorkers(c)
	ft.c, ft.uses = c, 1
	ft.stop = func() {
		stopWorkers()
		c.Close()
		os.RemoveAll(dir)
	}
	if ft.onStart != nil {
		ft.onStart(t, c)
	}
	return c
}

// checkPanics fails the input when the collector recovered a panic.
func (ft *fuzzTarget) checkPanics(t testing.TB) {
	t.Helper()
	if s := ft.log.take(); s != "" {
		t.Fatalf("the collector recovered a panic: %s", s)
	}
}

// freshEpoch is an epoch of path p with no side held and no result, not
// among avoid.
func (ft *fuzzTarget) freshEpoch(t testing.TB, c *Collector, avoid ...int64) int64 {
	t.Helper()
	ps := c.paths["p"]
	for {
		e := ft.fresh
		ft.fresh++
		ps.mu.Lock()
		held := ps.pending[e] != nil
		ps.mu.Unlock()
		if held || slices.Contains(avoid, e) {
			continue
		}
		if r, err := c.store.Result("p", e); err != nil {
			t.Fatal(err)
		} else if r == nil {
			return e
		}
	}
}

// checkPairs reports a valid epoch of path p and checks that its result
// is exact: whatever came before did not spoil the path.
func (ft *fuzzTarget) checkPairs(t testing.TB, c *Collector) {
	t.Helper()
	e := ft.freshEpoch(t, c)
	for i, probe := range []string{"a", "b"} {
		r := proto.CloneOf(ft.reports[i])
		r.Epoch = e
		if err := c.report(probe, r); err != nil {
			t.Fatalf("valid report of epoch %d from %s: %v", e, probe, err)
		}
	}
	res := ft.result(t, c, "p", e)
	ft.checkPanics(t) // the worker takes epochs in order: any before are done
	if res.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK || res.GetEstimator() != "rda" || res.GetMeanNs() != fuzzPathDelayNS || res.GetSamples() != fuzzPathPackets {
		t.Fatalf("valid epoch %d: %s %s mean %v over %d packets, want an exact rda result of %d ns over %d",
			e, res.GetStatus(), res.GetEstimator(), res.GetMeanNs(), res.GetSamples(), fuzzPathDelayNS, fuzzPathPackets)
	}
}

// result waits for the stored result of a path's epoch.
func (ft *fuzzTarget) result(t testing.TB, c *Collector, path string, e int64) *owlv1.PathStats {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Microsecond) {
		ft.checkPanics(t)
		r, err := c.store.Result(path, e)
		if err != nil {
			t.Fatal(err)
		}
		if r != nil {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("no result of %s epoch %d", path, e)
		}
	}
}

// settle waits until the path's worker is through with the epoch when
// both its sides are in.
func (ft *fuzzTarget) settle(t testing.TB, ps *pathState, e int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Microsecond) {
		ft.checkPanics(t)
		ps.mu.Lock()
		pr := ps.pending[e]
		busy := pr != nil && pr.complete()
		ps.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("epoch %d of %s has both sides and its worker never finished it", e, ps.path.Name)
		}
	}
}

// checkTaken checks what became of a report taken by report(): an error
// must be a rejection that says why; a report taken is held in its
// path's table or used (its epoch has a result), once the worker is
// through with the epoch.
func (ft *fuzzTarget) checkTaken(t testing.TB, c *Collector, r *owlv1.EpochReport, err error) {
	t.Helper()
	if err != nil {
		var rej *rejection
		if !errors.As(err, &rej) || rej.reason == "" {
			t.Fatalf("report of %q epoch %d: %v (%T), want a rejection that says why", r.GetPath(), r.GetEpoch(), err, err)
		}
		return
	}
	ps := c.paths[r.GetPath()]
	if ps == nil {
		t.Fatalf("report of the unconfigured path %q taken", r.GetPath())
	}
	e := r.GetEpoch()
	ft.settle(t, ps, e)
	ps.mu.Lock()
	held := ps.pending[e].held(&side{Pending: store.Pending{Report: r}}) != nil
	ps.mu.Unlock()
	if held {
		return
	}
	if res, err := c.store.Result(r.GetPath(), e); err != nil || res == nil {
		t.Fatalf("report of %q epoch %d taken, but neither held nor used: result %v, %v", r.GetPath(), e, res, err)
	}
}

// fuzzReportSeeds are real reports, up and down: LDAs alone; LDAs and
// RDAs with lost and extra packets; LDSs with top flows, counters and
// clock states.
func fuzzReportSeeds(tb testing.TB, cfg Config) []*owlv1.EpochReport {
	up, down := ldaPair(tb, cfg.Params.LDA, 300, 12_000, 1)
	out := []*owlv1.EpochReport{report("p", 4, owlv1.Role_ROLE_UPSTREAM, up), report("p", 4, owlv1.Role_ROLE_DOWNSTREAM, down)}
	ru, rd, _, _ := rdaPair(cfg.Params.RDA, 300, 10, 10)
	withRDA := []*owlv1.EpochReport{report("p", 5, owlv1.Role_ROLE_UPSTREAM, up), report("p", 5, owlv1.Role_ROLE_DOWNSTREAM, down)}
	withRDA[0].Rda, withRDA[1].Rda = ru, rd
	fu, fd := flowReports(tb, cfg, "p", 6)
	for i, r := range []*owlv1.EpochReport{fu, fd} {
		r.Counters = &owlv1.Counters{Packets: 3000 - uint64(i), Late: 2, DecodeFailures: map[string]uint64{"truncated": 1}, OutsidePaths: 40, Dropped: 3}
		r.Clock = &owlv1.ClockStatus{Source: "ptp", State: owlv1.ClockState_CLOCK_STATE_SYNCHRONIZED, Synchronized: true, OffsetNs: 120, UncertaintyNs: 80}
		r.Seq, r.CacheEntries, r.CacheComplete = uint64(9+i), 3000, true
	}
	fd.Partial = "the probe started mid-epoch"
	// The downstream side's top flows with their keys packed.
	for _, tf := range fd.GetTopFlows() {
		if k, err := netpath.FlowFromProto(tf.GetFlow()); err == nil {
			if b, ok := netpath.AppendPackedFlow(nil, k); ok {
				tf.Key, tf.Flow = b, nil
			}
		}
	}
	// Epoch 8 sent as exact lists (rebuilt into synopses by the collector).
	lists := agreeEpoch(rand.New(rand.NewPCG(8, 9)), 200, 5, 3, 2)
	lu, ld := report("p", 8, owlv1.Role_ROLE_UPSTREAM, nil), report("p", 8, owlv1.Role_ROLE_DOWNSTREAM, nil)
	lu.List, ld.List = listOf(lists.Packets[0]), listOf(lists.Packets[1])
	return append(append(out, withRDA...), fu, fd, lu, ld)
}

// addReportSeeds adds a report as it is, cut short, and with a bit of
// each synopsis flipped (a report that still parses).
func addReportSeeds(f *testing.F, r *owlv1.EpochReport, who uint8) {
	b, _ := proto.Marshal(r)
	f.Add(b, who)
	f.Add(b[:len(b)/2], who)
	bad := proto.CloneOf(r)
	for _, s := range [][]byte{bad.Lda, bad.Rda, bad.Lds, bad.List} {
		if len(s) > 0 {
			s[len(s)/2] ^= 0x81
		}
	}
	b, _ = proto.Marshal(bad)
	f.Add(b, who)
}

// FuzzReport feeds reports to the collector as probe a (upstream of p),
// b (downstream) or x (no path's): each ends in a rejection that says
// why or is held or used, and a valid epoch reported next is exact.
func FuzzReport(f *testing.F) {
	cfg := fuzzConfig(f)
	for _, r := range fuzzReportSeeds(f, cfg) {
		who := uint8(0)
		if r.GetRole() == owlv1.Role_ROLE_DOWNSTREAM {
			who = 1
		}
		addReportSeeds(f, r, who)
	}
	up, _ := ldaPair(f, cfg.Params.LDA, 10, 1, 2)
	stray, _ := proto.Marshal(report("p", 7, owlv1.Role_ROLE_UPSTREAM, up))
	f.Add(stray, uint8(2))
	ft := newFuzzTarget(f, cfg)
	f.Fuzz(func(t *testing.T, data []byte, who uint8) {
		r := &owlv1.EpochReport{}
		if proto.Unmarshal(data, r) != nil {
			return
		}
		c := ft.collector(t)
		probe := []string{"a", "b", "x"}[who%3]
		ft.checkTaken(t, c, r, c.report(probe, r))
		ft.checkPairs(t, c)
	})
}

// repairCase is an epoch whose reconciliation needs the probes'
// repairs: the two RDAs as reported, the probes' caches, and the two
// LDSs of the same packets (two flows).
type repairCase struct {
	name     string
	up, down *rda.RDA
	caches   *reconcile.Local
	lim      reconcile.Limits
	sketches [2]*lds.LDS
	flows    [2]uint64
}

// repairCases are an epoch that peels at once and needs the
// timestamps of the lost and extra packets, and one whose RDAs are too
// small: it asks for the repeated packets, a rebuild, then timestamps.
func repairCases(tb testing.TB, cfg Config) []*repairCase {
	var out []*repairCase
	for _, c := range []struct {
		name                 string
		buckets, lost, extra int
	}{{"fetch", 256, 10, 10}, {"rebuild", 32, 60, 10}} {
		rc := cfg.Params.RDA
		rc.Buckets = c.buckets
		ub, db, upTS, downTS := rdaPair(rc, 300, c.lost, c.extra)
		up, err1 := rda.Decode(ub)
		down, err2 := rda.Decode(db)
		if err := errors.Join(err1, err2); err != nil {
			tb.Fatal(err)
		}
		cs := &repairCase{name: c.name, up: up, down: down, flows: [2]uint64{0xf1, 0xf2},
			caches: &reconcile.Local{RDA: rc}, lim: cfg.limits()}
		for i, ts := range []map[uint64]int64{upTS, downTS} {
			cs.sketches[i], _ = lds.New(cfg.Params.LDS)
			for id, off := range ts {
				fl := cs.flows[id%2]
				cs.caches.Packets[i] = append(cs.caches.Packets[i], reconcile.Packet{ID: id, Entry: reconcile.Entry{OffsetNS: off, Flow: fl, Weight: 1}})
				cs.sketches[i].Insert(fl, id, off, 1)
			}
			slices.SortFunc(cs.caches.Packets[i], func(a, b reconcile.Packet) int { return cmp.Compare(a.ID, b.ID) })
		}
		out = append(out, cs)
	}
	return out
}

// fuzzProbes answers reconcile's repairs as the two probes of a path
// would over their streams: the honest side from its cache, the hostile
// side with the fuzzed replies (one FetchReply for every fetch, one
// RebuildReply for every rebuild). Either way the answer is read by the
// collector's own fetchEntries and rebuiltRDA.
type fuzzProbes struct {
	cs             *repairCase
	hashing        rda.Config
	hostile        reconcile.Side
	fetch, rebuild []byte
	// honest, when set, makes both sides honest and keeps the first
	// fetch and rebuild reply of each side in wire form (seeds).
	honest         bool
	fetchReplies   [2][]byte
	rebuildReplies [2][]byte
}

var _ reconcile.Repairs = (*fuzzProbes)(nil)

var errUnparsable = errors.New("the probe's answer does not parse: its stream ends")

func probeOf(s reconcile.Side) string { return []string{"a", "b"}[s] }

func (p *fuzzProbes) Fetch(ctx context.Context, s reconcile.Side, ids []uint64) (map[uint64][]reconcile.Entry, error) {
	return p.answerFetch(ctx, s, ids, false)
}

func (p *fuzzProbes) Repeated(ctx context.Context, s reconcile.Side) (map[uint64][]reconcile.Entry, error) {
	return p.answerFetch(ctx, s, nil, true)
}

func (p *fuzzProbes) answerFetch(ctx context.Context, s reconcile.Side, ids []uint64, repeated bool) (map[uint64][]reconcile.Entry, error) {
	rep := &owlv1.FetchReply{}
	if p.honest || s != p.hostile {
		var got map[uint64][]reconcile.Entry
		if repeated {
			got, _ = p.cs.caches.Repeated(ctx, s)
			ids = make([]uint64, 0, len(got))
			for id := range got {
				ids = append(ids, id)
			}
			slices.Sort(ids)
		} else {
			got, _ = p.cs.caches.Fetch(ctx, s, ids)
		}
		for _, id := range ids {
			for _, e := range got[id] {
				rep.PacketIds = append(rep.PacketIds, id)
				rep.OffsetsNs = append(rep.OffsetsNs, e.OffsetNS)
				rep.FlowHashes = append(rep.FlowHashes, e.Flow)
				rep.Weights = append(rep.Weights, uint32(e.Weight))
			}
		}
		if p.honest && !repeated && p.fetchReplies[s] == nil {
			p.fetchReplies[s], _ = proto.Marshal(rep)
		}
	} else if proto.Unmarshal(p.fetch, rep) != nil {
		return nil, errUnparsable
	}
	if repeated {
		ids = nil
	}
	out, _, err := fetchEntries(probeOf(s), ids, rep)
	return out, err
}

func (p *fuzzProbes) Rebuild(ctx context.Context, s reconcile.Side, buckets int) (*rda.RDA, error) {
	rep := &owlv1.RebuildReply{}
	if p.honest || s != p.hostile {
		r, err := p.cs.caches.Rebuild(ctx, s, buckets)
		if err != nil {
			rep.Error = err.Error()
		} else {
			rep.Rda, _ = r.MarshalBinary()
		}
		if p.honest && p.rebuildReplies[s] == nil {
			p.rebuildReplies[s], _ = proto.Marshal(rep)
		}
	} else if proto.Unmarshal(p.rebuild, rep) != nil {
		return nil, errUnparsable
	}
	out, _, err := rebuiltRDA(probeOf(s), p.hashing, rep)
	return out, err
}

// reconcileCase runs an epoch's reconciliation with the probes'
// answers, and repairs the LDSs with what it took out.
func reconcileCase(cfg Config, cs *repairCase, p *fuzzProbes) (reconcile.Outcome, [2]*lds.LDS, error) {
	in := reconcile.Input{Up: cs.up, Down: cs.down, StartNS: cfg.Params.Epoch.StartNS(1)}
	out, err := reconcile.Epoch(context.Background(), in, p, cs.lim)
	upL, downL := repairLDS(cs.sketches[0], cs.sketches[1], out.Remove)
	return out, [2]*lds.LDS{upL, downL}, err
}

// maxAlloc bounds what reading n bytes from outside may allocate:
// perByte times n, and some slack.
func maxAlloc(n, perByte int) uint64 { return uint64(perByte*n + 64<<10) }

// FuzzRepairAnswers answers the repairs of an epoch's reconciliation
// with fuzzed FetchReply and RebuildReply messages from one probe (the
// other answers from its cache), read as the collector reads them: no
// panic, errors that say what, reading an answer allocates in proportion
// to its size, and a reconciliation that succeeds gives finite
// statistics. The LDSs are repaired with what it took out.
func FuzzRepairAnswers(f *testing.F) {
	cfg := fuzzConfig(f)
	cases := repairCases(f, cfg)
	for i, cs := range cases {
		honest := &fuzzProbes{cs: cs, hashing: cfg.Params.RDA, honest: true}
		out, _, err := reconcileCase(cfg, cs, honest)
		if err != nil || !out.Repaired || !out.Diff.Complete() || out.Estimate.MeanNS != 90_000 || (cs.name == "rebuild") != (out.Rebuilds > 0) {
			f.Fatalf("case %s answered from the caches: %+v, %v", cs.name, out, err)
		}
		for s := range 2 {
			mode := uint8(i<<1 | s)
			fetch, rebuild := honest.fetchReplies[s], honest.rebuildReplies[s]
			f.Add(fetch, rebuild, mode)
			f.Add(fetch[:len(fetch)/2], rebuild[:len(rebuild)/3], mode)
			rep := &owlv1.FetchReply{}
			_ = proto.Unmarshal(fetch, rep)
			rep.OffsetsNs = rep.OffsetsNs[:len(rep.OffsetsNs)/2]
			short, _ := proto.Marshal(rep)
			refused, _ := proto.Marshal(&owlv1.RebuildReply{Error: "epoch no longer cached"})
			f.Add(short, refused, mode)
		}
	}
	// Long answers: 2000 entries of as many IDs, and of one.
	for _, distinct := range []bool{true, false} {
		rep := &owlv1.FetchReply{}
		for i := range uint64(2000) {
			id := uint64(7)
			if distinct {
				id = i * 0x9e3779b97f4a7c15
			}
			rep.PacketIds = append(rep.PacketIds, id)
			rep.OffsetsNs = append(rep.OffsetsNs, int64(i))
		}
		long, _ := proto.Marshal(rep)
		f.Add(long, []byte{}, uint8(0))
	}
	// A rebuild at another size than asked, and one with other hashing.
	for _, rc := range []rda.Config{{Banks: 2, Buckets: 48, Seed: cfg.Params.RDA.Seed, Check: true}, {Banks: 3, Buckets: 64, Seed: 7}} {
		r, _ := rda.New(rc)
		r.Insert(1, 2)
		b, _ := r.MarshalBinary()
		rep, _ := proto.Marshal(&owlv1.RebuildReply{Rda: b})
		f.Add([]byte{}, rep, uint8(2))
	}
	f.Fuzz(func(t *testing.T, fetch, rebuild []byte, mode uint8) {
		cs := cases[int(mode>>1)%len(cases)]
		p := &fuzzProbes{cs: cs, hashing: cfg.Params.RDA, hostile: reconcile.Side(mode & 1), fetch: fetch, rebuild: rebuild}
		out, repaired, err := reconcileCase(cfg, cs, p)
		if err != nil && err.Error() == "" {
			t.Fatal("reconciliation failed with an empty error")
		}
		if out.RepairErr != nil && out.RepairErr.Error() == "" {
			t.Fatal("repair failed with an empty error")
		}
		if err == nil {
			e := out.Estimate
			for _, v := range []float64{e.MeanNS, e.StddevNS, e.SumNS, e.Count} {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("estimate %+v is not finite", e)
				}
			}
		}
		for _, fl := range cs.flows {
			_, _ = lds.EstimateFlow(repaired[0], repaired[1], fl, 1, lds.DefaultOptions())
		}
		frep, rrep := &owlv1.FetchReply{}, &owlv1.RebuildReply{}
		if proto.Unmarshal(fetch, frep) == nil {
			if limit := maxAlloc(len(fetch), 32); synopsistest.Allocated(limit, func() { _, _, _ = fetchEntries("a", nil, frep) }) > limit {
				t.Fatalf("reading a fetch reply of %d bytes allocated over %d", len(fetch), limit)
			}
		}
		if proto.Unmarshal(rebuild, rrep) == nil {
			if limit := maxAlloc(len(rebuild), 16); synopsistest.Allocated(limit, func() { _, _, _ = rebuiltRDA("a", cfg.Params.RDA, rrep) }) > limit {
				t.Fatalf("reading a rebuild reply of %d bytes allocated over %d", len(rebuild), limit)
			}
		}
	})
}

// Kinds of hand-over FuzzHandover takes (the low four bits of its kind
// argument, modulo 3).
const (
	handTakePending = iota // a lone side, answering TakePending
	handReplicate          // an owner's copies (Replicate)
	handExport             // a stored epoch from Export (catch-up)
	// handOtherEpoch (a flag of kind) asks TakePending for the epoch
	// after the one the answer holds.
	handOtherEpoch = 0x10
	// handGiveAway (a flag of kind) has another member take the copies
	// of lone sides (TakePending) before they are promoted.
	handGiveAway = 0x20
)

// ownerCopies are what an owner of path p hands its replica and the
// other members: the copies of two epochs it paired (results, per-flow
// results, sketches and boundary records) and of a lone side, its
// stored epochs as Export sends them, and the lone side as TakePending
// gives it away.
func ownerCopies(tb testing.TB, cfg Config) (copies, exported []*owlv1.EpochCopy, taken *owlv1.TakePendingResponse) {
	cfg.DataDir = tb.TempDir()
	c := newTest(tb, cfg)
	defer c.Close()
	c.repl = newReplicator(c.m, c.log)
	c.worker.repl = c.repl
	valid := validReports(cfg, fuzzPathPackets, fuzzPathDelayNS)
	for e := int64(1); e <= 3; e++ {
		up, down := flowReports(tb, cfg, "p", e)
		up.Rda, down.Rda = valid[0].GetRda(), valid[1].GetRda()
		if err := c.report("a", up); err != nil {
			tb.Fatal(err)
		}
		if e == 3 {
			break // a lone side
		}
		if err := c.report("b", down); err != nil {
			tb.Fatal(err)
		}
		waitResult(tb, c, "p", e, anyResult)
	}
	// The worker queues its copies before it lets go of the epoch.
	ps := c.paths["p"]
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		ps.mu.Lock()
		busy := ps.pending[1] != nil || ps.pending[2] != nil
		ps.mu.Unlock()
		if !busy {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatal("the owner's worker did not finish epochs 1 and 2")
		}
	}
	for len(c.repl.queue) > 0 {
		copies = append(copies, (<-c.repl.queue).ec)
	}
	if len(copies) < 7 {
		tb.Fatalf("the owner queued %d copies, want 7 (5 sides, 2 results)", len(copies))
	}
	eps, err := c.store.StoredEpochs("p", math.MinInt64, exportBatch, func(int64) bool { return false })
	if err != nil {
		tb.Fatal(err)
	}
	for _, se := range eps {
		exported = append(exported, storedCopy("p", se))
	}
	if taken, err = c.takePending("p", 3, owlv1.Role_ROLE_UPSTREAM); err != nil || taken.GetProbe() == "" {
		tb.Fatalf("taking the lone side: %v, %v", taken, err)
	}
	return copies, exported, taken
}

// addHandoverSeeds adds the owner's real hand-overs, whole, cut short,
// and with their sketches flipped, and a few that no owner sends.
func addHandoverSeeds(f *testing.F, copies, exported []*owlv1.EpochCopy, taken *owlv1.TakePendingResponse) {
	add := func(m proto.Message, kind uint8) {
		b, _ := proto.Marshal(m)
		f.Add(b, kind)
		f.Add(b[:len(b)*2/3], kind)
	}
	add(taken, handTakePending)
	add(taken, handTakePending|handOtherEpoch)
	stray := proto.CloneOf(taken)
	stray.Probe = "x"
	add(stray, handTakePending)
	add(&owlv1.ReplicateRequest{From: "c0", Epochs: copies}, handReplicate)
	add(&owlv1.ReplicateRequest{From: "c0", Epochs: copies}, handReplicate|handGiveAway)
	for _, ec := range copies {
		add(&owlv1.ReplicateRequest{From: "c0", Epochs: []*owlv1.EpochCopy{ec}}, handReplicate)
	}
	for _, ec := range exported {
		add(ec, handExport)
		bad := proto.CloneOf(ec)
		for _, s := range [][]byte{bad.LdsPair, bad.LdsUp, bad.LdsDown, bad.Boundary} {
			if len(s) > 0 {
				s[len(s)/2] ^= 0x81
			}
		}
		add(bad, handExport)
	}
	// A lone side whose probe is no probe id (too long for one).
	for _, ec := range copies {
		if len(ec.GetLone()) > 0 {
			odd := proto.CloneOf(ec)
			odd.Lone[0].Probe = strings.Repeat("p", 300)
			add(&owlv1.ReplicateRequest{From: "c0", Epochs: []*owlv1.EpochCopy{odd, copies[len(copies)-1]}}, handReplicate)
		}
	}
}

// handBaseline is what a member stores of path p before the fuzzed
// hand-overs: epoch handBaselineEpoch, paired, with per-flow results.
type handBaseline struct {
	res  *owlv1.PathStats
	flow *owlv1.FlowKey
	fs   *owlv1.FlowStats
}

const handBaselineEpoch = 100

// FuzzHandover feeds a member the hand-overs other members make: a lone
// side answering TakePending, an owner's copies (Replicate), a stored
// epoch from Export (catch-up); then the copies of lone sides are given
// away to another member (TakePending) or promoted, as a new owner does.
// No panic; a side taken is the one asked for; a copy never fails its
// batch nor makes the stored results, per-flow results or sketches of
// other epochs unreadable; and a valid epoch reported next is exact.
func FuzzHandover(f *testing.F) {
	cfg := fuzzConfig(f)
	copies, exported, taken := ownerCopies(f, cfg)
	addHandoverSeeds(f, copies, exported, taken)
	ft := newFuzzTarget(f, cfg)
	var base handBaseline
	ft.onStart = func(t testing.TB, c *Collector) {
		up, down := flowReports(t, cfg, "p", handBaselineEpoch)
		for i, r := range []*owlv1.EpochReport{up, down} {
			if err := c.report([]string{"a", "b"}[i], r); err != nil {
				t.Fatal(err)
			}
		}
		ft.result(t, c, "p", handBaselineEpoch)
		ft.settle(t, c.paths["p"], handBaselineEpoch)
		base.res, _ = c.store.Result("p", handBaselineEpoch)
		base.flow = up.GetTopFlows()[0].GetFlow()
		fs, err := queryService{c: c}.GetFlowStats(context.Background(), &owlv1.GetFlowStatsRequest{Path: "p", Flow: base.flow})
		if err != nil || len(fs.GetStats()) != 1 || !fs.GetStats()[0].GetEstimated() {
			t.Fatalf("baseline flow: %v, %v", fs, err)
		}
		base.fs = fs.GetStats()[0]
	}
	f.Fuzz(func(t *testing.T, data []byte, kind uint8) {
		c := ft.collector(t)
		var named []int64 // epochs the hand-over names
		switch kind & 0x0f % 3 {
		case handTakePending:
			r := &owlv1.TakePendingResponse{}
			if proto.Unmarshal(data, r) != nil {
				return
			}
			named = append(named, r.GetReport().GetEpoch())
			ft.checkHandedOver(t, c, r, kind&handOtherEpoch != 0)
		case handReplicate:
			req := &owlv1.ReplicateRequest{}
			if proto.Unmarshal(data, req) != nil {
				return
			}
			for _, ec := range req.GetEpochs() {
				named = append(named, ec.GetEpoch())
			}
			// A valid copy after the fuzzed ones: none may fail it.
			e := ft.freshEpoch(t, c, named...)
			valid := &owlv1.EpochCopy{Path: "p", Epoch: e, Done: true,
				Result: &owlv1.PathStats{Path: "p", Epoch: e, Status: owlv1.ResultStatus_RESULT_STATUS_OK, MeanNs: 4242, Samples: 7}}
			req.Epochs = append(req.Epochs, valid)
			if _, err := (clusterService{c: c}).Replicate(context.Background(), req); err != nil {
				t.Fatalf("Replicate: %v", err)
			}
			if got, err := c.store.Result("p", e); err != nil || !proto.Equal(got, valid.GetResult()) {
				t.Fatalf("the valid copy after the fuzzed ones: stored %v, %v", got, err)
			}
			if kind&handGiveAway != 0 {
				giveAway(t, c, req.GetEpochs())
			}
			c.promote()
		case handExport:
			ec := &owlv1.EpochCopy{}
			if proto.Unmarshal(data, ec) != nil {
				return
			}
			named = append(named, ec.GetEpoch())
			if _, err := c.storeCopies([]*owlv1.EpochCopy{ec}); err != nil {
				t.Fatalf("storing an exported epoch: %v", err)
			}
			c.promote()
		}
		ft.checkReadable(t, c, &base, slices.Contains(named, handBaselineEpoch))
		ft.checkPairs(t, c)
	})
}

// giveAway has another member take the copies of lone sides stored
// (TakePending): each stored copy reads back as the side it was stored
// as.
func giveAway(t testing.TB, c *Collector, copies []*owlv1.EpochCopy) {
	t.Helper()
	for _, ec := range copies {
		for _, l := range ec.GetLone() {
			r := l.GetReport()
			if c.paths[r.GetPath()] == nil || r.GetRole() != owlv1.Role_ROLE_UPSTREAM && r.GetRole() != owlv1.Role_ROLE_DOWNSTREAM {
				continue // a copy left out
			}
			got, err := c.takePending(r.GetPath(), r.GetEpoch(), r.GetRole())
			if err != nil {
				t.Fatalf("giving away the %v side of %q epoch %d: %v", r.GetRole(), r.GetPath(), r.GetEpoch(), err)
			}
			if g := got.GetReport(); got.GetProbe() != "" && (g.GetPath() != r.GetPath() || g.GetEpoch() != r.GetEpoch() || g.GetRole() != r.GetRole()) {
				t.Fatalf("asked for the %v side of %q epoch %d, gave away %v of %q epoch %d", r.GetRole(), r.GetPath(), r.GetEpoch(), g.GetRole(), g.GetPath(), g.GetEpoch())
			}
		}
	}
}

// checkHandedOver takes a side handed over as the answer to TakePending
// for the epoch and role it holds (or, with otherEpoch, the epoch
// after): an error must say why; a side taken must be the one asked for,
// and is then held or used.
func (ft *fuzzTarget) checkHandedOver(t testing.TB, c *Collector, r *owlv1.TakePendingResponse, otherEpoch bool) {
	t.Helper()
	ps := c.paths["p"]
	rep := r.GetReport()
	epoch, role := rep.GetEpoch(), rep.GetRole()
	if otherEpoch {
		epoch++
	}
	taken, err := c.takeHandedOver(ps, epoch, role, r)
	if err != nil {
		var rej *rejection
		if !errors.As(err, &rej) && !errors.Is(err, errNotAsked) || err.Error() == "" {
			t.Fatalf("hand-over refused with %v (%T), want a rejection or errNotAsked that says why", err, err)
		}
		return
	}
	if !taken {
		if r.GetProbe() != "" {
			t.Fatalf("a side of %s not taken, without an error", r.GetProbe())
		}
		return
	}
	want := ps.path.Upstream
	if role == owlv1.Role_ROLE_DOWNSTREAM {
		want = ps.path.Downstream
	}
	if rep.GetPath() != ps.path.Name || rep.GetEpoch() != epoch || r.GetProbe() != want {
		t.Fatalf("asked for the %s side of %q epoch %d (probe %s), took %s's report of %q epoch %d %s",
			roleName(role), ps.path.Name, epoch, want, r.GetProbe(), rep.GetPath(), rep.GetEpoch(), rep.GetRole())
	}
	ft.checkTaken(t, c, rep, nil)
}

// checkReadable checks that path p's stored results, per-flow results
// and sketches can all still be read, and that the baseline epoch's are
// unchanged unless the hand-over named it (a newer copy may replace it).
func (ft *fuzzTarget) checkReadable(t testing.TB, c *Collector, base *handBaseline, named bool) {
	t.Helper()
	q, ctx := queryService{c: c}, context.Background()
	ps, err := q.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: "p", Limit: maxResults})
	if err != nil {
		t.Fatalf("GetPathStats after the hand-over: %v", err)
	}
	fs, err := q.GetFlowStats(ctx, &owlv1.GetFlowStatsRequest{Path: "p", Flow: base.flow, Limit: maxResults})
	if err != nil {
		t.Fatalf("GetFlowStats after the hand-over: %v", err)
	}
	// A flow no epoch names: every epoch's sketches are read for it.
	other := &owlv1.FlowKey{Src: "10.9.9.9", Dst: "10.9.9.8", SrcPort: 9, DstPort: 9, Protocol: 17}
	if _, err := q.GetFlowStats(ctx, &owlv1.GetFlowStatsRequest{Path: "p", Flow: other, Limit: maxResults}); err != nil {
		t.Fatalf("GetFlowStats of a flow no epoch names, after the hand-over: %v", err)
	}
	if _, err := q.TopFlows(ctx, &owlv1.TopFlowsRequest{Path: "p"}); err != nil {
		t.Fatalf("TopFlows after the hand-over: %v", err)
	}
	if named {
		return
	}
	i := slices.IndexFunc(ps.GetStats(), func(r *owlv1.PathStats) bool { return r.GetEpoch() == handBaselineEpoch })
	if i < 0 || !proto.Equal(ps.GetStats()[i], base.res) {
		t.Fatalf("the baseline epoch's result changed: %v", ps.GetStats())
	}
	j := slices.IndexFunc(fs.GetStats(), func(r *owlv1.FlowStats) bool { return r.GetEpoch() == handBaselineEpoch })
	if j < 0 || !proto.Equal(fs.GetStats()[j], base.fs) {
		t.Fatalf("the baseline epoch's flow changed: %v", fs.GetStats())
	}
}
