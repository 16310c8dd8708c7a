package probe

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket/layers"
	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/rtt"
	"github.com/owl-latency/owl/internal/synopsis"
	"github.com/owl-latency/owl/internal/synopsis/colate"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rap"
	"github.com/owl-latency/owl/internal/synopsis/rda"
	"github.com/owl-latency/owl/internal/synopsis/reorder"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// assignment is a path the probe takes part in, compiled.
type assignment struct {
	path       netpath.Path
	role       owlv1.Role
	match      *netpath.Matcher
	rdaBuckets int  // 0: keep the current size
	shift      int  // the sampling rate's shift to start with
	ldsCols    int  // LDS cells per row to start with (0: the parameters')
	ldsRows    int  // mask of the parameters' LDS rows to start with (0: all)
	ldaRows    int  // LDA rows per bank to start with (0: the parameters')
	ldsOff     bool // no LDS to start with
	// notOwner: the configuration came from a collector that does not
	// own the path, and gives none of its sizes (the owner's stand).
	notOwner bool
}

// pathSet is an immutable set of assignments. Each epoch keeps the set it
// was opened with, so that a new configuration applies from the next epoch.
type pathSet struct {
	paths []assignment
	// ldsWire is how the reports carry their LDS (ldsWireOf).
	ldsWire lds.Wire
	// sampleKeyBits is how many bits of a sample's keys above its rate
	// the reports carry (0: all 48).
	sampleKeyBits int
	// packedFlowKeys: the reports carry top flows' keys packed.
	packedFlowKeys bool
}

// ldsWireOf is the LDS wire form a collector reads: digests of its
// lds_digest_bytes (8 from one that does not say), packed if it says so.
func ldsWireOf(pc *owlv1.PathConfig) (lds.Wire, error) {
	w := lds.DefaultWire
	if n := int(pc.GetLdsDigestBytes()); n != 0 {
		if !slices.Contains(lds.DigestWidths, n) {
			return w, fmt.Errorf("lds_digest_bytes %d: must be one of %v", n, lds.DigestWidths)
		}
		w.DigestBytes = n
	}
	w.Packed = pc.GetLdsPacked()
	return w, nil
}

// newPathSet compiles the paths of a PathConfig message.
func newPathSet(pc *owlv1.PathConfig) (*pathSet, error) {
	w, err := ldsWireOf(pc)
	if err != nil {
		return nil, err
	}
	s := &pathSet{ldsWire: w, sampleKeyBits: int(pc.GetSampleKeyBits()), packedFlowKeys: pc.GetPackedFlowKeys()}
	if b := s.sampleKeyBits; b != 0 && (b < sample.MinKeyBits || b > sample.KeyBits) {
		return nil, fmt.Errorf("sample_key_bits %d out of [%d, %d]", b, sample.MinKeyBits, sample.KeyBits)
	}
	for _, pa := range pc.GetPaths() {
		p, err := netpath.FromProto(pa.GetPath())
		if err != nil {
			return nil, err
		}
		if pa.GetRole() != owlv1.Role_ROLE_UPSTREAM && pa.GetRole() != owlv1.Role_ROLE_DOWNSTREAM {
			return nil, fmt.Errorf("path %q: role %v", p.Name, pa.GetRole())
		}
		m, _ := p.Selector.Compile() // validated by FromProto
		if b := pa.GetRdaBuckets(); b > rda.MaxBuckets {
			return nil, fmt.Errorf("path %q: rda_buckets %d exceeds %d", p.Name, b, rda.MaxBuckets)
		}
		if sh := pa.GetSampleShift(); sh > sample.MaxShift {
			return nil, fmt.Errorf("path %q: sample_shift %d exceeds %d", p.Name, sh, sample.MaxShift)
		}
		if c := pa.GetLdsCols(); c > lds.MaxCols {
			return nil, fmt.Errorf("path %q: lds_cols %d exceeds %d", p.Name, c, lds.MaxCols)
		}
		if r := pa.GetLdsRows(); r >= 1<<lds.MaxRows {
			return nil, fmt.Errorf("path %q: lds_rows %#x names rows beyond %d", p.Name, r, lds.MaxRows)
		}
		if r := pa.GetLdaRows(); r > lda.MaxRows {
			return nil, fmt.Errorf("path %q: lda_rows %d exceeds %d", p.Name, r, lda.MaxRows)
		}
		s.paths = append(s.paths, assignment{path: p, role: pa.GetRole(), match: m, rdaBuckets: int(pa.GetRdaBuckets()),
			shift: int(pa.GetSampleShift()), ldsCols: int(pa.GetLdsCols()), ldsRows: int(pa.GetLdsRows()), ldaRows: int(pa.GetLdaRows()), ldsOff: pa.GetLdsOff(),
			notOwner: pa.GetNotOwner()})
	}
	return s, nil
}

