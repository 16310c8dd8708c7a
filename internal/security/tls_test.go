package security

import (
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

func TestParseURI(t *testing.T) {
	for in, want := range map[string]string{
		"owl://probe/op-a":        "probe op-a",
		"owl://collector/c1":      "collector c1",
		"owl://reader/ops":        "reader ops",
		"owl://admin/x":           "error",
		"owl://probe/":            "error",
		"owl://probe/a/b":         "error",
		"spiffe://probe/a":        "error",
		"owl://probe/a?x=1":       "error",
		"owl://user@probe/a":      "error",
		"owl://probe/10.0.0.1:99": "probe 10.0.0.1:99",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		id, err := ParseURI(u)
		got := string(id.Role) + " " + id.Name
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("%s: %q (%v), want %q", in, got, err, want)
		}
		if err == nil && URI(id.Role, id.Name).String() != in {
			t.Errorf("URI(%s, %s) = %s", id.Role, id.Name, URI(id.Role, id.Name))
		}
	}
}

func TestTLSConfigValidate(t *testing.T) {
	dir := t.TempDir()
	if err := MakeDevCerts(dir, DevSpec{Probes: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	cert, key := CertFiles(dir, RoleProbe, "a")
	good := TLSConfig{Cert: cert, Key: key, CA: CAFile(dir)}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]TLSConfig{
		"no ca":        {Cert: cert, Key: key},
		"missing cert": {Cert: cert + ".x", Key: key, CA: CAFile(dir)},
		"key for cert": {Cert: cert, Key: CAFile(dir), CA: CAFile(dir)},
		"ca not pem":   {Cert: cert, Key: key, CA: key + "x"},
		"negative":     {Cert: cert, Key: key, CA: CAFile(dir), ReloadInterval: -time.Second},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// handshake runs a TLS handshake between the server and client
// configurations of creds over a pipe and returns the client's view of
// the server certificate's serial and the server's verified client
// identity (or the errors).
func handshake(t *testing.T, server, client *Credentials, addr string, want func(Identity) error) (serial string, clientID Identity, err error) {
	t.Helper()
	sc, cc := net.Pipe()
	defer sc.Close()
	defer cc.Close()
	type result struct {
		info credentials.AuthInfo
		err  error
	}
	done := make(chan result, 1)
	go func() {
		_, info, err := server.Server().ServerHandshake(sc)
		done <- result{info, err}
	}()
	_, info, err := client.Client(addr, want).ClientHandshake(context.Background(), addr, cc)
	if err != nil {
		cc.Close()
		<-done
		return "", Identity{}, err
	}
	r := <-done
	if r.err != nil {
		return "", Identity{}, r.err
	}
	serial = info.(credentials.TLSInfo).State.PeerCertificates[0].SerialNumber.String()
	a := &Authenticator{}
	clientID, err = a.Identify(peer.NewContext(context.Background(), &peer.Peer{AuthInfo: r.info}))
	return serial, clientID, err
}

// TestCredentialsReload: a certificate replaced on disk is presented at
// the next handshake, without new credentials.
func TestCredentialsReload(t *testing.T) {
	dir := t.TempDir()
	if err := MakeDevCerts(dir, DevSpec{Probes: []string{"a"}, Collectors: []string{"c"}}); err != nil {
		t.Fatal(err)
	}
	load := func(role Role, name string) *Credentials {
		cert, key := CertFiles(dir, role, name)
		c, err := Load(TLSConfig{Cert: cert, Key: key, CA: CAFile(dir), ReloadInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	srv, cli := load(RoleCollector, "c"), load(RoleProbe, "a")
	first, id, err := handshake(t, srv, cli, "127.0.0.1:7700", WantRole(RoleCollector, "c"))
	if err != nil {
		t.Fatal(err)
	}
	if id.Role != RoleProbe || id.Name != "a" || !strings.Contains(id.Via, "owl://probe/a") {
		t.Errorf("client identity %+v", id)
	}
	if err := IssueCert(dir, RoleCollector, "c", nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	var now string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if now, _, err = handshake(t, srv, cli, "127.0.0.1:7700", nil); err != nil {
			t.Fatal(err)
		}
		if now != first {
			break
		}
	}
	if now == first {
		t.Fatalf("still serial %s 5 s after the certificate was replaced", first)
	}
	// The server must be the collector the client wants.
	if _, _, err := handshake(t, srv, cli, "127.0.0.1:7700", WantRole(RoleCollector, "other")); err == nil || !strings.Contains(err.Error(), "owl://collector/other") {
		t.Errorf("wrong collector name: %v", err)
	}
	if _, _, err := handshake(t, srv, cli, "127.0.0.1:7700", WantRole(RoleReader, "")); err == nil {
		t.Error("a collector accepted as a reader")
	}
	// The server name is checked.
	if _, _, err := handshake(t, srv, cli, "collector.example:7700", nil); err == nil {
		t.Error("a certificate without the dialed name accepted")
	}
}

func TestTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("# readers\ngrafana 0123456789abcdef0123\n\nabcdefghijklmnopqrstuvwxyz\n")
	tk, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := tk.Lookup("0123456789abcdef0123"); !ok || n != "grafana" {
		t.Errorf("grafana: %q %v", n, ok)
	}
	if n, ok := tk.Lookup("abcdefghijklmnopqrstuvwxyz"); !ok || n != "reader-4" {
		t.Errorf("unnamed: %q %v", n, ok)
	}
	if _, ok := tk.Lookup("0123456789abcdef012"); ok {
		t.Error("a prefix of a token accepted")
	}
	// A changed file is read again (within a second).
	write("grafana fedcba9876543210fedcba\n")
	future := time.Now().Add(2 * time.Second)
	os.Chtimes(path, future, future)
	tk.mu.Lock()
	tk.checked = time.Time{}
	tk.mu.Unlock()
	if _, ok := tk.Lookup("0123456789abcdef0123"); ok {
		t.Error("a removed token still accepted")
	}
	if _, ok := tk.Lookup("fedcba9876543210fedcba"); !ok {
		t.Error("a new token refused")
	}
	for name, bad := range map[string]string{"short": "x short\n", "three fields": "a b c\n", "empty": "# none\n"} {
		write(bad)
		if _, err := LoadTokens(path); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestIdentifyByToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(path, []byte("ops 0123456789abcdef0123\n"), 0o600)
	tk, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	a := &Authenticator{Tokens: tk}
	ctx := func(h string) context.Context {
		c := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{}}})
		if h != "" {
			c = metadata.NewIncomingContext(c, metadata.Pairs("authorization", h))
		}
		return c
	}
	if id, err := a.Identify(ctx("Bearer 0123456789abcdef0123")); err != nil || id.Role != RoleReader || id.Name != "ops" {
		t.Errorf("good token: %+v %v", id, err)
	}
	for _, h := range []string{"", "Bearer nope-nope-nope-nope", "Basic 0123456789abcdef0123"} {
		if id, err := a.Identify(ctx(h)); err == nil {
			t.Errorf("%q: identified as %+v", h, id)
		}
	}
	if id, err := (&Authenticator{Insecure: true}).Identify(context.Background()); err != nil || !id.IsInsecure() {
		t.Errorf("insecure: %+v %v", id, err)
	}
}

func TestValidateWebConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "web.yml")
	os.WriteFile(good, []byte("basic_auth_users:\n  prom: $2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG\n"), 0o600)
	if err := ValidateWebConfig(good); err != nil {
		t.Errorf("good: %v", err)
	}
	bad := filepath.Join(dir, "bad.yml")
	os.WriteFile(bad, []byte("tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /nonexistent.key\n"), 0o600)
	if err := ValidateWebConfig(bad); err == nil {
		t.Error("a web config naming missing files accepted")
	}
	if err := ValidateWebConfig(""); err != nil {
		t.Errorf("none: %v", err)
	}
}
