// Package collector pairs the two sides of each path: it takes the probes'
// epoch reports over gRPC, keeps each until the other side's report of the
// same path and epoch arrives (or a timeout passes), estimates the one-way
// delay, stores the result on disk, and serves results over gRPC and
// Prometheus.
//
// Every per-path state is keyed by path name, so that paths can later be
// sharded over a cluster of collectors.
package collector

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/owl-latency/owl/internal/cluster"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/reconcile"
	"github.com/owl-latency/owl/internal/security"
	"github.com/owl-latency/owl/internal/synopsis/lda"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rda"
	"github.com/owl-latency/owl/internal/synopsis/sample"
)

// Config is the collector's configuration.
type Config struct {
	// GRPCListen is the address of the probe and query services.
	GRPCListen string `yaml:"grpc_listen"`
	// HTTPListen serves /metrics and /healthz, and with WebPage the web
	// page and its JSON query endpoint.
	HTTPListen string `yaml:"http_listen"`
	// WebPage serves the web page (/) and the JSON form of the query
	// service (/api/v1/) on HTTPListen (docs/web.md). They show every
	// result, flows' addresses included, to whoever reaches the listener:
	// secure it with WebConfigFile, or turn the page off.
	WebPage bool `yaml:"web_page"`
	// WebConfigFile secures HTTPListen (metrics and the web page) with
	// TLS and basic authentication: a Prometheus exporter-toolkit web
	// configuration file (tls_server_config, basic_auth_users), read
	// again at each connection. Empty: plain HTTP, warned about when gRPC
	// has TLS.
	WebConfigFile string `yaml:"web_config_file"`
	// Pprof also serves Go's profiles under /debug/pprof/ on HTTPListen
	// (CPU, heap, goroutines): for finding where a collector's time and
	// memory go. It exposes the process's internals: keep it off where
	// others reach the listener.
	Pprof bool `yaml:"pprof"`
	// DataDir holds the database.
	DataDir string `yaml:"data_dir"`
	// CommitInterval is, under load, the least time between the starts
	// of two of the store's transactions: the results and records stored
	// meanwhile go in together, and fewer, larger transactions write a
	// third fewer bytes and take about an eighth less CPU for the same
	// results (docs/benchmarks.md). A result is queryable, and its reports are
	// acknowledged, up to this much later. A lone write (no load) is not
	// held back. 0: each transaction as soon as the one before is done.
	CommitInterval time.Duration `yaml:"commit_interval"`
	// Params are the deployment's shared parameters; probes must match.
	Params params.Params `yaml:"params"`
	// Paths are the measured paths.
	Paths []netpath.Path `yaml:"paths"`
	// PairTimeout is how long a report waits for the other side before the
	// epoch is reported as missing a side. A side waits no longer for a
	// probe that said its capture files are done (SourcesDone): it sends
	// nothing more.
	PairTimeout time.Duration `yaml:"pair_timeout"`
	// WriteLoneAfter is how long a report from a probe's stream is held
	// in memory only, unacknowledged, waiting for its other side: when
	// that comes, neither is written as a pending report and both are
	// acknowledged once the epoch's result is stored; a report still
	// alone is written then and acknowledged. The probe keeps a report
	// until it is acknowledged, so nothing is lost. 0: every report is
	// written (and acknowledged) when it comes, at twice the writes.
	// At most pair_timeout/2 is used.
	WriteLoneAfter time.Duration `yaml:"write_lone_after"`
	// PairRetention is how long a lone report is kept after the timeout, so
	// that a side that comes later still completes the epoch.
	PairRetention time.Duration `yaml:"pair_retention"`
	// DelayBounds are the plausible delays of a path (LDA usable rows).
	DelayBounds DelayBounds `yaml:"delay_bounds"`
	// SampleKeyBits is how many bits of each sampled packet's key above
	// the sampling rate the probes send (sample wire version 3; 0: the
	// full 48 bits, version 2, which collectors before it read). Fewer
	// bits, fewer bytes; two packets of an epoch's sample whose keys
	// agree are left out of the join, a chance of about n²/2^(bits+1) for
	// n sampled packets (at the default 28 and 1,250 packets, one epoch
	// in 340). A sample at rate 1, the epoch's exact list, keeps 32 bits
	// or more (probes since this default: one epoch in 8,600 at 1,000
	// packets).
	SampleKeyBits int `yaml:"sample_key_bits"`
	// MaxMessageBytes bounds a message from a probe.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// MaxPendingBytes bounds the memory of the reports held for their
	// other side or their worker (wire form, and the LDA, RDA and sample
	// decoded). Past it, a probe whose report waits for its other side is
	// paused (Pause: it holds its reports and sends them once the backlog
	// is under 80% of the bound, or after 2 s; counted in
	// owl_collector_probe_pauses_total), so that a collector that falls
	// behind slows its probes down instead of growing; once the epochs
	// with both sides in alone are over the bound (the workers are
	// behind), or the whole backlog is over three times it, every probe
	// that sends is paused. A report ends its
	// probe's stream unacknowledged (the probe sends it again after its
	// reconnect back-off; owl_collector_reports_shed_total) past the
	// bound for probes that do not pause, and for probes that do, past
	// twice the bound once they have been paused for a second, or past
	// four times. 0: no bound.
	MaxPendingBytes int64 `yaml:"max_pending_bytes"`
	// MemoryLimitBytes is the collector process's soft memory limit
	// (Go's runtime/debug.SetMemoryLimit): nearing it, the garbage
	// collector runs more often, trading CPU for memory. 0: twice the
	// sum of max_pending_bytes and 384 KiB for each path configured,
	// and 512 MiB more (1.5 GiB and 768 KiB a path by default; 2.96 GiB
	// at 2,000 paths), none when max_pending_bytes is 0; -1: none. The
	// GOMEMLIMIT environment variable, when set, takes precedence.
	MemoryLimitBytes int64 `yaml:"memory_limit_bytes"`
	// GCPercent is the garbage collector's target (Go's
	// runtime/debug.SetGCPercent): a collection starts once the heap
	// has grown by that percentage of what the last one left live.
	// Higher trades memory for CPU; the soft memory limit bounds the
	// heap either way. 0: 200; -1: off (only nearing the memory limit
	// starts a collection; needs one). The GOGC environment variable,
	// when set, takes precedence.
	GCPercent int `yaml:"gc_percent"`
	// ReadyFile, when set, receives the bound addresses as JSON once the
	// collector listens (useful with port 0).
	ReadyFile string `yaml:"ready_file"`
	// RDA sizes the paths' RDAs and bounds reconciliation.
	RDA RDAConfig `yaml:"rda"`
	// Flows sets per-flow results.
	Flows FlowsConfig `yaml:"flows"`
	// ClockUncertaintyShare flags results whose clock uncertainty (the ±
	// from both probes' clocks) is more than this share of the mean delay
	// (default 0.1).
	ClockUncertaintyShare float64 `yaml:"clock_uncertainty_share"`
	// Colate sets how COLATE vectors are kept and queried (when
	// params.colate.enabled).
	Colate ColateConfig `yaml:"colate"`
	// RTT sets how the probes' round-trip times are kept.
	RTT RTTConfig `yaml:"rtt"`
	// Reorder sets how the probes' TCP reordering by prefix is kept and
	// exported.
	Reorder ReorderConfig `yaml:"reorder"`
	// Limits bound what probes and readers may make the collector hold
	// or do: epochs out of range, probe ids, report rate, watchers, one
	// probe's share of the pending reports.
	Limits LimitsConfig `yaml:"limits"`
	// Cluster makes this collector one of several that share the paths
	// (hashicorp/memberlist gossip); off unless cluster.bind is set.
	Cluster cluster.Config `yaml:"cluster"`
	// TLS secures every gRPC connection, in and out, with certificates
	// on both ends (mTLS): the collector's own (an owl://collector/NAME
	// identity), and the CA that probes', readers' and the other
	// collectors' certificates must chain to. Required unless Insecure.
	TLS security.TLSConfig `yaml:"tls"`
	// ReaderTokensFile admits readers (queries only) by bearer token
	// besides client certificates: one token per line, `NAME TOKEN` or
	// `TOKEN`; the file is read again when it changes.
	ReaderTokensFile string `yaml:"reader_tokens_file"`
	// Insecure serves plaintext gRPC with no authentication: anyone who
	// reaches the collector can report as any probe and read everything.
	// For a laptop or a closed lab only; it is warned about in the log
	// and in ListProbes.
	Insecure bool `yaml:"insecure"`
}

