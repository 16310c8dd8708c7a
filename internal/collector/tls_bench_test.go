package collector

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/security"
)

// transportSetup runs a collector, with mTLS or in plaintext, and returns
// its address and the credentials of probe a and probe b.
func transportSetup(b *testing.B, withTLS bool) (addr string, creds map[string]credentials.TransportCredentials) {
	b.Helper()
	cfg := testConfig(b)
	cfg.ReadyFile = filepath.Join(b.TempDir(), "ready")
	creds = map[string]credentials.TransportCredentials{"a": insecure.NewCredentials(), "b": insecure.NewCredentials()}
	if withTLS {
		dir := b.TempDir()
		if err := security.MakeDevCerts(dir, security.DevSpec{Probes: []string{"a", "b"}, Collectors: []string{"c"}}); err != nil {
			b.Fatal(err)
		}
		cert, key := security.CertFiles(dir, security.RoleCollector, "c")
		cfg.Insecure, cfg.TLS = false, security.TLSConfig{Cert: cert, Key: key, CA: security.CAFile(dir)}
		for id := range creds {
			cert, key := security.CertFiles(dir, security.RoleProbe, id)
			c, err := security.Load(security.TLSConfig{Cert: cert, Key: key, CA: security.CAFile(dir)})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(c.Close)
			creds[id] = c.Client("127.0.0.1", security.WantRole(security.RoleCollector, ""))
		}
	}
	c := newTest(b, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	var addrs Addrs
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if bs, err := os.ReadFile(cfg.ReadyFile); err == nil && json.Unmarshal(bs, &addrs) == nil {
			break
		}
	}
	return addrs.GRPC, creds
}

// replayStream opens a probe stream as a replaying probe (its epochs may
// be old) and takes the path configuration.
func replayStream(b *testing.B, conn *grpc.ClientConn, id string) owlv1.ProbeService_ConnectClient {
	b.Helper()
	st, err := owlv1.NewProbeServiceClient(conn).Connect(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Hello{Hello: &owlv1.Hello{ProbeId: id, Replay: true}}}); err != nil {
		b.Fatal(err)
	}
	if m, err := st.Recv(); err != nil || m.GetPaths() == nil {
		b.Fatalf("hello answer %v, %v", m, err)
	}
	return st
}

// BenchmarkTransport compares mTLS with plaintext on loopback TCP: a new
// probe connection (TCP, TLS handshake with both certificates verified,
// Hello, path configuration), and one epoch's two reports (5,000 packets'
// LDAs) sent and acknowledged on open streams.
func BenchmarkTransport(b *testing.B) {
	for _, mode := range []struct {
		name string
		tls  bool
	}{{"plaintext", false}, {"mtls", true}} {
		b.Run("connect/"+mode.name, func(b *testing.B) {
			addr, creds := transportSetup(b, mode.tls)
			b.ResetTimer()
			for b.Loop() {
				conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds["a"]))
				if err != nil {
					b.Fatal(err)
				}
				st := replayStream(b, conn, "a")
				_ = st.CloseSend()
				conn.Close()
			}
		})
		b.Run("epoch/"+mode.name, func(b *testing.B) {
			addr, creds := transportSetup(b, mode.tls)
			streams := map[string]owlv1.ProbeService_ConnectClient{}
			for _, id := range []string{"a", "b"} {
				conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds[id]))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { conn.Close() })
				streams[id] = replayStream(b, conn, id)
			}
			cfg := testConfig(b)
			up, down := ldaPair(b, cfg.Params.LDA, 5000, 90_000, 1)
			first := time.Now().Add(-30 * 24 * time.Hour).Unix()
			i := int64(0)
			b.ResetTimer()
			for b.Loop() {
				epoch := first + i
				i++
				for id, role := range map[string]owlv1.Role{"a": owlv1.Role_ROLE_UPSTREAM, "b": owlv1.Role_ROLE_DOWNSTREAM} {
					l := up
					if id == "b" {
						l = down
					}
					if err := streams[id].Send(&owlv1.ProbeMessage{Msg: &owlv1.ProbeMessage_Report{Report: report("p", epoch, role, l)}}); err != nil {
						b.Fatal(err)
					}
				}
				nextAck(b, streams["a"])
				nextAck(b, streams["b"])
			}
		})
	}
}
