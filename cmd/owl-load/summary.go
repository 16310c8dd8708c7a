package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/probe"
)

// summary is what a run measured.
type summary struct {
	Probes     int     `json:"probes"`
	Paths      int     `json:"paths"`
	Packets    int     `json:"packets_per_path_epoch"`
	Loss       float64 `json:"loss"`
	Reorder    float64 `json:"reorder"`
	Collectors string  `json:"collectors"`
	Rate       float64 `json:"rate"`
	Window     int     `json:"window,omitempty"`
	FirstEpoch int64   `json:"first_epoch"`

	EpochsSent       int     `json:"epochs_sent"`
	PathEpochsSent   int     `json:"path_epochs_sent"`
	SendSeconds      float64 `json:"send_seconds"`
	OfferedPerSecond float64 `json:"offered_per_second"`

	// Results counts the path-epochs with a result, OK those with status
	// OK; Seconds is from the first send to the last result watched.
	Results             int            `json:"results"`
	OK                  int            `json:"ok"`
	Statuses            map[string]int `json:"statuses"`
	NoResult            int            `json:"no_result"`
	Updated             int            `json:"updated_by_boundary_matching"`
	WatchCuts           int            `json:"watch_cuts"`
	Seconds             float64        `json:"seconds"`
	ReconciledPerSecond float64        `json:"reconciled_per_second"`

	// Latency, in seconds, from an epoch's later report to its first
	// result, over the Watched results; by thirds of the epochs sent.
	Watched              int     `json:"watched"`
	LatencyP50           float64 `json:"latency_p50_seconds"`
	LatencyP99           float64 `json:"latency_p99_seconds"`
	LatencyMax           float64 `json:"latency_max_seconds"`
	LatencyFirstThirdP50 float64 `json:"latency_first_third_p50_seconds"`
	LatencyLastThirdP50  float64 `json:"latency_last_third_p50_seconds"`
	LatencyLastThirdP99  float64 `json:"latency_last_third_p99_seconds"`

	Estimators       map[string]int `json:"estimators"`
	Exact            int            `json:"exact"`
	NotExact         int            `json:"not_exact"`
	NotExactExamples []string       `json:"not_exact_examples,omitempty"`
	// Quantiles counts the sampled delay quantiles (with an interval) of
	// the OK results, QuantilesHeld those whose interval holds the
	// generated quantile, QuantileConfidence their mean stated confidence.
	Quantiles          int     `json:"quantiles"`
	QuantilesHeld      int     `json:"quantiles_held"`
	QuantileConfidence float64 `json:"quantile_confidence"`

	Reports      uint64 `json:"reports"`
	Acked        uint64 `json:"acked"`
	Dropped      uint64 `json:"dropped"`
	ReportBytes  uint64 `json:"report_bytes"`
	Fetches      uint64 `json:"fetches"`
	Rebuilds     uint64 `json:"rebuilds"`
	RepairErrors uint64 `json:"repair_errors"`

	CollectorCosts []collectorCost `json:"collector_costs,omitempty"`
	Kill           *killSummary    `json:"kill,omitempty"`
	LoadCPUSeconds float64         `json:"load_cpu_seconds"`
	LoadCores      float64         `json:"load_cores"`

	// KeptUp (with -rate > 0): every path-epoch has a result, and the
	// median latency grew by less than an epoch from the first third of
	// the epochs to the last (a collector that falls behind makes it grow
	// all along).
	KeptUp *bool `json:"kept_up,omitempty"`
}

// collectorCost is what a spawned collector spent over the run.
type collectorCost struct {
	Name              string  `json:"name"`
	CPUSeconds        float64 `json:"cpu_seconds"`
	CPUMsPerPathEpoch float64 `json:"cpu_ms_per_path_epoch"`
	// SecondHalfMsPerPathEpoch is the CPU per path-epoch from the
	// moment half of the results were in to the end (0: not measured).
	SecondHalfMsPerPathEpoch float64 `json:"second_half_ms_per_path_epoch,omitempty"`
	PeakBytes                int64   `json:"peak_rss_bytes"`
	// PeakAnonBytes leaves out the store's mapped file, which the
	// kernel can drop (sampled every 200 ms).
	PeakAnonBytes int64 `json:"peak_anon_bytes"`
}

