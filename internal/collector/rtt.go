package collector

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/DataDog/sketches-go/ddsketch"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/rtt"
	"github.com/owl-latency/owl/internal/synopsis/delays"
)

// RTTConfig sets how the probes' round-trip times are kept.
type RTTConfig struct {
	// Retention is how far back from a probe's newest RTT report its
	// reports are kept (epochs more than max_epoch_ahead ahead of the
	// collector's clock are refused, so one report cannot push the rest
	// out).
	Retention time.Duration `yaml:"retention"`
}

// rttQuantiles are the quantiles GetRTTDistribution gives by default.
var rttQuantiles = []float64{0.5, 0.9, 0.95, 0.99, 0.999}

// takeRTT checks and stores a probe's RTT report. Round-trip times, like
// COLATE vectors, are the probe's own, not a path's: they go to the
// member that owns the COLATE vectors.
func (c *Collector) takeRTT(probe string, r *owlv1.RTTReport) error {
	if owner, self := c.owner(colateKey); !self {
		c.m.rejected.WithLabelValues("not_owner").Inc()
		return &notOwner{key: colateKey, owner: owner}
	}
	if err := c.checkEpoch(probe, epochOf{kind: "RTT report of"}, r.GetEpoch()); err != nil {
		return err
	}
	kinds, err := checkRTT(r)
	if err != nil {
		c.m.rejected.WithLabelValues("malformed").Inc()
		return &rejection{fmt.Sprintf("RTT report of epoch %d: %v", r.GetEpoch(), err)}
	}
	keep := r.GetEpoch() - int64(c.cfg.RTT.Retention/c.cfg.Params.Epoch.Length)
	if err := c.store.PutRTT(probe, r, keep); err != nil {
		return fmt.Errorf("storing RTT report: %w", err)
	}
	c.m.observeRTT(probe, kinds)
	return nil
}

// checkRTT reads every sketch of a report from outside and returns the
// kinds' sketches by name.
func checkRTT(r *owlv1.RTTReport) (map[string]*ddsketch.DDSketch, error) {
	if len(r.GetKinds()) > int(rtt.Kinds) || len(r.GetPrefixes()) > rtt.MaxPrefixes {
		return nil, fmt.Errorf("%d kinds and %d prefixes, over %d and %d", len(r.GetKinds()), len(r.GetPrefixes()), rtt.Kinds, rtt.MaxPrefixes)
	}
	kinds := map[string]*ddsketch.DDSketch{}
	for _, k := range r.GetKinds() {
		if _, ok := rtt.ParseKind(k.GetKind()); !ok || kinds[k.GetKind()] != nil {
			return nil, fmt.Errorf("kind %q unknown or repeated", k.GetKind())
		}
		s, err := delays.Decode(k.GetSketch())
		if err != nil {
			return nil, fmt.Errorf("kind %s: %w", k.GetKind(), err)
		}
		kinds[k.GetKind()] = s
	}
	seen := map[string]bool{}
	for _, p := range r.GetPrefixes() {
		if _, err := netip.ParsePrefix(p.GetPrefix()); err != nil || seen[p.GetPrefix()] {
			return nil, fmt.Errorf("prefix %q unreadable or repeated", p.GetPrefix())
		}
		seen[p.GetPrefix()] = true
		if _, err := delays.Decode(p.GetSketch()); err != nil {
			return nil, fmt.Errorf("prefix %s: %w", p.GetPrefix(), err)
		}
	}
	if o := r.GetOther(); o != nil {
		if _, err := delays.Decode(o.GetSketch()); err != nil {
			return nil, fmt.Errorf("other prefixes: %w", err)
		}
	}
	return kinds, nil
}

// rttSketches merges the sketches that match (kind, prefix) from a
// probe's RTT reports of epochs [lo, hi]: the merged sketch, the samples
// behind it, the reports read, and those whose sketches did not decode.
func (c *Collector) rttSketches(probe string, lo, hi int64, kind, prefix string) (merged *ddsketch.DDSketch, samples uint64, reports, unreadable int, err error) {
	merged = delays.New()
	err = c.store.RTTReports(probe, lo, hi, func(r *owlv1.RTTReport) bool {
		reports++
		var pick []*owlv1.RTTSketch
		switch {
		case prefix != "":
			for _, p := range r.GetPrefixes() {
				if p.GetPrefix() == prefix {
					pick = append(pick, p)
				}
			}
		case kind != "":
			for _, k := range r.GetKinds() {
				if k.GetKind() == kind {
					pick = append(pick, k)
				}
			}
		default:
			pick = r.GetKinds()
		}
		for _, sk := range pick {
			d, err := delays.Decode(sk.GetSketch())
			if err == nil {
				err = merged.MergeWith(d)
			}
			if err != nil {
				unreadable++
				continue
			}
			samples += sk.GetSamples()
		}
		return true
	})
	return merged, samples, reports, unreadable, err
}