// epochData holds one epoch's synopses, one per path of its set.
type epochData struct {
	set  *pathSet
	ldas []*lda.LDA
	rdas []*rda.RDA
	// rdaHeld are packets on their way into rdas, added a batch at a
	// time (rda.InsertMany) and all before the epoch's close.
	rdaHeld []rdaBatch
	ldss    []*lds.LDS
	raps    []*rap.Table[capture.FlowKey]
	caches  []*epochCache
	samples []*sample.Sample // nil entries when sampling is off
	packets []uint64
	// copies are, per path, the packets seen in the epoch's first
	// epoch.Config.CopyWindow that the pipeline saw in the last of the
	// epoch before (EpochReport.boundary_copies).
	copies  [][]uint64
	outside uint64 // decoded packets that matched no path
	// colate is the point's COLATE vector of the epoch, of every decoded
	// packet whatever its path (nil when COLATE is off).
	colate *colate.Vector
	// rtt is the point's round-trip times of the epoch (nil when off).
	rtt *rtt.Summary
	// reorder is the point's reordering by prefix, as the tracker
	// counted it between the close of the previous epoch and this one's
	// (nil when off).
	reorder *reorder.Report
}

// rdaBatch is packets held for an RDA: a batch's bucket loads overlap
// (RDA.InsertMany), where one packet's waited for the last's.
type rdaBatch struct {
	ids  [64]uint64
	offs [64]int64
	n    int
}

// add holds a packet for r, and adds the batch to r when it is full.
func (b *rdaBatch) add(r *rda.RDA, id uint64, off int64) {
	b.ids[b.n], b.offs[b.n] = id, off
	if b.n++; b.n == len(b.ids) {
		b.flush(r)
	}
}

// flush adds the held packets to r.
func (b *rdaBatch) flush(r *rda.RDA) {
	r.InsertMany(b.ids[:b.n], b.offs[:b.n])
	b.n = 0
}

// counters are the probe's running totals, read by metrics.
type counters struct {
	frames, packets, outside, late atomic.Uint64
	colateVectors, colateBytes     atomic.Uint64
	decodeFailures                 [4]atomic.Uint64 // by capture.Reason
}

// pipeline turns frames into closed epochs of synopses. It runs on one
// goroutine (the source loop): Packet, Advance and Flush are not safe for
// concurrent use.
type pipeline struct {
	params params.Params
	dec    *capture.Decoder
	decs   map[layers.LinkType]*capture.Decoder
	window *epoch.Window[*epochData]
	paths  atomic.Pointer[pathSet] // the set new epochs use
	sink   func(closedEpoch)
	stats  *counters

	maxCache int          // cache entries per path and epoch
	sizes    sync.Map     // path name → RDA buckets the collector asked for
	shifts   sync.Map     // path name → sampling shift the collector asked for (scheduled)
	ldsCols  sync.Map     // path name → LDS cells per row the collector asked for (scheduled)
	ldsRows  sync.Map     // path name → mask of the LDS rows the collector asked for (scheduled with ldsCols)
	ldaRows  sync.Map     // path name → LDA rows per bank the collector asked for (scheduled)
	ldsOff   sync.Map     // path name → 1 while the collector asked for no LDS (scheduled)
	opened   atomic.Int64 // the newest epoch opened
	topFlows int          // flows reported per path and epoch (RAP keeps twice as many)
	weightOf func(capture.FlowKey) uint64
	// correct maps capture timestamps onto the reference clock (live
	// capture); nil keeps them (files).
	correct func(tsNS int64) int64

	// decode failures since the last report, by reason
	failSince [4]uint64
	// rtt matches requests with responses (nil when off).
	rtt *rttMatcher
	// reorder tracks TCP reordering by prefix (nil when off).
	reorder *reorder.Tracker
	// unpublished are the frames and packets not yet in stats.
	unpublished struct{ frames, packets uint64 }
	// sampleLens are the entries of each path's sample in its last
	// closed epoch.
	sampleLens map[string]int
	// tails hold the IDs of the packets of the last copy window
	// (epoch.Config.CopyWindow) of the two latest epochs (by the epoch's
	// parity); packets at offsets below headNS or from tailNS on are
	// looked up or kept there.
	tails          [2]tail
	headNS, tailNS int64
}