// summarize sums up the run between two snapshots, and its second half
// from half (zero: not taken) on.
func (l *loadRun) summarize(before, half, after snapshot, sendEnd time.Time) *summary {
	c := l.cfg
	s := &summary{Probes: c.probes, Paths: c.paths, Packets: c.traffic.Packets, Loss: c.traffic.Loss, Reorder: c.traffic.Reorder,
		Collectors: l.seed, Rate: c.rate, FirstEpoch: l.res.first, EpochsSent: int(l.sent.Load()),
		Statuses: map[string]int{}, Estimators: map[string]int{}}
	if c.rate == 0 {
		s.Window = c.window
	}
	if len(l.procs) > 0 {
		s.Collectors = fmt.Sprintf("%d spawned", len(l.procs))
	}
	s.PathEpochsSent = s.EpochsSent * len(l.paths)
	s.SendSeconds = sendEnd.Sub(before.at).Seconds()
	if s.SendSeconds > 0 {
		s.OfferedPerSecond = float64(s.PathEpochsSent) / s.SendSeconds
	}
	l.tallyResults(s)
	l.tallyLatency(s, before.at)
	for _, e := range l.probes {
		st := e.Stats()
		s.Reports += st.Reports
		s.Acked += st.Acked()
		s.Dropped += st.Dropped
		s.ReportBytes += st.Bytes
		s.Fetches += st.Fetches
		s.Rebuilds += st.Rebuilds
		s.RepairErrors += st.RepairErrors
	}
	for i, p := range l.procs {
		if !before.procs[i].ok || !after.procs[i].ok {
			continue // exited: run says so
		}
		cpu := after.procs[i].cpu - before.procs[i].cpu
		cc := collectorCost{Name: p.name, CPUSeconds: cpu.Seconds(), PeakBytes: after.procs[i].peakBytes, PeakAnonBytes: after.procs[i].peakAnon}
		if s.OK > 0 {
			cc.CPUMsPerPathEpoch = cpu.Seconds() * 1000 / float64(s.OK)
		}
		cc.SecondHalfMsPerPathEpoch = secondHalf(half, after, i)
		s.CollectorCosts = append(s.CollectorCosts, cc)
	}
	s.Kill = l.summarizeKill(s, after)
	s.LoadCPUSeconds = (after.self - before.self).Seconds()
	if d := after.at.Sub(before.at).Seconds(); d > 0 {
		s.LoadCores = s.LoadCPUSeconds / d
	}
	if c.rate > 0 {
		kept := s.NoResult == 0 && s.LatencyLastThirdP50 <= s.LatencyFirstThirdP50+l.grid.Length.Seconds()
		s.KeptUp = &kept
	}
	return s
}

// secondHalf is collector i's CPU per path-epoch between two snapshots
// (0 when the first was not taken or either could not read it).
func secondHalf(half, after snapshot, i int) float64 {
	if i >= len(half.procs) || !half.procs[i].ok || !after.procs[i].ok || after.results <= half.results {
		return 0
	}
	return (after.procs[i].cpu - half.procs[i].cpu).Seconds() * 1000 / float64(after.results-half.results)
}

// tallyResults counts statuses, estimators and exactness against the
// truth.
func (l *loadRun) tallyResults(s *summary) {
	r := l.res
	r.outcomesMu.Lock()
	defer r.outcomesMu.Unlock()
	s.Results, s.WatchCuts = len(r.outcomes), r.watchCuts
	s.NoResult = s.PathEpochsSent - s.Results
	keys := slices.SortedFunc(maps.Keys(r.outcomes), func(a, b pathEpoch) int {
		return cmp.Or(cmp.Compare(a.epoch, b.epoch), strings.Compare(a.path, b.path))
	})
	for _, k := range keys {
		o := r.outcomes[k]
		if o.updates > 0 {
			s.Updated++
		}
		st := strings.TrimPrefix(o.res.GetStatus().String(), "RESULT_STATUS_")
		s.Statuses[st]++
		if o.res.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK {
			s.NotExact++
			continue
		}
		s.OK++
		s.Estimators[o.res.GetEstimator()]++
		truth := l.traffic.Truth(k.path, k.epoch)
		s.tallyQuantiles(o.res, truth)
		if why := inexact(o.res, truth); why != "" {
			s.NotExact++
			if len(s.NotExactExamples) < 5 {
				s.NotExactExamples = append(s.NotExactExamples, fmt.Sprintf("%s epoch %d: %s", k.path, k.epoch, why))
			}
			continue
		}
		s.Exact++
	}
	if !r.lastAt.IsZero() {
		if first := r.firstSent(); !first.IsZero() {
			s.Seconds = r.lastAt.Sub(first).Seconds()
		}
	}
	if s.Seconds > 0 {
		s.ReconciledPerSecond = float64(s.OK) / s.Seconds
	}
}

