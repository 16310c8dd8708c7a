package collector

import (
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// pathSeries are the per-path counters and gauges, kept as plain values
// per path and made into series only when scraped (a
// prometheus.Collector). As CounterVec and GaugeVec children they were
// about 20 series a path, each some seven objects on the heap that every
// garbage collection marked, and each epoch looked a dozen of them up by
// hashing their label values. A series appears once it is first set or
// added to, as a child of a vector did.
type pathSeries struct {
	descs map[string]*prometheus.Desc // by metric name

	mu    sync.Mutex
	paths map[string]*pathValues
}

// pathMetric is one per-path series: a metric and, for metrics with a
// second label, its value.
type pathMetric int

const (
	pmLost pathMetric = iota
	pmReordered
	pmDuplicates
	pmBoundary
	pmRebuilds
	pmExchanged
	pmReportBytes
	pmFlaggedEpochs
	pmPacketsUp
	pmPacketsDown
	pmPeelsUndecoded
	pmPeelsDecoded
	pmResultsOK
	pmResultsPartial
	pmResultsNoSamples
	pmResultsMissingUp
	pmResultsMissingDown
	pmResultsMismatch
	pmResultsUnknown
	pmMean
	pmStddev
	pmSamples
	pmLastEpoch
	pmClockUnc
	pmClockFlagged
	pathMetrics // how many
)

// pathMetricDef is a series' metric, kind and second label.
type pathMetricDef struct {
	name, help   string
	kind         prometheus.ValueType
	label, value string // second label and its value ("": none)
}

var pathMetricDefs = [pathMetrics]pathMetricDef{
	pmLost:               {"owl_path_lost_packets_total", "Packets estimated lost between the path's points.", prometheus.CounterValue, "", ""},
	pmReordered:          {"owl_path_reordered_packets_total", "Packets only the downstream point saw (not duplicates, not sent in the previous epoch).", prometheus.CounterValue, "", ""},
	pmDuplicates:         {"owl_path_duplicate_packets_total", "Extra copies of packets the downstream point saw.", prometheus.CounterValue, "", ""},
	pmBoundary:           {"owl_path_boundary_matched_packets_total", "Packets sent in one epoch and seen downstream in the next, counted as delivered.", prometheus.CounterValue, "", ""},
	pmRebuilds:           {"owl_collector_rda_rebuilds_total", "Late-binding rebuilds of RDAs at a larger size.", prometheus.CounterValue, "", ""},
	pmExchanged:          {"owl_collector_repair_bytes_total", "Bytes of rebuilt RDAs and timestamp fetches exchanged with probes.", prometheus.CounterValue, "", ""},
	pmReportBytes:        {"owl_collector_report_synopsis_bytes_total", "Synopsis bytes received, by path.", prometheus.CounterValue, "", ""},
	pmFlaggedEpochs:      {"owl_path_clock_flagged_epochs_total", "Epoch results flagged for their clocks.", prometheus.CounterValue, "", ""},
	pmPacketsUp:          {"owl_path_packets_total", "Packets the path's synopses counted, by side.", prometheus.CounterValue, "side", "upstream"},
	pmPacketsDown:        {"owl_path_packets_total", "", prometheus.CounterValue, "side", "downstream"},
	pmPeelsUndecoded:     {"owl_collector_rda_reconciliations_total", "RDA reconciliations, by whether peeling decoded the whole set difference.", prometheus.CounterValue, "decoded", "false"},
	pmPeelsDecoded:       {"owl_collector_rda_reconciliations_total", "", prometheus.CounterValue, "decoded", "true"},
	pmResultsOK:          {"owl_collector_results_total", "Epoch results computed, by path and status.", prometheus.CounterValue, "status", "ok"},
	pmResultsPartial:     {"owl_collector_results_total", "", prometheus.CounterValue, "status", "partial"},
	pmResultsNoSamples:   {"owl_collector_results_total", "", prometheus.CounterValue, "status", "no_samples"},
	pmResultsMissingUp:   {"owl_collector_results_total", "", prometheus.CounterValue, "status", "missing_upstream"},
	pmResultsMissingDown: {"owl_collector_results_total", "", prometheus.CounterValue, "status", "missing_downstream"},
	pmResultsMismatch:    {"owl_collector_results_total", "", prometheus.CounterValue, "status", "mismatch"},
	pmResultsUnknown:     {"owl_collector_results_total", "", prometheus.CounterValue, "status", "unknown"},
	pmMean:               {"owl_path_delay_mean_seconds", "Mean one-way delay of the path's latest epoch.", prometheus.GaugeValue, "", ""},
	pmStddev:             {"owl_path_delay_stddev_seconds", "Standard deviation of the one-way delay of the path's latest epoch.", prometheus.GaugeValue, "", ""},
	pmSamples:            {"owl_path_samples", "Effective sample size of the path's latest epoch.", prometheus.GaugeValue, "", ""},
	pmLastEpoch:          {"owl_path_last_epoch", "Number of the path's latest epoch with a result.", prometheus.GaugeValue, "", ""},
	pmClockUnc:           {"owl_path_clock_uncertainty_seconds", "± on the mean delay of the path's latest epoch from the two probes' clocks.", prometheus.GaugeValue, "", ""},
	pmClockFlagged:       {"owl_path_clock_flagged", "1 when the path's latest epoch is flagged: clock uncertainty above the configured share of the mean, or a clock not synchronized.", prometheus.GaugeValue, "", ""},
}

// pathValues are one path's values, and which of them have been set.
type pathValues struct {
	v   [pathMetrics]float64
	set uint64 // bit k: series k exists
}

func newPathSeries() *pathSeries {
	ps := &pathSeries{descs: map[string]*prometheus.Desc{}, paths: map[string]*pathValues{}}
	for _, d := range pathMetricDefs {
		if ps.descs[d.name] != nil {
			continue // its help and labels are its first series'
		}
		labels := []string{"path"}
		if d.label != "" {
			labels = append(labels, d.label)
		}
		ps.descs[d.name] = prometheus.NewDesc(d.name, d.help, labels, nil)
	}
	return ps
}

// values is path's values; call it with mu held.
func (ps *pathSeries) values(path string) *pathValues {
	pv := ps.paths[path]
	if pv == nil {
		pv = &pathValues{}
		ps.paths[path] = pv
	}
	return pv
}

// add adds v to a counter of path (the series appears even for 0).
func (ps *pathSeries) add(path string, k pathMetric, v float64) {
	ps.mu.Lock()
	pv := ps.values(path)
	pv.v[k] += v
	pv.set |= 1 << k
	ps.mu.Unlock()
}

// latest sets the per-path gauges from a path's newest result.
func (ps *pathSeries) latest(r *owlv1.PathStats) {
	flagged := 0.0
	if r.GetClockFlagged() {
		flagged = 1
	}
	ps.mu.Lock()
	pv := ps.values(r.GetPath())
	pv.v[pmMean] = r.GetMeanNs() / 1e9
	pv.v[pmStddev] = r.GetStddevNs() / 1e9
	pv.v[pmSamples] = float64(r.GetSamples())
	pv.v[pmLastEpoch] = float64(r.GetEpoch())
	pv.v[pmClockUnc] = r.GetClockUncertaintyNs() / 1e9
	pv.v[pmClockFlagged] = flagged
	pv.set |= 1<<pmMean | 1<<pmStddev | 1<<pmSamples | 1<<pmLastEpoch | 1<<pmClockUnc | 1<<pmClockFlagged
	ps.mu.Unlock()
}

// resultsOf is the results counter of a status.
func resultsOf(s owlv1.ResultStatus) pathMetric {
	switch s {
	case owlv1.ResultStatus_RESULT_STATUS_OK:
		return pmResultsOK
	case owlv1.ResultStatus_RESULT_STATUS_PARTIAL:
		return pmResultsPartial
	case owlv1.ResultStatus_RESULT_STATUS_NO_SAMPLES:
		return pmResultsNoSamples
	case owlv1.ResultStatus_RESULT_STATUS_MISSING_UPSTREAM:
		return pmResultsMissingUp
	case owlv1.ResultStatus_RESULT_STATUS_MISSING_DOWNSTREAM:
		return pmResultsMissingDown
	case owlv1.ResultStatus_RESULT_STATUS_MISMATCH:
		return pmResultsMismatch
	}
	return pmResultsUnknown
}

// Describe is prometheus.Collector's.
func (ps *pathSeries) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range ps.descs {
		ch <- d
	}
}

