package collector

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/encoding/protowire"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/rda"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// The bounds the collector keeps to against what comes from outside:
// epochs no probe can have closed, more probe ids than it can keep,
// reports faster than it can take, synopses larger than it asked for, one
// probe's lone sides filling the pending budget, watchers that never
// read. Each refusal is clear to the sender, counted and logged.

// LimitsConfig bounds what probes and readers may make the collector hold
// or do.
type LimitsConfig struct {
	// MaxEpochAge is how far back a live probe's epochs may end, by the
	// collector's clock: older reports are rejected. It covers what a
	// probe's spool holds after an outage of the collector (3600 epochs
	// of 1 s by default) and a probe restarted on its disk spool within
	// a day. Probes that replay files (their Hello says so) may send
	// epochs of any age.
	MaxEpochAge time.Duration `yaml:"max_epoch_age"`
	// MaxEpochAhead is how far ahead of the collector's clock any
	// probe's epoch may start: a probe never reports an epoch before it
	// closes, so only a wrong clock (or a forgery) gets there.
	MaxEpochAhead time.Duration `yaml:"max_epoch_ahead"`
	// MaxProbes bounds the probe ids the collector keeps (connected or
	// not). A new id past it is refused, unless a path names it: those
	// are always taken.
	MaxProbes int `yaml:"max_probes"`
	// ForgetProbesAfter forgets a probe no path names once it has been
	// disconnected this long, with its per-probe metric series.
	ForgetProbesAfter time.Duration `yaml:"forget_probes_after"`
	// MaxStreamsPerProbe bounds the streams one probe id may have open at
	// once, each with its own reports in flight: a probe needs one per
	// collector it reports to (which may name this one twice) and one
	// more while it reconnects. A stream past it is refused at its Hello.
	MaxStreamsPerProbe int `yaml:"max_streams_per_probe"`
	// ReportsPerSecond bounds the reports and COLATE vectors (together)
	// one probe's stream is read at (bursts of as many): past it the
	// collector waits before reading on, which slows the probe down
	// without cutting it off (counted in
	// owl_collector_report_rate_wait_seconds_total). 0: no bound.
	ReportsPerSecond float64 `yaml:"reports_per_second"`
	// MaxWatchers bounds the WatchPathStats streams open at once. In a
	// cluster a watcher of one member watches every other too, and counts
	// there as well.
	MaxWatchers int `yaml:"max_watchers"`
	// MaxPendingShare is the share of max_pending_bytes the reports of
	// one probe may hold while they wait for their other side or their
	// worker: past it that probe is paused, or, if it does not pause, its
	// reports are turned away unacknowledged (it sends them later), while
	// the other probes' are taken.
	MaxPendingShare float64 `yaml:"max_pending_share"`
}

// DefaultLimits are the limits DefaultConfig sets.
func DefaultLimits() LimitsConfig {
	return LimitsConfig{
		MaxEpochAge:        24 * time.Hour,
		MaxEpochAhead:      time.Minute,
		MaxProbes:          1000,
		ForgetProbesAfter:  time.Hour,
		MaxStreamsPerProbe: 8,
		ReportsPerSecond:   2000,
		MaxWatchers:        256,
		MaxPendingShare:    0.5,
	}
}

// Validate reports limits out of range; epochLen is the epoch length.
func (l LimitsConfig) Validate(epochLen time.Duration) error {
	if l.MaxEpochAge < max(time.Minute, 2*epochLen) || l.MaxEpochAhead < 0 {
		return fmt.Errorf("max_epoch_age %v must be at least a minute and two epochs, max_epoch_ahead %v not negative", l.MaxEpochAge, l.MaxEpochAhead)
	}
	if l.MaxProbes < 1 || l.ForgetProbesAfter <= 0 {
		return fmt.Errorf("max_probes %d and forget_probes_after %v must be positive", l.MaxProbes, l.ForgetProbesAfter)
	}
	if l.ReportsPerSecond < 0 || math.IsNaN(l.ReportsPerSecond) || l.MaxWatchers < 1 {
		return fmt.Errorf("reports_per_second %v must not be negative and max_watchers %d must be positive", l.ReportsPerSecond, l.MaxWatchers)
	}
	if l.MaxStreamsPerProbe < 1 {
		return fmt.Errorf("max_streams_per_probe %d must be positive", l.MaxStreamsPerProbe)
	}
	if !(l.MaxPendingShare > 0 && l.MaxPendingShare <= 1) {
		return fmt.Errorf("max_pending_share %v out of range (0, 1]", l.MaxPendingShare)
	}
	return nil
}