// ColateConfig bounds the stored COLATE vectors and sets the defaults of
// GetFlowLatencyHistoric.
type ColateConfig struct {
	// MaxBytes caps the stored vectors of all probes together; past it
	// the oldest go first.
	MaxBytes int64 `yaml:"max_bytes"`
	// Retention drops vectors older than this (0: only max_bytes applies).
	Retention time.Duration `yaml:"retention"`
	// Gamma is the default number of virtual repetitions (COLATE §4.2.2);
	// 0 takes their exact expectation (the limit of many).
	Gamma int `yaml:"gamma"`
	// Beta is the default confidence interval β whose reliability a
	// query reports; Alpha the level of the reported half-width.
	Beta  float64 `yaml:"beta"`
	Alpha float64 `yaml:"alpha"`
}

// FlowsConfig sets how per-flow results are kept and exported.
type FlowsConfig struct {
	// Retention is how long the sketches behind GetFlowStats of any flow,
	// and the top flows' results, are kept after they were stored (by
	// the collector's clock, up to a minute more): a replayed capture's
	// as long as a live probe's.
	Retention time.Duration `yaml:"retention"`
	// MetricsTop is how many of a path's heaviest flows of its latest
	// epoch get Prometheus series (bounded cardinality).
	MetricsTop int `yaml:"metrics_top"`
	// LDSMinCols is the fewest LDS cells per row the collector asks a
	// path's probes for (0: no sizing, every epoch at params.lds.cols).
	// It sizes each path's LDS to the most large flows and packets of its
	// last 8 epochs, twice over: the LDS paper's cells for the large
	// flows (ε = 1%), and no fewer than make the other flows' packets in
	// a cell at most a large flow's share of it; a power of two from
	// LDSMinCols up to params.lds.cols; grown at once, shrunk only to a
	// quarter or less and after 8 epochs.
	LDSMinCols int `yaml:"lds_min_cols"`
	// LDSMinRows is the fewest of params.lds's rows the collector keeps
	// in a path's LDS (0: every row). Rows sample at different rates so
	// that some stay clean whatever the loss (multi-bank LDS); packets
	// reconciliation finds lost or extra are taken out of the sketches,
	// so the loss that spoils rows is the rest. The collector keeps the
	// rows clean, at twice the most spoiled share of the last 8 epochs,
	// from 100-packet flows to the largest flow, and at least
	// LDSMinRows: at no loss the two densest (half of the default
	// four). 1 saves a third more of a busy path's bytes, at a cost to
	// flows that collide with larger ones. Only with lds_min_cols above 0.
	LDSMinRows int `yaml:"lds_min_rows"`
	// LDSLargePackets is the size (packets per epoch) of the flows the
	// LDS is sized to measure well; smaller flows share cells.
	LDSLargePackets int `yaml:"lds_large_packets"`
	// LDS is "auto" (the default): the collector turns a path's LDS off
	// while its packet sample gives a flow of LDSLargePackets at least
	// SampleMinDelays sampled delays (at the defaults, up to about 10,000
	// packets per epoch), and the top flows' results come from the
	// sample; or "always": every epoch carries an LDS, so that
	// GetFlowStats can estimate any flow, not only the top ones. "auto"
	// needs LDSMinCols above 0.
	LDS string `yaml:"lds"`
	// SampleMinDelays is how many sampled delays of a top flow an epoch
	// needs for the flow's delay quantiles (with 95% intervals). Any
	// number gives the flow a mean where its sketches give none.
	SampleMinDelays int `yaml:"sample_min_delays"`
	// LDSDigestBytes is how many low bytes of each LDS cell's digest (the
	// xor of its packets' IDs) the probes send: 8, 4 or 2. A cell is used
	// for a flow only when both sides agree on its count and digest; with
	// n bytes, two different sets of packets of one count pass for the
	// same with a chance of 2^-(8n) (4: one in four billion), and each
	// byte less saves one per cell (a quarter of an LDS at 4, two fifths
	// at 2). Probes older than this setting send 8.
	LDSDigestBytes int `yaml:"lds_digest_bytes"`
	// LDSPacked asks the probes for the packed LDS wire form (version 3:
	// counts and sums bit-packed, a fifth smaller on busy paths and half
	// on quiet ones). Off only while collectors of an older version
	// share a cluster with this one: they cannot read it. Probes older
	// than this setting send the plain form.
	LDSPacked bool `yaml:"lds_packed"`
}

