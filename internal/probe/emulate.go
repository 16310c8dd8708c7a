package probe

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/buildinfo"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/ptp"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rda"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// TrafficConfig shapes the made-up traffic that emulated probes report,
// the same for every path.
type TrafficConfig struct {
	// Packets is the number of packets sent upstream per path and epoch.
	Packets int
	// Loss is the probability that a packet is lost between the two points.
	Loss float64
	// Reorder is the probability that a delivered packet is held up to
	// 1 ms more, which reorders it within the epoch.
	Reorder float64
	// Flows is the number of flows the packets belong to; their sizes
	// follow a Zipf law (s = 1.1), as on real links a few flows are heavy.
	Flows int
	// Variants is the number of distinct epochs generated: each path and
	// epoch reports one of them, so that memory does not grow with paths.
	Variants int
	// Seed makes the traffic reproducible.
	Seed uint64
}

// DefaultTrafficConfig returns 5000 packets per epoch in 100 flows, 1%
// loss, no reordering, 16 variants.
func DefaultTrafficConfig() TrafficConfig {
	return TrafficConfig{Packets: 5000, Loss: 0.01, Flows: 100, Variants: 16, Seed: 1}
}

// Validate reports a traffic shape out of range.
func (c TrafficConfig) Validate() error {
	switch {
	case c.Packets < 1 || c.Packets > 1<<24:
		return fmt.Errorf("packets %d out of range [1, %d]", c.Packets, 1<<24)
	case c.Loss < 0 || c.Loss >= 1:
		return fmt.Errorf("loss %v out of range [0, 1)", c.Loss)
	case c.Reorder < 0 || c.Reorder > 1:
		return fmt.Errorf("reorder %v out of range [0, 1]", c.Reorder)
	case c.Flows < 1 || c.Flows > 1<<24:
		return fmt.Errorf("flows %d out of range [1, %d]", c.Flows, 1<<24)
	case c.Variants < 1 || c.Variants > 4096:
		return fmt.Errorf("variants %d out of range [1, 4096]", c.Variants)
	}
	return nil
}

// emulatedDelay is internal/sim's delay model: 20 µs of propagation plus
// Weibull queueing (shape 0.65, scale 50 µs), as in the LDA and RDA
// evaluations.
var emulatedDelay = sim.Weibull{Shape: 0.65, Scale: 50 * time.Microsecond, Base: 20 * time.Microsecond}

const (
	// maxReorderNS bounds the extra delay of a reordered packet.
	maxReorderNS = int64(time.Millisecond)
	// emulatedTopFlows is how many flows a report names (a probe's default).
	emulatedTopFlows = 20
	// cachedSizes bounds the RDA and the LDS sizes kept per variant and side.
	cachedSizes = 8
)

// Truth is what a variant's traffic really was: what an exact estimate of
// its epoch must say.
type Truth struct {
	// Sent counts the packets seen upstream, Delivered those seen
	// downstream, Lost the difference.
	Sent, Delivered, Lost int
	// MeanNS is the mean delay of the delivered packets.
	MeanNS float64
	// FlowLost counts each flow's lost packets (flows with none absent).
	FlowLost map[capture.FlowKey]int
	// Delays are the delivered packets' delays, sorted.
	Delays []int64
}

// packet is one packet as one side saw it.
type packet struct {
	id       uint64
	offsetNS int64 // from the epoch's start
	flow     int32 // index into Traffic.flows
}

// trafficSide is what one side of a variant saw: its packets, sorted by
// ID, and its synopses in wire form, built once. Safe for concurrent use.
type trafficSide struct {
	packets  []packet
	lda      []byte
	lds      []byte
	top      []*owlv1.TopFlow // keys as text
	topKeys  []*owlv1.TopFlow // keys packed, for collectors that read them
	topFlows []int            // the top flows' indices in Traffic.flows

	sizedMu sync.Mutex                // guards rdas, ldas, ldss and samples
	rdas    map[int][]byte            // buckets per bank → wire form
	ldas    map[int][]byte            // rows per bank other than the parameters' → wire form
	ldss    map[ldsKey][]byte         // shapes and wire forms other than the parameters' at version 1 → wire form
	samples map[sampleKey]*sideSample // rates and key widths → sample and top flows
}

