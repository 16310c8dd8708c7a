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
	reportBytes     *prometheus.CounterVec
	rejected        *prometheus.CounterVec
	mismatch        *prometheus.CounterVec
	dupReports      prometheus.Counter
	results         *prometheus.CounterVec
	probesConnected *prometheus.GaugeVec
	watchersDropped prometheus.Counter
	clusterChanges  prometheus.Counter
	handedOver      prometheus.Counter
	resultDelay     prometheus.Histogram

	replicated     prometheus.Counter
	replicaDropped prometheus.Counter
	caughtUp       prometheus.Counter
	promoted       prometheus.Counter

	delay     *weightedHistogramVec
	rtt       *weightedHistogramVec
	mean      *prometheus.GaugeVec
	stddev    *prometheus.GaugeVec
	samples   *prometheus.GaugeVec
	lost      *prometheus.CounterVec
	packets   *prometheus.CounterVec
	lastEpoch *prometheus.GaugeVec

	reordered  *prometheus.CounterVec
	dupPackets *prometheus.CounterVec
	boundary   *prometheus.CounterVec
	rebuilds   *prometheus.CounterVec
	peels      *prometheus.CounterVec
	exchanged  *prometheus.CounterVec

	shed        *prometheus.CounterVec
	pauses      *prometheus.CounterVec
	conflicting *prometheus.CounterVec
	rateWait    *prometheus.CounterVec
	// probesRefused counts Hellos of ids not kept, watchersRefused
	// WatchPathStats streams past the limit.
	probesRefused   *prometheus.CounterVec
	watchersRefused prometheus.Counter
	// flowSeries are each path's top-flow series (flowmetrics.go).
	flowSeries *flowSeries

	clockUnc      *prometheus.GaugeVec
	clockFlagged  *prometheus.GaugeVec
	flaggedEpochs *prometheus.CounterVec
	probeOffset   *prometheus.GaugeVec
	probeDelay    *prometheus.GaugeVec
	probeUnc      *prometheus.GaugeVec
	probeSync     *prometheus.GaugeVec
	probeState    *prometheus.GaugeVec

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
	m.reportBytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_report_synopsis_bytes_total", Help: "Synopsis bytes received, by path."}, []string{"path"})
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_reports_rejected_total", Help: "Epoch reports that cannot be used, by reason."}, []string{"reason"})
	m.mismatch = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_parameter_mismatches_total", Help: "Probes or reports rejected because their parameters differ from the deployment's, by probe."}, []string{"probe"})
	m.dupReports = prometheus.NewCounter(prometheus.CounterOpts{Name: "owl_collector_duplicate_reports_total", Help: "Reports received again for an epoch already combined."})
	m.results = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_results_total", Help: "Epoch results computed, by path and status."}, []string{"path", "status"})
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
	m.mean = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_path_delay_mean_seconds", Help: "Mean one-way delay of the path's latest epoch."}, []string{"path"})
	m.stddev = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_path_delay_stddev_seconds", Help: "Standard deviation of the one-way delay of the path's latest epoch."}, []string{"path"})
	m.samples = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_path_samples", Help: "Effective sample size of the path's latest epoch."}, []string{"path"})
	m.lost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_path_lost_packets_total", Help: "Packets estimated lost between the path's points."}, []string{"path"})
	m.packets = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_path_packets_total", Help: "Packets the path's synopses counted, by side."}, []string{"path", "side"})
	m.lastEpoch = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_path_last_epoch", Help: "Number of the path's latest epoch with a result."}, []string{"path"})
	m.reordered = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_path_reordered_packets_total", Help: "Packets only the downstream point saw (not duplicates, not sent in the previous epoch)."}, []string{"path"})
	m.dupPackets = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_path_duplicate_packets_total", Help: "Extra copies of packets the downstream point saw."}, []string{"path"})
	m.boundary = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_path_boundary_matched_packets_total", Help: "Packets sent in one epoch and seen downstream in the next, counted as delivered."}, []string{"path"})
	m.rebuilds = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_rda_rebuilds_total", Help: "Late-binding rebuilds of RDAs at a larger size."}, []string{"path"})
	m.peels = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_rda_reconciliations_total", Help: "RDA reconciliations, by whether peeling decoded the whole set difference."}, []string{"path", "decoded"})
	m.exchanged = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_repair_bytes_total", Help: "Bytes of rebuilt RDAs and timestamp fetches exchanged with probes."}, []string{"path"})
	m.flowSeries = newFlowSeries()
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
	m.clockUnc = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_path_clock_uncertainty_seconds", Help: "± on the mean delay of the path's latest epoch from the two probes' clocks."}, []string{"path"})
	m.clockFlagged = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_path_clock_flagged", Help: "1 when the path's latest epoch is flagged: clock uncertainty above the configured share of the mean, or a clock not synchronized."}, []string{"path"})
	m.flaggedEpochs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_path_clock_flagged_epochs_total", Help: "Epoch results flagged for their clocks."}, []string{"path"})
	m.probeOffset = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_collector_probe_clock_offset_seconds", Help: "Last reported offset of each probe's clock from its reference (local − reference)."}, []string{"probe"})
	m.probeDelay = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_collector_probe_clock_delay_seconds", Help: "Last reported path delay to each probe's grandmaster (or PHC read time)."}, []string{"probe"})
	m.probeUnc = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_collector_probe_clock_uncertainty_seconds", Help: "Last reported bound on the error of each probe's timestamps."}, []string{"probe"})
	m.probeSync = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_collector_probe_clock_synchronized", Help: "1 when the probe's clock is synchronized or in holdover."}, []string{"probe"})
	m.probeState = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "owl_collector_probe_clock_state", Help: "1 for each probe's current clock state and source."}, []string{"probe", "source", "state"})
	for _, c := range []prometheus.Collector{m.clockUnc, m.clockFlagged, m.flaggedEpochs, m.probeOffset, m.probeDelay, m.probeUnc, m.probeSync, m.probeState,
		m.flowSeries, m.reordered, m.dupPackets, m.boundary, m.rebuilds, m.peels, m.exchanged, m.reports, m.reportBytes, m.rejected, m.mismatch, m.dupReports, m.results,
		m.probesConnected, m.watchersDropped, m.clusterChanges, m.handedOver, m.resultDelay, m.delay, m.rtt, m.mean, m.stddev, m.samples, m.lost, m.packets, m.lastEpoch} {
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
	m.results.WithLabelValues(p, statusName(r.GetStatus())).Inc()
	if r.GetClockFlagged() {
		m.flaggedEpochs.WithLabelValues(p).Inc()
	}
	if r.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK {
		return
	}
	m.observeDelays(r, sketch)
	m.latest(r)
	m.packets.WithLabelValues(p, "upstream").Add(float64(r.GetUpstreamPackets()))
	m.packets.WithLabelValues(p, "downstream").Add(float64(r.GetDownstreamPackets()))
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
		m.lost.WithLabelValues(p).Add(r.GetLost())
	}
	m.reordered.WithLabelValues(p).Add(float64(r.GetReordered()))
	m.dupPackets.WithLabelValues(p).Add(float64(r.GetDuplicates()))
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

