package probe

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/codec"
	"github.com/owl-latency/owl/internal/security"
)

// router sends each spooled message to the collector that takes it. With
// one collector that is the configured one. In a cluster of collectors the
// path configuration names each path's owner (and the COLATE vectors'):
// the router keeps one client per collector named, each sending the
// messages routed to it, and re-routes when the owners change.
type router struct {
	seed  string // the configured collector, which every probe keeps a stream to
	creds credsFor
	gzip  bool // compress the streams
	log   *slog.Logger
	// newClient makes a client for a collector, without its connection,
	// address and routing fields.
	newClient func() *client

	mu      sync.Mutex
	paths   map[string]string // path → collector, when not the seed
	colate  string            // collector of COLATE vectors, when not the seed
	clients map[string]*routed
	ctx     context.Context
	wg      sync.WaitGroup
	errc    chan error // an error that ends the probe, from any client
}

// routed is a running client.
type routed struct {
	c      *client
	cancel context.CancelFunc
	linger *time.Timer // set while no longer named: stops the client when it fires
}

// lingerFor is how long the probe keeps its stream to a collector that no
// longer owns any of its paths: that one may still be reconciling epochs
// it took before, and ask for repairs, and release them.
var lingerFor = time.Minute

// newRouter makes a router; creds are the credentials for a collector's
// address (nil: plaintext).
func newRouter(seed string, creds credsFor, log *slog.Logger, newClient func() *client) *router {
	return &router{seed: seed, creds: creds, log: log, newClient: newClient, paths: map[string]string{}, clients: map[string]*routed{}, errc: make(chan error, 1)}
}

// credsFor are the transport credentials for a collector's address.
type credsFor func(addr string) credentials.TransportCredentials

// dial connects to a collector (in plaintext when creds is nil), its
// messages gzipped when gzipped is set (Config.Gzip).
func dial(addr string, creds credsFor, gzipped bool) (*grpc.ClientConn, error) {
	tc := insecure.NewCredentials()
	if creds != nil {
		tc = creds(addr)
	}
	call := []grpc.CallOption{grpc.MaxCallRecvMsgSize(16 << 20), grpc.ForceCodecV2(codec.New())}
	if gzipped {
		call = append(call, grpc.UseCompressor(gzip.Name))
	}
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(tc),
		experimental.WithBufferPool(codec.Buffers),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.WithDefaultCallOptions(call...))
	if err != nil {
		return nil, fmt.Errorf("collector address %q: %w", addr, err)
	}
	return conn, nil
}

// insecureWarning is what a probe that connects in plaintext logs at
// start, as a collector run with -insecure does.
const insecureWarning = "this probe connects to its collectors without TLS (-insecure): anyone on the network can read and alter its reports, and whoever answers at a collector's address gets them"

// run keeps the clients going until ctx ends or a client's error ends the
// probe (a collector rejected it, or changed the parameters it took).
func (r *router) run(ctx context.Context) error {
	if r.creds == nil {
		r.log.Warn("INSECURE: " + insecureWarning)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.mu.Lock()
	r.ctx = ctx
	err := r.start(r.seed)
	if err == nil {
		// Owners known before (the path configuration a restarted
		// probe kept) get their clients now.
		r.reroute(map[string]string{}, "")
	}
	r.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		err = nil
	case err = <-r.errc:
	}
	cancel()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.clients)
	return err
}

// start runs a client for addr. r.mu is held.
func (r *router) start(addr string) error {
	conn, err := dial(addr, r.creds, r.gzip)
	if err != nil {
		return err
	}
	c := r.newClient()
	c.conn, c.addr = conn, addr
	c.routes = routedTo{r, addr}
	c.restart = make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(r.ctx)
	r.clients[addr] = &routed{c: c, cancel: cancel}
	r.wg.Go(func() {
		defer conn.Close()
		if err := c.run(ctx); fatal(err) {
			select {
			case r.errc <- err:
			default:
			}
		}
	})
	return nil
}

// dest is the collector a message goes to.
func (r *router) dest(m *owlv1.ProbeMessage) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.colate
	if rep := m.GetReport(); rep != nil {
		d = r.paths[rep.GetPath()]
	}
	if d == "" {
		return r.seed
	}
	return d
}