// sampleKey is a side's sampling: its shift and the key bits sent.
type sampleKey struct{ shift, keyBits int }

// sideSample is a side's packet sample in wire form and its top flows
// naming their sampled packets, keys as text and packed.
type sideSample struct {
	wire         []byte
	top, topKeys []*owlv1.TopFlow
}

// variant is one made-up epoch of a path: both sides and the truth.
type variant struct {
	up, down *trafficSide
	truth    Truth
}

// Traffic is made-up epochs of one path: variants of an epoch's packets on
// both sides, with their synopses built once and reused by every path and
// epoch. Safe for concurrent use.
type Traffic struct {
	params     params.Params
	cfg        TrafficConfig
	flows      []capture.FlowKey
	flowHashes []uint64 // of flows, under the LDS seed
	variants   []*variant
}

// NewTraffic generates c.Variants epochs of traffic and their synopses
// under the deployment's parameters p.
func NewTraffic(p params.Params, c TrafficConfig) (*Traffic, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("parameters: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("traffic: %w", err)
	}
	t := &Traffic{params: p, cfg: c}
	for j := range c.Flows {
		f := flowKey(j)
		t.flows = append(t.flows, f)
		t.flowHashes = append(t.flowHashes, f.Hash(p.LDS.Seed))
	}
	r := rand.New(rand.NewPCG(c.Seed, 0x6f776c2d6c6f6164)) // "owl-load"
	for v := range c.Variants {
		vr, err := t.newVariant(r)
		if err != nil {
			return nil, fmt.Errorf("variant %d: %w", v, err)
		}
		t.variants = append(t.variants, vr)
	}
	return t, nil
}

// flowKey makes up the j-th flow: TCP to port 443 from a source address
// of its own.
func flowKey(j int) capture.FlowKey {
	return capture.FlowKey{
		Src:     netip.AddrFrom4([4]byte{10, byte(j >> 16), byte(j >> 8), byte(j)}),
		Dst:     netip.AddrFrom4([4]byte{192, 0, 2, 1}),
		SrcPort: uint16(1024 + j%60000),
		DstPort: 443,
		Proto:   6,
	}
}

// newVariant draws one epoch: distinct IDs, loss, delays and offsets such
// that every delivered packet is seen downstream within the epoch.
func (t *Traffic) newVariant(r *rand.Rand) (*variant, error) {
	c := t.cfg
	lengthNS := int64(t.params.Epoch.Length)
	var zipf *rand.Zipf
	if c.Flows > 1 {
		zipf = rand.NewZipf(r, 1.1, 1, uint64(c.Flows-1))
	}
	seen := make(map[uint64]struct{}, c.Packets)
	up := make([]packet, 0, c.Packets)
	down := make([]packet, 0, c.Packets)
	var sumNS int64
	delays := make([]int64, 0, c.Packets)
	lost := map[int32]int{}
	for len(up) < c.Packets {
		id := r.Uint64()
		if _, dup := seen[id]; dup || id == 0 {
			continue
		}
		seen[id] = struct{}{}
		var flow int32
		if zipf != nil {
			flow = int32(zipf.Uint64())
		}
		delayNS := emulatedDelay.SampleNS(r)
		if c.Reorder > 0 && r.Float64() < c.Reorder {
			delayNS += 1 + r.Int64N(maxReorderNS)
		}
		delayNS = min(delayNS, lengthNS-1)
		// Sent early enough to arrive within the epoch: no packet
		// crosses into the next one.
		off := r.Int64N(lengthNS - delayNS)
		up = append(up, packet{id: id, offsetNS: off, flow: flow})
		if c.Loss > 0 && r.Float64() < c.Loss {
			lost[flow]++
			continue
		}
		down = append(down, packet{id: id, offsetNS: off + delayNS, flow: flow})
		sumNS += delayNS
		delays = append(delays, delayNS)
	}
	slices.Sort(delays)
	v := &variant{truth: Truth{Sent: len(up), Delivered: len(down), Lost: len(up) - len(down), FlowLost: map[capture.FlowKey]int{}, Delays: delays}}
	for f, n := range lost {
		v.truth.FlowLost[t.flows[f]] = n
	}
	if len(down) > 0 {
		v.truth.MeanNS = float64(sumNS) / float64(len(down))
	}
	var err error
	if v.up, err = t.newSide(up); err != nil {
		return nil, err
	}
	if v.down, err = t.newSide(down); err != nil {
		return nil, err
	}
	return v, nil
}

