package collector

import (
	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// metrics are the collector's Prometheus series. Per-path series are
// bounded by the configured paths, per-probe series by the probes.
type metrics struct {
	reg *prometheus.Registry

	reports         *prometheus.CounterVec
	rejected        *prometheus.CounterVec
	mismatch        *prometheus.CounterVec
	dupReports      prometheus.Counter
	probesConnected *prometheus.GaugeVec
	watchersDropped prometheus.Counter
	clusterChanges  prometheus.Counter
	handedOver      prometheus.Counter
	resultDelay     prometheus.Histogram

	replicated     prometheus.Counter
	replicaDropped prometheus.Counter
	caughtUp       prometheus.Counter
	promoted       prometheus.Counter

	delay *weightedHistogramVec
	rtt   *weightedHistogramVec

	shed        *prometheus.CounterVec
	pauses      *prometheus.CounterVec
	conflicting *prometheus.CounterVec
	rateWait    *prometheus.CounterVec
	// probesRefused counts Hellos of ids not kept, watchersRefused
	// WatchPathStats streams past the limit.
	probesRefused   *prometheus.CounterVec
	watchersRefused prometheus.Counter
	// flowSeries are each path's top-flow series (flowmetrics.go),
	// pathSeries its counters and gauges (pathmetrics.go).
	flowSeries *flowSeries
	pathSeries *pathSeries

	probeOffset *prometheus.GaugeVec
	probeDelay  *prometheus.GaugeVec
	probeUnc    *prometheus.GaugeVec
	probeSync   *prometheus.GaugeVec
	probeState  *prometheus.GaugeVec

	colateVectors    *prometheus.CounterVec
	colatePackets    *prometheus.CounterVec
	colateBytesIn    *prometheus.CounterVec
	colateOverflow   *prometheus.CounterVec
	colateFullTables *prometheus.CounterVec
	colatePruned     prometheus.Counter
	colateStored     prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	// The process's memory, CPU and garbage collection (go_*, process_*).
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.addColate()
	m.reports = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_reports_total", Help: "Epoch reports received, by probe."}, []string{"probe"})
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_reports_rejected_total", Help: "Epoch reports that cannot be used, by reason."}, []string{"reason"})
	m.mismatch = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_parameter_mismatches_total", Help: "Probes or reports rejected because their parameters differ from the deployment's, by probe."}, []string{"probe"})
	m.dupReports = prometheus.NewCounter(prometheus.CounterOpts{Name: "owl_collector_duplicate_reports_total", Help: "Reports received again for an epoch already combined."})
	m.probesConnected = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_collector_probe_streams", Help: "Open streams per probe."}, []string{"probe"})
	m.watchersDropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "owl_collector_watchers_dropped_total", Help: "WatchPathStats streams cut off because they did not keep up."})
	m.clusterChanges = prometheus.NewCounter(prometheus.CounterOpts{Name: "owl_collector_cluster_changes_total", Help: "Changes of the cluster's members seen (each sends the probes their paths' owners again)."})
	m.handedOver = prometheus.NewCounter(prometheus.CounterOpts{Name: "owl_collector_sides_handed_over_total", Help: "Sides of an epoch taken from an earlier owner of the path (the owners changed between its two reports)."})
	m.replicated = prometheus.NewCounter(prometheus.CounterOpts{Name: "owl_collector_replicated_epochs_total", Help: "Copies of stored epochs taken by the other holders of their paths (one per member)."})
	m.replicaDropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "owl_collector_replication_dropped_epochs_total", Help: "Copies of stored epochs not sent: the replication queue was full or a member did not take them (catch-up repairs)."})
	m.caughtUp = prometheus.NewCounter(prometheus.CounterOpts{Name: "owl_collector_caught_up_epochs_total", Help: "Epoch results taken from other members by catch-up."})
	m.promoted = prometheus.NewCounter(prometheus.CounterOpts{Name: "owl_collector_replica_sides_taken_total", Help: "Copies of lone sides taken into the pairing table when this member became their path's owner."})
	for _, x := range []prometheus.Collector{m.replicated, m.replicaDropped, m.caughtUp, m.promoted} {
		f(x)
	}
	m.resultDelay = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "owl_collector_result_delay_seconds", Help: "Time from the later side's epoch close to the result being stored and queryable.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), NativeHistogramBucketFactor: 1.1,
	})
	// Native buckets of schema 7 are 0.54% wide.
	m.delay = newWeightedHistogramVec("owl_path_delay_seconds", "One-way delay of each sampled delivered packet, by path (native histogram; classic buckets from 1 µs).",
		prometheus.ExponentialBuckets(1e-6, 2, 24), 7, "path")
	m.rtt = newWeightedHistogramVec("owl_probe_rtt_seconds", "Round-trip times of request/response pairs at each probe, by kind (tcp-data, tcp-handshake, dns), each pair as many times as it stands for (native histogram; classic buckets from 1 µs).",
		prometheus.ExponentialBuckets(1e-6, 2, 24), 7, "probe", "kind")
	m.flowSeries, m.pathSeries = newFlowSeries(), newPathSeries()
	m.shed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_reports_shed_total",
		Help: "Reports turned away, unacknowledged (the probe sends them again), by probe and reason: the backlog was over max_pending_bytes (pending_bytes), or the probe's reports held over its share of it (probe_share)."}, []string{"probe", "reason"})
	m.pauses = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_probe_pauses_total",
		Help: "Times a probe was asked to hold its reports (Pause): the backlog, or the probe's share of it, was over max_pending_bytes and its report waited for its other side."}, []string{"probe"})
	m.conflicting = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_conflicting_reports_total", Help: "Reports sent again with other content than the side already held or used, by probe (the result keeps the first, and counts them)."}, []string{"probe"})
	m.rateWait = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_report_rate_wait_seconds_total", Help: "Time the collector waited before reading a probe's stream on, to keep its reports and COLATE vectors within limits.reports_per_second, by probe."}, []string{"probe"})
	m.probesRefused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_probes_refused_total", Help: "Probe streams refused at their Hello, by reason: an id no path names with COLATE off (not_in_paths), past limits.max_probes (max_probes), or of a probe with limits.max_streams_per_probe streams open already (max_streams_per_probe)."}, []string{"reason"})
	m.watchersRefused = prometheus.NewCounter(prometheus.CounterOpts{Name: "owl_collector_watchers_refused_total", Help: "WatchPathStats streams refused because limits.max_watchers were open."})
	for _, x := range []prometheus.Collector{m.shed, m.pauses, m.conflicting, m.rateWait, m.probesRefused, m.watchersRefused} {
		f(x)
	}
	m.probeOffset = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_collector_probe_clock_offset_seconds", Help: "Last reported offset of each probe's clock from its reference (local − reference)."}, []string{"probe"})
	m.probeDelay = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_collector_probe_clock_delay_seconds", Help: "Last reported path delay to each probe's grandmaster (or PHC read time)."}, []string{"probe"})
	m.probeUnc = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_collector_probe_clock_uncertainty_seconds", Help: "Last reported bound on the error of each probe's timestamps."}, []string{"probe"})
	m.probeSync = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_collector_probe_clock_synchronized", Help: "1 when the probe's clock is synchronized or in holdover."}, []string{"probe"})
	m.probeState = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_collector_probe_clock_state", Help: "1 for each probe's current clock state and source."}, []string{"probe", "source", "state"})
	for _, c := range []prometheus.Collector{m.probeOffset, m.probeDelay, m.probeUnc, m.probeSync, m.probeState,
		m.flowSeries, m.pathSeries, m.reports, m.rejected, m.mismatch, m.dupReports,
		m.probesConnected, m.watchersDropped, m.clusterChanges, m.handedOver, m.resultDelay, m.delay, m.rtt} {
		f(c)
	}
	return m
}