// update takes the owners from a path configuration.
func (r *router) update(pc *owlv1.PathConfig) {
	paths := map[string]string{}
	for _, a := range pc.GetPaths() {
		if c := a.GetCollector(); c != "" && c != r.seed {
			paths[a.GetPath().GetName()] = c
		}
	}
	colate := pc.GetColateCollector()
	if colate == r.seed {
		colate = ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if maps.Equal(paths, r.paths) && colate == r.colate {
		return
	}
	oldPaths, oldColate := r.paths, r.colate
	r.paths, r.colate = paths, colate
	r.reroute(oldPaths, oldColate)
}

// routedTo is a router's routes for its client of the collector at addr.
type routedTo struct {
	r    *router
	addr string
}

func (t routedTo) keep(m *owlv1.ProbeMessage) bool { return t.r.dest(m) == t.addr }

func (t routedTo) misrouted(kind owlv1.Reject_Kind, path, owner string) {
	// RTT and reordering reports, like COLATE vectors, go to the owner
	// of the probe's own data.
	t.r.misrouted(kind == owlv1.Reject_KIND_COLATE || kind == owlv1.Reject_KIND_RTT || kind == owlv1.Reject_KIND_REORDER, path, owner)
}

// misrouted takes a collector's word that another owns a path (or, with
// colate, the COLATE vectors).
func (r *router) misrouted(colate bool, path, owner string) {
	if owner == r.seed {
		owner = ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	oldPaths, oldColate := maps.Clone(r.paths), r.colate
	switch {
	case colate:
		r.colate = owner
	case owner == "":
		delete(r.paths, path)
	default:
		r.paths[path] = owner
	}
	r.reroute(oldPaths, oldColate)
}

// reroute starts clients for collectors newly named, stops those no
// longer named, and restarts the sessions of those that were given a path
// (or the COLATE vectors) so that they send the unacknowledged messages
// now routed to them. r.mu is held.
func (r *router) reroute(oldPaths map[string]string, oldColate string) {
	if r.ctx == nil {
		return
	}
	or := func(a string) string { return cmp.Or(a, r.seed) }
	gained := map[string]bool{}
	if or(r.colate) != or(oldColate) {
		gained[or(r.colate)] = true
	}
	for p := range oldPaths {
		if or(r.paths[p]) != or(oldPaths[p]) {
			gained[or(r.paths[p])] = true
		}
	}
	for p := range r.paths {
		if or(r.paths[p]) != or(oldPaths[p]) {
			gained[or(r.paths[p])] = true
		}
	}
	want := map[string]bool{r.seed: true}
	for _, a := range r.paths {
		want[a] = true
	}
	if r.colate != "" {
		want[r.colate] = true
	}
	for addr, rc := range r.clients {
		if !want[addr] {
			if rc.linger == nil {
				r.log.Info("no longer sending to collector; keeping the stream a while for its repairs", "collector", addr, "for", lingerFor)
				rc.linger = time.AfterFunc(lingerFor, func() { r.stopIdle(addr) })
			}
			continue
		}
		if rc.linger != nil {
			rc.linger.Stop()
			rc.linger = nil
		}
		if gained[addr] {
			select {
			case rc.c.restart <- struct{}{}:
			default:
			}
		}
	}
	for addr := range want {
		if r.clients[addr] == nil {
			r.log.Info("sending to another collector of the cluster", "collector", addr)
			if err := r.start(addr); err != nil {
				r.log.Error("cannot reach collector", "collector", addr, "err", err)
			}
		}
	}
}

// stopIdle stops the client of a collector still not named.
func (r *router) stopIdle(addr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc := r.clients[addr]
	if rc == nil || rc.linger == nil {
		return
	}
	r.log.Info("closed the stream to a collector that owns none of the probe's paths", "collector", addr)
	rc.cancel()
	delete(r.clients, addr)
}

// connected says whether every collector the probe sends to has an open
// stream.
// sessionsAndPauses sums, over the router's clients, the streams opened
// and the times a collector paused one.
func (r *router) sessionsAndPauses() (sessions, pauses uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rc := range r.clients {
		sessions += rc.c.sessions.Load()
		pauses += rc.c.pauses.Load()
	}
	return sessions, pauses
}

func (r *router) connected() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.clients) == 0 {
		return false
	}
	for _, rc := range r.clients {
		if rc.linger == nil && !rc.c.connected.Load() {
			return false
		}
	}
	return true
}

// doneSent says whether every collector that takes SourcesDone was sent
// it.
func (r *router) doneSent() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rc := range r.clients {
		if rc.c.takesDone.Load() && !rc.c.doneSent.Load() {
			return false
		}
	}
	return true
}

// probeCredentials are the credentials of a probe's connections: its
// certificate, and the collector's verified (nil when insecure).
func probeCredentials(cfg Config) (credsFor, error) {
	if cfg.Insecure {
		return nil, nil
	}
	c, err := security.Load(cfg.TLS)
	if err != nil {
		return nil, err
	}
	return func(addr string) credentials.TransportCredentials {
		return c.Client(addr, security.WantRole(security.RoleCollector, ""))
	}, nil
}