// newSide builds one side's LDA, LDS and top flows from its packets.
func (t *Traffic) newSide(pkts []packet) (*trafficSide, error) {
	la, err := lda.New(t.params.LDA)
	if err != nil {
		return nil, fmt.Errorf("lda: %w", err)
	}
	ls, err := lds.New(t.params.LDS)
	if err != nil {
		return nil, fmt.Errorf("lds: %w", err)
	}
	perFlow := make([]uint64, len(t.flows))
	for _, p := range pkts {
		la.Insert(p.id, p.offsetNS)
		ls.Insert(t.flowHashes[p.flow], p.id, p.offsetNS, 1)
		perFlow[p.flow]++
	}
	s := &trafficSide{packets: slices.Clone(pkts), rdas: map[int][]byte{}, ldas: map[int][]byte{}, ldss: map[ldsKey][]byte{}, samples: map[sampleKey]*sideSample{}}
	slices.SortFunc(s.packets, func(a, b packet) int { return cmp.Compare(a.id, b.id) })
	s.lda, _ = la.MarshalBinary() // does not fail
	s.lds, _ = ls.MarshalBinary()
	heavy := make([]int, len(t.flows))
	for j := range heavy {
		heavy[j] = j
	}
	slices.SortStableFunc(heavy, func(a, b int) int { return cmp.Compare(perFlow[b], perFlow[a]) })
	for _, j := range heavy[:min(emulatedTopFlows, len(heavy))] {
		if perFlow[j] > 0 {
			s.topFlows = append(s.topFlows, j)
			s.top = append(s.top, topFlow(t.flows[j], perFlow[j], false))
			s.topKeys = append(s.topKeys, topFlow(t.flows[j], perFlow[j], true))
		}
	}
	return s, nil
}

// rda returns the side's RDA at buckets per bank in wire form, built on
// first use from the side's packets and kept (a few sizes).
func (s *trafficSide) rda(cfg rda.Config, buckets int) ([]byte, error) {
	s.sizedMu.Lock()
	defer s.sizedMu.Unlock()
	if b, ok := s.rdas[buckets]; ok {
		return b, nil
	}
	cfg.Buckets = buckets
	r, err := rda.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("rda of %d buckets: %w", buckets, err)
	}
	for _, p := range s.packets {
		r.Insert(p.id, p.offsetNS)
	}
	b, _ := r.MarshalBinary() // does not fail
	if len(s.rdas) >= cachedSizes {
		for k := range s.rdas {
			delete(s.rdas, k) // any one: sizes change seldom
			break
		}
	}
	s.rdas[buckets] = b
	return b, nil
}

// ldaAt returns the side's LDA at rows per bank (0: the parameters'),
// built on first use from the side's packets and kept (a few sizes).
func (s *trafficSide) ldaAt(p lda.Config, rows int) ([]byte, error) {
	if rows == 0 || rows == p.Rows {
		return s.lda, nil
	}
	s.sizedMu.Lock()
	defer s.sizedMu.Unlock()
	if b, ok := s.ldas[rows]; ok {
		return b, nil
	}
	cfg, err := p.WithRows(rows)
	if err != nil {
		return nil, err
	}
	l, _ := lda.New(cfg) // validated by WithRows
	for _, pk := range s.packets {
		l.Insert(pk.id, pk.offsetNS)
	}
	b, _ := l.MarshalBinary() // does not fail
	if len(s.ldas) >= cachedSizes {
		clear(s.ldas) // sizes change seldom
	}
	s.ldas[rows] = b
	return b, nil
}

// ldsKey names an LDS of a side: cells per row, row mask, wire form.
type ldsKey struct {
	cols, rows int
	wire       lds.Wire
}