// pathFamily is one metric's series of a path, in the order the
// registry sorts them: by the values of their labels, names in order.
// Where the second label's name sorts before "path", a metric's series
// are sorted by its value first (valueFirst).
type pathFamily struct {
	defs       []pathMetric // by value of the second label
	valueFirst bool
}

// pathFamilies are the per-path metrics (see Collect).
var pathFamilies = func() []pathFamily {
	var fams []pathFamily
	at := map[string]int{}
	for k, d := range pathMetricDefs {
		i, ok := at[d.name]
		if !ok {
			i, at[d.name] = len(fams), len(fams)
			fams = append(fams, pathFamily{valueFirst: d.label != "" && d.label < "path"})
		}
		fams[i].defs = append(fams[i].defs, pathMetric(k))
	}
	for _, f := range fams {
		slices.SortFunc(f.defs, func(a, b pathMetric) int { return strings.Compare(pathMetricDefs[a].value, pathMetricDefs[b].value) })
	}
	return fams
}()

// Collect is prometheus.Collector's. The values are copied out first, so
// that a scrape does not hold up the workers. Series come sorted by
// their labels (paths by name), as the registry sorts each metric's: it
// then checks the order instead of making it, a third of a scrape's CPU
// at 2,000 paths (BenchmarkScrape).
func (ps *pathSeries) Collect(ch chan<- prometheus.Metric) {
	type path struct {
		name string
		pathValues
	}
	ps.mu.Lock()
	paths := make([]path, 0, len(ps.paths))
	for name, pv := range ps.paths {
		paths = append(paths, path{name, *pv})
	}
	ps.mu.Unlock()
	slices.SortFunc(paths, func(a, b path) int { return strings.Compare(a.name, b.name) })
	emit := func(p *path, k pathMetric) {
		if p.set&(1<<k) == 0 {
			return
		}
		d := pathMetricDefs[k]
		labels := []string{p.name}
		if d.label != "" {
			labels = append(labels, d.value)
		}
		ch <- prometheus.MustNewConstMetric(ps.descs[d.name], d.kind, p.v[k], labels...)
	}
	for _, f := range pathFamilies {
		if f.valueFirst {
			for _, k := range f.defs {
				for i := range paths {
					emit(&paths[i], k)
				}
			}
			continue
		}
		for i := range paths {
			for _, k := range f.defs {
				emit(&paths[i], k)
			}
		}
	}
}
