package collector

import (
	"context"
	"testing"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
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