// ldsAt returns the side's LDS at cols cells per row (0: the
// parameters') and the parameters' rows in the mask rows (0: all) in the
// wire form wire, built on first use from the side's packets and kept (a
// few shapes), as a probe sized by its collector builds it.
func (s *trafficSide) ldsAt(t *Traffic, cols, rows int, wire lds.Wire) ([]byte, error) {
	full := uint32(1)<<t.params.LDS.Rows - 1
	if (cols == 0 || cols == t.params.LDS.Cols) && (rows == 0 || uint32(rows) == full) && wire == lds.DefaultWire {
		return s.lds, nil
	}
	key := ldsKey{cols, rows, wire}
	s.sizedMu.Lock()
	defer s.sizedMu.Unlock()
	if b, ok := s.ldss[key]; ok {
		return b, nil
	}
	cfg, err := ldsShape(t.params.LDS, cols, rows)
	if err != nil {
		return nil, err
	}
	ls, err := lds.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("lds of %d cells per row: %w", cols, err)
	}
	if err := ls.SetWire(wire); err != nil {
		return nil, err
	}
	for _, p := range s.packets {
		ls.Insert(t.flowHashes[p.flow], p.id, p.offsetNS, 1)
	}
	b, _ := ls.MarshalBinary() // does not fail
	if len(s.ldss) >= cachedSizes {
		clear(s.ldss) // sizes change seldom
	}
	s.ldss[key] = b
	return b, nil
}

// sampleAt returns the side's packet sample at 2^-shift with keys of
// keyBits, built as a probe builds it (halved past max entries), and its
// top flows naming their sampled packets; kept for later epochs.
func (s *trafficSide) sampleAt(t *Traffic, shift, keyBits int) (*sideSample, error) {
	key := sampleKey{shift, keyBits}
	s.sizedMu.Lock()
	defer s.sizedMu.Unlock()
	if x, ok := s.samples[key]; ok {
		return x, nil
	}
	cfg, err := sample.ForShift(t.params.Sample.Seed, shift)
	if err != nil {
		return nil, err
	}
	smp, err := sample.New(cfg)
	if err != nil {
		return nil, err
	}
	for _, p := range s.packets {
		if smp.InsertFlow(p.id, t.flowHashes[p.flow], p.offsetNS) && smp.Len() > t.params.Sample.MaxEntries {
			smp.Halve()
		}
	}
	if err := smp.SetKeyBits(keyBits); err != nil {
		return nil, err
	}
	x := &sideSample{}
	if x.wire, err = smp.MarshalBinary(); err != nil {
		return nil, err
	}
	hashes := make([]uint64, len(s.topFlows))
	for i, j := range s.topFlows {
		hashes[i] = t.flowHashes[j]
	}
	positions := smp.FlowPositions(hashes)
	for i, j := range s.topFlows {
		tf, tk := topFlow(t.flows[j], s.top[i].GetPackets(), false), topFlow(t.flows[j], s.top[i].GetPackets(), true)
		tf.SamplePositions, tk.SamplePositions = positions[i], positions[i]
		x.top, x.topKeys = append(x.top, tf), append(x.topKeys, tk)
	}
	if len(s.samples) >= cachedSizes {
		clear(s.samples) // rates change seldom
	}
	s.samples[key] = x
	return x, nil
}

// lookup returns the side's packets of the given IDs (an ID not seen is
// left out).
func (s *trafficSide) lookup(ids []uint64) []packet {
	var out []packet
	for _, id := range ids {
		i, found := slices.BinarySearchFunc(s.packets, id, func(p packet, id uint64) int { return cmp.Compare(p.id, id) })
		for ; found && i < len(s.packets) && s.packets[i].id == id; i++ {
			out = append(out, s.packets[i])
		}
	}
	return out
}

// repeated returns the side's packets whose ID occurs more than once.
func (s *trafficSide) repeated() []packet {
	return repeatedIn(s.packets, func(p packet) uint64 { return p.id })
}

// Params are the parameters the traffic's synopses were built with.
func (t *Traffic) Params() params.Params { return t.params }

// Config is the traffic's shape.
func (t *Traffic) Config() TrafficConfig { return t.cfg }

// Variant is the variant a path's epoch reports: a hash of both, the same
// on every probe, so that the two sides of an epoch match.
func (t *Traffic) Variant(path string, epoch int64) int {
	h := uint64(14695981039346656037) // FNV-1a
	for i := range len(path) {
		h = (h ^ uint64(path[i])) * 1099511628211
	}
	for i := range 8 {
		h = (h ^ uint64(byte(epoch>>(8*i)))) * 1099511628211
	}
	return int(h % uint64(len(t.variants)))
}