// addColate makes and registers the COLATE store's metrics.
func (m *metrics) addColate() {
	m.colateVectors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_colate_vectors_total", Help: "COLATE vectors stored, by probe."}, []string{"probe"})
	m.colatePackets = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_colate_packets_total", Help: "Packets recorded in the stored COLATE vectors, by probe."}, []string{"probe"})
	m.colateBytesIn = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_colate_vector_bytes_total", Help: "Bytes of COLATE vectors received, by probe (divide by packets for the storage cost per packet)."}, []string{"probe"})
	m.colateOverflow = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_colate_overflowed_vectors_total", Help: "COLATE vectors with a counter that outgrew its bits, by probe."}, []string{"probe"})
	m.colateFullTables = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_colate_full_flow_tables_total", Help: "COLATE vectors whose flow table was full (flows past the bound have no count), by probe."}, []string{"probe"})
	m.colatePruned = prometheus.NewCounter(prometheus.CounterOpts{Name: "owl_collector_colate_pruned_vectors_total", Help: "COLATE vectors deleted by the storage budget or retention."})
	m.colateStored = prometheus.NewGauge(prometheus.GaugeOpts{Name: "owl_collector_colate_stored_bytes", Help: "Size of the stored COLATE vectors of all probes."})
	m.reg.MustRegister(m.colateVectors, m.colatePackets, m.colateBytesIn, m.colateOverflow, m.colateFullTables, m.colatePruned, m.colateStored)
}

