package collector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync/atomic"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/reconcile"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rda"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// sessionRepairs answers reconcile.Repairs for one epoch of a path by
// asking its two probes over their streams. It waits up to the pair
// timeout for a probe that is not connected, and counts the bytes
// exchanged.
type sessionRepairs struct {
	wk        *worker
	ps        *pathState
	epoch     int64
	exchanged atomic.Uint64 // bytes, from the two sides' goroutines
	// lists answers for the sides that sent an exact list (nil: none).
	lists *listedEpoch
}

// listed says whether side s sent an exact list, which then answers.
func (r *sessionRepairs) listed(s reconcile.Side) bool { return r.lists != nil && r.lists.listed[s] }

var _ reconcile.Repairs = (*sessionRepairs)(nil)

func (r *sessionRepairs) probe(s reconcile.Side) string {
	if s == reconcile.Downstream {
		return r.ps.path.Downstream
	}
	return r.ps.path.Upstream
}

// askTries bounds the streams a request to a probe is asked on: a probe
// reconnects when its cluster's routes change, ending the stream a
// request was on.
const askTries = 3

// ask runs call on the newest stream of side s's probe; when that stream
// ends before the probe answers, it asks again on the stream the probe
// opens next (a fetch or a rebuild can be asked twice).
func (r *sessionRepairs) ask(ctx context.Context, s reconcile.Side, call func(*session) error) error {
	probe := r.probe(s)
	var prev *session
	for try := 1; ; try++ {
		sess := r.wk.probes.waitSession(ctx, probe, r.wk.cfg.PairTimeout, prev)
		if sess == nil {
			return fmt.Errorf("%s is not connected", probe)
		}
		err := call(sess)
		if !errors.Is(err, ErrProbeGone) || try == askTries {
			return err
		}
		prev = sess
	}
}

func (r *sessionRepairs) count(n int) {
	r.exchanged.Add(uint64(n))
	r.wk.m.pathSeries.add(r.ps.path.Name, pmExchanged, float64(n))
}

// Rebuild asks the side's probe for the epoch's RDA at buckets.
func (r *sessionRepairs) Rebuild(ctx context.Context, s reconcile.Side, buckets int) (*rda.RDA, error) {
	if r.listed(s) {
		return r.lists.local.Rebuild(ctx, s, buckets)
	}
	var rep *owlv1.RebuildReply
	err := r.ask(ctx, s, func(sess *session) (err error) {
		rep, err = sess.rebuild(ctx, r.ps.path.Name, r.epoch, buckets)
		return err
	})
	if err != nil {
		return nil, err
	}
	out, n, err := rebuiltRDA(r.probe(s), r.wk.cfg.Params.RDA, rep)
	r.count(n)
	return out, err
}

// rebuiltRDA reads probe's answer to a rebuild: the RDA, which must hash
// as the deployment's RDAs do (hashing; the caller checks its size), and
// the bytes exchanged. rep comes from outside: nil (the probe answered
// with another message) reads as an empty, malformed RDA.
func rebuiltRDA(probe string, hashing rda.Config, rep *owlv1.RebuildReply) (*rda.RDA, int, error) {
	if rep.GetError() != "" {
		return nil, 0, fmt.Errorf("%s: %s", probe, rep.GetError())
	}
	b := rep.GetRda()
	out, err := rda.Decode(b)
	if err != nil {
		return nil, len(b), fmt.Errorf("rebuilt RDA from %s: %w", probe, err)
	}
	if err := params.SameRDAHashing(hashing, out.Config()); err != nil {
		return nil, len(b), fmt.Errorf("rebuilt RDA from %s: %w", probe, err)
	}
	return out, len(b), nil
}

// Fetch asks the side's probe for the entries of ids.
func (r *sessionRepairs) Fetch(ctx context.Context, s reconcile.Side, ids []uint64) (map[uint64][]reconcile.Entry, error) {
	if r.listed(s) {
		return r.lists.local.Fetch(ctx, s, ids)
	}
	return r.fetch(ctx, s, &owlv1.FetchRequest{Path: r.ps.path.Name, Epoch: r.epoch, PacketIds: ids})
}