// Truth is the truth of a path's epoch.
func (t *Traffic) Truth(path string, epoch int64) Truth {
	return t.variants[t.Variant(path, epoch)].truth
}

// side is what the probe in role saw of a path's epoch.
func (t *Traffic) side(path string, epoch int64, role owlv1.Role) *trafficSide {
	v := t.variants[t.Variant(path, epoch)]
	if role == owlv1.Role_ROLE_DOWNSTREAM {
		return v.down
	}
	return v.up
}

// Emulated is a probe that reports made-up epochs (Traffic) over the real
// probe protocol: a Connect stream to each collector its path
// configuration names, reports spooled until acknowledged, and answers to
// the collectors' fetch and rebuild requests from the epochs' packets. It
// captures nothing: Report queues an epoch when the caller says. Safe for
// concurrent use.
type Emulated struct {
	id        string
	traffic   *Traffic
	log       *slog.Logger
	spool     *spool
	router    *router
	ready     chan struct{} // closed when the first path configuration came
	readyOnce sync.Once

	pathsMu sync.Mutex // guards paths, roles and buckets
	paths   []emulatedPath
	roles   map[string]owlv1.Role
	buckets map[string]int // RDA buckets per bank the collector set, by path
	ldsCols sync.Map       // path name → LDS cells per row the collector set (scheduled)
	ldsRows sync.Map       // path name → mask of the LDS rows the collector set (scheduled with ldsCols)
	ldsOff  sync.Map       // path name → 1 while the collector asked for no LDS (scheduled)
	ldaRows sync.Map       // path name → LDA rows per bank the collector set (scheduled)
	shifts  sync.Map       // path name → sampling shift the collector set (scheduled)
	// ldsWire is the LDS wire form the collector reads (version 1 until
	// it says).
	ldsWire atomic.Pointer[lds.Wire]
	// packedKeys: the collector reads top flows' keys packed.
	packedKeys atomic.Bool
	// sampleKeyBits is the collector's sample_key_bits (0: all).
	sampleKeyBits atomic.Int32

	reports, bytes, fetches, rebuilds, releases, repairErrors atomic.Uint64
	reported                                                  atomic.Int64 // the newest epoch reported
}

// emulatedPath is a path assigned to an emulated probe.
type emulatedPath struct {
	name string
	role owlv1.Role
}

var _ handler = (*Emulated)(nil)

// The spool of an emulated probe holds 64 epochs' reports. Its byte bound
// counts each report's wire size, but the reports of a variant share their
// synopses' bytes, so the memory held is far smaller: the epochs bound it.
const (
	emulatedSpoolEpochs = 64
	emulatedSpoolBytes  = 16 << 30
	emulatedReconnect   = 5 * time.Second
)

// NewEmulated returns an emulated probe named id that connects to the
// collector at collector (any member of a cluster) and reports t's epochs.
// Run starts it.
func NewEmulated(id, collector string, t *Traffic, log *slog.Logger) *Emulated {
	e := &Emulated{id: id, traffic: t, log: log, ready: make(chan struct{}), roles: map[string]owlv1.Role{}, buckets: map[string]int{}}
	e.spool = newSpool(emulatedSpoolEpochs, emulatedSpoolBytes)
	e.spool.log = log
	e.router = newRouter(collector, nil, log, func() *client {
		return &client{log: log, spool: e.spool, reconnectMax: emulatedReconnect, h: e}
	})
	return e
}

// Gzip makes the probe gzip its streams (Config.Gzip); call it before Run.
func (e *Emulated) Gzip(on bool) { e.router.gzip = on }

// Run keeps the streams to the collectors going until ctx ends or a
// collector rejects the probe (a *RejectedError).
func (e *Emulated) Run(ctx context.Context) error {
	if err := e.router.run(ctx); err != nil {
		return fmt.Errorf("probe %s: %w", e.id, err)
	}
	return nil
}

// Ready is closed once a collector sent the probe its path configuration.
func (e *Emulated) Ready() <-chan struct{} { return e.ready }

// Connected says whether every collector the probe sends to has an open
// stream.
func (e *Emulated) Connected() bool { return e.router.connected() }

