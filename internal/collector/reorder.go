package collector

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/synopsis/reorder"
)

// ReorderConfig sets how the probes' reordering reports (TCP reordering
// by prefix at each probe) are kept and exported.
type ReorderConfig struct {
	// Retention is how far back from a probe's newest reordering report
	// its reports are kept (epochs more than max_epoch_ahead ahead of
	// the collector's clock are refused, so one report cannot push the
	// rest out).
	Retention time.Duration `yaml:"retention"`
	// MetricsTop is how many prefixes of each probe get Prometheus
	// series: those with the highest reordering rate over the probe's
	// latest MetricsWindow, of at least MetricsMinPackets packets (0:
	// none).
	MetricsTop int `yaml:"metrics_top"`
	// MetricsWindow is the span of a probe's latest epochs the series
	// sum.
	MetricsWindow time.Duration `yaml:"metrics_window"`
	// MetricsMinPackets is the packets measured over the window a prefix
	// needs for a series: a rate of a few packets says little.
	MetricsMinPackets uint64 `yaml:"metrics_min_packets"`
}

// DefaultReorderConfig keeps a day, and exports the 10 worst prefixes of
// each probe over its last minute among those of 1,000 packets or more.
func DefaultReorderConfig() ReorderConfig {
	return ReorderConfig{Retention: 24 * time.Hour, MetricsTop: 10, MetricsWindow: time.Minute, MetricsMinPackets: 1000}
}

// Validate reports a retention or a metrics window shorter than an epoch
// (epochLen), a window over an hour, or a metrics_top out of range.
func (c ReorderConfig) Validate(epochLen time.Duration) error {
	switch {
	case c.Retention < epochLen:
		return fmt.Errorf("retention %v is shorter than an epoch (%v)", c.Retention, epochLen)
	case c.MetricsTop < 0 || c.MetricsTop > 1000:
		return fmt.Errorf("metrics_top %d out of [0, 1000]", c.MetricsTop)
	case c.MetricsWindow < epochLen || c.MetricsWindow > time.Hour:
		return fmt.Errorf("metrics_window %v out of [an epoch (%v), 1h]", c.MetricsWindow, epochLen)
	}
	return nil
}

// takeReorder checks and stores a probe's reordering report. Like RTT
// reports and COLATE vectors, it is the probe's own, not a path's: it
// goes to the member that owns the COLATE vectors.
func (c *Collector) takeReorder(probe string, r *owlv1.ReorderReport) error {
	if owner, self := c.owner(colateKey); !self {
		c.m.rejected.WithLabelValues("not_owner").Inc()
		return &notOwner{key: colateKey, owner: owner}
	}
	if err := c.checkEpoch(probe, epochOf{kind: "reordering report of"}, r.GetEpoch()); err != nil {
		return err
	}
	rep, err := reorder.FromProto(r)
	if err != nil {
		c.m.rejected.WithLabelValues("malformed").Inc()
		return &rejection{fmt.Sprintf("reordering report of epoch %d: %v", r.GetEpoch(), err)}
	}
	keep := r.GetEpoch() - int64(c.cfg.Reorder.Retention/c.cfg.Params.Epoch.Length)
	if err := c.store.PutReorder(probe, r, keep); err != nil {
		return fmt.Errorf("storing reordering report: %w", err)
	}
	c.reorders.observe(probe, r.GetEpoch(), rep.Prefixes)
	return nil
}

// prefixSum is one prefix's counts over a range of epochs.
type prefixSum struct {
	reorder.Stats
	epochs uint32
}

// rankReordered lists the prefixes of sums with at least minPackets
// packets and a rate of at least minRate, by rate, worst first (ties:
// more packets, then by prefix).
func rankReordered(sums map[netip.Prefix]*prefixSum, minRate float64, minPackets uint64) []reorder.PrefixStats {
	var out []reorder.PrefixStats
	for p, s := range sums {
		if s.Packets > 0 && s.Packets >= minPackets && s.Rate() >= minRate {
			out = append(out, reorder.PrefixStats{Prefix: p, Stats: s.Stats})
		}
	}
	slices.SortFunc(out, func(a, b reorder.PrefixStats) int {
		return cmp.Or(cmp.Compare(b.Rate(), a.Rate()), cmp.Compare(b.Packets, a.Packets),
			a.Prefix.Addr().Compare(b.Prefix.Addr()), cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits()))
	})
	return out
}

// maxReorderPrefixesSummed bounds the prefixes one answer sums apart;
// the rest go into other.
const maxReorderPrefixesSummed = 1 << 16

// reorderSums is a probe's reordering reports of a range, summed.
type reorderSums struct {
	byPrefix   map[netip.Prefix]*prefixSum
	other      reorder.Stats
	counters   owlv1.ReorderCounters
	reports    int
	unreadable int // stored reports that did not read back
	pastBound  int // prefixes summed in other past maxReorderPrefixesSummed
}

