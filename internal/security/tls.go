package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/tls/certprovider"
	"google.golang.org/grpc/credentials/tls/certprovider/pemfile"
)

// TLSConfig names a TLS identity and the CA its peers must chain to.
type TLSConfig struct {
	// Cert and Key are this end's certificate and private key (PEM). They
	// must be in the same directory; replace both at once (write new files
	// and rename them over the old) to rotate.
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// CA holds the certificates (PEM) the peers' certificates must chain
	// to: the client CA on a server, the server CA on a client.
	CA string `yaml:"ca"`
	// ServerName is the name a client expects in the server's certificate
	// (default: the host of the address it dials).
	ServerName string `yaml:"server_name"`
	// ReloadInterval is how often the three files are read again
	// (default 1 minute).
	ReloadInterval time.Duration `yaml:"reload_interval"`
}

// DefaultReloadInterval is how often certificate files are re-read.
const DefaultReloadInterval = time.Minute

// handshakeWait bounds the wait for the key material at a handshake
// (read at start; it is there unless the files were never readable).
const handshakeWait = 10 * time.Second

// Configured says whether any TLS file is named.
func (c TLSConfig) Configured() bool { return c.Cert != "" || c.Key != "" || c.CA != "" }

// Validate checks that the three files are named, readable and hold a
// matching certificate and key and at least one CA certificate.
func (c TLSConfig) Validate() error {
	if c.Cert == "" || c.Key == "" || c.CA == "" {
		return errors.New("tls needs cert, key and ca (or run with -insecure for plaintext)")
	}
	if c.ReloadInterval < 0 {
		return fmt.Errorf("tls reload_interval %v is negative", c.ReloadInterval)
	}
	_, _, err := c.load()
	return err
}

// load reads the files once, for clear errors at start.
func (c TLSConfig) load() (tls.Certificate, *x509.CertPool, error) {
	pair, err := tls.LoadX509KeyPair(c.Cert, c.Key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("tls cert %s and key %s: %w", c.Cert, c.Key, err)
	}
	b, err := os.ReadFile(c.CA)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("tls ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return tls.Certificate{}, nil, fmt.Errorf("tls ca %s: no PEM certificate in it", c.CA)
	}
	return pair, pool, nil
}

// Credentials are gRPC transport credentials from a TLSConfig's files,
// read again every reload interval: a rotated certificate is used for
// the next handshake, with no restart. Close stops the watching.
type Credentials struct {
	cfg      TLSConfig
	provider certprovider.Provider
}

// Load checks the files and starts watching them.
func Load(c TLSConfig) (*Credentials, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	every := c.ReloadInterval
	if every == 0 {
		every = DefaultReloadInterval
	}
	p, err := pemfile.NewProvider(pemfile.Options{CertFile: c.Cert, KeyFile: c.Key, RootFile: c.CA, RefreshDuration: every})
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	return &Credentials{cfg: c, provider: p}, nil
}

// Close stops watching the files.
func (c *Credentials) Close() { c.provider.Close() }

// material is the current certificate and CA pool.
func (c *Credentials) material(ctx context.Context) (*certprovider.KeyMaterial, error) {
	ctx, cancel := context.WithTimeout(ctx, handshakeWait)
	defer cancel()
	km, err := c.provider.KeyMaterial(ctx)
	if err != nil {
		return nil, fmt.Errorf("tls key material from %s, %s, %s: %w", c.cfg.Cert, c.cfg.Key, c.cfg.CA, err)
	}
	if len(km.Certs) == 0 || km.Roots == nil {
		return nil, errors.New("tls key material incomplete")
	}
	return km, nil
}

// ServerConfig is a server's TLS configuration: this end's current
// certificate, and client certificates verified against the current CA
// when given (a reader may come with a bearer token instead; the roles
// decide per call).
func (c *Credentials) ServerConfig(ctx context.Context) (*tls.Config, error) {
	km, err := c.material(ctx)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: km.Certs,
		ClientCAs:    km.Roots,
		ClientAuth:   tls.VerifyClientCertIfGiven,
	}, nil
}

// ClientConfig is a client's TLS configuration for a server at addr:
// this end's certificate, the server's verified against the CA for
// ServerName (or addr's host). want, when not nil, must also accept the
// server's identity.
func (c *Credentials) ClientConfig(ctx context.Context, addr string, want func(Identity) error) (*tls.Config, error) {
	km, err := c.material(ctx)
	if err != nil {
		return nil, err
	}
	name := c.cfg.ServerName
	if name == "" {
		name = hostOf(addr)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: km.Certs,
		RootCAs:      km.Roots,
		ServerName:   name,
	}
	if want != nil {
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server sent no certificate")
			}
			id, err := FromCertificate(cs.PeerCertificates[0])
			if err != nil {
				return fmt.Errorf("server %s: %w", addr, err)
			}
			return want(id)
		}
	}
	return cfg, nil
}

// hostOf is the host of a host:port address (the address itself when it
// has no port).
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// Server is gRPC server credentials that take the current files at each
// handshake.
func (c *Credentials) Server() credentials.TransportCredentials {
	return &transport{server: c.ServerConfig}
}

// Client is gRPC client credentials for the server at addr (see
// ClientConfig).
func (c *Credentials) Client(addr string, want func(Identity) error) credentials.TransportCredentials {
	return &transport{client: func(ctx context.Context) (*tls.Config, error) { return c.ClientConfig(ctx, addr, want) }}
}

// WantRole accepts a peer of the given role, and with name set only that
// name.
func WantRole(role Role, name string) func(Identity) error {
	return func(id Identity) error {
		if id.Role != role || (name != "" && id.Name != name) {
			want := string(role)
			if name != "" {
				want = URI(role, name).String()
			}
			return fmt.Errorf("the server is %s, not a %s", id.Via, want)
		}
		return nil
	}
}

// transport is TLS transport credentials whose tls.Config is made anew
// for each handshake, from the files as last read.
type transport struct {
	server     func(context.Context) (*tls.Config, error)
	client     func(context.Context) (*tls.Config, error)
	serverName string
}

func (t *transport) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cfg, err := t.client(ctx)
	if err != nil {
		return nil, nil, err
	}
	if t.serverName != "" {
		cfg.ServerName = t.serverName
	}
	return credentials.NewTLS(cfg).ClientHandshake(ctx, authority, conn)
}

func (t *transport) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cfg, err := t.server(context.Background())
	if err != nil {
		return nil, nil, err
	}
	return credentials.NewTLS(cfg).ServerHandshake(conn)
}

func (t *transport) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (t *transport) Clone() credentials.TransportCredentials {
	c := *t
	return &c
}

// OverrideServerName is deprecated in gRPC but part of the interface.
func (t *transport) OverrideServerName(name string) error {
	t.serverName = name
	return nil
}