// Assigned returns the probe's paths and its role on each, as the
// collector configured them.
func (e *Emulated) Assigned() map[string]owlv1.Role {
	e.pathsMu.Lock()
	defer e.pathsMu.Unlock()
	out := make(map[string]owlv1.Role, len(e.roles))
	for k, v := range e.roles {
		out[k] = v
	}
	return out
}

// Report queues the probe's report of epoch for each of its paths (its
// role's side of the path's variant), closed now, and returns how many it
// queued.
func (e *Emulated) Report(epoch int64) int {
	e.pathsMu.Lock()
	paths := e.paths // replaced, never changed in place
	e.pathsMu.Unlock()
	now := time.Now().UnixNano()
	clock := clockToProto(e.clock(now))
	for old := e.reported.Load(); epoch > old && !e.reported.CompareAndSwap(old, epoch); old = e.reported.Load() {
	}
	n := 0
	for _, a := range paths {
		r, err := e.report(a, epoch)
		if err != nil {
			e.log.Error("cannot make an emulated report", "probe", e.id, "path", a.name, "epoch", epoch, "err", err)
			continue
		}
		r.Clock, r.ClosedUnixNs = clock, now
		e.bytes.Add(uint64(proto.Size(r)))
		e.reports.Add(1)
		e.spool.add(r)
		n++
	}
	return n
}

// report makes the report of one path's epoch, at the path's RDA size.
func (e *Emulated) report(a emulatedPath, epoch int64) (*owlv1.EpochReport, error) {
	s := e.traffic.side(a.name, epoch, a.role)
	rb, err := s.rda(e.traffic.params.RDA, e.bucketsOf(a.name))
	if err != nil {
		return nil, err
	}
	wire := lds.DefaultWire // until the path configuration comes
	if w := e.ldsWire.Load(); w != nil {
		wire = *w
	}
	var lb []byte
	if setting(&e.ldsOff, a.name, epoch) == 0 {
		if lb, err = s.ldsAt(e.traffic, setting(&e.ldsCols, a.name, epoch), setting(&e.ldsRows, a.name, epoch), wire); err != nil {
			return nil, err
		}
	}
	la, err := s.ldaAt(e.traffic.params.LDA, setting(&e.ldaRows, a.name, epoch))
	if err != nil {
		return nil, err
	}
	top, topKeys, smp := s.top, s.topKeys, []byte(nil)
	if e.traffic.params.Sample.Target > 0 {
		shift := setting(&e.shifts, a.name, epoch)
		x, err := s.sampleAt(e.traffic, shift, keyBits(shift, int(e.sampleKeyBits.Load())))
		if err != nil {
			return nil, err
		}
		top, topKeys, smp = x.top, x.topKeys, x.wire
	}
	if e.packedKeys.Load() {
		top = topKeys
	}
	return &owlv1.EpochReport{
		Path: a.name, Epoch: epoch, Role: a.role,
		Lda: la, Rda: rb, Lds: lb, TopFlows: top, Sample: smp,
		Counters:     &owlv1.Counters{Packets: uint64(len(s.packets))},
		CacheEntries: uint64(len(s.packets)), CacheComplete: true,
	}, nil
}

// bucketsOf is the RDA size the collector last set for a path.
func (e *Emulated) bucketsOf(path string) int {
	e.pathsMu.Lock()
	defer e.pathsMu.Unlock()
	if b, ok := e.buckets[path]; ok {
		return b
	}
	return e.traffic.params.RDA.Buckets
}

// EmulatedStats are an emulated probe's totals.
type EmulatedStats struct {
	// Reports counts the reports queued, Bytes their wire size.
	Reports, Bytes uint64
	// Unacked counts the reports not yet acknowledged, Dropped those a
	// full spool dropped unacknowledged.
	Unacked int
	Dropped uint64
	// Fetches and Rebuilds count the collectors' requests answered,
	// RepairErrors those answered with an error; Releases the epochs the
	// collectors were done with.
	Fetches, Rebuilds, RepairErrors, Releases uint64
	// Sessions counts the streams opened, Pauses the times a collector
	// asked for no more reports for a while.
	Sessions, Pauses uint64
}

// Acked is the number of reports the collectors acknowledged.
func (s EmulatedStats) Acked() uint64 {
	return s.Reports - min(s.Reports, uint64(s.Unacked)+s.Dropped)
}