// latest sets the per-path gauges from a path's newest result.
func (m *metrics) latest(r *owlv1.PathStats) {
	p := r.GetPath()
	m.mean.WithLabelValues(p).Set(r.GetMeanNs() / 1e9)
	m.stddev.WithLabelValues(p).Set(r.GetStddevNs() / 1e9)
	m.samples.WithLabelValues(p).Set(float64(r.GetSamples()))
	m.lastEpoch.WithLabelValues(p).Set(float64(r.GetEpoch()))
	m.clockUnc.WithLabelValues(p).Set(r.GetClockUncertaintyNs() / 1e9)
	flagged := 0.0
	if r.GetClockFlagged() {
		flagged = 1
	}
	m.clockFlagged.WithLabelValues(p).Set(flagged)
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
	m.boundary.WithLabelValues(r.GetPath()).Add(float64(r.GetBoundaryMatched()))
}

// rdaOutcome counts a reconciliation.
func (m *metrics) rdaOutcome(path string, decoded bool, _ int) {
	d := "false"
	if decoded {
		d = "true"
	}
	m.peels.WithLabelValues(path, d).Inc()
}

// statusName is a result status as a metric label.
func statusName(s owlv1.ResultStatus) string {
	switch s {
	case owlv1.ResultStatus_RESULT_STATUS_OK:
		return "ok"
	case owlv1.ResultStatus_RESULT_STATUS_PARTIAL:
		return "partial"
	case owlv1.ResultStatus_RESULT_STATUS_NO_SAMPLES:
		return "no_samples"
	case owlv1.ResultStatus_RESULT_STATUS_MISSING_UPSTREAM:
		return "missing_upstream"
	case owlv1.ResultStatus_RESULT_STATUS_MISSING_DOWNSTREAM:
		return "missing_downstream"
	case owlv1.ResultStatus_RESULT_STATUS_MISMATCH:
		return "mismatch"
	}
	return "unknown"
}