// tail is the IDs of the packets seen in the last copy window of an
// epoch.
type tail struct {
	epoch int64
	ids   *synopsis.Index // nil: none yet
}

// maxTail bounds the IDs an epoch's tail keeps, and the copies a path's
// report names: the tail's index then takes 1.5 MiB, 3 MiB for the two
// a pipeline holds (10,000 IDs, 10 ms at a million packets a second,
// take 384 KiB).
const maxTail = 1 << 16

// newPipeline returns a pipeline (one capture worker's synopses) that hands
// its closed epochs to sink.
func newPipeline(p params.Params, maxCache, topFlows int, sink func(closedEpoch), stats *counters) (*pipeline, error) {
	pl := &pipeline{params: p, decs: map[layers.LinkType]*capture.Decoder{}, sink: sink, stats: stats,
		maxCache: maxCache, topFlows: topFlows, sampleLens: map[string]int{}}
	var err error
	if pl.weightOf, err = p.WeightOf(); err != nil {
		return nil, err
	}
	pl.window, err = epoch.NewWindow(p.Epoch, pl.open, pl.close)
	if err != nil {
		return nil, err
	}
	w := int64(p.Epoch.CopyWindow())
	pl.headNS, pl.tailNS = w, int64(p.Epoch.Length)-w
	pl.paths.Store(&pathSet{})
	return pl, nil
}

// setLink selects the decoder for the frames that follow.
func (pl *pipeline) setLink(link layers.LinkType) error {
	if d, ok := pl.decs[link]; ok {
		pl.dec = d
		return nil
	}
	d, err := capture.NewDecoder(link, pl.params.Identity)
	if err != nil {
		return err
	}
	pl.decs[link], pl.dec = d, d
	return nil
}

// setPaths makes the next epochs use a new path set.
func (pl *pipeline) setPaths(s *pathSet) {
	for _, a := range s.paths {
		if a.notOwner {
			continue // the owner's sizes stand
		}
		if a.rdaBuckets > 0 {
			pl.sizes.Store(a.path.Name, a.rdaBuckets)
		}
		pl.schedule(&pl.shifts, a.path.Name, a.shift, 0)
		if a.ldsCols > 0 && pl.setLDSShape(a.path.Name, a.ldsCols, a.ldsRows, 0) != nil {
			pl.ldsCols.Delete(a.path.Name) // not for these parameters: theirs
			pl.ldsRows.Delete(a.path.Name)
		}
		pl.setLDSOff(a.path.Name, a.ldsOff, 0)
		if a.ldaRows > 0 && pl.setLDARows(a.path.Name, a.ldaRows, 0) != nil {
			pl.ldaRows.Delete(a.path.Name) // not for these parameters: theirs
		}
	}
	pl.paths.Store(s)
}

// scheduled is a path's setting from the collector (LDS cells per row,
// sampling shift): v from epoch from on, before until then (0: the
// parameters', rate 1).
type scheduled struct {
	v, before int
	from      int64
}

// at is the setting of epoch e.
func (z scheduled) at(e int64) int {
	if e < z.from {
		return z.before
	}
	return z.v
}

// schedule sets a path's setting in m to v from epoch from on, or, where
// that is past, from the next epoch opened.
func (pl *pipeline) schedule(m *sync.Map, path string, v int, from int64) {
	scheduleAt(m, path, v, from, pl.opened.Load())
}

// scheduleAt is schedule with open the newest epoch opened: until from,
// the setting in use as of open stays (a change still ahead is replaced).
func scheduleAt(m *sync.Map, path string, v int, from, open int64) {
	z := scheduled{v: v, from: from}
	if old, ok := m.Load(path); ok {
		z.before = old.(scheduled).at(open)
	}
	m.Store(path, z)
}