// sumReorder sums a probe's reordering reports of epochs [lo, hi].
func (c *Collector) sumReorder(ctx context.Context, probe string, lo, hi int64) (*reorderSums, error) {
	out := &reorderSums{byPrefix: map[netip.Prefix]*prefixSum{}}
	past := map[netip.Prefix]bool{}
	err := c.store.ReorderReports(probe, lo, hi, func(m *owlv1.ReorderReport) bool {
		out.reports++
		r, err := reorder.FromProto(m)
		if err != nil {
			out.unreadable++
			return true
		}
		for _, p := range r.Prefixes {
			s := out.byPrefix[p.Prefix]
			if s == nil && len(out.byPrefix) >= maxReorderPrefixesSummed {
				out.other.Add(p.Stats)
				past[p.Prefix] = true
				continue
			}
			if s == nil {
				s = &prefixSum{}
				out.byPrefix[p.Prefix] = s
			}
			s.Add(p.Stats)
			s.epochs++
		}
		out.other.Add(r.Other)
		addReorderCounters(&out.counters, m.GetCounters())
		return out.reports%1024 != 0 || ctx.Err() == nil
	})
	out.pastBound = len(past)
	if err == nil {
		err = ctx.Err()
	}
	return out, err
}

// addReorderCounters adds b to a.
func addReorderCounters(a, b *owlv1.ReorderCounters) {
	a.Packets += b.GetPackets()
	a.Segments += b.GetSegments()
	a.Windows += b.GetWindows()
	a.Refused += b.GetRefused()
	a.Quota += b.GetQuota()
	a.PrefixFull += b.GetPrefixFull()
	a.Promoted += b.GetPromoted()
	a.Demoted += b.GetDemoted()
}

// reorderedPrefix is a prefix's answer ("" for other and total).
func reorderedPrefix(prefix string, s reorder.Stats, epochs uint32) *owlv1.ReorderedPrefix {
	return &owlv1.ReorderedPrefix{Prefix: prefix, Packets: s.Packets, Reordered: s.Reordered, Retransmitted: s.Retransmitted,
		Flows: s.Flows, Rate: s.Rate(), RateSe: s.RateSE(), Epochs: epochs}
}

// Bounds of ListReorderedPrefixes' limit.
const (
	defaultReorderedListed = 100
	maxReorderedListed     = 1000
)

func (s queryService) ListReorderedPrefixes(ctx context.Context, req *owlv1.ListReorderedPrefixesRequest) (*owlv1.ListReorderedPrefixesResponse, error) {
	if r, ok, err := toOwner(ctx, s.c, colateKey, func(ctx context.Context, q owlv1.QueryServiceClient) (*owlv1.ListReorderedPrefixesResponse, error) {
		return q.ListReorderedPrefixes(ctx, req)
	}); ok {
		return r, err
	}
	if req.GetProbe() == "" {
		return nil, status.Error(codes.InvalidArgument, "probe is required")
	}
	if r := req.GetMinRate(); !(r >= 0 && r <= 1) {
		return nil, status.Errorf(codes.InvalidArgument, "min_rate %v out of [0, 1]: a share of the packets", r)
	}
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = defaultReorderedListed
	}
	limit = min(limit, maxReorderedListed)
	lo, hi, err := epochRange(s.c.cfg.Params.Epoch, req.GetFrom(), req.GetTo())
	if err != nil {
		return nil, err
	}
	sums, err := s.c.sumReorder(ctx, req.GetProbe(), lo, hi)
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Internal, "reading reordering reports: %v", err)
	}
	ranked := rankReordered(sums.byPrefix, req.GetMinRate(), req.GetMinPackets())
	out := &owlv1.ListReorderedPrefixesResponse{Epochs: uint32(sums.reports), Matched: uint32(len(ranked)), Counters: &sums.counters}
	total := sums.other
	for _, ps := range sums.byPrefix {
		total.Add(ps.Stats)
	}
	// An empty sum has no rate: other and total are left out.
	if sums.other.Packets > 0 {
		out.Other = reorderedPrefix("", sums.other, 0)
	}
	if total.Packets > 0 {
		out.Total = reorderedPrefix("", total, 0)
	}
	for _, p := range ranked[:min(limit, len(ranked))] {
		out.Prefixes = append(out.Prefixes, reorderedPrefix(p.Prefix.String(), p.Stats, sums.byPrefix[p.Prefix].epochs))
	}
	var notes []string
	if sums.reports == 0 {
		notes = append(notes, fmt.Sprintf("no reordering report of probe %q in the range", req.GetProbe()))
	}
	if sums.unreadable > 0 {
		notes = append(notes, fmt.Sprintf("%d reports could not be read", sums.unreadable))
	}
	if sums.pastBound > 0 {
		notes = append(notes, fmt.Sprintf("%d prefixes past the bound of %d on one answer are summed in other", sums.pastBound, maxReorderPrefixesSummed))
	}
	out.Note = strings.Join(notes, "; ")
	return out, nil
}