func (s queryService) GetRTTDistribution(ctx context.Context, req *owlv1.GetRTTDistributionRequest) (*owlv1.GetRTTDistributionResponse, error) {
	if r, ok, err := toOwner(ctx, s.c, colateKey, func(ctx context.Context, q owlv1.QueryServiceClient) (*owlv1.GetRTTDistributionResponse, error) {
		return q.GetRTTDistribution(ctx, req)
	}); ok {
		return r, err
	}
	qs := req.GetQuantiles()
	if len(qs) == 0 {
		qs = rttQuantiles
	}
	if err := checkDistributionAsk(qs, req.GetCdfAtNs()); err != nil {
		return nil, err
	}
	if req.GetProbe() == "" {
		return nil, status.Error(codes.InvalidArgument, "probe is required")
	}
	if _, ok := rtt.ParseKind(req.GetKind()); req.GetKind() != "" && !ok {
		return nil, status.Errorf(codes.InvalidArgument, "kind %q: one of tcp-data, tcp-handshake, dns, or empty for all", req.GetKind())
	}
	if req.GetKind() != "" && req.GetPrefix() != "" {
		return nil, status.Error(codes.InvalidArgument, "a kind and a prefix cannot be asked together: prefix sketches hold every kind")
	}
	lo, hi, err := epochRange(s.c.cfg.Params.Epoch, req.GetFrom(), req.GetTo())
	if err != nil {
		return nil, err
	}
	merged, samples, reports, unreadable, err := s.c.rttSketches(req.GetProbe(), lo, hi, req.GetKind(), req.GetPrefix())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading RTT reports: %v", err)
	}
	out := &owlv1.GetRTTDistributionResponse{Epochs: uint32(reports), Samples: samples, RelativeAccuracy: delays.Accuracy}
	var notes []string
	if unreadable > 0 {
		notes = append(notes, fmt.Sprintf("%d sketches could not be read", unreadable))
	}
	if merged.IsEmpty() {
		out.Note = strings.Join(append(notes, fmt.Sprintf("no round-trip time of probe %q in the range", req.GetProbe())), "; ")
		return out, nil
	}
	d := readSketch(merged, qs, req.GetCdfAtNs())
	out.Pairs, out.MinNs, out.MaxNs, out.Quantiles, out.Cdf = d.count, d.minNS, d.maxNS, d.quantiles, d.cdf
	out.Note = strings.Join(notes, "; ")
	return out, nil
}

// maxRTTPrefixesListed bounds TopRTTPrefixes' limit.
const maxRTTPrefixesListed = 1000

func (s queryService) TopRTTPrefixes(ctx context.Context, req *owlv1.TopRTTPrefixesRequest) (*owlv1.TopRTTPrefixesResponse, error) {
	if r, ok, err := toOwner(ctx, s.c, colateKey, func(ctx context.Context, q owlv1.QueryServiceClient) (*owlv1.TopRTTPrefixesResponse, error) {
		return q.TopRTTPrefixes(ctx, req)
	}); ok {
		return r, err
	}
	if req.GetProbe() == "" {
		return nil, status.Error(codes.InvalidArgument, "probe is required")
	}
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = 10
	}
	limit = min(limit, maxRTTPrefixesListed)
	lo, hi, err := epochRange(s.c.cfg.Params.Epoch, req.GetFrom(), req.GetTo())
	if err != nil {
		return nil, err
	}
	type acc struct {
		sketch  *ddsketch.DDSketch
		samples uint64
	}
	byPrefix := map[string]*acc{}
	out := &owlv1.TopRTTPrefixesResponse{}
	unreadable := 0
	err = s.c.store.RTTReports(req.GetProbe(), lo, hi, func(r *owlv1.RTTReport) bool {
		out.OtherPairs += r.GetOther().GetPairs()
		for _, p := range r.GetPrefixes() {
			d, err := delays.Decode(p.GetSketch())
			if err != nil {
				unreadable++
				continue
			}
			a := byPrefix[p.GetPrefix()]
			if a == nil {
				if len(byPrefix) >= 4*maxRTTPrefixesListed {
					out.OtherPairs += p.GetPairs()
					continue
				}
				a = &acc{sketch: delays.New()}
				byPrefix[p.GetPrefix()] = a
			}
			_ = a.sketch.MergeWith(d) // same mapping
			a.samples += p.GetSamples()
		}
		return true
	})
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading RTT reports: %v", err)
	}
	for prefix, a := range byPrefix {
		q := delays.Quantiles(a.sketch, []float64{0.5, 0.99})
		out.Prefixes = append(out.Prefixes, &owlv1.RTTPrefix{Prefix: prefix, Samples: a.samples, Pairs: a.sketch.GetCount(), P50Ns: q[0].Value, P99Ns: q[1].Value})
	}
	slices.SortFunc(out.Prefixes, func(a, b *owlv1.RTTPrefix) int {
		if req.GetOrderBy() == owlv1.TopRTTPrefixesRequest_ORDER_COUNT {
			return cmp.Or(cmp.Compare(b.GetPairs(), a.GetPairs()), strings.Compare(a.GetPrefix(), b.GetPrefix()))
		}
		return cmp.Or(cmp.Compare(b.GetP99Ns(), a.GetP99Ns()), strings.Compare(a.GetPrefix(), b.GetPrefix()))
	})
	if len(out.Prefixes) > limit {
		out.Prefixes = out.Prefixes[:limit]
	}
	if unreadable > 0 {
		out.Note = fmt.Sprintf("%d sketches could not be read", unreadable)
	}
	return out, nil
}

// observeRTT puts a report's round-trip times into the probe's native
// histograms by kind: each bin's value as many times as it holds pairs.
func (m *metrics) observeRTT(probe string, kinds map[string]*ddsketch.DDSketch) {
	for kind, s := range kinds {
		m.rtt.ObserveAll(func(add func(float64, uint64)) {
			s.ForEach(func(value, count float64) bool {
				add(value/1e9, uint64(math.Round(min(count, maxObservationsPerBin))))
				return false
			})
		}, probe, kind)
	}
}

// maxObservationsPerBin bounds the weight one bin of a report has (a
// hostile weight must not swamp the histogram).
const maxObservationsPerBin = 1 << 16