// Stats returns the probe's totals so far.
func (e *Emulated) Stats() EmulatedStats {
	sessions, pauses := e.router.sessionsAndPauses()
	return EmulatedStats{
		Sessions: sessions, Pauses: pauses,
		Reports: e.reports.Load(), Bytes: e.bytes.Load(),
		Unacked: e.spool.len(), Dropped: e.spool.droppedTotal(),
		Fetches: e.fetches.Load(), Rebuilds: e.rebuilds.Load(), RepairErrors: e.repairErrors.Load(),
		Releases: e.releases.Load(),
	}
}

// clock is the emulated probe's clock: synchronized, exact.
func (e *Emulated) clock(atNS int64) ptp.Status {
	return ptp.Status{Source: "load", State: ptp.StateSynchronized, AtNS: atNS, Detail: "emulated probe: made-up timestamps"}
}

// hello introduces the probe: the traffic's parameters, a synchronized
// clock.
func (e *Emulated) hello() *owlv1.Hello {
	// Made-up epochs are a replay: the load generator sends past ones.
	return &owlv1.Hello{ProbeId: e.id, Version: buildinfo.Version(), Params: e.traffic.params.ToProto(), Clock: e.clockStatus(), Replay: true}
}

// clockStatus is the emulated clock's status now.
func (e *Emulated) clockStatus() *owlv1.ClockStatus {
	return clockToProto(e.clock(time.Now().UnixNano()))
}

// setPaths takes a path configuration from a collector.
func (e *Emulated) setPaths(pc *owlv1.PathConfig) error {
	var paths []emulatedPath
	roles := map[string]owlv1.Role{}
	sizes := map[string]int{}
	wire, err := ldsWireOf(pc)
	if err != nil {
		return err
	}
	e.ldsWire.Store(&wire)
	e.packedKeys.Store(pc.GetPackedFlowKeys())
	e.sampleKeyBits.Store(int32(pc.GetSampleKeyBits()))
	for _, a := range pc.GetPaths() {
		name, role := a.GetPath().GetName(), a.GetRole()
		if role != owlv1.Role_ROLE_UPSTREAM && role != owlv1.Role_ROLE_DOWNSTREAM {
			return fmt.Errorf("path %q: role %v", name, role)
		}
		if _, dup := roles[name]; !dup {
			paths = append(paths, emulatedPath{name: name, role: role})
		}
		roles[name] = role
		if a.GetNotOwner() {
			continue // the owner's sizes stand
		}
		if b := a.GetRdaBuckets(); b > 0 {
			if err := e.checkBuckets(int(b)); err != nil {
				return fmt.Errorf("path %q: %w", name, err)
			}
			sizes[name] = int(b)
		}
		if c, r := int(a.GetLdsCols()), int(a.GetLdsRows()); c > 0 {
			if _, err := ldsShape(e.traffic.params.LDS, c, r); err == nil {
				scheduleAt(&e.ldsCols, name, c, 0, 0)
				scheduleAt(&e.ldsRows, name, r, 0, 0)
			}
		}
		scheduleAt(&e.ldsOff, name, boolSetting(a.GetLdsOff()), 0, 0)
		if sh := a.GetSampleShift(); sh <= sample.MaxShift {
			scheduleAt(&e.shifts, name, int(sh), 0, 0)
		}
		if r := int(a.GetLdaRows()); r > 0 {
			if _, err := e.traffic.params.LDA.WithRows(r); err == nil {
				scheduleAt(&e.ldaRows, name, r, 0, 0)
			}
		}
	}
	e.pathsMu.Lock()
	e.paths, e.roles = paths, roles
	for k, v := range sizes {
		e.buckets[k] = v
	}
	e.pathsMu.Unlock()
	e.router.update(pc)
	e.readyOnce.Do(func() { close(e.ready) })
	return nil
}

// checkBuckets reports an RDA size the parameters do not allow.
func (e *Emulated) checkBuckets(buckets int) error {
	c := e.traffic.params.RDA
	c.Buckets = buckets
	return c.Validate()
}

