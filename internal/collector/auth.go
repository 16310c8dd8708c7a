package collector

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/owl-latency/owl/internal/security"
)

// insecureWarning is logged at start and returned by ListProbes when the
// collector serves plaintext.
const insecureWarning = "this collector runs without TLS (-insecure): anyone who reaches it can report as any probe and read every result"

// guardian authenticates the collector's calls and decides what each
// identity may call.
type guardian struct {
	creds   *security.Credentials // nil when insecure
	auth    security.Authenticator
	refused *prometheus.CounterVec // by reason
}

// newGuardian loads the collector's TLS files and reader tokens.
func newGuardian(cfg Config, reg prometheus.Registerer) (*guardian, error) {
	g := &guardian{auth: security.Authenticator{Insecure: cfg.Insecure}}
	g.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "owl_collector_auth_refused_total",
		Help: "Calls refused: no or unknown credentials (unauthenticated), a role not allowed the method (role), a probe certificate used for another id (probe_id)."}, []string{"reason"})
	reg.MustRegister(g.refused)
	if cfg.Insecure {
		return g, nil
	}
	creds, err := security.Load(cfg.TLS)
	if err != nil {
		return nil, err
	}
	g.creds = creds
	if cfg.ReaderTokensFile != "" {
		if g.auth.Tokens, err = security.LoadTokens(cfg.ReaderTokensFile); err != nil {
			creds.Close()
			return nil, err
		}
	}
	return g, nil
}

// close stops watching the TLS files.
func (g *guardian) close() {
	if g.creds != nil {
		g.creds.Close()
	}
}

// serverOptions are the server credentials and the interceptors that
// authenticate and authorize every call.
func (g *guardian) serverOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if g.creds != nil {
		opts = append(opts, grpc.Creds(g.creds.Server()))
	}
	return opts
}

// peerCreds are the credentials for calling the collector at addr: its
// certificate must name a collector.
func (g *guardian) peerCreds(addr string) credentials.TransportCredentials {
	if g.creds == nil {
		return insecure.NewCredentials()
	}
	return g.creds.Client(addr, security.WantRole(security.RoleCollector, ""))
}

// authorize identifies a call's peer and checks that its role may call
// the method; the identity goes into the returned context.
func (g *guardian) authorize(ctx context.Context) (context.Context, error) {
	id, err := g.auth.Identify(ctx)
	if err != nil {
		g.refused.WithLabelValues("unauthenticated").Inc()
		return nil, err
	}
	method, _ := grpc.Method(ctx)
	if !allowed(method, id) {
		g.refused.WithLabelValues("role").Inc()
		return nil, status.Errorf(codes.PermissionDenied, "%s (%s) may not call %s", id.Role, id.Via, method)
	}
	return security.NewContext(ctx, id), nil
}

// allowed is the policy: probes report, readers query, collectors call
// each other's cluster and query services; reflection is open to every
// authenticated peer. Anything else is refused.
func allowed(method string, id security.Identity) bool {
	if id.IsInsecure() {
		return true
	}
	service, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	switch service {
	case "owl.v1.ProbeService":
		return id.Role == security.RoleProbe
	case "owl.v1.QueryService":
		return id.Role == security.RoleReader || id.Role == security.RoleCollector
	case "owl.v1.ClusterService":
		return id.Role == security.RoleCollector
	case "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection":
		return true
	}
	return false
}

// probeIDRefused says why a stream's Hello was refused for its
// certificate, or "" when the certificate allows the id.
func (g *guardian) probeIDRefused(ctx context.Context, probe string) string {
	id, ok := security.FromContext(ctx)
	if !ok || id.IsInsecure() || id.Name == probe {
		return ""
	}
	g.refused.WithLabelValues("probe_id").Inc()
	return fmt.Sprintf("this stream's certificate is for probe %q (%s); it cannot report as %q", id.Name, id.Via, probe)
}

// via says how a stream's probe proved its id.
func via(ctx context.Context) string {
	if id, ok := security.FromContext(ctx); ok {
		return id.Via
	}
	return ""
}