// validateMessageSize checks that the largest report the configuration
// lets a probe send fits max_message_bytes: otherwise the collector would
// ask for RDAs it cannot receive.
func (c Config) validateMessageSize() error {
	buckets := c.maxRDABuckets()
	if n := maxReportBytes(c.Params, buckets); n > c.MaxMessageBytes {
		fit := buckets
		for fit > 1 && maxReportBytes(c.Params, fit) > c.MaxMessageBytes {
			fit = fit * 7 / 8
		}
		return fmt.Errorf("the largest report (RDA at rda.max_buckets %d, LDA and LDS at params, %d top flows) takes %d bytes, over max_message_bytes %d: lower rda.max_buckets (to about %d) or raise max_message_bytes",
			buckets, maxTopFlows, n, c.MaxMessageBytes, fit)
	}
	return nil
}

// maxRDABuckets is the largest RDA (buckets per bank) a report may hold:
// what late binding asks for at most, or the size probes start from.
func (c Config) maxRDABuckets() int { return max(c.RDA.MaxBuckets, c.Params.RDA.Buckets) }

// Bounds of the wire forms' fields (see each synopsis's AppendBinary).
const (
	maxVarint   = binary.MaxVarintLen64
	envelope    = 5 // "OWL", kind, version
	maxPathName = 128
	// maxFlowAddr is the longest text form of an address (an IPv6
	// address with an embedded IPv4 one).
	maxFlowAddr = len("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255")
	// reportExtra bounds what a report holds besides its synopses and top
	// flows: its path, counters, clock status and partial note.
	reportExtra = 64 << 10
)

// maxReportBytes is the wire size of the largest report a probe that keeps
// to p sends, with an RDA of rdaBuckets per bank and maxTopFlows top
// flows, every counter at its longest encoding, in its ProbeMessage.
func maxReportBytes(p params.Params, rdaBuckets int) int {
	ldaBytes := envelope + maxVarint + 1 + len(p.LDA.BankSampleLog2) + 8 +
		len(p.LDA.BankSampleLog2)*p.LDA.Rows*(2*maxVarint)
	perBucket := 8 + 2*maxVarint
	if p.RDA.Check {
		perBucket += 4
	}
	rdaBytes := envelope + 2 + maxVarint + 8 + p.RDA.Banks*rdaBuckets*perBucket
	ldsBytes := envelope + 1 + maxVarint + 2 + len(p.LDS.RowSampleLog2) + 8 +
		p.LDS.Rows*p.LDS.Cols*(2*maxVarint+8)
	flowKey := 2*protowire.SizeBytes(maxFlowAddr) + 3*(1+protowire.SizeVarint(math.MaxUint32)) + 2
	topFlow := 1 + protowire.SizeBytes(flowKey) + 1 + protowire.SizeVarint(math.MaxUint64)
	sampleBytes := envelope + 16 + maxVarint + p.Sample.MaxEntries*2*maxVarint
	n := 1 + protowire.SizeBytes(ldaBytes) + 1 + protowire.SizeBytes(rdaBytes) + 1 + protowire.SizeBytes(ldsBytes) +
		1 + protowire.SizeBytes(sampleBytes) +
		maxTopFlows*(1+protowire.SizeBytes(topFlow)) + 1 + protowire.SizeBytes(maxPathName) + reportExtra
	return 1 + protowire.SizeBytes(n) // ProbeMessage.report
}

