package security

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Authenticator tells who the peer of a call is: the owl identity of its
// verified client certificate, or a reader by bearer token.
type Authenticator struct {
	// Insecure makes every peer Insecure (a collector run with -insecure).
	Insecure bool
	// Tokens, when set, admits readers by `authorization: Bearer TOKEN`.
	Tokens *Tokens
}

// Identify returns the caller's identity, or an Unauthenticated error
// that says what was missing.
func (a *Authenticator) Identify(ctx context.Context) (Identity, error) {
	if a.Insecure {
		return Insecure, nil
	}
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 && len(ti.State.VerifiedChains[0]) > 0 {
			id, err := FromCertificate(ti.State.VerifiedChains[0][0])
			if err != nil {
				return Identity{}, status.Errorf(codes.Unauthenticated, "client certificate: %v", err)
			}
			return id, nil
		}
	}
	tok, err := auth.AuthFromMD(ctx, "bearer")
	if err != nil {
		return Identity{}, status.Error(codes.Unauthenticated, "no client certificate and no bearer token: present a certificate signed by the collector's CA, or a reader token (authorization: Bearer TOKEN)")
	}
	if a.Tokens == nil {
		return Identity{}, status.Error(codes.Unauthenticated, "bearer tokens are not accepted here (no reader_tokens_file): present a client certificate")
	}
	name, ok := a.Tokens.Lookup(tok)
	if !ok {
		return Identity{}, status.Error(codes.Unauthenticated, "unknown bearer token")
	}
	return Identity{Role: RoleReader, Name: name, Via: "token " + name}, nil
}

type identityKey struct{}

// NewContext returns ctx carrying id.
func NewContext(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// FromContext is the identity NewContext put in ctx.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// Tokens are reader bearer tokens from a file: one per line, `NAME TOKEN`
// or only `TOKEN` (named reader-N by its line); blank lines and lines
// starting with # are skipped. The file is read again when it changes
// (checked at most once a second).
type Tokens struct {
	path string

	mu      sync.Mutex
	checked time.Time
	mod     time.Time
	size    int64
	names   []string
	tokens  [][]byte
}

// minTokenLen refuses tokens short enough to guess.
const minTokenLen = 16

// LoadTokens reads a token file.
func LoadTokens(path string) (*Tokens, error) {
	t := &Tokens{path: path}
	if err := t.reload(time.Now()); err != nil {
		return nil, err
	}
	return t, nil
}

// reload reads the file when it changed. t.mu is held or t is new.
func (t *Tokens) reload(now time.Time) error {
	fi, err := os.Stat(t.path)
	if err != nil {
		return fmt.Errorf("reader tokens: %w", err)
	}
	t.checked = now
	if fi.ModTime().Equal(t.mod) && fi.Size() == t.size && t.tokens != nil {
		return nil
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("reader tokens: %w", err)
	}
	names, tokens, err := parseTokens(b)
	if err != nil {
		return fmt.Errorf("reader tokens %s: %w", t.path, err)
	}
	t.names, t.tokens, t.mod, t.size = names, tokens, fi.ModTime(), fi.Size()
	return nil
}

func parseTokens(b []byte) ([]string, [][]byte, error) {
	var names []string
	var tokens [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		name, tok := fmt.Sprintf("reader-%d", n), f[0]
		switch len(f) {
		case 1:
		case 2:
			name, tok = f[0], f[1]
		default:
			return nil, nil, fmt.Errorf("line %d: want TOKEN or NAME TOKEN", n)
		}
		if len(tok) < minTokenLen {
			return nil, nil, fmt.Errorf("line %d: token shorter than %d characters", n, minTokenLen)
		}
		names, tokens = append(names, name), append(tokens, []byte(tok))
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if len(tokens) == 0 {
		return nil, nil, errors.New("no token in the file")
	}
	return names, tokens, nil
}

// Lookup returns the name of a token, comparing with every known token
// in constant time. A file that became unreadable keeps the tokens last
// read (and the error goes unnoticed here: the file is checked again in a
// second).
func (t *Tokens) Lookup(token string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now := time.Now(); now.Sub(t.checked) >= time.Second {
		_ = t.reload(now)
	}
	found := -1
	for i, k := range t.tokens {
		if subtle.ConstantTimeCompare(k, []byte(token)) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return t.names[found], true
}

// BearerToken is per-call credentials sending a reader token (over TLS
// only).
type BearerToken string

// GetRequestMetadata adds the authorization header.
func (b BearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity keeps the token off plaintext connections.
func (BearerToken) RequireTransportSecurity() bool { return true }
