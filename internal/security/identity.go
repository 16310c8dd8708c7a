// Package security authenticates owl's connections: TLS with client
// certificates (mTLS) whose files are re-read when they change, the roles
// a certificate or a bearer token grants, and a development CA for demos
// and tests.
//
// A certificate names its holder with one URI SAN:
//
//	owl://probe/<id>         an observation point; it may report only as <id>
//	owl://collector/<name>   a collector of the cluster named <name>
//	owl://reader/<name>      a user or tool that may only query
package security

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Role is what an authenticated peer may do.
type Role string

// The roles.
const (
	RoleProbe     Role = "probe"
	RoleCollector Role = "collector"
	RoleReader    Role = "reader"
)

// Scheme is the URI scheme of owl identities in certificates.
const Scheme = "owl"

// Identity is who an authenticated peer is.
type Identity struct {
	Role Role
	Name string
	// Via says how the peer proved it: "certificate owl://probe/a",
	// "token <name>", or "none (insecure)".
	Via string
}

// Insecure is the identity of every peer of a collector that runs
// without TLS: it may do anything.
var Insecure = Identity{Via: "none (insecure)"}

// IsInsecure says whether the identity is Insecure's.
func (id Identity) IsInsecure() bool { return id.Role == "" }

// URI is the identity URI of a role and name.
func URI(role Role, name string) *url.URL {
	return &url.URL{Scheme: Scheme, Host: string(role), Path: "/" + name}
}

// ParseURI reads an identity URI.
func ParseURI(u *url.URL) (Identity, error) {
	if u.Scheme != Scheme {
		return Identity{}, fmt.Errorf("URI %q is not an owl identity (owl://ROLE/NAME)", u)
	}
	role := Role(u.Host)
	switch role {
	case RoleProbe, RoleCollector, RoleReader:
	default:
		return Identity{}, fmt.Errorf("URI %q: role %q is none of probe, collector, reader", u, u.Host)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if name == "" || strings.Contains(name, "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return Identity{}, fmt.Errorf("URI %q: want owl://%s/NAME with one path segment", u, role)
	}
	return Identity{Role: role, Name: name, Via: "certificate " + u.String()}, nil
}

// errNoIdentity says a certificate names no owl identity.
var errNoIdentity = errors.New("the certificate has no owl:// URI SAN (owl://probe/ID, owl://collector/NAME or owl://reader/NAME)")

// FromCertificate is the identity a verified certificate names: its one
// owl:// URI SAN.
func FromCertificate(c *x509.Certificate) (Identity, error) {
	var found []Identity
	for _, u := range c.URIs {
		if u.Scheme != Scheme {
			continue
		}
		id, err := ParseURI(u)
		if err != nil {
			return Identity{}, err
		}
		found = append(found, id)
	}
	switch len(found) {
	case 0:
		return Identity{}, errNoIdentity
	case 1:
		return found[0], nil
	}
	return Identity{}, fmt.Errorf("the certificate names %d owl identities; it must name one", len(found))
}