// RDAConfig sizes RDAs and bounds what reconciling one epoch may cost.
type RDAConfig struct {
	// MinBuckets and MaxBuckets bound the buckets per bank the collector
	// asks for (it starts from params.rda.buckets and follows the set
	// differences it sees: 2.5 × the largest of the last 8 epochs, grown
	// at once, shrunk to a quarter or less once 8 epochs are seen). The
	// mean needs few buckets to be exact; the standard deviation comes
	// from the packet sample where it holds at least as many delays as
	// the RDA has buckets, and else from the buckets, whose error falls
	// as 1/√buckets. MinBuckets 0 (the default) is 16 where paths are
	// sampled (params.sample.target above 0) and 256 where they are not.
	// A report whose RDA is larger than MaxBuckets (or
	// params.rda.buckets) is rejected, and the largest report
	// MaxBuckets allows must fit max_message_bytes: 2^19 buckets take
	// at most 32 MiB, which leaves room for large LDS and LDA params.
	MinBuckets int `yaml:"min_buckets"`
	MaxBuckets int `yaml:"max_buckets"`
	// LDAMinRows is the fewest LDA rows per bank the collector asks a
	// path's probes for (0: no sizing, every LDA at params.lda.rows). The
	// LDA is the estimate of an epoch whose RDAs cannot be reconciled
	// (a probe's cache lost, rebuilds exhausted); the collector sizes it
	// to the same set differences as the RDA: a power of two of at least
	// twice the largest of the last 8 epochs (so that at that loss most of
	// a bank's rows stay usable), from lda_min_rows up to
	// params.lda.rows, grown at once, shrunk to a quarter or less once 8
	// epochs are seen, and told to both probes (LDASize) from an epoch
	// three past the newest they reported. An epoch whose two sides used
	// different rows has no LDA estimate.
	LDAMinRows int `yaml:"lda_min_rows"`
	// MaxRebuilds caps late-binding rebuilds per epoch.
	MaxRebuilds int `yaml:"max_rebuilds"`
	// RequestTimeout bounds one epoch's rebuilds and timestamp fetches.
	RequestTimeout time.Duration `yaml:"request_timeout"`
}

