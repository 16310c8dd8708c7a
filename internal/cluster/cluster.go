// Package cluster lets several collectors share the work: they find each
// other by gossip (hashicorp/memberlist) and every key (a path's name, or
// the COLATE store) has one owner among the live members, chosen by
// rendezvous hashing so that a member's arrival or departure moves only
// the keys it takes or leaves. The same ranking names the members that
// keep copies of a key's state (Holders): the owner first.
package cluster

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/hashicorp/memberlist"
)

// Config says how a collector takes part in a cluster.
type Config struct {
	// Bind is the gossip address (host:port, TCP and UDP); empty means no
	// cluster: the collector owns everything.
	Bind string `yaml:"bind"`
	// Advertise is the gossip address the others use, when Bind's is not
	// reachable from them (0.0.0.0, NAT).
	Advertise string `yaml:"advertise"`
	// Join lists gossip addresses of members to join at start (any one
	// that answers is enough). Empty: start a new cluster.
	Join []string `yaml:"join"`
	// Name is this member's name, unique in the cluster. Default: the host
	// name and the gossip port.
	Name string `yaml:"name"`
	// GRPCAdvertise is the gRPC address probes and the other members use
	// to reach this collector. Default: the gRPC listen address, when it
	// names a host.
	GRPCAdvertise string `yaml:"grpc_advertise"`
	// JoinTimeout bounds the wait for the first successful join.
	JoinTimeout time.Duration `yaml:"join_timeout"`
	// KeyFile holds the gossip encryption keys (AES-GCM, memberlist's
	// keyring): base64 of 16, 24 or 32 bytes, one per line; the first
	// encrypts, every one decrypts (add the new key second, then make it
	// first on every member, then remove the old one). Members without a
	// key of the ring cannot join or read the gossip.
	KeyFile string `yaml:"key_file"`
}

// Enabled says whether the collector runs in a cluster.
func (c Config) Enabled() bool { return c.Bind != "" }

// Validate checks the addresses.
func (c Config) Validate() error {
	if !c.Enabled() {
		if len(c.Join) > 0 || c.Advertise != "" {
			return errors.New("cluster: join and advertise need a bind address")
		}
		return nil
	}
	for _, a := range append([]string{c.Bind, c.Advertise}, c.Join...) {
		if a == "" {
			continue
		}
		if _, _, err := splitHostPort(a); err != nil {
			return fmt.Errorf("cluster: address %q: %w", a, err)
		}
	}
	if c.JoinTimeout < 0 {
		return fmt.Errorf("cluster: join_timeout %v is negative", c.JoinTimeout)
	}
	if c.KeyFile != "" {
		if _, err := ReadKeyring(c.KeyFile); err != nil {
			return err
		}
	}
	return nil
}

func splitHostPort(a string) (string, int, error) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number in 0–65535", port)
	}
	return host, p, nil
}

// Member is a collector of the cluster.
type Member struct {
	Name   string
	GRPC   string // gRPC address
	Gossip string // memberlist address
	State  string // as memberlist last reported it: alive, for a listed member
	Self   bool
}

// Cluster is this collector's membership.
type Cluster struct {
	ml      *memberlist.Memberlist
	self    string
	changed chan struct{}
	log     *slog.Logger

	refreshMu sync.Mutex // one refresh at a time, so the last read wins
	left      bool       // Leave was called: this member owns nothing
	mu        sync.Mutex
	members   []Member // live members, by name

	// nodes are the live members as memberlist's events last described
	// them, copied while memberlist holds its node lock: the nodes its
	// Members returns are its own, changed under that lock (a member
	// that comes back on another address), so they cannot be read later.
	nodesMu sync.Mutex // guards nodes
	nodes   map[string]Member
}

