package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/e2e/harness"
	"github.com/owl-latency/owl/internal/security"
)

// secureCollector is a TLS collector of one path (op-a → op-b), in a
// cluster of its own so that ClusterService is served, with its
// certificate files re-read every 200 ms.
type secureCollector struct {
	proc   *harness.Proc
	addrs  harness.Addrs
	certs  string // the harness's CA directory
	config string
}

func startSecureCollector(t *testing.T, env *harness.Env, name string) secureCollector {
	t.Helper()
	certs, err := harness.CertsDir()
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := harness.Issue(security.RoleCollector, name, "localhost", "127.0.0.1", "::1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := collectorYAML(filepath.Join(env.Dir, name+"-data"), "127.0.0.1:0", pathAB) + fmt.Sprintf(`tls:
  cert: %s
  key: %s
  ca: %s
  reload_interval: 200ms
reader_tokens_file: %s
cluster:
  bind: 127.0.0.1:0
  name: %s
  key_file: %s
`, cert, key, security.CAFile(certs), security.ReaderTokensFile(certs), name, security.GossipKeyFile(certs))
	p, a, err := env.StartCollector(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return secureCollector{proc: p, addrs: a, certs: certs, config: cfg}
}

// clientCreds are TLS credentials of role/name from the CA in dir
// (issued there when missing), verifying a collector.
func clientCreds(t *testing.T, dir string, role security.Role, name string, addr string) credentials.TransportCredentials {
	t.Helper()
	cert, key := security.CertFiles(dir, role, name)
	if _, err := os.Stat(cert); err != nil {
		if err := security.IssueCert(dir, role, name, nil, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	c, err := security.Load(security.TLSConfig{Cert: cert, Key: key, CA: security.CAFile(dir)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.Client(addr, security.WantRole(security.RoleCollector, ""))
}

func dialWith(t *testing.T, addr string, tc credentials.TransportCredentials, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(tc)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// hello opens a probe stream, says hello as id and returns the first
// answer (or the error that ended the stream).
func hello(ctx context.Context, conn *grpc.ClientConn, id string) (*owlv1.CollectorMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := owlv1.NewProbeServiceClient(conn).Connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Hello{Hello: &owlv1.Hello{ProbeId: id}}}); err != nil && err != io.EOF {
		return nil, err
	}
	return st.Recv()
}

// metricValue reads one sample of the collector's /metrics.
func metricValue(t *testing.T, httpAddr, series string) string {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestSecurity checks, on real sockets against a TLS collector, that only
// the holders of the right certificates get in and each only as far as
// its role allows.
func TestSecurity(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	env := newEnv(t)
	sc := startSecureCollector(t, env, "sec")
	ctx := context.Background()
	addr := sc.addrs.GRPC

	t.Run("probe of another CA refused", func(t *testing.T) {
		other := t.TempDir()
		if err := security.MakeDevCerts(other, security.DevSpec{Probes: []string{"op-a"}}); err != nil {
			t.Fatal(err)
		}
		// It trusts the real CA (the server is verified), but its own
		// certificate chains to another.
		cert, key := security.CertFiles(other, security.RoleProbe, "op-a")
		c, err := security.Load(security.TLSConfig{Cert: cert, Key: key, CA: security.CAFile(sc.certs)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conn := dialWith(t, addr, c.Client(addr, nil))
		if m, err := hello(ctx, conn, "op-a"); err == nil {
			t.Fatalf("a certificate of another CA got an answer: %v", m)
		}
		if n := metricValue(t, sc.addrs.HTTP, `owl_collector_probes_connected{probe="op-a"}`); n != "" && n != "0" {
			t.Errorf("op-a connected: %s", n)
		}
	})

	t.Run("probe certificate for A cannot report as B", func(t *testing.T) {
		conn := dialWith(t, addr, clientCreds(t, sc.certs, security.RoleProbe, "op-a", addr))
		m, err := hello(ctx, conn, "op-b")
		if err != nil {
			t.Fatal(err)
		}
		rej := m.GetReject()
		if rej == nil || rej.GetKind() != owlv1.Reject_KIND_PROBE || !strings.Contains(rej.GetReason(), `cannot report as "op-b"`) {
			t.Fatalf("answer %v, want a probe rejection naming op-b", m)
		}
		if v := metricValue(t, sc.addrs.HTTP, `owl_collector_auth_refused_total{reason="probe_id"}`); v != "1" {
			t.Errorf("probe_id refusals %q, want 1", v)
		}
		// As itself it gets its paths.
		m, err = hello(ctx, conn, "op-a")
		if err != nil || m.GetPaths() == nil {
			t.Fatalf("op-a as itself: %v, %v", m, err)
		}
	})

	t.Run("reader queries only", func(t *testing.T) {
		conn := dialWith(t, addr, clientCreds(t, sc.certs, security.RoleReader, "ops", addr))
		if _, err := owlv1.NewQueryServiceClient(conn).ListPaths(ctx, &owlv1.ListPathsRequest{}); err != nil {
			t.Fatalf("reader ListPaths: %v", err)
		}
		if _, err := hello(ctx, conn, "op-a"); status.Code(err) != codes.PermissionDenied {
			t.Errorf("reader Connect: %v, want PermissionDenied", err)
		}
		_, err := owlv1.NewClusterServiceClient(conn).TakePending(ctx, &owlv1.TakePendingRequest{Path: "a-to-b", Epoch: 1, Role: owlv1.Role_ROLE_UPSTREAM})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("reader TakePending: %v, want PermissionDenied", err)
		}
	})

	t.Run("probe cannot query or take sides", func(t *testing.T) {
		conn := dialWith(t, addr, clientCreds(t, sc.certs, security.RoleProbe, "op-a", addr))
		if _, err := owlv1.NewQueryServiceClient(conn).ListPaths(ctx, &owlv1.ListPathsRequest{}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("probe ListPaths: %v, want PermissionDenied", err)
		}
		_, err := owlv1.NewClusterServiceClient(conn).TakePending(ctx, &owlv1.TakePendingRequest{Path: "a-to-b", Epoch: 1, Role: owlv1.Role_ROLE_UPSTREAM})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("probe TakePending: %v, want PermissionDenied", err)
		}
	})

	t.Run("reader token", func(t *testing.T) {
		tok := readerToken(t, sc.certs, harness.ReaderName)
		// TLS without a client certificate: the token is the credential.
		pool := x509.NewCertPool()
		b, _ := os.ReadFile(security.CAFile(sc.certs))
		pool.AppendCertsFromPEM(b)
		tc := credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
		good := dialWith(t, addr, tc, grpc.WithPerRPCCredentials(security.BearerToken(tok)))
		if _, err := owlv1.NewQueryServiceClient(good).ListProbes(ctx, &owlv1.ListProbesRequest{}); err != nil {
			t.Errorf("token ListProbes: %v", err)
		}
		if _, err := hello(ctx, good, "op-a"); status.Code(err) != codes.PermissionDenied {
			t.Errorf("token Connect: %v, want PermissionDenied", err)
		}
		bad := dialWith(t, addr, tc, grpc.WithPerRPCCredentials(security.BearerToken(strings.Repeat("0", 32))))
		if _, err := owlv1.NewQueryServiceClient(bad).ListProbes(ctx, &owlv1.ListProbesRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("unknown token: %v, want Unauthenticated", err)
		}
		none := dialWith(t, addr, tc)
		if _, err := owlv1.NewQueryServiceClient(none).ListProbes(ctx, &owlv1.ListProbesRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("no credentials: %v, want Unauthenticated", err)
		}
	})

	t.Run("plaintext refused", func(t *testing.T) {
		conn := dialWith(t, addr, insecure.NewCredentials())
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := owlv1.NewQueryServiceClient(conn).ListPaths(cctx, &owlv1.ListPathsRequest{}); err == nil {
			t.Error("a plaintext client got an answer")
		}
	})

	t.Run("member without the gossip key cannot join", func(t *testing.T) {
		for i, key := range []string{"", otherGossipKey(t)} {
			name := fmt.Sprintf("intruder%d", i)
			cert, k, err := harness.Issue(security.RoleCollector, name, "127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			keyLine := ""
			if key != "" {
				keyLine = "  key_file: " + key + "\n"
			}
			cfg := collectorYAML(filepath.Join(env.Dir, name), "127.0.0.1:0", pathAB) + fmt.Sprintf(`tls: {cert: %s, key: %s, ca: %s}
cluster:
  bind: 127.0.0.1:0
  name: %s
  join: [%s]
  join_timeout: 3s
%s`, cert, k, security.CAFile(sc.certs), name, sc.addrs.Gossip, keyLine)
			p, _, err := env.StartCollector(name, cfg)
			if err == nil {
				p.Kill()
				t.Errorf("%s (key %q) started in the cluster", name, key)
				continue
			}
			if !strings.Contains(err.Error(), "key_file is required") && !strings.Contains(err.Error(), "joining") {
				t.Errorf("%s: %v", name, err)
			}
		}
		conn := dialWith(t, addr, clientCreds(t, sc.certs, security.RoleReader, "ops", addr))
		r, err := owlv1.NewQueryServiceClient(conn).ListCollectors(ctx, &owlv1.ListCollectorsRequest{})
		if err != nil || len(r.GetCollectors()) != 1 {
			t.Errorf("members %v (%v), want the one", r.GetCollectors(), err)
		}
	})
}

// readerToken is the token the CA directory's token file gives name.
func readerToken(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(security.ReaderTokensFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			return f[1]
		}
	}
	t.Fatalf("no token for %s in %s", name, b)
	return ""
}

// otherGossipKey writes a gossip key file with a key the cluster does
// not have.
func otherGossipKey(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := security.MakeDevCerts(dir, security.DevSpec{}); err != nil {
		t.Fatal(err)
	}
	return security.GossipKeyFile(dir)
}

// TestCertificateRotation replaces the collector's certificate while two
// probes stream to it: their streams go on, every epoch is measured, and
// new connections get the new certificate.
func TestCertificateRotation(t *testing.T) {
	env, out, truths := setup(t)
	sc := startSecureCollector(t, env, "rot")
	addr := sc.addrs.GRPC

	// serialOf is the serial of the certificate the collector presents
	// to a new connection.
	serialOf := func() string {
		t.Helper()
		cert, key, _ := harness.Issue(security.RoleReader, harness.ReaderName)
		c, err := security.Load(security.TLSConfig{Cert: cert, Key: key, CA: security.CAFile(sc.certs)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cfg, err := c.ClientConfig(context.Background(), addr, security.WantRole(security.RoleCollector, "rot"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.NextProtos = []string{"h2"}
		tc, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			t.Fatalf("TLS to the collector: %v", err)
		}
		defer tc.Close()
		return tc.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serialOf()

	a, err := env.Start("op-a", "probe", "-id", "op-a", "-collector", addr, "-file", out.Up, "-replay-speed", "1", "-reconnect-max", "200ms")
	if err != nil {
		t.Fatal(err)
	}
	b, err := env.Start("op-b", "probe", "-id", "op-b", "-collector", addr, "-file", out.Down, "-replay-speed", "1", "-reconnect-max", "200ms")
	if err != nil {
		t.Fatal(err)
	}
	q := query(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := harness.WaitStats(ctx, q, "a-to-b", 2); err != nil {
		t.Fatalf("first results: %v", err)
	}
	// Rotate: a new certificate and key for the same identity.
	if err := security.IssueCert(sc.certs, security.RoleCollector, "rot", []string{"localhost", "127.0.0.1", "::1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	var after string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if after = serialOf(); after != before {
			break
		}
	}
	if after == before {
		t.Fatalf("the collector still presents serial %s 10 s after rotation", before)
	}
	for _, p := range []*harness.Proc{a, b} {
		if err := p.Wait(2 * time.Minute); err != nil {
			t.Fatalf("%s: %v\n%s", p.Name, err, p.Log())
		}
		if strings.Contains(p.Log(), "reconnecting") {
			t.Errorf("%s reconnected during the rotation:\n%s", p.Name, p.Log())
		}
	}
	var epochs []int64
	for _, tr := range truths {
		if tr.Sent > 0 {
			epochs = append(epochs, tr.Epoch)
		}
	}
	res, err := harness.WaitEpochs(ctx, q, "a-to-b", epochs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK {
			t.Errorf("epoch %d: %v %s", r.GetEpoch(), r.GetStatus(), r.GetDetail())
		}
	}
}