// setSampleRate takes a path's new sampling rate from its collector, from
// the epoch it names.
func (e *Emulated) setSampleRate(m *owlv1.SampleRate) error {
	if m.GetShift() > sample.MaxShift {
		return fmt.Errorf("sampling shift %d exceeds %d", m.GetShift(), sample.MaxShift)
	}
	scheduleAt(&e.shifts, m.GetPath(), int(m.GetShift()), m.GetFromEpoch(), e.reported.Load())
	return nil
}

// setLDSSize takes a path's new LDS size from its collector, from the
// epoch it names.
func (e *Emulated) setLDSSize(m *owlv1.LDSSize) error {
	if err := checkLDSSize(e.traffic.params.LDS, int(m.GetCols()), int(m.GetRows())); err != nil {
		return err
	}
	scheduleAt(&e.ldsCols, m.GetPath(), int(m.GetCols()), m.GetFromEpoch(), e.reported.Load())
	scheduleAt(&e.ldsRows, m.GetPath(), int(m.GetRows()), m.GetFromEpoch(), e.reported.Load())
	scheduleAt(&e.ldsOff, m.GetPath(), boolSetting(m.GetOff()), m.GetFromEpoch(), e.reported.Load())
	return nil
}

// setLDASize takes a path's new LDA rows from its collector, from the
// epoch it names.
func (e *Emulated) setLDASize(m *owlv1.LDASize) error {
	if _, err := e.traffic.params.LDA.WithRows(int(m.GetRows())); err != nil {
		return err
	}
	scheduleAt(&e.ldaRows, m.GetPath(), int(m.GetRows()), m.GetFromEpoch(), e.reported.Load())
	return nil
}

// setRDASize takes a path's new RDA size from its collector.
func (e *Emulated) setRDASize(m *owlv1.RDASize) error {
	if err := e.checkBuckets(int(m.GetBuckets())); err != nil {
		return err
	}
	e.pathsMu.Lock()
	e.buckets[m.GetPath()] = int(m.GetBuckets())
	e.pathsMu.Unlock()
	return nil
}

// errNotAssigned says a request named a path the probe does not report.
var errNotAssigned = errors.New("not one of the probe's paths")

// sideOf is the probe's side of a path's epoch.
func (e *Emulated) sideOf(path string, epoch int64) (*trafficSide, error) {
	e.pathsMu.Lock()
	role, ok := e.roles[path]
	e.pathsMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("path %q: %w", path, errNotAssigned)
	}
	return e.traffic.side(path, epoch, role), nil
}

// fetch answers a FetchRequest from the epoch's packets, with offsets
// from the epoch's start as a probe's cache keeps them.
func (e *Emulated) fetch(req *owlv1.FetchRequest) *owlv1.FetchReply {
	e.fetches.Add(1)
	rep := &owlv1.FetchReply{RequestId: req.GetRequestId()}
	s, err := e.sideOf(req.GetPath(), req.GetEpoch())
	if err != nil {
		e.repairErrors.Add(1)
		rep.Error = err.Error()
		return rep
	}
	var pkts []packet
	if req.GetRepeated() {
		pkts = s.repeated()
	} else {
		pkts = s.lookup(req.GetPacketIds())
	}
	for _, p := range pkts {
		rep.PacketIds = append(rep.PacketIds, p.id)
		rep.OffsetsNs = append(rep.OffsetsNs, p.offsetNS)
		rep.FlowHashes = append(rep.FlowHashes, e.traffic.flowHashes[p.flow])
		rep.Weights = append(rep.Weights, 1)
	}
	return rep
}

// rebuild answers a RebuildRequest with the epoch's RDA at the size asked.
func (e *Emulated) rebuild(req *owlv1.RebuildRequest) *owlv1.RebuildReply {
	e.rebuilds.Add(1)
	rep := &owlv1.RebuildReply{RequestId: req.GetRequestId()}
	s, err := e.sideOf(req.GetPath(), req.GetEpoch())
	if err == nil {
		rep.Rda, err = s.rda(e.traffic.params.RDA, int(req.GetBuckets()))
	}
	if err != nil {
		e.repairErrors.Add(1)
		rep.Error = err.Error()
	}
	return rep
}

// release counts an epoch the collector is done with: the emulated probe
// keeps nothing per epoch.
func (e *Emulated) release(string, int64) { e.releases.Add(1) }
