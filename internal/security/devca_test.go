package security

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// devRoots is the CA pool of dir.
func devRoots(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(CAFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("no certificate in %s", CAFile(dir))
	}
	return pool
}

// devLeaf reads the certificate of role and name in dir, checking that
// its key matches it as a TLS pair.
func devLeaf(t *testing.T, dir string, role Role, name string) *x509.Certificate {
	t.Helper()
	certFile, keyFile := CertFiles(dir, role, name)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func verifyDev(c *x509.Certificate, roots *x509.CertPool, host string, usage x509.ExtKeyUsage) error {
	_, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMakeDevCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	spec := DevSpec{
		Probes:     []string{"tor1-mirror", "up-loss-0.1pct"},
		Collectors: []string{"c1"},
		Readers:    []string{"ops"},
		Hosts:      []string{"collector.example", "10.0.0.5", "localhost"},
	}
	if err := MakeDevCerts(dir, spec); err != nil {
		t.Fatal(err)
	}
	roots := devRoots(t, dir)

	for _, name := range spec.Probes {
		c := devLeaf(t, dir, RoleProbe, name)
		if err := verifyDev(c, roots, "", x509.ExtKeyUsageClientAuth); err != nil {
			t.Errorf("probe %s as a client: %v", name, err)
		}
		if err := verifyDev(c, roots, "", x509.ExtKeyUsageServerAuth); err == nil {
			t.Errorf("probe %s verifies as a server", name)
		}
		id, err := FromCertificate(c)
		if err != nil || id.Role != RoleProbe || id.Name != name {
			t.Errorf("probe %s: identity %+v, %v", name, id, err)
		}
	}

	coll := devLeaf(t, dir, RoleCollector, "c1")
	for _, host := range []string{"localhost", "127.0.0.1", "::1", "collector.example", "10.0.0.5"} {
		if err := verifyDev(coll, roots, host, x509.ExtKeyUsageServerAuth); err != nil {
			t.Errorf("collector as server %s: %v", host, err)
		}
	}
	if err := verifyDev(coll, roots, "other.example", x509.ExtKeyUsageServerAuth); err == nil {
		t.Error("the collector verifies for a host it was not given")
	}
	if err := verifyDev(coll, roots, "", x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("collector as a client (of the other members): %v", err)
	}
	if len(coll.DNSNames) != 2 {
		t.Errorf("collector DNS names %v: localhost given twice?", coll.DNSNames)
	}
	if id, err := FromCertificate(coll); err != nil || id != (Identity{Role: RoleCollector, Name: "c1", Via: "certificate owl://collector/c1"}) {
		t.Errorf("collector identity %+v, %v", id, err)
	}

	reader := devLeaf(t, dir, RoleReader, "ops")
	if err := verifyDev(reader, roots, "", x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("reader: %v", err)
	}
	if len(reader.DNSNames)+len(reader.IPAddresses) != 0 {
		t.Errorf("reader names hosts: %v %v", reader.DNSNames, reader.IPAddresses)
	}

	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(mustRead(t, GossipKeyFile(dir)))))
	if err != nil || len(key) != 32 {
		t.Errorf("gossip key: %d bytes, %v", len(key), err)
	}
	f := strings.Fields(string(mustRead(t, ReaderTokensFile(dir))))
	if len(f) != 2 || f[0] != "ops" || len(f[1]) < 32 {
		t.Errorf("reader tokens: %q", f)
	}

	modes := map[string]os.FileMode{dir: 0o700, CAFile(dir): 0o644, caKeyFile(dir): 0o600, GossipKeyFile(dir): 0o600, ReaderTokensFile(dir): 0o600}
	certFile, keyFile := CertFiles(dir, RoleProbe, "tor1-mirror")
	modes[certFile], modes[keyFile] = 0o644, 0o600
	for path, want := range modes {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(tmp) > 0 {
		t.Errorf("temporary files left: %v", tmp)
	}
}