// Start creates the member and joins the cluster. grpcAddr is the address
// the others should use for this collector's gRPC services.
func Start(cfg Config, grpcAddr string, logger *slog.Logger) (*Cluster, error) {
	began := time.Now()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, errors.New("cluster: no bind address")
	}
	if grpcAddr == "" {
		return nil, errors.New("cluster: no gRPC address to advertise")
	}
	mc := memberlist.DefaultLANConfig()
	host, port, _ := splitHostPort(cfg.Bind)
	mc.BindAddr, mc.BindPort = host, port
	if mc.BindAddr == "" {
		mc.BindAddr = "0.0.0.0"
	}
	if cfg.Advertise != "" {
		host, port, _ := splitHostPort(cfg.Advertise)
		mc.AdvertiseAddr, mc.AdvertisePort = host, port
	}
	// A member restarted on another address (a new pod) may take its
	// name back once the old one has been dead this long.
	mc.DeadNodeReclaimTime = 30 * time.Second
	mc.Name = cfg.Name
	if mc.Name == "" {
		h, _ := os.Hostname()
		mc.Name = h + ":" + strconv.Itoa(port)
		if port == 0 {
			mc.Name = h + ":" + grpcAddr
		}
	}
	c := &Cluster{self: mc.Name, changed: make(chan struct{}, 1), log: logger, nodes: map[string]Member{}}
	var ml *memberlist.Memberlist
	var err error
	if cfg.KeyFile != "" {
		if mc.Keyring, err = ReadKeyring(cfg.KeyFile); err != nil {
			return nil, err
		}
	} else {
		logger.Warn("cluster: gossip is not encrypted (no cluster.key_file): anyone who reaches the gossip port can join")
	}
	mc.Delegate = meta(grpcAddr)
	mc.Events = &events{c: c}
	mc.Logger = log.New(&logWriter{log: logger}, "", 0)
	ml, err = memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("cluster: starting member %q on %s: %w", mc.Name, cfg.Bind, err)
	}
	c.refreshMu.Lock()
	c.ml = ml
	c.refreshMu.Unlock()
	c.refresh()
	if len(cfg.Join) > 0 {
		wait := cfg.JoinTimeout
		if wait == 0 {
			wait = 30 * time.Second
		}
		deadline := time.Now().Add(wait)
		for {
			n, err := ml.Join(cfg.Join)
			if n > 0 {
				break
			}
			if time.Now().After(deadline) {
				_ = ml.Shutdown()
				return nil, fmt.Errorf("cluster: joining %v: %w", cfg.Join, err)
			}
			logger.Warn("cluster: no member to join yet; retrying", "join", cfg.Join, "err", err)
			time.Sleep(time.Second)
		}
	}
	c.refresh()
	logger.Info("cluster member up", "name", mc.Name, "gossip", c.ml.LocalNode().Address(), "grpc", grpcAddr, "members", len(c.Members()),
		"took", time.Since(began).Round(time.Millisecond))
	return c, nil
}

// Name is this member's name.
func (c *Cluster) Name() string { return c.self }

// Gossip is this member's gossip address.
func (c *Cluster) Gossip() string { return c.ml.LocalNode().Address() }

// Changed receives a value after the membership changes.
func (c *Cluster) Changed() <-chan struct{} { return c.changed }

// Members lists the live members, by name. A member memberlist suspects
// of failure is listed (as alive) until it is declared dead.
func (c *Cluster) Members() []Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.members)
}

// Owner is the member that owns key: of the live members, the one with
// the highest hash of (member, key).
func (c *Cluster) Owner(key string) Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Owner(c.members, key)
}

// Holders are the first n live members for key by rendezvous hashing:
// the owner, then the members that keep copies of key's state.
func (c *Cluster) Holders(key string, n int) []Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Holders(c.members, key, n)
}

// Owner picks key's owner among members by rendezvous hashing; the zero
// Member when there are none. It is the first of Holders.
func Owner(members []Member, key string) Member {
	var best Member
	var bestScore uint64
	for i, m := range members {
		s := score(m, key)
		if i == 0 || ranksBefore(s, m.Name, bestScore, best.Name) {
			best, bestScore = m, s
		}
	}
	return best
}

// Holders ranks members for key by rendezvous hashing and returns the
// first n (fewer when there are fewer members). When a holder goes, the
// next takes its place and the others keep theirs: the second holder of
// a key becomes its owner when the owner leaves.
func Holders(members []Member, key string, n int) []Member {
	type ranked struct {
		m     Member
		score uint64
	}
	rs := make([]ranked, len(members))
	for i, m := range members {
		rs[i] = ranked{m, score(m, key)}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		if ranksBefore(a.score, a.m.Name, b.score, b.m.Name) {
			return -1
		}
		if ranksBefore(b.score, b.m.Name, a.score, a.m.Name) {
			return 1
		}
		return 0
	})
	out := make([]Member, min(max(n, 0), len(rs)))
	for i := range out {
		out[i] = rs[i].m
	}
	return out
}