// Repeated asks the side's probe for the entries of the IDs it saw more
// than once.
func (r *sessionRepairs) Repeated(ctx context.Context, s reconcile.Side) (map[uint64][]reconcile.Entry, error) {
	if r.listed(s) {
		return r.lists.local.Repeated(ctx, s)
	}
	return r.fetch(ctx, s, &owlv1.FetchRequest{Path: r.ps.path.Name, Epoch: r.epoch, Repeated: true})
}

func (r *sessionRepairs) fetch(ctx context.Context, s reconcile.Side, req *owlv1.FetchRequest) (map[uint64][]reconcile.Entry, error) {
	var out map[uint64][]reconcile.Entry
	err := r.ask(ctx, s, func(sess *session) error {
		got, size, err := sess.fetch(ctx, req)
		r.count(size)
		out = got
		return err
	})
	return out, err
}

// noteSampleRate remembers a path's upstream packet count of an epoch and,
// with what recent reports took (noteSampleCost), when the sampling rate or
// the LDS the probes use no longer fits, tells them new ones
// (Config.SamplingFor): the highest rate 2^-k at which the busiest of the
// recent epochs would have given at most √2 times the target
// (sample.ShiftFor), so that it gives about the target, and the LDS off
// where the sample gives the large flows their delays at that rate, or,
// at fewer bytes than the LDS, at a higher one. An epoch whose top flows
// did not name their sampled packets (flowsSampled) turns the LDS on;
// one with none sampled leaves the choice as it was.
func (wk *worker) noteSampleRate(ps *pathState, packets uint64, sampled flowSampling) {
	target := uint64(wk.cfg.Params.Sample.Target)
	if target == 0 {
		return
	}
	ps.mu.Lock()
	ps.recentPackets = append(ps.recentPackets, packets)
	if len(ps.recentPackets) > 8 {
		ps.recentPackets = ps.recentPackets[1:]
	}
	peak := slices.Max(ps.recentPackets)
	cur, from, wasOff := ps.sampleShift, ps.newest+sizeLead, ps.ldsOff
	named := sampled == samplingNamed || sampled == samplingUnknown && wasOff
	want, off := wk.cfg.SamplingFor(peak, sample.ShiftFor(peak, target), ps.sampleCost, wasOff, named, wk.cfg.Params.Sample.MaxEntries)
	ps.sampleShift, ps.ldsOff = want, off
	if want != cur || off != wasOff {
		ps.resized()
	}
	cols, rows := ps.ldsCols, ps.ldsRows
	ps.mu.Unlock()
	if want != cur {
		wk.log.Info("changing sampling rate", "path", ps.path.Name, "rate", fmt.Sprintf("1/%d", uint64(1)<<want), "was", fmt.Sprintf("1/%d", uint64(1)<<cur), "from_epoch", from)
		wk.tellProbes(ps, &owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_SampleRate{SampleRate: &owlv1.SampleRate{Path: ps.path.Name, Shift: uint32(want), FromEpoch: from}}})
	}
	if off != wasOff {
		wk.log.Info("turning the LDS", "path", ps.path.Name, "off", off, "rate", fmt.Sprintf("1/%d", uint64(1)<<want), "from_epoch", from)
		wk.tellProbes(ps, &owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_LdsSize{LdsSize: &owlv1.LDSSize{Path: ps.path.Name, Cols: uint32(cols), Rows: rows, FromEpoch: from, Off: off}}})
	}
}