// firstSent is when the first report was queued. r.mu is held.
func (r *results) firstSent() time.Time {
	if len(r.sentAt) == 0 || len(r.sentAt[0]) == 0 {
		return time.Time{}
	}
	return slices.MinFunc(r.sentAt[0], func(a, b time.Time) int { return a.Compare(b) })
}

// tallyQuantiles counts res's delay quantiles whose interval holds the
// generated quantile (the delay of rank ⌈q·n⌉ among the n delivered).
func (s *summary) tallyQuantiles(res *owlv1.PathStats, t probe.Truth) {
	n := len(t.Delays)
	if n == 0 {
		return
	}
	for _, q := range res.GetQuantiles() {
		if q.GetConfidence() == 0 {
			continue
		}
		k := min(max(int(math.Ceil(q.GetQ()*float64(n)))-1, 0), n-1)
		v := float64(t.Delays[k])
		s.QuantileConfidence = (s.QuantileConfidence*float64(s.Quantiles) + q.GetConfidence()) / float64(s.Quantiles+1)
		s.Quantiles++
		if q.GetLoNs() <= v && v <= q.GetHiNs() {
			s.QuantilesHeld++
		}
	}
}

// inexact says why a result is not exactly the truth, or "".
func inexact(res *owlv1.PathStats, t probe.Truth) string {
	switch {
	case res.GetEstimator() != "rda" || !res.GetDecoded() || res.GetUnusableBuckets() > 0:
		return fmt.Sprintf("estimator %s, decoded %v, %d buckets unusable (%s)", res.GetEstimator(), res.GetDecoded(), res.GetUnusableBuckets(), res.GetDetail())
	case res.GetLost() != float64(t.Lost):
		return fmt.Sprintf("lost %v, truth %d", res.GetLost(), t.Lost)
	case math.Abs(res.GetMeanNs()-t.MeanNS) > 1e-9*t.MeanNS:
		return fmt.Sprintf("mean %.3f ns, truth %.3f ns", res.GetMeanNs(), t.MeanNS)
	}
	return ""
}

// tallyLatency sets the latency percentiles, overall and by thirds of the
// epochs sent.
func (l *loadRun) tallyLatency(s *summary, start time.Time) {
	r := l.res
	r.outcomesMu.Lock()
	samples := slices.Clone(r.latencies)
	r.outcomesMu.Unlock()
	s.Watched = len(samples)
	all := make([]time.Duration, len(samples))
	var firstThird, lastThird []time.Duration
	third := int64(max(1, s.EpochsSent/3))
	for i, x := range samples {
		all[i] = x.d
		switch k := x.epoch - r.first; {
		case k < third:
			firstThird = append(firstThird, x.d)
		case k >= int64(s.EpochsSent)-third:
			lastThird = append(lastThird, x.d)
		}
	}
	s.LatencyP50, s.LatencyP99, s.LatencyMax = quantile(all, 0.5), quantile(all, 0.99), quantile(all, 1)
	s.LatencyFirstThirdP50 = quantile(firstThird, 0.5)
	s.LatencyLastThirdP50, s.LatencyLastThirdP99 = quantile(lastThird, 0.5), quantile(lastThird, 0.99)
}

// quantile is the q-quantile of ds in seconds (it sorts ds; 0 when empty).
func quantile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := min(len(ds)-1, int(math.Ceil(q*float64(len(ds))))-1)
	return ds[max(0, i)].Seconds()
}