// setting is a path's setting in m for epoch e (0: none set).
func setting(m *sync.Map, path string, e int64) int {
	if v, ok := m.Load(path); ok {
		return v.(scheduled).at(e)
	}
	return 0
}

// setLDSShape makes a path's epochs from epoch from on (or, where that is
// past, the next it opens) use an LDS of this many cells per row, at most
// the parameters', and the parameters' rows in the mask rows (0: all):
// the collector's sizing, LDSSize.
func (pl *pipeline) setLDSShape(path string, cols, rows int, from int64) error {
	if err := checkLDSSize(pl.params.LDS, cols, rows); err != nil {
		return err
	}
	pl.schedule(&pl.ldsCols, path, cols, from)
	pl.schedule(&pl.ldsRows, path, rows, from)
	return nil
}

// setLDSOff makes a path's epochs from epoch from on (or, where that is
// past, the next it opens) send no LDS (off) or one again: LDSSize.off.
func (pl *pipeline) setLDSOff(path string, off bool, from int64) {
	pl.schedule(&pl.ldsOff, path, boolSetting(off), from)
}

// boolSetting is a yes/no setting as setting holds it: 1 for yes.
func boolSetting(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkLDSSize reports an LDS size from a collector that the parameters p
// do not allow (ldsShape), or no cells per row.
func checkLDSSize(p lds.Config, cols, rows int) error {
	if cols < 1 {
		return fmt.Errorf("lds cols %d: at least one", cols)
	}
	_, err := ldsShape(p, cols, rows)
	return err
}

// ldsShape is the parameters' LDS p at cols cells per row (0: theirs) and
// with the rows of the mask rows (0: all), or why the parameters do not
// allow it: more cells per row than theirs, rows they do not have, or a
// shape LDS refuses.
func ldsShape(p lds.Config, cols, rows int) (lds.Config, error) {
	if cols > p.Cols {
		return lds.Config{}, fmt.Errorf("lds cols %d exceed params.lds.cols %d", cols, p.Cols)
	}
	if cols > 0 {
		p.Cols = cols
	}
	if rows < 0 || rows > math.MaxUint32 {
		return lds.Config{}, fmt.Errorf("lds row mask %d out of range", rows)
	}
	return p.Select(uint32(rows))
}

// setLDARows makes a path's epochs from epoch from on (or, where that is
// past, the next it opens) use LDAs of this many rows per bank, at most
// the parameters': the collector's sizing, LDASize.
func (pl *pipeline) setLDARows(path string, rows int, from int64) error {
	if _, err := pl.params.LDA.WithRows(rows); err != nil {
		return err
	}
	pl.schedule(&pl.ldaRows, path, rows, from)
	return nil
}

// ldaConfig is a path's LDA parameters at epoch e.
func (pl *pipeline) ldaConfig(path string, e int64) lda.Config {
	c := pl.params.LDA
	if r := setting(&pl.ldaRows, path, e); r > 0 {
		c.Rows = r // checked by setLDARows
	}
	return c
}

// setRDASize makes a path's next epochs use an RDA of this many buckets.
func (pl *pipeline) setRDASize(path string, buckets int) error {
	c := pl.params.RDA
	c.Buckets = buckets
	if err := c.Validate(); err != nil {
		return err
	}
	pl.sizes.Store(path, buckets)
	return nil
}

// setSampleShift makes a path's epochs from epoch from on (or, where that
// is past, the next it opens) sample 2^-shift of packets.
func (pl *pipeline) setSampleShift(path string, shift int, from int64) error {
	if shift < 0 || shift > sample.MaxShift {
		return fmt.Errorf("sampling shift %d out of [0, %d]", shift, sample.MaxShift)
	}
	pl.schedule(&pl.shifts, path, shift, from)
	return nil
}

// newSample is a path's empty sample at epoch e's rate, or nil when
// sampling is off.
func (pl *pipeline) newSample(path string, e int64) *sample.Sample {
	if pl.params.Sample.Target == 0 {
		return nil
	}
	cfg, _ := sample.ForShift(pl.params.Sample.Seed, setting(&pl.shifts, path, e)) // checked by setSampleShift and newPathSet
	s, _ := sample.New(cfg)                                                        // a shift's threshold is never 0
	// Room for as many entries as the path's last closed epoch had, and
	// an eighth more: growing by doubling copied the sample ~10 times.
	if n := pl.sampleLens[path]; n > 0 {
		s.Grow(min(n+n/8, pl.params.Sample.MaxEntries+1))
	}
	return s
}

func (pl *pipeline) open(e int64) *epochData {
	if e > pl.opened.Load() {
		pl.opened.Store(e) // written here only
	}
	s := pl.paths.Load()
	n := len(s.paths)
	ed := &epochData{set: s, ldas: make([]*lda.LDA, n), rdas: make([]*rda.RDA, n), rdaHeld: make([]rdaBatch, n), ldss: make([]*lds.LDS, n),
		raps: make([]*rap.Table[capture.FlowKey], n), caches: make([]*epochCache, n), samples: make([]*sample.Sample, n),
		packets: make([]uint64, n), copies: make([][]uint64, n)}
	if pl.params.Colate.Enabled {
		ed.colate = getVector(pl.params.ColateConfig(), pl.params.Epoch.StartNS(e))
	}
	if pl.rtt != nil {
		ed.rtt = pl.rtt.newEpoch()
	}
	for i, a := range s.paths {
		ed.ldas[i] = reuse(&ldas, pl.ldaConfig(a.path.Name, e), (*lda.LDA).Config, lda.New) // validated in Config and setLDARows
		rc := pl.params.RDA
		if v, ok := pl.sizes.Load(a.path.Name); ok {
			rc.Buckets = v.(int)
		}
		ed.rdas[i] = reuse(&rdas, rc, (*rda.RDA).Config, rda.New)                                                    // validated in Config and setRDASize
		lc, _ := ldsShape(pl.params.LDS, setting(&pl.ldsCols, a.path.Name, e), setting(&pl.ldsRows, a.path.Name, e)) // checked by setLDSShape
		if setting(&pl.ldsOff, a.path.Name, e) == 0 {
			ed.ldss[i] = reuse(&ldss, lc, (*lds.LDS).Config, lds.New) // validated in Config and setLDSShape
		}
		ed.raps[i] = rap.New[capture.FlowKey](2*pl.topFlows, uint64(i))
		ed.caches[i] = &epochCache{rda: rc, complete: true}
		ed.samples[i] = pl.newSample(a.path.Name, e)
	}
	return ed
}

// frame feeds one captured frame.
func (pl *pipeline) frame(data []byte, tsNS int64) {
	// The shared counters take the counts in batches: an atomic add is a
	// full barrier, which made the misses of one packet's synopsis
	// updates wait before the next packet's work.
	if pl.unpublished.frames++; pl.unpublished.frames >= publishEvery {
		pl.publish()
	}
	tsNS = pl.captureTime(tsNS)
	var p capture.Packet
	if err := pl.dec.Decode(data, tsNS, &p); err != nil {
		r := capture.ReasonOf(err)
		pl.failSince[r]++
		pl.stats.decodeFailures[r].Add(1)
		return
	}
	pl.unpublished.packets++
	ed, off, ok := pl.window.Get(p.TimeNS)
	if !ok {
		pl.stats.late.Add(1)
		return
	}
	if ed.rtt != nil {
		pl.rtt.packet(&p, ed.rtt)
	}
	if pl.reorder != nil {
		pl.reorder.Add(&p)
	}
	copied := false
	if off < pl.headNS || off >= pl.tailNS {
		copied = pl.boundaryCopy(p.ID, p.TimeNS, off)
	}
	matched, hashed := false, false
	var flowHash, weight uint64
	if ed.colate != nil {
		flowHash, hashed = p.Flow.Hash(pl.params.LDS.Seed), true
		ed.colate.Insert(flowHash, p.ID, p.TimeNS)
	}
	for i := range ed.set.paths {
		if ed.set.paths[i].match.Match(p.Flow) {
			if !matched {
				if !hashed {
					flowHash = p.Flow.Hash(pl.params.LDS.Seed)
				}
				weight = pl.weightOf(p.Flow)
			}
			ed.ldas[i].Insert(p.ID, off)
			ed.rdaHeld[i].add(ed.rdas[i], p.ID, off)
			if l := ed.ldss[i]; l != nil {
				l.Insert(flowHash, p.ID, off, weight)
			}
			ed.raps[i].Add(flowHash, &p.Flow)
			ed.caches[i].add(newEntry(p.ID, flowHash, off, weight), pl.maxCache)
			if s := ed.samples[i]; s != nil && s.InsertFlow(p.ID, flowHash, off) && s.Len() > pl.params.Sample.MaxEntries {
				s.Halve()
			}
			if copied && len(ed.copies[i]) < maxTail {
				ed.copies[i] = append(ed.copies[i], p.ID)
			}
			ed.packets[i]++
			matched = true
		}
	}
	if !matched {
		ed.outside++
		pl.stats.outside.Add(1)
	}
}

// boundaryCopy says whether a packet seen at tsNS, off ns into its epoch,
// in the epoch's first copy window, is a copy of one seen in the last
// copy window of the epoch before; one in its epoch's last copy window is
// kept for the next epoch's look-ups.
func (pl *pipeline) boundaryCopy(id uint64, tsNS, off int64) bool {
	e, _ := pl.params.Epoch.Of(tsNS)
	if off < pl.headNS {
		t := &pl.tails[(e-1)&1]
		if t.epoch != e-1 || t.ids == nil {
			return false
		}
		_, seen := t.ids.Find(id)
		return seen
	}
	t := &pl.tails[e&1]
	switch {
	case t.ids == nil:
		t.ids = synopsis.NewIndex(1024)
	case t.epoch != e:
		t.ids.Reset()
	}
	t.epoch = e
	if t.ids.Len() < maxTail {
		t.ids.Add(id)
	}
	return false
}

// publishEvery is how many frames a pipeline counts before it adds them
// to the shared counters (and at each epoch's close, flush and advance).
const publishEvery = 256

// publish adds the frames and packets counted since the last call to the
// shared counters.
func (pl *pipeline) publish() {
	pl.stats.frames.Add(pl.unpublished.frames)
	pl.stats.packets.Add(pl.unpublished.packets)
	pl.unpublished.frames, pl.unpublished.packets = 0, 0
}

// captureTime maps a capture timestamp onto the reference clock.
func (pl *pipeline) captureTime(tsNS int64) int64 {
	if pl.correct != nil {
		return pl.correct(tsNS)
	}
	return tsNS
}

// flush closes every open epoch (end of a capture file).
func (pl *pipeline) flush() {
	pl.publish()
	pl.window.Flush()
}

// advance moves the pipeline's time on to nowNS (no packet came), closing
// the epochs past their grace.
func (pl *pipeline) advance(nowNS int64) {
	pl.publish()
	pl.window.Advance(nowNS)
}

// close turns a closed epoch into one report per path.
func (pl *pipeline) close(cl epoch.Closed[*epochData]) {
	pl.publish()
	for i := range cl.Value.rdaHeld {
		cl.Value.rdaHeld[i].flush(cl.Value.rdas[i])
	}
	for i, a := range cl.Value.set.paths {
		if s := cl.Value.samples[i]; s != nil {
			pl.sampleLens[a.path.Name] = s.Len()
		}
	}
	if pl.reorder != nil {
		cl.Value.reorder = pl.reorder.Report()
	}
	pl.sink(closedEpoch{epoch: cl.Epoch, data: cl.Value, late: cl.Late, failures: pl.failSince})
	pl.failSince = [4]uint64{}
}

// closedEpoch is an epoch a pipeline (or, merged, all of a live capture's
// workers) closed.
type closedEpoch struct {
	epoch    int64
	data     *epochData
	late     uint64
	failures [4]uint64 // decode failures since the previous close, by reason
}

// reporter turns closed epochs into reports, one per path, and keeps their
// caches for the collector's requests.
type reporter struct {
	caches   *cacheStore
	topFlows int
	grid     epoch.Config
	clock    func(fromNS, toNS int64) *owlv1.ClockStatus
	emit     func(*owlv1.EpochReport)
	// emitVector takes the epoch's COLATE vector (nil: not sent).
	emitVector func(*owlv1.ColateVector)
	// emitRTT takes the epoch's RTT report (nil: not sent).
	emitRTT func(*owlv1.RTTReport)
	// emitReorder takes the epoch's reordering report (nil: not sent),
	// cut by reorderCut.
	emitReorder func(*owlv1.ReorderReport)
	reorderCut  *reorderCutter
	dropped     func() uint64 // packets the capture lost since the previous call
	// startedNS is when a live capture started (0 for files): an epoch
	// that began before it is partial.
	startedNS atomic.Int64
	// stoppedNS is when a live capture stopped (0 while it runs, and for
	// files): an epoch that ends after it is partial.
	stoppedNS atomic.Int64
	// exactLists lets a report carry the epoch's exact list of packets in
	// place of its synopses where the list is smaller.
	exactLists bool
	// gzipped says reports travel gzipped (Config.Gzip).
	gzipped bool
}

// partial says why the probe saw part of an epoch only, or "": a live
// capture started or stopped inside it.
func (r *reporter) partial(epoch int64) string {
	startNS, endNS := r.grid.StartNS(epoch), r.grid.EndNS(epoch)
	into := func(ns int64) time.Duration { return time.Duration(max(ns-startNS, 0)).Round(time.Microsecond) }
	var why []string
	if s := r.startedNS.Load(); s > startNS {
		why = append(why, fmt.Sprintf("capture started %v into the epoch", into(s)))
	}
	if s := r.stoppedNS.Load(); s != 0 && s < endNS {
		why = append(why, fmt.Sprintf("capture stopped %v into the epoch", into(s)))
	}
	return strings.Join(why, " and ") // the collector joins probes with "; "
}

func (r *reporter) report(ce closedEpoch) {
	ed := ce.data
	failures := map[string]uint64{}
	for _, reason := range capture.Reasons {
		if n := ce.failures[reason]; n > 0 {
			failures[reason.String()] = n
		}
	}
	var dropped uint64
	if r.dropped != nil {
		dropped = r.dropped()
	}
	now := time.Now().UnixNano()
	clock := r.clock(r.grid.StartNS(ce.epoch), r.grid.EndNS(ce.epoch))
	partial := r.partial(ce.epoch)
	for i, a := range ed.set.paths {
		b, _ := ed.ldas[i].MarshalBinary() // does not fail
		var sb []byte
		if l := ed.ldss[i]; l != nil {
			_ = l.SetWire(ed.set.ldsWire) // checked by newPathSet
			sb, _ = l.MarshalBinary()
		}
		var rb []byte
		if ed.rdas[i] != nil {
			rb, _ = ed.rdas[i].MarshalBinary()
		}
		var sb2 []byte
		if s := ed.samples[i]; s != nil {
			_ = s.SetKeyBits(keyBits(s.Config().Shift(), ed.set.sampleKeyBits))
			sb2, _ = s.MarshalBinary() // does not fail
		}
		top := topFlows(ed.raps[i], ed.samples[i], r.topFlows, ed.set.packedFlowKeys)
		c := ed.caches[i]
		list := r.exactList(c, rb != nil, len(b)+len(sb)+len(rb)+len(sb2))
		if list != nil {
			b, sb, rb, sb2 = nil, nil, nil, nil
			for _, tf := range top {
				tf.SamplePositions = nil // the list says every packet's flow
			}
		}
		r.caches.put(a.path.Name, ce.epoch, c)
		r.emit(&owlv1.EpochReport{
			Path:  a.path.Name,
			Epoch: ce.epoch,
			Role:  a.role,
			Lda:   b,
			Counters: &owlv1.Counters{
				Packets:        ed.packets[i],
				Late:           ce.late,
				DecodeFailures: failures,
				OutsidePaths:   ed.outside,
				Dropped:        dropped,
			},
			Clock:          clock,
			ClosedUnixNs:   now,
			Rda:            rb,
			CacheEntries:   uint64(c.len()),
			CacheComplete:  c.complete,
			Lds:            sb,
			TopFlows:       top,
			Partial:        partial,
			Sample:         sb2,
			List:           list,
			BoundaryCopies: ed.copies[i],
		})
	}
	for i := range ed.set.paths {
		ldas.Put(ed.ldas[i])
		if ed.ldss[i] != nil {
			ldss.Put(ed.ldss[i])
		}
		if ed.rdas[i] != nil {
			rdas.Put(ed.rdas[i])
		}
	}
	r.reportPoint(ed, ce.epoch, clock)
}

// keyBits is the width of the keys a sample at rate 2^-k carries when
// the collector reads above bits above the rate (0: all of them): k +
// above, within [sample.MinKeyBits, sample.KeyBits], and at rate 1 at
// least exactKeyBits.
func keyBits(k, above int) int {
	if above == 0 {
		return sample.KeyBits
	}
	if k == 0 {
		above = max(above, exactKeyBits)
	}
	return max(sample.MinKeyBits, min(sample.KeyBits, max(0, k)+above))
}

// exactKeyBits is the narrowest key a sample at rate 1 carries: that
// sample is the epoch's exact list, and its results are exact only where
// no two of its keys agree (n packets: a chance of about n²/2³³ an
// epoch, one in 8,600 at 1,000 packets), where a sampled epoch's
// estimates do not suffer from two entries in a thousand left out.
const exactKeyBits = 32

// topFlows is a path's n heaviest flows of an epoch, each naming its
// packets in the epoch's sample s (none: nil), their keys packed where
// packed is set.
func topFlows(t *rap.Table[capture.FlowKey], s *sample.Sample, n int, packed bool) []*owlv1.TopFlow {
	var top []*owlv1.TopFlow
	var hashes []uint64
	for _, e := range t.Top(n) {
		top = append(top, topFlow(e.Value, e.Count, packed))
		hashes = append(hashes, e.Key)
	}
	if s != nil {
		for k, pos := range s.FlowPositions(hashes) {
			top[k].SamplePositions = pos
		}
	}
	return top
}

// topFlow is a top flow of packets packets, its key packed where packed
// is set and its addresses of one family.
func topFlow(f capture.FlowKey, packets uint64, packed bool) *owlv1.TopFlow {
	if packed {
		if k, ok := netpath.AppendPackedFlow(nil, f); ok {
			return &owlv1.TopFlow{Key: k, Packets: packets}
		}
	}
	return &owlv1.TopFlow{Flow: netpath.FlowToProto(f), Packets: packets}
}

// reportPoint emits what the point measured of the epoch whatever the
// paths: round-trip times, reordering, the COLATE vector.
func (r *reporter) reportPoint(ed *epochData, epoch int64, clock *owlv1.ClockStatus) {
	if rep := rttReport(ed.rtt, epoch, clock); rep != nil && r.emitRTT != nil {
		r.emitRTT(rep)
	}
	if rep := reorderReport(ed.reorder, epoch, clock, r.reorderCut); rep != nil && r.emitReorder != nil {
		r.emitReorder(rep)
	}
	if v := ed.colate; v != nil {
		if r.emitVector != nil {
			b, _ := v.MarshalBinary() // does not fail
			first, last := v.Span()
			r.emitVector(&owlv1.ColateVector{Epoch: epoch, FirstUnixNs: first, LastUnixNs: last, Packets: v.Packets(), Vector: b, Clock: clock})
		}
		putVector(v)
		ed.colate = nil
	}
}

// vectors recycles COLATE vectors: each is n counters, too large to
// allocate afresh every epoch.
var vectors sync.Pool

// ldas, rdas and ldss recycle the synopses of epochs reported: an LDS is
// hundreds of KiB, and fresh memory costs a page fault every 4 KiB.
var ldas, rdas, ldss sync.Pool

// reuse returns an emptied synopsis of configuration cfg from pool, or a
// new one.
func reuse[T interface{ Reset() }, C any](pool *sync.Pool, cfg C, cfgOf func(T) C, make func(C) (T, error)) T {
	if x, ok := pool.Get().(T); ok && reflect.DeepEqual(cfgOf(x), cfg) {
		x.Reset()
		return x
	}
	x, _ := make(cfg)
	return x
}

func getVector(cfg colate.Config, startNS int64) *colate.Vector {
	if v, ok := vectors.Get().(*colate.Vector); ok && v.Config() == cfg {
		v.Reset(startNS)
		return v
	}
	v, _ := colate.New(cfg, startNS) // validated with the parameters
	return v
}

func putVector(v *colate.Vector) { vectors.Put(v) }