// score is member m's rendezvous hash for key.
func score(m Member, key string) uint64 { return xxhash.Sum64String(m.Name + "\x00" + key) }

// ranksBefore says whether a member with score sa and name na comes
// before one with sb and nb: the higher score, then the smaller name.
func ranksBefore(sa uint64, na string, sb uint64, nb string) bool {
	return sa > sb || sa == sb && na < nb
}

// Leave tells the others that this member goes, then stops gossip.
func (c *Cluster) Leave(timeout time.Duration) error {
	c.refreshMu.Lock()
	c.left = true
	c.refreshMu.Unlock()
	c.mu.Lock()
	c.members = slices.DeleteFunc(c.members, func(m Member) bool { return m.Self })
	c.mu.Unlock()
	err := c.ml.Leave(timeout)
	if serr := c.ml.Shutdown(); err == nil {
		err = serr
	}
	return err
}

// refresh rereads the live members and signals a change.
func (c *Cluster) refresh() {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	if c.ml == nil || c.left {
		return // notified while starting (Start refreshes once up), or gone
	}
	c.nodesMu.Lock()
	ms := slices.Collect(maps.Values(c.nodes))
	c.nodesMu.Unlock()
	slices.SortFunc(ms, func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
	c.mu.Lock()
	same := slices.Equal(ms, c.members)
	c.members = ms
	c.mu.Unlock()
	if !same {
		select {
		case c.changed <- struct{}{}:
		default:
		}
	}
}

func stateName(s memberlist.NodeStateType) string {
	switch s {
	case memberlist.StateAlive:
		return "alive"
	case memberlist.StateSuspect:
		return "suspect"
	case memberlist.StateDead:
		return "dead"
	case memberlist.StateLeft:
		return "left"
	}
	return "unknown"
}

// meta is the node metadata every member gossips: its gRPC address.
type meta string

func (m meta) NodeMeta(limit int) []byte {
	if len(m) > limit {
		return nil
	}
	return []byte(m)
}
func (meta) NotifyMsg([]byte)                           {}
func (meta) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (meta) LocalState(join bool) []byte                { return nil }
func (meta) MergeRemoteState(buf []byte, join bool)     {}

// events notes every change memberlist reports and refreshes the member
// list. memberlist holds its node lock while notifying: n may be read
// here, not later, and memberlist may not be called.
type events struct{ c *Cluster }

func (e *events) NotifyJoin(n *memberlist.Node) {
	e.c.log.Info("cluster: member joined", "name", n.Name, "grpc", string(n.Meta))
	e.c.noteNode(n)
	go e.c.refresh()
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	e.c.log.Warn("cluster: member left", "name", n.Name, "grpc", string(n.Meta))
	e.c.nodesMu.Lock()
	delete(e.c.nodes, n.Name)
	e.c.nodesMu.Unlock()
	go e.c.refresh()
}

func (e *events) NotifyUpdate(n *memberlist.Node) {
	e.c.noteNode(n)
	go e.c.refresh()
}

// noteNode copies a live node's description.
func (c *Cluster) noteNode(n *memberlist.Node) {
	m := Member{Name: n.Name, GRPC: string(n.Meta), Gossip: n.Address(), State: stateName(n.State), Self: n.Name == c.self}
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
	c.nodes[n.Name] = m
}

// logWriter passes memberlist's log lines to slog: errors and warnings as
// warnings, the rest at debug level.
type logWriter struct{ log *slog.Logger }

func (w *logWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	switch {
	case strings.Contains(line, "[ERR]"), strings.Contains(line, "[WARN]"):
		w.log.Warn("memberlist: " + line)
	default:
		w.log.Debug("memberlist: " + line)
	}
	return len(p), nil
}

// ReadKeyring reads gossip keys: base64, one per line, the first the one
// that encrypts.
func ReadKeyring(path string) (*memberlist.Keyring, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster key_file: %w", err)
	}
	var keys [][]byte
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("cluster key_file %s line %d: not base64: %w", path, n+1, err)
		}
		if l := len(k); l != 16 && l != 24 && l != 32 {
			return nil, fmt.Errorf("cluster key_file %s line %d: a key of %d bytes; want 16, 24 or 32", path, n+1, l)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("cluster key_file %s: no key in it", path)
	}
	kr, err := memberlist.NewKeyring(keys[1:], keys[0])
	if err != nil {
		return nil, fmt.Errorf("cluster key_file %s: %w", path, err)
	}
	return kr, nil
}