// maxReorderWindowEntries bounds the prefix entries a probe's metrics
// window holds: past it the oldest epochs of the window go.
const maxReorderWindowEntries = 1 << 16

// reorderTop exports the worst prefixes of each probe: it keeps each
// probe's reports of its latest window (cfg.MetricsWindow) and, at each
// new report, sets the series of the probe's cfg.MetricsTop worst
// prefixes over it and deletes the series of those no longer among them,
// so that a probe has at most MetricsTop. Safe for concurrent use.
type reorderTop struct {
	cfg          ReorderConfig
	windowEpochs int64
	rate, se     *prometheus.GaugeVec
	packets      *prometheus.GaugeVec

	probesMu sync.Mutex // guards probes and the series set
	probes   map[string]*reorderWindow
}

// reorderWindow is one probe's latest reports and its series.
type reorderWindow struct {
	newest  int64
	reports map[int64][]reorder.PrefixStats
	entries int      // prefix entries in reports
	labels  []string // prefixes with series
}

// newReorderTop registers the series of the worst prefixes on reg.
func newReorderTop(cfg ReorderConfig, epochLen time.Duration, reg prometheus.Registerer) *reorderTop {
	t := &reorderTop{cfg: cfg, windowEpochs: max(int64(cfg.MetricsWindow/epochLen), 1), probes: map[string]*reorderWindow{}}
	labels := []string{"probe", "prefix"}
	t.rate = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_probe_reordered_prefix_rate",
		Help: "Share of the TCP segments of a prefix that came reordered at a probe, over its latest reorder.metrics_window; the reorder.metrics_top worst prefixes of each probe with reorder.metrics_min_packets packets measured or more."}, labels)
	t.se = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_probe_reordered_prefix_rate_stderr",
		Help: "Standard error of owl_probe_reordered_prefix_rate (from the spread between the flows measured)."}, labels)
	t.packets = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_probe_reordered_prefix_packets",
		Help: "TCP segments of the prefix measured over the window, behind owl_probe_reordered_prefix_rate."}, labels)
	reg.MustRegister(t.rate, t.se, t.packets)
	return t
}

// observe takes a probe's report of an epoch and updates its series. A
// report older than the probe's window changes nothing.
func (t *reorderTop) observe(probe string, epoch int64, prefixes []reorder.PrefixStats) {
	if t.cfg.MetricsTop == 0 {
		return
	}
	t.probesMu.Lock()
	defer t.probesMu.Unlock()
	w := t.probes[probe]
	if w == nil {
		w = &reorderWindow{newest: epoch, reports: map[int64][]reorder.PrefixStats{}}
		t.probes[probe] = w
	}
	if epoch <= w.newest-t.windowEpochs {
		return
	}
	w.entries += len(prefixes) - len(w.reports[epoch])
	w.reports[epoch] = prefixes
	w.newest = max(w.newest, epoch)
	for e, ps := range w.reports {
		if e <= w.newest-t.windowEpochs {
			w.entries -= len(ps)
			delete(w.reports, e)
		}
	}
	for w.entries > maxReorderWindowEntries && len(w.reports) > 1 {
		oldest := slices.Min(slices.Collect(maps.Keys(w.reports)))
		w.entries -= len(w.reports[oldest])
		delete(w.reports, oldest)
	}
	t.export(probe, w)
}

// export sets a probe's series from its window. t.probesMu is held.
func (t *reorderTop) export(probe string, w *reorderWindow) {
	sums := map[netip.Prefix]*prefixSum{}
	for _, ps := range w.reports {
		for _, p := range ps {
			s := sums[p.Prefix]
			if s == nil {
				s = &prefixSum{}
				sums[p.Prefix] = s
			}
			s.Add(p.Stats)
		}
	}
	ranked := rankReordered(sums, 0, t.cfg.MetricsMinPackets)
	ranked = ranked[:min(t.cfg.MetricsTop, len(ranked))]
	now := make([]string, 0, len(ranked))
	for _, p := range ranked {
		l := p.Prefix.String()
		now = append(now, l)
		t.rate.WithLabelValues(probe, l).Set(p.Rate())
		t.se.WithLabelValues(probe, l).Set(p.RateSE())
		t.packets.WithLabelValues(probe, l).Set(float64(p.Packets))
	}
	for _, l := range w.labels {
		if !slices.Contains(now, l) {
			t.rate.DeleteLabelValues(probe, l)
			t.se.DeleteLabelValues(probe, l)
			t.packets.DeleteLabelValues(probe, l)
		}
	}
	w.labels = now
}