// observe records a new result. The loss, reordered packets and
// duplicates of a reconciled RDA epoch are counted later, by settled, once
// boundary matching with its neighbours is over: the matching moves
// packets between them (a loss delivered, an extra taken off, a
// duplicate taken back).
func (m *metrics) observe(r *owlv1.PathStats, sketch *ddsketch.DDSketch) {
	p := r.GetPath()
	m.pathSeries.add(p, resultsOf(r.GetStatus()), 1)
	if r.GetClockFlagged() {
		m.pathSeries.add(p, pmFlaggedEpochs, 1)
	}
	if r.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK {
		return
	}
	m.observeDelays(r, sketch)
	m.pathSeries.latest(r)
	m.pathSeries.add(p, pmPacketsUp, float64(r.GetUpstreamPackets()))
	m.pathSeries.add(p, pmPacketsDown, float64(r.GetDownstreamPackets()))
	if !settlesLater(r) {
		m.countMoved(r)
	}
}

// settlesLater says whether a result's loss, reordered packets and
// duplicates wait for its boundary matching (a reconciled RDA epoch's do).
func settlesLater(r *owlv1.PathStats) bool {
	return r.GetEstimator() == "rda" || r.GetEstimator() == "rda-partial"
}

// countMoved counts a result's loss, reordered packets and duplicates.
func (m *metrics) countMoved(r *owlv1.PathStats) {
	p := r.GetPath()
	if r.GetLost() > 0 {
		m.pathSeries.add(p, pmLost, r.GetLost())
	}
	m.pathSeries.add(p, pmReordered, float64(r.GetReordered()))
	m.pathSeries.add(p, pmDuplicates, float64(r.GetDuplicates()))
}

// observeDelays puts the epoch's sampled delays into the path's delay
// histogram, read back from the result's sketch (each bin's value, as
// many times as it holds sampled packets).
func (m *metrics) observeDelays(r *owlv1.PathStats, s *ddsketch.DDSketch) {
	rate := r.GetSampleRate()
	if len(r.GetDelaySketch()) == 0 || !(rate > 0 && rate <= 1) {
		return
	}
	if s == nil {
		var err error
		if s, err = decodeDelaySketch(r.GetDelaySketch()); err != nil {
			return // made by this collector or a peer's worker; checked where it is served
		}
	}
	m.delay.ObserveSketch(s, 1e9, rate, r.GetPath())
}

// probeClock sets a probe's clock gauges from its latest status.
func (m *metrics) probeClock(probe string, c *owlv1.ClockStatus) {
	m.probeOffset.WithLabelValues(probe).Set(float64(c.GetOffsetNs()) / 1e9)
	m.probeDelay.WithLabelValues(probe).Set(float64(c.GetDelayNs()) / 1e9)
	m.probeUnc.WithLabelValues(probe).Set(float64(c.GetUncertaintyNs()) / 1e9)
	sync := 0.0
	if c.GetSynchronized() {
		sync = 1
	}
	m.probeSync.WithLabelValues(probe).Set(sync)
	m.probeState.DeletePartialMatch(prometheus.Labels{"probe": probe})
	m.probeState.WithLabelValues(probe, c.GetSource(), stateName(c.GetState())).Set(1)
}

// forgetProbe deletes every series of a probe.
func (m *metrics) forgetProbe(probe string) {
	l := prometheus.Labels{"probe": probe}
	for _, v := range []*prometheus.CounterVec{m.reports, m.mismatch, m.shed, m.pauses, m.conflicting, m.rateWait,
		m.colateVectors, m.colatePackets, m.colateBytesIn, m.colateOverflow, m.colateFullTables} {
		v.DeletePartialMatch(l)
	}
	for _, v := range []*prometheus.GaugeVec{m.probesConnected, m.probeOffset, m.probeDelay, m.probeUnc, m.probeSync, m.probeState} {
		v.DeletePartialMatch(l)
	}
}

// settled counts the final loss, reordered packets and duplicates of an
// RDA epoch.
func (m *metrics) settled(r *owlv1.PathStats) {
	m.countMoved(r)
	m.pathSeries.add(r.GetPath(), pmBoundary, float64(r.GetBoundaryMatched()))
}

// rdaOutcome counts a reconciliation.
func (m *metrics) rdaOutcome(path string, decoded bool, _ int) {
	k := pmPeelsUndecoded
	if decoded {
		k = pmPeelsDecoded
	}
	m.pathSeries.add(path, k, 1)
}