// noteSampleCost keeps what an epoch's upstream report took: bytes per
// entry of its sample, and LDS bytes per packet where it sent one. A
// side sent as an exact list, or with too few entries to say, changes
// neither.
func noteSampleCost(ps *pathState, up *side) {
	packets := up.Report.GetCounters().GetPackets()
	if up.listed || packets == 0 {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if up.sample != nil && up.sample.Len() >= 16 {
		ps.sampleCost.EntryBytes = float64(len(up.Report.GetSample())) / float64(up.sample.Len())
	}
	if b := len(up.Report.GetLds()); b > 0 {
		ps.sampleCost.LDSPacketBytes = float64(b) / float64(packets)
	}
}

// flowSampling is what an epoch shows of its top flows' sampled packets.
type flowSampling int

const (
	samplingUnknown flowSampling = iota // no packet sampled upstream
	samplingNamed                       // the top flows named theirs
	samplingNone                        // they did not (an older probe), or a side sent no sample
)

// flowsSampled says whether an epoch's sample join can give its top flows
// their delays: both sides sent a sample (or a list) and the upstream
// one's top flows named their packets in it.
func flowsSampled(pr *pairing) flowSampling {
	switch {
	case pr.up.sample != nil && pr.up.sample.Len() == 0:
		return samplingUnknown
	case pr.up.sample != nil && pr.down.sample != nil && pr.up.namesFlows:
		return samplingNamed
	}
	return samplingNone
}

// tellProbes sends msg to both probes of a path, those connected: one
// that is not learns the path's sizes from its next PathConfig.
func (wk *worker) tellProbes(ps *pathState, msg *owlv1.CollectorMessage) {
	for _, probe := range []string{ps.path.Upstream, ps.path.Downstream} {
		if s := wk.probes.session(probe); s != nil {
			_ = s.send(msg)
		}
	}
}

// ldsEps is the LDS sizing's ε: the chance that a large flow collides
// with another large flow in all of its cells (LDS §3.2).
const ldsEps = 0.01

// ldsWindow is how many recent epochs size a path's LDS.
const ldsWindow = 8

// sizeLead is how many epochs past the newest one reported a new LDS size
// or sampling rate starts: the probes have opened the next one or two (the
// one after the newest reported, and the next when the report waited for
// late packets), so both sides change at the same epoch.
const sizeLead = 3

// ldsLoad is what an epoch's sketches showed: the large flows
// (flows.lds_large_packets) and packets of the upstream one, the largest
// flow its report names, and the share of packets the two sides still
// differ on once reconciliation's repairs are taken out (lds.Spoiled).
type ldsLoad struct {
	large, packets, largest, spoiled float64
}

// noteLDSLoad remembers an epoch's ldsLoad and, when the LDS shape the
// probes use no longer fits, tells both a new one. Its rows are those
// lds.RowsFor keeps, at least flows.lds_min_rows, for twice the most
// spoiled share and the largest flow of the last 8 epochs; its cells per
// row lds.ColsFor for twice the most large flows and packets with those
// rows, a power of two within [flows.lds_min_cols, params.lds.cols].
// The shape grows at once (more cells, or a row it lacked) and shrinks
// only once it has seen 8 epochs, cells to a quarter or less (as RDAs
// do): an epoch whose sides use different shapes loses its per-flow
// results, so shapes change seldom, and never for a path's first, often
// partial, epochs.
func (wk *worker) noteLDSLoad(ps *pathState, load ldsLoad) {
	minCols, sketch := wk.cfg.Flows.LDSMinCols, wk.cfg.Params.LDS
	if minCols == 0 {
		return
	}
	all := uint32(1)<<sketch.Rows - 1
	ps.mu.Lock()
	ps.recentLDS = append(ps.recentLDS, load)
	if len(ps.recentLDS) > ldsWindow {
		ps.recentLDS = ps.recentLDS[1:]
	}
	var most ldsLoad
	for _, l := range ps.recentLDS {
		most = ldsLoad{max(most.large, l.large), max(most.packets, l.packets), max(most.largest, l.largest), max(most.spoiled, l.spoiled)}
	}
	rows := lds.RowsFor(sketch, 2*most.spoiled, most.largest, wk.cfg.Flows.LDSMinRows)
	want := lds.ColsFor(2*most.large, 2*most.packets, float64(wk.cfg.Flows.LDSLargePackets), bits.OnesCount32(rows), sketch.K, ldsEps, minCols, sketch.Cols)
	cur, curRows, from := ps.ldsCols, cmp.Or(ps.ldsRows, all), ps.newest+sizeLead
	full := len(ps.recentLDS) == ldsWindow
	grow := want > cur || rows&^curRows != 0
	shrink := full && (want <= cur/4 || (rows != curRows && rows&^curRows == 0))
	if !grow && !shrink {
		ps.mu.Unlock()
		return
	}
	if want > cur/4 && want < cur { // a change of rows alone keeps the cells unless they shrink by a quarter
		want = cur
	}
	ps.ldsCols, ps.ldsRows = want, rows
	ps.resized()
	off := ps.ldsOff
	ps.mu.Unlock()
	wk.log.Info("resizing LDS", "path", ps.path.Name, "cols", want, "was", cur, "rows", fmt.Sprintf("%0*b", sketch.Rows, rows),
		"rows_were", fmt.Sprintf("%0*b", sketch.Rows, curRows), "from_epoch", from, "large_flows", load.large, "spoiled", most.spoiled)
	wk.tellProbes(ps, &owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_LdsSize{LdsSize: &owlv1.LDSSize{Path: ps.path.Name, Cols: uint32(want), Rows: rows, FromEpoch: from, Off: off}}})
}