// TestMakeDevCertsAgain: a second run reuses the CA, so that the
// certificates of the first still verify, and keeps the gossip key and
// the tokens of readers it already had.
func TestMakeDevCertsAgain(t *testing.T) {
	dir := t.TempDir()
	if err := MakeDevCerts(dir, DevSpec{Probes: []string{"a"}, Readers: []string{"ops"}}); err != nil {
		t.Fatal(err)
	}
	oldCA, oldGossip, oldTokens := mustRead(t, CAFile(dir)), mustRead(t, GossipKeyFile(dir)), mustRead(t, ReaderTokensFile(dir))
	oldLeaf := devLeaf(t, dir, RoleProbe, "a")

	if err := MakeDevCerts(dir, DevSpec{Probes: []string{"a", "b"}, Readers: []string{"ops", "ci"}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustRead(t, CAFile(dir)), oldCA) {
		t.Error("the CA was made again")
	}
	roots := devRoots(t, dir)
	if err := verifyDev(oldLeaf, roots, "", x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("a certificate of the first run: %v", err)
	}
	newLeaf := devLeaf(t, dir, RoleProbe, "a")
	if newLeaf.SerialNumber.Cmp(oldLeaf.SerialNumber) == 0 {
		t.Error("probe a was not issued again")
	}
	for _, n := range []string{"a", "b"} {
		if err := verifyDev(devLeaf(t, dir, RoleProbe, n), roots, "", x509.ExtKeyUsageClientAuth); err != nil {
			t.Errorf("probe %s: %v", n, err)
		}
	}
	if !bytes.Equal(mustRead(t, GossipKeyFile(dir)), oldGossip) {
		t.Error("the gossip key changed")
	}
	tokens := mustRead(t, ReaderTokensFile(dir))
	if !bytes.HasPrefix(tokens, oldTokens) || !bytes.HasPrefix(tokens[len(oldTokens):], []byte("ci ")) || bytes.Count(tokens, []byte("\n")) != 2 {
		t.Errorf("reader tokens, before:\n%s\nafter:\n%s", oldTokens, tokens)
	}
}

// TestIssueCertRotates: IssueCert replaces a certificate and key with new
// ones from the same CA, and no certificate outlives the CA.
func TestIssueCertRotates(t *testing.T) {
	dir := t.TempDir()
	if err := MakeDevCerts(dir, DevSpec{Collectors: []string{"c1"}}); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := CertFiles(dir, RoleCollector, "c1")
	oldCert, oldKey := mustRead(t, certFile), mustRead(t, keyFile)
	if err := IssueCert(dir, RoleCollector, "c1", []string{"10.1.2.3"}, 100*365*24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(mustRead(t, certFile), oldCert) || bytes.Equal(mustRead(t, keyFile), oldKey) {
		t.Error("certificate or key not replaced")
	}
	c := devLeaf(t, dir, RoleCollector, "c1")
	if err := verifyDev(c, devRoots(t, dir), "10.1.2.3", x509.ExtKeyUsageServerAuth); err != nil {
		t.Error(err)
	}
	ca, err := parseCertPEM(mustRead(t, CAFile(dir)))
	if err != nil {
		t.Fatal(err)
	}
	if c.NotAfter.After(ca.NotAfter) {
		t.Errorf("the certificate ends %v, after its CA (%v)", c.NotAfter, ca.NotAfter)
	}
}

// TestDevCertsHandshake: a collector's and a probe's files make an mTLS
// connection as crypto/tls loads them.
func TestDevCertsHandshake(t *testing.T) {
	dir := t.TempDir()
	if err := MakeDevCerts(dir, DevSpec{Probes: []string{"p"}, Collectors: []string{"c"}}); err != nil {
		t.Fatal(err)
	}
	roots := devRoots(t, dir)
	pair := func(role Role, name string) tls.Certificate {
		c, k := CertFiles(dir, role, name)
		p, err := tls.LoadX509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := net.Pipe()
	defer a.Close() // the raw pipe: a TLS close_notify would wait for a reader
	defer b.Close()
	server := tls.Server(a, &tls.Config{Certificates: []tls.Certificate{pair(RoleCollector, "c")}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert})
	client := tls.Client(b, &tls.Config{Certificates: []tls.Certificate{pair(RoleProbe, "p")}, RootCAs: roots, ServerName: "localhost"})
	done := make(chan error, 1)
	go func() { done <- server.Handshake() }()
	if err := client.Handshake(); err != nil {
		t.Fatalf("client: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("server: %v", err)
	}
	id, err := FromCertificate(server.ConnectionState().PeerCertificates[0])
	if err != nil || id.Role != RoleProbe || id.Name != "p" {
		t.Errorf("the collector sees %+v, %v", id, err)
	}
}

func TestDevSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec DevSpec
		want string
	}{
		{"empty probe", DevSpec{Probes: []string{""}}, "probe name is empty"},
		{"slash", DevSpec{Readers: []string{"ops/admin"}}, `reader name "ops/admin" contains '/'`},
		{"space", DevSpec{Collectors: []string{"c 1"}}, `collector name "c 1": use 1–128 letters`},
		{"dot dot", DevSpec{Probes: []string{".."}}, `probe name "..": use`},
		{"twice", DevSpec{Probes: []string{"a", "a"}}, `probe name "a" given twice`},
		{"host", DevSpec{Collectors: []string{"c"}, Hosts: []string{"http://x"}}, `host "http://x" is neither`},
		{"valid", DevSpec{Probes: []string{"a"}, Valid: -time.Hour}, "validity -1h0m0s is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "certs")
			err := MakeDevCerts(dir, tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if _, err := os.Stat(dir); err == nil {
				t.Error("an invalid spec wrote files")
			}
		})
	}
}

func TestIssueCertErrors(t *testing.T) {
	dir := t.TempDir()
	if err := IssueCert(dir, RoleProbe, "a", nil, 0); err == nil || !strings.Contains(err.Error(), "no CA in") {
		t.Errorf("without a CA: %v", err)
	}
	if err := MakeDevCerts(dir, DevSpec{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		role  Role
		id    string
		hosts []string
		want  string
	}{
		{"role", "admin", "a", nil, `role "admin" is none of`},
		{"name", RoleProbe, "a/b", nil, `probe name "a/b" contains '/'`},
		{"hosts", RoleProbe, "a", []string{"x.example"}, "only collector certificates name hosts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := IssueCert(dir, tc.role, tc.id, tc.hosts, 0); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if err := os.Remove(caKeyFile(dir)); err != nil {
		t.Fatal(err)
	}
	if err := MakeDevCerts(dir, DevSpec{}); err == nil || !strings.Contains(err.Error(), "must both exist") {
		t.Errorf("with ca.key missing: %v", err)
	}
}
