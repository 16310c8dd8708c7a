// Package probe is the observation point: it captures packets, sorts them
// into the paths the collector assigns, folds them into synopses per epoch and
// streams the closed epochs to the collector, keeping each in a spool until
// the collector acknowledges it.
package probe

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/cli"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/ptp"
	"github.com/owl-latency/owl/internal/security"
)

// Config is a probe's configuration.
type Config struct {
	// ID names the observation point; the collector's paths refer to it.
	ID string `yaml:"id"`
	// Collector is the collector's gRPC address (host:port).
	Collector string `yaml:"collector"`
	// TLS authenticates the probe to the collector with its certificate
	// (whose URI SAN owl://probe/ID names it; ID may then be left out)
	// and the collector to the probe (its certificate must chain to
	// tls.ca, name the address's host or tls.server_name, and carry an
	// owl://collector/ identity). Required unless Insecure.
	TLS security.TLSConfig `yaml:"tls"`
	// Insecure connects in plaintext, to a collector run with -insecure.
	Insecure bool `yaml:"insecure"`
	// Sources are read one after the other as one capture.
	Sources []SourceConfig `yaml:"sources"`
	// Params are the deployment's shared parameters (identity, epoch
	// grid, synopses) when ExplicitParams; otherwise the probe takes the
	// collector's, which come with the path configuration, and keeps of
	// these only its local settings (params.Params.WithLocal: grace, the
	// RDA size to start with, flow tags and VXLAN port).
	Params params.Params `yaml:"params"`
	// ExplicitParams says that Params were given (a flag of a shared
	// parameter, or one under params in the YAML file): the probe's Hello
	// carries them, and the collector refuses the probe when they differ
	// from its own. LoadFile and NoteFlags set it.
	ExplicitParams bool `yaml:"-"`
	// SpoolMaxEpochs bounds the epochs whose reports (one per path) and COLATE
	// vectors are kept until acknowledged; past it the oldest epoch goes.
	SpoolMaxEpochs int `yaml:"spool_max_epochs"`
	// SpoolMaxBytes bounds the same messages in bytes.
	SpoolMaxBytes int64 `yaml:"spool_max_bytes"`
	// DataDir keeps the spool, the repair caches and the last path
	// configuration (with the collector's parameters) on disk, so that a
	// restarted probe sends what was not acknowledged, answers repairs of
	// what was not released and captures before the collector is back;
	// empty keeps them in memory only.
	DataDir string `yaml:"data_dir"`
	// ExitWhenDone makes the probe exit once its file sources are read and
	// every report is acknowledged.
	ExitWhenDone bool `yaml:"exit_when_done"`
	// ReconnectMax caps the wait between attempts to reach the collector.
	ReconnectMax time.Duration `yaml:"reconnect_max"`
	// DrainTimeout bounds how long shutdown waits for acknowledgements.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// ReleaseTimeout bounds how long a finished replay waits for the
	// collector to release its epochs (it may still need the caches).
	ReleaseTimeout time.Duration `yaml:"release_timeout"`
	// MetricsListen serves /metrics and /healthz when set (e.g. ":7702").
	MetricsListen string `yaml:"metrics_listen"`
	// WebConfigFile secures MetricsListen with TLS and basic
	// authentication: a Prometheus exporter-toolkit web configuration
	// file (tls_server_config, basic_auth_users). Empty: plain HTTP.
	WebConfigFile string `yaml:"web_config_file"`
	// Cache sets how the (packet ID, timestamp) lists behind RDA repair
	// are kept.
	Cache CacheConfig `yaml:"cache"`
	// TopFlows is how many of each path's heaviest flows a report names
	// (RAP keeps twice as many counters); the collector estimates them.
	TopFlows int `yaml:"top_flows"`
	// ExactLists lets a report carry the epoch's exact list of packets
	// (ID, time, flow) in place of its synopses wherever the list is at
	// most their size (half, with Gzip): quiet paths then cost bytes in
	// proportion to their packets.
	ExactLists bool `yaml:"exact_lists"`
	// Gzip compresses the stream to the collectors. Off by default: a
	// report's synopses compress by 2–10% only (lists of random IDs and
	// times hardly at all), and inflating them took a quarter of a
	// collector's CPU (docs/benchmarks.md).
	Gzip bool `yaml:"gzip"`
	// RTT measures round-trip times at this point (request/response
	// pairs of every flow it sees), shipped once per epoch.
	RTT RTTConfig `yaml:"rtt"`
	// Reorder measures TCP reordering by prefix at this point (of every
	// TCP flow it sees, in a fixed memory per capture worker), shipped
	// once per epoch.
	Reorder ReorderConfig `yaml:"reorder"`
	// Clock is where a live capture's timestamps get their time from;
	// replayed files keep the time of their capture.
	Clock ptp.Config `yaml:"clock"`
}