// MemoryLimit is the soft memory limit MemoryLimitBytes names, and false
// when there is none.
func (c Config) MemoryLimit() (int64, bool) {
	switch {
	case c.MemoryLimitBytes > 0:
		return c.MemoryLimitBytes, true
	case c.MemoryLimitBytes < 0 || c.MaxPendingBytes == 0:
		return 0, false
	}
	return 2*(c.MaxPendingBytes+int64(len(c.Paths))*pathMemoryBytes) + 512<<20, true
}

// pathMemoryBytes is what a path adds to the default memory limit before
// it is doubled. At 2,000 paths and a full backlog the heap held 0.6 to
// 1.0 GB besides the reports (300 to 520 KB a path: the joins and
// sketches kept for neighbouring epochs, decoded storage waiting for
// reuse), and under a limit of 1.5 GiB the garbage collector took up to
// a third of the CPU (docs/benchmarks.md).
const pathMemoryBytes = 384 << 10

// defaultGCPercent is the garbage collector's target gc_percent 0 stands
// for: twice Go's own. At 700 paths it cut the collector's marking time
// by about two thirds (docs/benchmarks.md).
const defaultGCPercent = 200

// GCTarget is the garbage collector's target GCPercent names (-1: off).
func (c Config) GCTarget() int {
	if c.GCPercent == 0 {
		return defaultGCPercent
	}
	return c.GCPercent
}