// Epochs no probe can have measured: before this or after that.
var (
	earliestEpochStart = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	latestEpochStart   = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// epochBounds are the first and last epochs of ep that start within the
// years probes can measure. Any epoch between has a start (and an end)
// that nanoseconds since 1970 hold.
func epochBounds(ep epoch.Config) (first, last int64) {
	first, off := ep.Of(earliestEpochStart.UnixNano())
	if off > 0 {
		first++
	}
	last, _ = ep.Of(latestEpochStart.UnixNano())
	return first, last
}

// checkEpoch rejects an epoch a probe cannot have closed: one that does
// not start between 2000 and 2200, one that starts more than
// max_epoch_ahead after the collector's clock, or, from a live probe, one
// that ended more than max_epoch_age before it. what names the report's
// path or the kind of report for the reason (epochOf). A probe the registry does not
// know (no Hello: tests) is held to the first two only.
func (c *Collector) checkEpoch(probe string, what epochOf, e int64) error {
	first, last := epochBounds(c.cfg.Params.Epoch)
	if e < first || e > last {
		c.m.rejected.WithLabelValues("epoch_invalid").Inc()
		return &rejection{fmt.Sprintf("%s epoch %d: it does not start between %s and %s: no probe measured it", what, e, stamp(earliestEpochStart), stamp(latestEpochStart))}
	}
	ep, lim, now := c.cfg.Params.Epoch, c.cfg.Limits, c.now()
	start, end := time.Unix(0, ep.StartNS(e)), time.Unix(0, ep.EndNS(e))
	if start.After(now.Add(lim.MaxEpochAhead)) {
		c.m.rejected.WithLabelValues("epoch_ahead").Inc()
		return &rejection{fmt.Sprintf("%s epoch %d starts at %s, more than limits.max_epoch_ahead (%v) after the collector's clock (%s): is the probe's clock ahead?",
			what, e, stamp(start), lim.MaxEpochAhead, stamp(now))}
	}
	if replay, known := c.probes.replaying(probe); known && !replay && end.Before(now.Add(-lim.MaxEpochAge)) {
		c.m.rejected.WithLabelValues("epoch_too_old").Inc()
		return &rejection{fmt.Sprintf("%s epoch %d ended at %s, more than limits.max_epoch_age (%v) before the collector's clock (%s): a live probe's epochs must be recent (is its clock behind? a probe that replays files says so in its Hello)",
			what, e, stamp(end), lim.MaxEpochAge, stamp(now))}
	}
	return nil
}

// epochOf names what an epoch belongs to in checkEpoch's rejections: a
// kind of report, or a path. The path is quoted only when a rejection
// is written, not for every report that passes.
type epochOf struct{ kind, path string }

func (w epochOf) String() string {
	if w.path != "" {
		return fmt.Sprintf("path %q", w.path)
	}
	return w.kind
}

// stamp is a time as the reasons of rejections give it.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// checkShapes rejects a report whose LDA is not the deployment's (at most its rows),
// or whose RDA hashes otherwise or is larger than the collector ever asks
// for, from their headers, before their cells are allocated.
func (c *Collector) checkShapes(probe string, r *owlv1.EpochReport) error {
	if len(r.GetList()) > 0 {
		return nil // the collector builds a list's synopses itself (decodeList)
	}
	lc, err := lda.DecodeConfig(r.GetLda())
	if err != nil {
		c.m.rejected.WithLabelValues("malformed").Inc()
		return &rejection{fmt.Sprintf("path %q epoch %d: %v", r.GetPath(), r.GetEpoch(), err)}
	}
	if err := c.cfg.Params.LDA.Within(lc); err != nil {
		c.m.rejected.WithLabelValues("mismatch").Inc()
		c.m.mismatch.WithLabelValues(probe).Inc()
		return &rejection{fmt.Sprintf("path %q epoch %d: %v", r.GetPath(), r.GetEpoch(), err)}
	}
	b := r.GetRda()
	if len(b) == 0 {
		return nil
	}
	rc, err := rda.DecodeConfig(b)
	if err != nil {
		c.m.rejected.WithLabelValues("malformed").Inc()
		return &rejection{fmt.Sprintf("path %q epoch %d: %v", r.GetPath(), r.GetEpoch(), err)}
	}
	if err := params.SameRDAHashing(c.cfg.Params.RDA, rc); err != nil {
		c.m.rejected.WithLabelValues("mismatch").Inc()
		c.m.mismatch.WithLabelValues(probe).Inc()
		return &rejection{fmt.Sprintf("path %q epoch %d: %v", r.GetPath(), r.GetEpoch(), err)}
	}
	if max := c.cfg.maxRDABuckets(); rc.Buckets > max {
		c.m.rejected.WithLabelValues("oversized").Inc()
		return &rejection{fmt.Sprintf("path %q epoch %d: RDA of %d buckets per bank, over the %d the collector asks for at most (rda.max_buckets)", r.GetPath(), r.GetEpoch(), rc.Buckets, max)}
	}
	return nil
}

// sampleFits says why a probe's sample cannot be used here: taken under
// another seed, or holding more than params.sample.max_entries.
func (c *Collector) sampleFits(s *sample.Sample) error {
	p := c.cfg.Params.Sample
	if p.Target == 0 || s.Config().Seed != p.Seed || s.Len() > p.MaxEntries {
		return fmt.Errorf("a sample of %d packets under seed %x; the collector takes samples of at most %d under seed %x (params.sample, target %d)",
			s.Len(), s.Config().Seed, p.MaxEntries, p.Seed, p.Target)
	}
	return nil
}

// reportDigest identifies a report's content: its synopses and top flows.
// 0 is kept for "unknown" (results stored before digests).
func reportDigest(r *owlv1.EpochReport) uint64 {
	d := xxhash.New()
	var b []byte
	for _, s := range [][]byte{r.GetLda(), r.GetRda(), r.GetLds(), r.GetSample(), r.GetList()} {
		b = binary.LittleEndian.AppendUint64(b[:0], uint64(len(s)))
		d.Write(b)
		d.Write(s)
	}
	for _, tf := range r.GetTopFlows() {
		f := tf.GetFlow()
		b = b[:0]
		if k := tf.GetKey(); len(k) > 0 { // the digests of text keys stay as they were
			b = append(append(b, 0xff), k...)
		}
		for _, s := range []string{f.GetSrc(), f.GetDst()} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
		for _, v := range []uint64{uint64(f.GetSrcPort()), uint64(f.GetDstPort()), uint64(f.GetProtocol()), tf.GetPackets()} {
			b = binary.AppendUvarint(b, v)
		}
		d.Write(b)
	}
	return max(d.Sum64(), 1)
}

// newLimiter is a probe's report rate limiter; nil without a bound.
func newLimiter(perSecond float64) *rate.Limiter {
	if perSecond <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(perSecond), max(1, int(math.Ceil(perSecond))))
}

