package security

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// DevSpec says which certificates MakeDevCerts makes: one per name, each
// naming its holder owl://ROLE/NAME.
type DevSpec struct {
	// Probes, Collectors and Readers are the names to issue a
	// certificate for, by role.
	Probes, Collectors, Readers []string
	// Hosts are DNS names and IP addresses put in every collector
	// certificate besides localhost, 127.0.0.1 and ::1: the names
	// probes and readers dial.
	Hosts []string
	// Valid is how long the new certificates are valid (default
	// DefaultDevValid).
	Valid time.Duration
}

// DefaultDevValid is how long a development certificate is valid unless
// DevSpec.Valid says otherwise.
const DefaultDevValid = 365 * 24 * time.Hour

// devCAValid is how long a new development CA is valid (or Valid, if
// longer): long enough that certificates issued later still fit in it.
const devCAValid = 10 * 365 * 24 * time.Hour

// clockSkew backdates certificates so that a peer whose clock is a little
// behind accepts them at once.
const clockSkew = 5 * time.Minute

// devSecretBytes is the size of the gossip key and of reader tokens.
const devSecretBytes = 32

// The files of a development CA directory besides the certificates.
const (
	caCertName       = "ca.crt"
	caKeyName        = "ca.key"
	gossipKeyName    = "gossip.key"
	readerTokensName = "reader-tokens"
)

// CAFile is the CA certificate MakeDevCerts writes in dir: every
// component's tls.ca.
func CAFile(dir string) string { return filepath.Join(dir, caCertName) }

// caKeyFile is the CA's private key. It stays in dir: no component needs it.
func caKeyFile(dir string) string { return filepath.Join(dir, caKeyName) }

// CertFiles are the certificate and key files of role and name in dir:
// ROLE-NAME.crt and ROLE-NAME.key, in one directory as the file watcher
// requires.
func CertFiles(dir string, role Role, name string) (cert, key string) {
	base := filepath.Join(dir, string(role)+"-"+name)
	return base + ".crt", base + ".key"
}

// GossipKeyFile is the memberlist encryption key MakeDevCerts writes in
// dir: the collectors' cluster.key_file.
func GossipKeyFile(dir string) string { return filepath.Join(dir, gossipKeyName) }

// ReaderTokensFile is the reader token file MakeDevCerts writes in dir:
// the collectors' reader_tokens_file.
func ReaderTokensFile(dir string) string { return filepath.Join(dir, readerTokensName) }