// The RDA floors rda.min_buckets 0 stands for: with a packet sample the
// standard deviation comes from the sample and the RDA needs only to
// decode; without one the buckets give it.
const (
	sampledMinBuckets   = 16
	unsampledMinBuckets = 256
)

// MinRDABuckets is the fewest RDA buckets per bank the collector asks
// for.
func (c Config) MinRDABuckets() int {
	switch {
	case c.RDA.MinBuckets > 0:
		return c.RDA.MinBuckets
	case c.Params.Sample.Target > 0:
		return sampledMinBuckets
	}
	return unsampledMinBuckets
}

// limits are the bounds reconcile.Epoch keeps to.
func (c Config) limits() reconcile.Limits {
	return reconcile.Limits{MinBuckets: c.MinRDABuckets(), MaxBuckets: c.RDA.MaxBuckets, MaxRebuilds: c.RDA.MaxRebuilds}
}

// DelayBounds is lda.DelayBounds in configuration form.
type DelayBounds struct {
	Min time.Duration `yaml:"min"`
	Max time.Duration `yaml:"max"`
}

// The values of FlowsConfig.LDS.
const (
	ldsAuto   = "auto"
	ldsAlways = "always"
)

// DefaultConfig listens on :7700 (gRPC) and :7701 (HTTP) and keeps data in
// ./owl-data.
func DefaultConfig() Config {
	b := lda.DefaultDelayBounds()
	return Config{
		GRPCListen:      ":7700",
		HTTPListen:      ":7701",
		WebPage:         true,
		DataDir:         "owl-data",
		CommitInterval:  50 * time.Millisecond,
		Params:          params.Default(),
		PairTimeout:     30 * time.Second,
		PairRetention:   10 * time.Minute,
		WriteLoneAfter:  2 * time.Second,
		DelayBounds:     DelayBounds{Min: time.Duration(b.MinNS), Max: time.Duration(b.MaxNS)},
		SampleKeyBits:   28,
		MaxMessageBytes: 64 << 20,
		MaxPendingBytes: 512 << 20,
		RDA:             RDAConfig{MaxBuckets: 1 << 19, LDAMinRows: 32, MaxRebuilds: 4, RequestTimeout: 10 * time.Second},
		Flows:           FlowsConfig{Retention: time.Hour, MetricsTop: 10, LDSMinCols: 64, LDSMinRows: 2, LDSLargePackets: 128, LDS: ldsAuto, SampleMinDelays: 16, LDSDigestBytes: 4, LDSPacked: true},
		Colate:          ColateConfig{MaxBytes: 10 << 30, Beta: 0.05, Alpha: 0.95},
		RTT:             RTTConfig{Retention: 24 * time.Hour},
		Reorder:         DefaultReorderConfig(),

		ClockUncertaintyShare: 0.1,
		Limits:                DefaultLimits(),
	}
}

// validateMemory checks max_pending_bytes, memory_limit_bytes and
// gc_percent.
func (c Config) validateMemory() error {
	if c.MaxPendingBytes < 0 {
		return fmt.Errorf("max_pending_bytes %d must not be negative", c.MaxPendingBytes)
	}
	if c.MemoryLimitBytes < -1 {
		return fmt.Errorf("memory_limit_bytes %d: give a size in bytes, 0 for the default or -1 for none", c.MemoryLimitBytes)
	}
	if _, limited := c.MemoryLimit(); c.GCPercent < -1 || c.GCPercent == -1 && !limited {
		return fmt.Errorf("gc_percent %d: give a percentage, 0 for the default or -1 for off (with a memory limit: memory_limit_bytes or max_pending_bytes set)", c.GCPercent)
	}
	return nil
}