// pace waits for the probe's next report to be within its rate
// (limiter lim, nil: no bound), counting the time it waits. It fails only
// when ctx ends.
func (c *Collector) pace(ctx context.Context, probe string, lim *rate.Limiter) error {
	if lim == nil {
		return nil
	}
	r := lim.Reserve()
	d := r.Delay()
	if d <= 0 {
		return nil
	}
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	defer func() { c.m.rateWait.WithLabelValues(probe).Add(time.Since(start).Seconds()) }()
	select {
	case <-ctx.Done():
		r.Cancel()
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// shareExceeded says whether the reports of probe held in memory are
// over slack times its share of MaxPendingBytes.
func (c *Collector) shareExceeded(probe string, slack float64) bool {
	max := c.cfg.MaxPendingBytes
	share := c.cfg.Limits.MaxPendingShare
	if max <= 0 || share >= 1 {
		return false
	}
	held := int64(0)
	if m := c.pendingByProbe.Load(); m != nil {
		held = (*m)[probe]
	}
	return float64(held) > slack*share*float64(max)
}

// errProbeShare ends a probe's stream when its reports hold more than its
// share of the pending budget.
var errProbeShare = errors.New("this probe's reports waiting for their other side are over its share of the collector's backlog (limits.max_pending_share of max_pending_bytes); reconnect later")

// overShare says whether a report of probe must wait: the reports of the
// probe held in memory are over slack times its share of MaxPendingBytes.
func (c *Collector) overShare(probe string, slack float64) bool {
	if !c.shareExceeded(probe, slack) {
		return false
	}
	c.m.shed.WithLabelValues(probe, "probe_share").Inc()
	return true
}