// devNameRE is the rule of probe ids (netpath.ValidName), applied to
// every name so that it is one URI path segment and a file name.
var devNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// dnsNameRE is a host name, optionally a wildcard of one label.
var dnsNameRE = regexp.MustCompile(`^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// checkName reports a name that cannot be an owl identity.
func checkName(role Role, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s name is empty", role)
	case strings.Contains(name, "/"):
		return fmt.Errorf("%s name %q contains '/': an identity is owl://%s/NAME with NAME one path segment", role, name, role)
	case !devNameRE.MatchString(name):
		return fmt.Errorf("%s name %q: use 1–128 letters, digits or ._:- starting with a letter or digit", role, name)
	}
	return nil
}

// checkRole reports a role that is none of the three.
func checkRole(role Role) error {
	switch role {
	case RoleProbe, RoleCollector, RoleReader:
		return nil
	}
	return fmt.Errorf("role %q is none of probe, collector, reader", role)
}

// checkHosts reports a host that is neither an IP address nor a DNS name.
func checkHosts(hosts []string) error {
	for _, h := range hosts {
		if net.ParseIP(h) == nil && !dnsNameRE.MatchString(h) {
			return fmt.Errorf("host %q is neither an IP address nor a DNS name", h)
		}
	}
	return nil
}

// Validate reports names that cannot be owl identities (empty, with a
// '/', or given twice), hosts that are not DNS names or IP addresses, and
// a negative validity.
func (s DevSpec) Validate() error {
	for _, g := range []struct {
		role  Role
		names []string
	}{{RoleProbe, s.Probes}, {RoleCollector, s.Collectors}, {RoleReader, s.Readers}} {
		seen := map[string]bool{}
		for _, n := range g.names {
			if err := checkName(g.role, n); err != nil {
				return err
			}
			if seen[n] {
				return fmt.Errorf("%s name %q given twice", g.role, n)
			}
			seen[n] = true
		}
	}
	if err := checkHosts(s.Hosts); err != nil {
		return err
	}
	if s.Valid < 0 {
		return fmt.Errorf("validity %v is negative", s.Valid)
	}
	return nil
}

// valid is the validity of new certificates.
func (s DevSpec) valid() time.Duration {
	if s.Valid == 0 {
		return DefaultDevValid
	}
	return s.Valid
}

// MakeDevCerts writes a development PKI in dir (created 0700 if missing):
//
//   - ca.crt and ca.key, made once: an existing CA is reused, so that
//     certificates issued before and after chain to the same one;
//   - ROLE-NAME.crt and ROLE-NAME.key for every name of s (existing ones
//     are issued again);
//   - gossip.key, a memberlist key (base64 of 32 random bytes), kept if
//     present;
//   - reader-tokens, a `NAME TOKEN` line per reader with a random token;
//     existing lines are kept and lines added for new readers (the file is
//     written only when there are readers).
//
// Private keys, the gossip key and the tokens are 0600. Every file is
// written to a temporary name and renamed, so that a component re-reading
// it never sees half of it.
func MakeDevCerts(dir string, s DevSpec) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("certificate directory: %w", err)
	}
	ca, err := loadOrMakeDevCA(dir, max(devCAValid, s.valid()))
	if err != nil {
		return err
	}
	for _, n := range s.Probes {
		if err := ca.issue(dir, RoleProbe, n, nil, s.valid()); err != nil {
			return err
		}
	}
	for _, n := range s.Collectors {
		if err := ca.issue(dir, RoleCollector, n, s.Hosts, s.valid()); err != nil {
			return err
		}
	}
	for _, n := range s.Readers {
		if err := ca.issue(dir, RoleReader, n, nil, s.valid()); err != nil {
			return err
		}
	}
	if err := ensureGossipKey(GossipKeyFile(dir)); err != nil {
		return err
	}
	return addReaderTokens(ReaderTokensFile(dir), s.Readers)
}

// IssueCert issues, or issues again, the certificate of role and name in
// dir, signed by the CA MakeDevCerts made there: a new key and a new
// certificate written over the old ones (rotation). Only collectors name
// hosts (besides localhost, 127.0.0.1 and ::1). valid 0 means
// DefaultDevValid; no certificate outlives the CA.
func IssueCert(dir string, role Role, name string, hosts []string, valid time.Duration) error {
	if err := checkRole(role); err != nil {
		return err
	}
	if err := checkName(role, name); err != nil {
		return err
	}
	if role != RoleCollector && len(hosts) > 0 {
		return fmt.Errorf("%s %q: only collector certificates name hosts", role, name)
	}
	if err := checkHosts(hosts); err != nil {
		return err
	}
	if valid < 0 {
		return fmt.Errorf("validity %v is negative", valid)
	}
	if valid == 0 {
		valid = DefaultDevValid
	}
	ca, err := loadDevCA(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no CA in %s (%w): make one with MakeDevCerts (collector certs) first", dir, err)
	}
	if err != nil {
		return err
	}
	return ca.issue(dir, role, name, hosts, valid)
}

// devCA is a CA certificate and its key.
type devCA struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// loadOrMakeDevCA reuses dir's CA, or makes one valid for caValid when
// there is none.
func loadOrMakeDevCA(dir string, caValid time.Duration) (*devCA, error) {
	ca, err := loadDevCA(dir)
	if !errors.Is(err, fs.ErrNotExist) {
		return ca, err
	}
	return makeDevCA(dir, caValid)
}

// loadDevCA reads dir's CA. Its error wraps fs.ErrNotExist only when
// neither file exists.
func loadDevCA(dir string) (*devCA, error) {
	certFile, keyFile := CAFile(dir), caKeyFile(dir)
	certPEM, certErr := os.ReadFile(certFile)
	keyPEM, keyErr := os.ReadFile(keyFile)
	switch {
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		return nil, certErr
	case errors.Is(certErr, fs.ErrNotExist) || errors.Is(keyErr, fs.ErrNotExist):
		return nil, fmt.Errorf("%s and %s must both exist: restore the missing one, or remove both to make a new CA (and issue every certificate again)", certFile, keyFile)
	case certErr != nil:
		return nil, fmt.Errorf("reading the CA: %w", certErr)
	case keyErr != nil:
		return nil, fmt.Errorf("reading the CA key: %w", keyErr)
	}
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA %s: %w", certFile, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("CA %s is not a CA certificate", certFile)
	}
	if now := time.Now(); now.After(cert.NotAfter) {
		return nil, fmt.Errorf("CA %s expired on %s: remove %s and %s to make a new one (and issue every certificate again)", certFile, cert.NotAfter.Format(time.DateOnly), certFile, keyFile)
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key %s: %w", keyFile, err)
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("CA key %s does not belong to %s", keyFile, certFile)
	}
	return &devCA{cert: cert, key: key}, nil
}

// makeDevCA makes a CA valid for caValid and writes it in dir.
func makeDevCA(dir string, caValid time.Duration) (*devCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"owl"}, CommonName: "owl development CA"},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValid),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if err := writeKeyAndCert(caKeyFile(dir), CAFile(dir), key, der); err != nil {
		return nil, err
	}
	return &devCA{cert: cert, key: key}, nil
}

// issue makes a new key and certificate for role and name and writes
// them in dir. Collectors are servers and clients and name localhost,
// the loopback addresses and hosts; probes and readers are clients.
func (ca *devCA) issue(dir string, role Role, name string, hosts []string, valid time.Duration) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("%s %q key: %w", role, name, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return err
	}
	uri := URI(role, name)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"owl"}, CommonName: uri.String()},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(valid),
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:                  []*url.URL{uri},
	}
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	if role == RoleCollector {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames, tmpl.IPAddresses = serverNames(hosts)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return fmt.Errorf("%s certificate: %w", uri, err)
	}
	certFile, keyFile := CertFiles(dir, role, name)
	return writeKeyAndCert(keyFile, certFile, key, der)
}

// serverNames are the DNS names and IP addresses of a collector
// certificate: localhost, 127.0.0.1, ::1 and hosts, each once.
func serverNames(hosts []string) ([]string, []net.IP) {
	dns := []string{"localhost"}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		} else if !slices.ContainsFunc(dns, func(n string) bool { return strings.EqualFold(n, h) }) {
			dns = append(dns, h)
		}
	}
	return dns, ips
}

// randomSerial is a 128-bit random certificate serial number.
func randomSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil // positive, as RFC 5280 asks
}

// writeKeyAndCert writes a private key (0600) and then its certificate
// (0644), each replacing the old file at once. A watcher that reads the
// new certificate with the old key in between finds that they do not
// match and keeps the pair it has until its next read.
func writeKeyAndCert(keyFile, certFile string, key *ecdsa.PrivateKey, der []byte) error {
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", keyFile, err)
	}
	if err := replaceFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600); err != nil {
		return err
	}
	return replaceFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// parseCertPEM reads the first certificate of a PEM file.
func parseCertPEM(b []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil, errors.New("no PEM certificate in it")
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}

// parseKeyPEM reads a PEM private key: PKCS #8 (as MakeDevCerts writes
// it) or SEC 1 (openssl ecparam -genkey).
func parseKeyPEM(b []byte) (crypto.Signer, error) {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil, errors.New("no PEM private key in it")
		}
		switch block.Type {
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				return nil, err
			}
			s, ok := k.(crypto.Signer)
			if !ok {
				return nil, fmt.Errorf("a %T cannot sign", k)
			}
			return s, nil
		case "EC PRIVATE KEY":
			return x509.ParseECPrivateKey(block.Bytes)
		}
	}
}

// ensureGossipKey writes a memberlist key at path unless a file is there.
func ensureGossipKey(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("gossip key: %w", err)
	}
	key := make([]byte, devSecretBytes)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("gossip key: %w", err)
	}
	return replaceFile(path, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600)
}

// addReaderTokens appends a `NAME TOKEN` line with a random token to the
// token file at path for every reader it does not name yet.
func addReaderTokens(path string, readers []string) error {
	if len(readers) == 0 {
		return nil
	}
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reader tokens: %w", err)
	}
	named := map[string]bool{}
	for _, line := range strings.Split(string(old), "\n") {
		if f := strings.Fields(line); len(f) == 2 && !strings.HasPrefix(f[0], "#") {
			named[f[0]] = true
		}
	}
	var b bytes.Buffer
	b.Write(old)
	if len(old) > 0 && old[len(old)-1] != '\n' {
		b.WriteByte('\n')
	}
	added := 0
	for _, r := range readers {
		if named[r] {
			continue
		}
		tok := make([]byte, devSecretBytes)
		if _, err := rand.Read(tok); err != nil {
			return fmt.Errorf("reader token: %w", err)
		}
		fmt.Fprintf(&b, "%s %s\n", r, hex.EncodeToString(tok))
		added++
	}
	if added == 0 {
		return nil
	}
	return replaceFile(path, b.Bytes(), 0o600)
}

// replaceFile writes data to a temporary file beside path and renames it
// over path, so that a reader sees the old file or the new one, whole.
func replaceFile(path string, data []byte, perm os.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("writing %s: %w", path, err)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