// print writes the summary as a table (text) or JSON.
func (s *summary) print(w io.Writer, format string) error {
	if format == "json" {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(s)
	}
	var b strings.Builder
	line := func(label, f string, a ...any) { fmt.Fprintf(&b, "%-15s %s\n", label, fmt.Sprintf(f, a...)) }
	pace := fmt.Sprintf("rate %g epochs/s", s.Rate)
	if s.Rate == 0 {
		pace = fmt.Sprintf("as fast as answered, window %d", s.Window)
	}
	line("load", "%d probes, %d paths, %d packets per path-epoch, loss %g, reorder %g; collectors %s; %s",
		s.Probes, s.Paths, s.Packets, s.Loss, s.Reorder, s.Collectors, pace)
	line("sent", "%d epochs from %d = %d path-epochs in %.1f s (%.0f path-epochs/s offered)",
		s.EpochsSent, s.FirstEpoch, s.PathEpochsSent, s.SendSeconds, s.OfferedPerSecond)
	line("results", "%d of %d (%s); %d never answered; %d updated by boundary matching; watch cut %d times",
		s.Results, s.PathEpochsSent, counts(s.Statuses), s.NoResult, s.Updated, s.WatchCuts)
	line("reconciled", "%.0f path-epochs/s OK (first report to last result: %.1f s)", s.ReconciledPerSecond, s.Seconds)
	line("latency", "report to queryable: p50 %s, p99 %s, max %s (%d watched); p50 first third %s, last third %s (p99 %s)",
		secs(s.LatencyP50), secs(s.LatencyP99), secs(s.LatencyMax), s.Watched, secs(s.LatencyFirstThirdP50), secs(s.LatencyLastThirdP50), secs(s.LatencyLastThirdP99))
	line("estimators", "%s", counts(s.Estimators))
	line("vs truth", "%d exact (rda, decoded, loss and mean equal to the generated), %d not", s.Exact, s.NotExact)
	for _, x := range s.NotExactExamples {
		line("", "e.g. %s", x)
	}
	if s.Quantiles > 0 {
		line("quantiles", "%d of %d sampled quantiles' intervals hold the generated quantile (%.1f%%; stated confidence %.1f%% on average)",
			s.QuantilesHeld, s.Quantiles, 100*float64(s.QuantilesHeld)/float64(s.Quantiles), 100*s.QuantileConfidence)
	}
	line("reports", "%d sent, %d acknowledged, %d dropped; %s to the collectors (%s per report); answered %d fetches, %d rebuilds (%d errors)",
		s.Reports, s.Acked, s.Dropped, bytesText(float64(s.ReportBytes)), bytesText(float64(s.ReportBytes)/float64(max(1, s.Reports))), s.Fetches, s.Rebuilds, s.RepairErrors)
	for _, c := range s.CollectorCosts {
		line("collector "+c.Name, "CPU %.2f s (%.3f ms per path-epoch; second half %.3f), peak RSS %s (anonymous %s, the rest the store's mapped file)",
			c.CPUSeconds, c.CPUMsPerPathEpoch, c.SecondHalfMsPerPathEpoch, bytesText(float64(c.PeakBytes)), bytesText(float64(c.PeakAnonBytes)))
	}
	if n := len(s.CollectorCosts); n > 1 {
		var cpu, perPE, half float64
		for _, c := range s.CollectorCosts {
			cpu, perPE, half = cpu+c.CPUSeconds, perPE+c.CPUMsPerPathEpoch, half+c.SecondHalfMsPerPathEpoch
		}
		line("collectors", "CPU %.2f s together (%.3f ms per path-epoch; second half %.3f)", cpu, perPE, half)
	}
	if k := s.Kill; k != nil {
		line("kill", "%s killed (%s) after epoch %d: %d path-epochs in flight then, answered within %s; before it: reports of %s, %.3f rebuilds each",
			k.Member, k.Signal, k.AfterEpoch, k.InFlight, secs(k.InFlightMax), bytesText(k.BytesPerReportBefore), k.RebuildsPerReportBefore)
		w := k.After
		line("", "epochs %d on: latency p50 %s, p99 %s, max %s; reports of %s, %.3f rebuilds each",
			w.FromEpoch, secs(w.LatencyP50), secs(w.LatencyP99), secs(w.LatencyMax), bytesText(w.BytesPerReport), w.RebuildsPerReport)
		if w := k.Back; w != nil {
			line("", "%s back, listening after %s; epochs %d on: latency p50 %s, p99 %s, max %s; reports of %s, %.3f rebuilds each",
				k.Member, secs(w.ListenSeconds), w.FromEpoch, secs(w.LatencyP50), secs(w.LatencyP99), secs(w.LatencyMax), bytesText(w.BytesPerReport), w.RebuildsPerReport)
		}
		line("", "the members' CPU from the kill on: %.3f ms per path-epoch", k.MsPerPathEpoch)
	}
	if len(s.CollectorCosts) == 0 {
		line("collectors", "CPU and memory not measured (not started by owl-load, or exited)")
	}
	line("owl-load", "CPU %.2f s (%.2f cores)", s.LoadCPUSeconds, s.LoadCores)
	if s.KeptUp != nil {
		verdict := "yes"
		if !*s.KeptUp {
			verdict = "no: the latency grew by an epoch or more (or some results never came)"
		}
		line("kept up", "%s", verdict)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// counts renders a tally as "a 3, b 1", largest first.
func counts(m map[string]int) string {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), strings.Compare(a, b)) })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", cmp.Or(k, `""`), m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// secs renders seconds as a rounded duration.
func secs(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d >= time.Second {
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}

// bytesText renders a byte count in binary units.
func bytesText(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}