// Validate reports an unusable configuration.
func (c Config) Validate() error {
	if c.GRPCListen == "" || c.DataDir == "" {
		return errors.New("collector needs grpc_listen and data_dir")
	}
	if err := c.validateMemory(); err != nil {
		return err
	}
	if c.SampleKeyBits != 0 && (c.SampleKeyBits < sample.MinKeyBits || c.SampleKeyBits > sample.KeyBits) {
		return fmt.Errorf("sample_key_bits %d must be 0 or in [%d, %d]", c.SampleKeyBits, sample.MinKeyBits, sample.KeyBits)
	}
	if err := c.Params.Validate(); err != nil {
		return fmt.Errorf("params: %w", err)
	}
	if len(c.Paths) == 0 && !c.Params.Colate.Enabled {
		return errors.New("paths: none configured, and COLATE is off: the collector would measure nothing")
	}
	seen := map[string]bool{}
	for _, p := range c.Paths {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("paths: %w", err)
		}
		if seen[p.Name] {
			return fmt.Errorf("path %q defined twice", p.Name)
		}
		seen[p.Name] = true
	}
	if err := c.Cluster.Validate(); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := c.validateSecurity(); err != nil {
		return err
	}
	if err := security.ValidateWebConfig(c.WebConfigFile); err != nil {
		return err
	}
	if c.PairTimeout <= 0 || c.PairRetention < 0 {
		return errors.New("pair_timeout must be positive and pair_retention not negative")
	}
	if c.WriteLoneAfter < 0 {
		return fmt.Errorf("write_lone_after %v must not be negative", c.WriteLoneAfter)
	}
	if c.CommitInterval < 0 || c.CommitInterval > time.Second {
		return fmt.Errorf("commit_interval %v out of [0, 1s]", c.CommitInterval)
	}
	if err := c.DelayBounds.Validate(); err != nil {
		return fmt.Errorf("delay_bounds: %w", err)
	}
	if err := c.RDA.Validate(); err != nil {
		return fmt.Errorf("rda: %w", err)
	}
	if err := c.Flows.Validate(c.Params.Epoch.Length, c.Params.LDS); err != nil {
		return fmt.Errorf("flows: %w", err)
	}
	if c.ClockUncertaintyShare <= 0 || c.ClockUncertaintyShare > 100 {
		return fmt.Errorf("clock_uncertainty_share %v out of range (0, 100]", c.ClockUncertaintyShare)
	}
	if err := c.Colate.Validate(); err != nil {
		return fmt.Errorf("colate: %w", err)
	}
	if c.RTT.Retention < c.Params.Epoch.Length {
		return fmt.Errorf("rtt: retention %v is shorter than an epoch (%v)", c.RTT.Retention, c.Params.Epoch.Length)
	}
	if err := c.Reorder.Validate(c.Params.Epoch.Length); err != nil {
		return fmt.Errorf("reorder: %w", err)
	}
	if c.MaxMessageBytes < 1<<16 {
		return fmt.Errorf("max_message_bytes %d is below 64 KiB", c.MaxMessageBytes)
	}
	if err := c.validateMessageSize(); err != nil {
		return err
	}
	if err := c.Limits.Validate(c.Params.Epoch.Length); err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	return nil
}

// Validate reports bounds that are out of order.
func (b DelayBounds) Validate() error {
	if b.Min >= b.Max {
		return fmt.Errorf("min %v must be below max %v", b.Min, b.Max)
	}
	return nil
}

// Validate reports RDA sizes and limits out of range.
func (c RDAConfig) Validate() error {
	if c.MinBuckets < 0 || c.MaxBuckets < max(c.MinBuckets, unsampledMinBuckets) || c.MaxBuckets > rda.MaxBuckets {
		return fmt.Errorf("min_buckets %d and max_buckets %d must satisfy 0 ≤ min ≤ max, %d ≤ max ≤ %d", c.MinBuckets, c.MaxBuckets, unsampledMinBuckets, rda.MaxBuckets)
	}
	if c.MaxRebuilds < 0 || c.RequestTimeout <= 0 {
		return errors.New("max_rebuilds must not be negative and request_timeout must be positive")
	}
	if c.LDAMinRows != 0 && (c.LDAMinRows < 2 || c.LDAMinRows%2 != 0 || c.LDAMinRows > lda.MaxRows) {
		return fmt.Errorf("lda_min_rows %d must be 0 (no sizing) or even and in [2, %d]", c.LDAMinRows, lda.MaxRows)
	}
	return nil
}

