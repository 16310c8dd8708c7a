package collector

import (
	"context"
	"strings"
	"testing"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/security"
)

// TestInsecureWarning: a collector run with -insecure says so in every
// ListProbes answer, so that a reader sees it, not only its log; one with
// TLS says nothing.
func TestInsecureWarning(t *testing.T) {
	cfg := testConfig(t) // insecure
	c := newTest(t, cfg)
	defer c.Close()
	q := owlv1.NewQueryServiceClient(serve(t, c))
	r, err := q.ListProbes(context.Background(), &owlv1.ListProbesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetWarning() != insecureWarning {
		t.Errorf("ListProbes of an insecure collector warns %q, want %q", r.GetWarning(), insecureWarning)
	}
	// The answer alone, as a collector with TLS gives it (its
	// credentials play no part in it).
	c.cfg.Insecure = false
	r, err = queryService{c: c}.ListProbes(context.Background(), &owlv1.ListProbesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetWarning() != "" {
		t.Errorf("ListProbes of a collector with TLS warns %q", r.GetWarning())
	}
}

// TestGossipKeyWithTLS: with TLS a collector in a cluster does not start
// without cluster.key_file (docs/security.md, Gossip key); only under
// insecure does it start without one (the cluster warns as it joins).
func TestGossipKeyWithTLS(t *testing.T) {
	dir := t.TempDir()
	if err := security.MakeDevCerts(dir, security.DevSpec{Collectors: []string{"c1"}}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Insecure = false
	cfg.TLS.Cert, cfg.TLS.Key = security.CertFiles(dir, security.RoleCollector, "c1")
	cfg.TLS.CA = security.CAFile(dir)
	cfg.Cluster.Bind = "127.0.0.1:0"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "cluster.key_file is required") {
		t.Errorf("TLS in a cluster without a gossip key: %v, want cluster.key_file required", err)
	}
	cfg.Cluster.KeyFile = security.GossipKeyFile(dir)
	if err := cfg.Validate(); err != nil {
		t.Errorf("TLS in a cluster with a gossip key: %v", err)
	}
	cfg = testConfig(t) // insecure
	cfg.Cluster.Bind = "127.0.0.1:0"
	if err := cfg.Validate(); err != nil {
		t.Errorf("insecure in a cluster without a gossip key: %v", err)
	}
}
