package security

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// TestServeHTTPWebConfig serves a handler behind an exporter-toolkit web
// configuration (TLS and basic auth) and checks who gets through.
func TestServeHTTPWebConfig(t *testing.T) {
	dir := t.TempDir()
	if err := MakeDevCerts(dir, DevSpec{Collectors: []string{"c"}}); err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	cert, key := CertFiles(dir, RoleCollector, "c")
	web := filepath.Join(dir, "web.yml")
	fmt.Fprintf(mustCreate(t, web), "tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  prom: %s\n", cert, key, hash)
	if err := ValidateWebConfig(web); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }), ReadHeaderTimeout: time.Second}
	go func() { _ = ServeHTTP(l, srv, web, slog.New(slog.DiscardHandler)) }()
	defer srv.Close()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(mustRead(t, CAFile(dir)))
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	url := "https://" + l.Addr().String() + "/metrics"
	get := func(user, pass string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
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
	if c := get("prom", "secret"); c != http.StatusOK {
		t.Errorf("right password: %d", c)
	}
	if c := get("prom", "wrong"); c != http.StatusUnauthorized {
		t.Errorf("wrong password: %d", c)
	}
	if c := get("", ""); c != http.StatusUnauthorized {
		t.Errorf("no password: %d", c)
	}
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + l.Addr().String() + "/metrics"); err == nil && resp.StatusCode == http.StatusOK {
		t.Error("plain HTTP got through")
	}
}

func mustCreate(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