// Validate reports a retention shorter than an epoch (epochLen), a
// metrics_top out of range, or LDS sizing outside the shape the
// parameters allow (sketch).
func (c FlowsConfig) Validate(epochLen time.Duration, sketch lds.Config) error {
	if c.Retention < epochLen || c.MetricsTop < 0 || c.MetricsTop > 1000 {
		return fmt.Errorf("retention %v must cover an epoch and metrics_top %d be in [0, 1000]", c.Retention, c.MetricsTop)
	}
	if c.LDSMinRows < 0 {
		return fmt.Errorf("lds_min_rows %d must not be negative", c.LDSMinRows)
	}
	if c.LDSMinCols != 0 && (c.LDSMinCols < sketch.K || c.LDSMinCols > sketch.Cols) {
		return fmt.Errorf("lds_min_cols %d must be 0 or in [params.lds.k %d, params.lds.cols %d]", c.LDSMinCols, sketch.K, sketch.Cols)
	}
	if !slices.Contains(lds.DigestWidths, c.LDSDigestBytes) {
		return fmt.Errorf("lds_digest_bytes %d must be one of %v", c.LDSDigestBytes, lds.DigestWidths)
	}
	if c.LDS != ldsAuto && c.LDS != ldsAlways {
		return fmt.Errorf("lds %q must be %q or %q", c.LDS, ldsAuto, ldsAlways)
	}
	if c.SampleMinDelays < 1 {
		return fmt.Errorf("sample_min_delays %d must be positive", c.SampleMinDelays)
	}
	if c.LDSLargePackets < 1 {
		return fmt.Errorf("lds_large_packets %d must be positive", c.LDSLargePackets)
	}
	return nil
}

// Validate reports COLATE storage and query defaults out of range.
func (c ColateConfig) Validate() error {
	if c.MaxBytes < 1<<20 || c.Retention < 0 || c.Gamma < 0 || c.Gamma > 1_000_000 {
		return fmt.Errorf("max_bytes %d must be at least 1 MiB, retention %v not negative, gamma %d in [0, 10^6]", c.MaxBytes, c.Retention, c.Gamma)
	}
	if c.Beta <= 0 || c.Beta > 1 || c.Alpha <= 0 || c.Alpha >= 1 {
		return fmt.Errorf("beta %v must be in (0, 1] and alpha %v in (0, 1)", c.Beta, c.Alpha)
	}
	return nil
}

// LoadFile reads a YAML configuration over cfg. Unknown keys are errors.
func LoadFile(path string, cfg *Config) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading collector config: %w", err)
	}
	defer f.Close()
	d := yaml.NewDecoder(f)
	d.KnownFields(true)
	if err := d.Decode(cfg); err != nil {
		return fmt.Errorf("parsing collector config %s: %w", path, err)
	}
	return nil
}

// validateSecurity checks that the collector runs with TLS, or in
// plaintext only when asked for.
func (c Config) validateSecurity() error {
	if c.Insecure {
		if c.TLS.Configured() || c.ReaderTokensFile != "" {
			return errors.New("insecure is set together with tls or reader_tokens_file: choose one")
		}
		return nil
	}
	if err := c.TLS.Validate(); err != nil {
		return err
	}
	if c.Cluster.Enabled() && c.Cluster.KeyFile == "" {
		return errors.New("cluster.key_file is required with TLS: without a gossip key anyone who reaches the gossip port can join the cluster")
	}
	if c.ReaderTokensFile != "" {
		if _, err := security.LoadTokens(c.ReaderTokensFile); err != nil {
			return err
		}
	}
	return nil
}
