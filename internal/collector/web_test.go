package collector

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/security"
)

// TestWebPageAnswersAsGRPC: the HTTP listener serves the page, and its
// JSON endpoint answers what the query service answers over gRPC.
func TestWebPageAnswersAsGRPC(t *testing.T) {
	c := newTest(t, testConfig(t))
	defer c.Close()
	for e := int64(1); e <= 5; e++ {
		r := &owlv1.PathStats{Path: "p", Epoch: e, Start: timestamppb.New(epochTime(e, 0)), Status: owlv1.ResultStatus_RESULT_STATUS_OK,
			MeanNs: 1000 + float64(e), Samples: 10, Quantiles: []*owlv1.DelayQuantile{{Q: 0.99, ValueNs: 2000}}}
		if err := c.store.PutResult(r, true); err != nil {
			t.Fatal(err)
		}
	}
	h := c.httpHandler()
	q := queryService{c: c}
	ctx := context.Background()
	for _, tc := range []struct {
		method string
		req    proto.Message
		want   func() (proto.Message, error)
		got    proto.Message
	}{
		{"GetPathStats", &owlv1.GetPathStatsRequest{Path: "p", Limit: 1},
			func() (proto.Message, error) {
				return q.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: "p", Limit: 1})
			}, &owlv1.GetPathStatsResponse{}},
		{"GetPathStats", &owlv1.GetPathStatsRequest{Path: "p", From: timestamppb.New(epochTime(2, 0)), To: timestamppb.New(epochTime(4, 0))},
			func() (proto.Message, error) {
				return q.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: "p", From: timestamppb.New(epochTime(2, 0)), To: timestamppb.New(epochTime(4, 0))})
			}, &owlv1.GetPathStatsResponse{}},
		{"ListPaths", &owlv1.ListPathsRequest{}, func() (proto.Message, error) { return q.ListPaths(ctx, &owlv1.ListPathsRequest{}) }, &owlv1.ListPathsResponse{}},
		{"ListProbes", &owlv1.ListProbesRequest{}, func() (proto.Message, error) { return q.ListProbes(ctx, &owlv1.ListProbesRequest{}) }, &owlv1.ListProbesResponse{}},
		{"ListCollectors", &owlv1.ListCollectorsRequest{}, func() (proto.Message, error) { return q.ListCollectors(ctx, &owlv1.ListCollectorsRequest{}) }, &owlv1.ListCollectorsResponse{}},
	} {
		want, err := tc.want()
		if err != nil {
			t.Fatal(err)
		}
		body, _ := protojson.Marshal(tc.req)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/"+tc.method+"?q="+url.QueryEscape(string(body)), nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.method, rec.Code, rec.Body)
		}
		if err := protojson.Unmarshal(rec.Body.Bytes(), tc.got); err != nil {
			t.Fatalf("%s: %v", tc.method, err)
		}
		if !proto.Equal(tc.got, want) {
			t.Errorf("%s %v: web answered\n%v\ngRPC\n%v", tc.method, tc.req, tc.got, want)
		}
	}
	if got := (&owlv1.GetPathStatsResponse{}); protojson.Unmarshal(getHTTP(t, h, "/api/v1/GetPathStats?q="+url.QueryEscape(`{"path":"p","limit":1}`), http.StatusOK), got) != nil ||
		len(got.GetStats()) != 1 || got.GetStats()[0].GetEpoch() != 5 {
		t.Errorf("the latest result: %v", got)
	}
	getHTTP(t, h, "/api/v1/GetPathStats?q="+url.QueryEscape(`{"path":"nowhere"}`), http.StatusNotFound)
	if page := getHTTP(t, h, "/", http.StatusOK); !strings.Contains(string(page), `id="view"`) {
		t.Errorf("/ is not the page: %.200s", page)
	}
	getHTTP(t, h, "/metrics", http.StatusOK)
}

// TestWebPageOff: with web_page off, neither the page nor its endpoint
// is served, and the metrics still are.
func TestWebPageOff(t *testing.T) {
	cfg := testConfig(t)
	cfg.WebPage = false
	c := newTest(t, cfg)
	defer c.Close()
	h := c.httpHandler()
	getHTTP(t, h, "/", http.StatusNotFound)
	getHTTP(t, h, "/api/v1/ListPaths", http.StatusNotFound)
	getHTTP(t, h, "/metrics", http.StatusOK)
}

// getHTTP asks h for target and checks the status; it returns the body.
func getHTTP(t *testing.T, h http.Handler, target string, want int) []byte {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	ctx, cancel := context.WithTimeout(req.Context(), 10*time.Second)
	defer cancel()
	h.ServeHTTP(rec, req.WithContext(ctx))
	b, _ := io.ReadAll(rec.Body)
	if rec.Code != want {
		t.Errorf("GET %s: %d %.200s, want %d", target, rec.Code, b, want)
	}
	return b
}

// TestWebPageBehindWebConfig: with a web configuration, the page and its
// endpoint take TLS and the password /metrics takes, and nothing less.
func TestWebPageBehindWebConfig(t *testing.T) {
	dir := t.TempDir()
	if err := security.MakeDevCerts(dir, security.DevSpec{Collectors: []string{"c"}}); err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cert, key := security.CertFiles(dir, security.RoleCollector, "c")
	cfg := testConfig(t)
	cfg.HTTPListen = "127.0.0.1:0"
	cfg.WebConfigFile = filepath.Join(dir, "web.yml")
	cfg.ReadyFile = filepath.Join(dir, "ready")
	web := fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  ops: %s\n", cert, key, hash)
	if err := os.WriteFile(cfg.WebConfigFile, []byte(web), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := runCollector(t, cfg).HTTP
	ca, err := os.ReadFile(security.CAFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	status := func(target, user, pass string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+target, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, target := range []string{"/", "/app.js", "/api/v1/ListPaths", "/metrics"} {
		if c := status(target, "ops", "secret"); c != http.StatusOK {
			t.Errorf("%s with the password: %d", target, c)
		}
		if c := status(target, "ops", "wrong"); c != http.StatusUnauthorized {
			t.Errorf("%s with a wrong password: %d", target, c)
		}
		if c := status(target, "", ""); c != http.StatusUnauthorized {
			t.Errorf("%s without a password: %d", target, c)
		}
	}
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/api/v1/ListPaths"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP got through")
		}
	}
}

// runCollector runs a collector until the test ends and returns its
// addresses once it listens (cfg.ReadyFile set).
func runCollector(t *testing.T, cfg Config) Addrs {
	t.Helper()
	c, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, err := os.ReadFile(cfg.ReadyFile); err == nil {
			var a Addrs
			if err := json.Unmarshal(b, &a); err != nil {
				t.Fatal(err)
			}
			return a
		}
		if time.Now().After(deadline) {
			t.Fatal("the collector is not ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