// CacheConfig bounds the per-epoch caches that let the collector fetch
// timestamps of lost and reordered packets and ask for a larger RDA.
type CacheConfig struct {
	// MaxPackets caps the entries of one path and epoch (24 bytes each);
	// past it the epoch's RDA can no longer be rebuilt.
	MaxPackets int `yaml:"max_packets"`
	// Retention is how many closed epochs per path are kept; it should
	// cover the collector's pair timeout.
	Retention int `yaml:"retention_epochs"`
	// MaxBytes caps all caches together; the oldest go first.
	MaxBytes int64 `yaml:"max_bytes"`
}

// SourceConfig is one packet source: a capture file or a live interface.
type SourceConfig struct {
	// File is a pcap or pcapng capture (optionally gzipped).
	File string `yaml:"file"`
	// ReplaySpeed paces a file at this multiple of its original speed;
	// 0 reads it as fast as possible.
	ReplaySpeed float64 `yaml:"replay_speed"`
	// Live captures an interface (a probe has at most one live source).
	Live *capture.LiveConfig `yaml:"live"`
}

// DefaultConfig returns a probe that exits when its files are done.
func DefaultConfig() Config {
	return Config{
		Collector:      "127.0.0.1:7700",
		Params:         params.Default(),
		SpoolMaxEpochs: 3600,
		SpoolMaxBytes:  256 << 20,
		ExitWhenDone:   true,
		ReconnectMax:   2 * time.Second,
		DrainTimeout:   10 * time.Second,
		ReleaseTimeout: 60 * time.Second,
		TopFlows:       20,
		ExactLists:     true,
		RTT:            DefaultRTTConfig(),
		Reorder:        DefaultReorderConfig(),
		Cache:          CacheConfig{MaxPackets: 4 << 20, Retention: 64, MaxBytes: 512 << 20},
		Clock:          ptp.DefaultConfig(),
	}
}

// Validate reports an unusable configuration.
func (c Config) Validate() error {
	if !netpath.ValidName(c.ID) {
		return fmt.Errorf("probe id %q: use 1–128 letters, digits or ._:-", c.ID)
	}
	if c.Collector == "" {
		return errors.New("probe needs a collector address")
	}
	if err := c.validateSecurity(); err != nil {
		return err
	}
	if err := security.ValidateWebConfig(c.WebConfigFile); err != nil {
		return err
	}
	if len(c.Sources) == 0 {
		return errors.New("probe needs at least one source")
	}
	for i, s := range c.Sources {
		if s.Live != nil && len(c.Sources) > 1 {
			return fmt.Errorf("source %d: a live capture must be the probe's only source", i+1)
		}
		if err := s.Validate(); err != nil {
			return fmt.Errorf("source %d: %w", i+1, err)
		}
	}
	if err := c.Params.Validate(); err != nil {
		return fmt.Errorf("params: %w", err)
	}
	if c.SpoolMaxEpochs < 1 || c.SpoolMaxBytes < 1 {
		return fmt.Errorf("spool_max_epochs %d and spool_max_bytes %d must be positive", c.SpoolMaxEpochs, c.SpoolMaxBytes)
	}
	if err := c.Cache.Validate(); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	if c.TopFlows < 0 || c.TopFlows > 10_000 {
		return fmt.Errorf("top_flows %d out of range [0, 10000]", c.TopFlows)
	}
	if err := c.RTT.Validate(); err != nil {
		return fmt.Errorf("rtt: %w", err)
	}
	if err := c.Reorder.Validate(); err != nil {
		return fmt.Errorf("reorder: %w", err)
	}
	if c.Sources[0].Live != nil {
		if err := c.Clock.Validate(); err != nil {
			return fmt.Errorf("clock: %w", err)
		}
	}
	if c.ReconnectMax <= 0 || c.DrainTimeout < 0 || c.ReleaseTimeout < 0 {
		return errors.New("reconnect_max must be positive, drain_timeout and release_timeout not negative")
	}
	return nil
}

