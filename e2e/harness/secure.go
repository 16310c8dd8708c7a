package harness

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/owl-latency/owl/internal/security"
)

// The harness runs everything with mTLS, as a deployment would: one
// development CA per test process, and a certificate for each probe id,
// collector and the tests' reader, issued when first needed. A test
// that chooses its own security (-insecure, -tls-cert, or insecure: in a
// collector's YAML) is left alone.

// ReaderName is the reader identity of the harness's queries.
const ReaderName = "e2e"

var (
	certsOnce sync.Once
	certsDir  string
	certsErr  error

	issueMu sync.Mutex
	issued  = map[string]string{} // role/name → hosts issued for

	readerOnce  sync.Once
	readerCreds *security.Credentials
	readerErr   error
)

// CertsDir is the process's development CA directory (made on first use,
// in a temporary directory unless UseCertsDir named one): ca.crt,
// gossip.key, reader-tokens, and the certificates issued so far.
func CertsDir() (string, error) {
	certsOnce.Do(func() { certsErr = makeCerts("") })
	return certsDir, certsErr
}

// UseCertsDir makes dir the development CA directory; it must come
// before anything is started. The demo keeps its certificates beside its
// logs, for grpcurl.
func UseCertsDir(dir string) error {
	used := false
	certsOnce.Do(func() { used, certsErr = true, makeCerts(dir) })
	if !used {
		return fmt.Errorf("certificates are in %s already", certsDir)
	}
	return certsErr
}

func makeCerts(dir string) error {
	var err error
	if dir == "" {
		if dir, err = os.MkdirTemp("", "owl-e2e-certs-"); err != nil {
			return err
		}
	}
	certsDir = dir
	return security.MakeDevCerts(dir, security.DevSpec{Readers: []string{ReaderName}})
}

// Issue returns the certificate and key of role/name, issuing them (with
// hosts as DNS or IP SANs, for a collector) when not issued yet for those
// hosts.
func Issue(role security.Role, name string, hosts ...string) (cert, key string, err error) {
	dir, err := CertsDir()
	if err != nil {
		return "", "", err
	}
	slices.Sort(hosts)
	hosts = slices.Compact(hosts)
	k, h := string(role)+"/"+name, strings.Join(hosts, ",")
	cert, key = security.CertFiles(dir, role, name)
	issueMu.Lock()
	defer issueMu.Unlock()
	if done, ok := issued[k]; ok && done == h {
		return cert, key, nil
	}
	if err := security.IssueCert(dir, role, name, hosts, 24*time.Hour); err != nil {
		return "", "", err
	}
	issued[k] = h
	return cert, key, nil
}

// chosen says whether the arguments choose the security themselves.
func chosen(args []string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == "insecure" || strings.HasPrefix(a, "insecure=") || strings.HasPrefix(a, "tls-cert") {
			return true
		}
	}
	return false
}

// argAfter is the value of a flag in args ("-id x" or "-id=x").
func argAfter(args []string, flag string) string {
	for i, a := range args {
		a = "-" + strings.TrimLeft(a, "-")
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// probeTLS adds a probe's TLS flags for its -id.
func probeTLS(args []string) ([]string, error) {
	id := argAfter(args, "-id")
	if id == "" || chosen(args) {
		return args, nil
	}
	cert, key, err := Issue(security.RoleProbe, id)
	if err != nil {
		return nil, err
	}
	dir, _ := CertsDir()
	return append(args, "-tls-cert", cert, "-tls-key", key, "-tls-ca", security.CAFile(dir)), nil
}

// listenHost finds the hosts of the addresses a collector's YAML
// listens on or advertises.
var listenHost = regexp.MustCompile(`(?m)^\s*(?:grpc_listen|grpc_advertise):\s*"?([^"\s]+)`)

// collectorTLS adds a collector's TLS flags: a certificate named after
// the process, valid for loopback and the hosts config listens on.
func collectorTLS(name, config string, args []string) ([]string, error) {
	if chosen(args) || regexp.MustCompile(`(?m)^\s*(insecure|tls):`).MatchString(config) {
		return args, nil
	}
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	for _, m := range listenHost.FindAllStringSubmatch(config, -1) {
		if h, _, err := net.SplitHostPort(m[1]); err == nil && h != "" && h != "0.0.0.0" && h != "::" {
			hosts = append(hosts, h)
		}
	}
	cert, key, err := Issue(security.RoleCollector, name, hosts...)
	if err != nil {
		return nil, err
	}
	dir, _ := CertsDir()
	return append(args, "-tls-cert", cert, "-tls-key", key, "-tls-ca", security.CAFile(dir),
		"-cluster-key-file", security.GossipKeyFile(dir), "-reader-tokens", security.ReaderTokensFile(dir)), nil
}

// ReaderCredentials are the transport credentials of the harness's
// reader, for a collector at addr.
func ReaderCredentials(addr string) (credentials.TransportCredentials, error) {
	readerOnce.Do(func() {
		cert, key, err := Issue(security.RoleReader, ReaderName)
		if err != nil {
			readerErr = err
			return
		}
		dir, _ := CertsDir()
		readerCreds, readerErr = security.Load(security.TLSConfig{Cert: cert, Key: key, CA: security.CAFile(dir)})
	})
	if readerErr != nil {
		return nil, fmt.Errorf("reader credentials: %w", readerErr)
	}
	return readerCreds.Client(addr, security.WantRole(security.RoleCollector, "")), nil
}

// Dial connects to a collector's gRPC address as the harness's reader.
func Dial(addr string) (*grpc.ClientConn, error) {
	tc, err := ReaderCredentials(addr)
	if err != nil {
		return nil, err
	}
	return grpc.NewClient(addr, grpc.WithTransportCredentials(tc))
}

// DialInsecure connects in plaintext (to a collector run with -insecure).
func DialInsecure(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}