// rdaWindow is how many recent epochs size a path's RDA.
const rdaWindow = 8

// noteSetDifference remembers the set difference of a path's epoch and, when
// the RDA size the probes use no longer fits, tells them a new one:
// 2.5 × the largest of the last 8 epochs, within [rda.min_buckets,
// rda.max_buckets]. It grows at once and shrinks only to a quarter or less
// and once it has seen 8 epochs: a path's first epochs are often partial,
// and a path sized to their small differences decodes the next ones only
// by rebuilding from the probes' caches, which a failover may have lost.
func (wk *worker) noteSetDifference(ps *pathState, d reconcile.Difference) {
	size := d.Size()
	for _, r := range d.Residual {
		size += 2 * len(r) // at least two undecoded packets per residual bucket
	}
	ps.mu.Lock()
	ps.recentDiff = append(ps.recentDiff, size)
	if len(ps.recentDiff) > rdaWindow {
		ps.recentDiff = ps.recentDiff[1:]
	}
	most, full := slices.Max(ps.recentDiff), len(ps.recentDiff) == rdaWindow
	want := reconcile.Size(most, wk.cfg.MinRDABuckets(), wk.cfg.RDA.MaxBuckets)
	cur := ps.rdaBuckets
	change := want > cur || (want <= cur/4 && full)
	if change {
		ps.rdaBuckets = want
	}
	rows, curRows, from := wk.ldaRowsFor(most), ps.ldaRows, ps.newest+sizeLead
	resizeLDA := rows > curRows || (rows <= curRows/4 && full)
	if resizeLDA {
		ps.ldaRows = rows
	}
	if change || resizeLDA {
		ps.resized()
	}
	ps.mu.Unlock()
	if resizeLDA {
		wk.log.Info("resizing LDA", "path", ps.path.Name, "rows", rows, "was", curRows, "from_epoch", from)
		wk.tellProbes(ps, &owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_LdaSize{LdaSize: &owlv1.LDASize{Path: ps.path.Name, Rows: uint32(rows), FromEpoch: from}}})
	}
	if !change {
		return
	}
	wk.log.Info("resizing RDA", "path", ps.path.Name, "buckets", want, "was", cur)
	wk.tellProbes(ps, &owlv1.CollectorMessage{Msg: &owlv1.CollectorMessage_RdaSize{RdaSize: &owlv1.RDASize{Path: ps.path.Name, Buckets: uint32(want)}}})
}

// ldaRowsFor is the LDA rows per bank for epochs whose set differences
// reach d (lda.RowsFor within [rda.lda_min_rows, params.lda.rows]), or
// params.lda.rows without sizing.
func (wk *worker) ldaRowsFor(d int) int {
	if wk.cfg.RDA.LDAMinRows == 0 {
		return wk.cfg.Params.LDA.Rows
	}
	return lda.RowsFor(d, wk.cfg.RDA.LDAMinRows, wk.cfg.Params.LDA.Rows)
}