// Validate reports a source that names nothing or both a file and an
// interface.
func (s SourceConfig) Validate() error {
	switch {
	case s.Live != nil && s.File != "":
		return errors.New("a live capture must be the probe's only source")
	case s.Live != nil:
		return s.Live.Validate()
	case s.File == "":
		return errors.New("no file or live interface given")
	case s.ReplaySpeed < 0:
		return errors.New("negative replay speed")
	}
	return nil
}

// Validate reports cache limits out of range.
func (c CacheConfig) Validate() error {
	if c.MaxPackets < 0 || c.Retention < 1 || c.MaxBytes < 0 {
		return fmt.Errorf("max_packets %d, retention_epochs %d, max_bytes %d: retention must be positive, the others not negative",
			c.MaxPackets, c.Retention, c.MaxBytes)
	}
	return nil
}

// LoadFile reads a YAML configuration over cfg. Unknown keys are errors.
// Shared parameters under params make the parameters explicit.
func LoadFile(path string, cfg *Config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading probe config: %w", err)
	}
	d := yaml.NewDecoder(bytes.NewReader(b))
	d.KnownFields(true)
	if err := d.Decode(cfg); err != nil {
		return fmt.Errorf("parsing probe config %s: %w", path, err)
	}
	var doc struct {
		Params yaml.Node `yaml:"params"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("parsing probe config %s: %w", path, err)
	}
	if params.SharedInYAML(&doc.Params) {
		cfg.ExplicitParams = true
	}
	return nil
}

var _ cli.FlagNoter = (*Config)(nil)

// NoteFlags makes the parameters explicit when a flag of a shared
// parameter was given (cli.Parse calls it).
func (c *Config) NoteFlags(names []string) {
	if params.SetsShared(names) {
		c.ExplicitParams = true
	}
}

// validateSecurity checks that the probe connects with TLS, or in
// plaintext only when asked for, and that its id is its certificate's.
func (c Config) validateSecurity() error {
	if c.Insecure {
		if c.TLS.Configured() {
			return errors.New("insecure is set together with tls: choose one")
		}
		return nil
	}
	if err := c.TLS.Validate(); err != nil {
		return err
	}
	id, err := c.certificateID()
	if err != nil {
		return err
	}
	if id != c.ID {
		return fmt.Errorf("probe id %q differs from its certificate's %q: the collector would refuse it", c.ID, id)
	}
	return nil
}

// certificateID is the probe id that the TLS certificate names.
func (c Config) certificateID() (string, error) {
	pair, err := tls.LoadX509KeyPair(c.TLS.Cert, c.TLS.Key)
	if err != nil {
		return "", fmt.Errorf("tls cert %s: %w", c.TLS.Cert, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return "", fmt.Errorf("tls cert %s: %w", c.TLS.Cert, err)
	}
	id, err := security.FromCertificate(leaf)
	if err != nil {
		return "", fmt.Errorf("tls cert %s: %w", c.TLS.Cert, err)
	}
	if id.Role != security.RoleProbe {
		return "", fmt.Errorf("tls cert %s is for a %s (%s), not a probe", c.TLS.Cert, id.Role, id.Via)
	}
	return id.Name, nil
}

// TakeCertificateID sets an unset probe id from the TLS certificate.
func (c *Config) TakeCertificateID() error {
	if c.ID != "" || c.Insecure || c.TLS.Cert == "" {
		return nil
	}
	id, err := c.certificateID()
	c.ID = id
	return err
}
