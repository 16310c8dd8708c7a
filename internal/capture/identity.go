package capture

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
)

// MaxPayloadBytes bounds IdentityConfig.PayloadBytes.
const MaxPayloadBytes = 1500

// maxExtBytes bounds the IPv6 extension header bytes taken into an identity.
const maxExtBytes = 256

// IdentityConfig says which bytes of a packet make its identity. Every
// observation point of a deployment must use the same settings: the collector
// rejects reports whose settings differ.
//
// The identity is a 64-bit xxh3 hash, seeded with Seed, over the bytes of the
// innermost IP packet that do not change in flight:
//   - IPv4 header with TOS (DSCP/ECN), TTL and header checksum zeroed;
//   - IPv6 fixed header with traffic class and hop limit zeroed, and the
//     extension headers that follow it except Hop-by-Hop and Routing (both may
//     be rewritten by routers), at most 256 bytes of them;
//   - TCP, UDP, ICMPv4 or ICMPv6 header with its checksum zeroed;
//   - at most PayloadBytes bytes of the transport payload (of the IP payload
//     for other protocols and for IP fragments other than the first: these
//     carry no transport header, so their identity is the IP header, which
//     holds the fragment offset, plus the first bytes of the fragment).
//
// With NATSafe the addresses, the ports and the ICMP echo identifier are
// zeroed too, so that a packet keeps its identity across a NAT (RDA §VIII).
//
// Mirror ports and fabrics wrap packets (802.1Q and QinQ tags, MPLS label
// stacks, GRE, ERSPAN type II and III, VXLAN): the identity is always that of
// the innermost IP packet, so a packet seen bare at one point and
// encapsulated at the other keeps one identity.
type IdentityConfig struct {
	// Seed is the deployment-wide hash key.
	Seed uint64 `yaml:"seed"`
	// PayloadBytes is how many transport payload bytes are hashed (default 64).
	PayloadBytes int `yaml:"payload_bytes"`
	// NATSafe leaves addresses and ports out of the identity.
	NATSafe bool `yaml:"nat_safe"`
	// FlowTag adds the innermost VLAN ID or VXLAN VNI to flow keys.
	FlowTag bool `yaml:"flow_tag"`
	// VXLANPort is a UDP port that carries VXLAN besides 4789 (Linux's
	// default without dstport is 8472); 0 for none.
	VXLANPort uint16 `yaml:"vxlan_port"`
}

// DefaultIdentityConfig returns the defaults: seed 0x6f776c (a deployment
// should pick its own), 64 payload bytes, addresses and ports included.
func DefaultIdentityConfig() IdentityConfig {
	return IdentityConfig{Seed: 0x6f776c, PayloadBytes: 64}
}

// Validate reports a setting out of range.
func (c IdentityConfig) Validate() error {
	if c.PayloadBytes < 0 || c.PayloadBytes > MaxPayloadBytes {
		return fmt.Errorf("identity payload_bytes %d out of range [0, %d]", c.PayloadBytes, MaxPayloadBytes)
	}
	return nil
}

// ErrIdentityMismatch says two identity settings differ.
var ErrIdentityMismatch = errors.New("identity settings differ")

// Compatible returns an error wrapping ErrIdentityMismatch when o would give
// different identities to the same packet.
func (c IdentityConfig) Compatible(o IdentityConfig) error {
	if c != o {
		return fmt.Errorf("%w: seed %#x payload_bytes %d nat_safe %t flow_tag %t vxlan_port %d vs seed %#x payload_bytes %d nat_safe %t flow_tag %t vxlan_port %d",
			ErrIdentityMismatch, c.Seed, c.PayloadBytes, c.NATSafe, c.FlowTag, c.VXLANPort, o.Seed, o.PayloadBytes, o.NATSafe, o.FlowTag, o.VXLANPort)
	}
	return nil
}

// scratchSize is the largest invariant byte string an identity hashes:
// IPv4 header with options (60) or IPv6 header (40) plus extensions (256),
// TCP header with options (60), payload.
func scratchSize(payloadBytes int) int { return 40 + maxExtBytes + 60 + payloadBytes }

// appendIPv4 appends an IPv4 header with its mutable fields zeroed.
func appendIPv4(b, hdr []byte, natSafe bool) []byte {
	n := len(b)
	b = append(b, hdr...)
	h := b[n:]
	h[1] = 0            // DSCP/ECN
	h[8] = 0            // TTL
	h[10], h[11] = 0, 0 // header checksum
	if natSafe {
		clear(h[12:20]) // addresses
	}
	return b
}

// appendIPv6 appends an IPv6 fixed header with its mutable fields zeroed.
func appendIPv6(b, hdr []byte, natSafe bool) []byte {
	n := len(b)
	b = append(b, hdr[:40]...)
	h := b[n:]
	h[0] &= 0xf0 // traffic class, high nibble
	h[1] &= 0x0f // traffic class, low nibble
	h[7] = 0     // hop limit
	if natSafe {
		clear(h[8:40])
	}
	return b
}

// IPv6 extension header numbers used by appendIPv6Ext.
const (
	ipv6Routing  = 43
	ipv6Fragment = 44
	ipv6AH       = 51
)

// appendIPv6Ext appends the extension headers in ext (which starts with the
// header numbered next) except Routing headers, and at most maxExtBytes of
// them. ext was validated by the decoder; should a length not add up, the rest
// of ext is taken as it is.
func appendIPv6Ext(b []byte, next uint8, ext []byte) []byte {
	taken := 0
	for len(ext) > 0 {
		if len(ext) < 2 {
			break
		}
		var size int
		switch next {
		case ipv6Fragment:
			size = 8
		case ipv6AH:
			size = (int(ext[1]) + 2) * 4
		default:
			size = (int(ext[1]) + 1) * 8
		}
		if size > len(ext) {
			break
		}
		if next != ipv6Routing {
			take := min(size, maxExtBytes-taken)
			b = append(b, ext[:take]...)
			taken += take
		}
		next, ext = ext[0], ext[size:]
	}
	take := min(len(ext), maxExtBytes-taken)
	return append(b, ext[:take]...)
}

// appendL4 appends a transport header with its checksum (at csumOff) zeroed,
// and with the ports (or, for ICMP echo, the identifier) zeroed under natSafe.
func appendL4(b, hdr []byte, csumOff int, natSafe bool, natOff, natLen int) []byte {
	n := len(b)
	b = append(b, hdr...)
	h := b[n:]
	if csumOff+2 <= len(h) {
		h[csumOff], h[csumOff+1] = 0, 0
	}
	if natSafe && natOff+natLen <= len(h) {
		clear(h[natOff : natOff+natLen])
	}
	return b
}

// BindFlags binds the settings to flags of fs (-id-seed, -payload-bytes,
// -nat-safe), with the current values as defaults.
func (c *IdentityConfig) BindFlags(fs *flag.FlagSet) {
	fs.Uint64Var(&c.Seed, "id-seed", c.Seed, "deployment-wide packet identity hash key (same on every probe)")
	fs.IntVar(&c.PayloadBytes, "payload-bytes", c.PayloadBytes, "transport payload bytes in the packet identity")
	fs.BoolVar(&c.NATSafe, "nat-safe", c.NATSafe, "leave addresses and ports out of the packet identity")
	fs.BoolVar(&c.FlowTag, "flow-tag", c.FlowTag, "add the innermost VLAN ID or VXLAN VNI to flow keys")
	fs.Var((*portFlag)(&c.VXLANPort), "vxlan-port", "UDP port that carries VXLAN besides 4789 (e.g. 8472)")
}

// portFlag is a flag.Value for a port number.
type portFlag uint16

func (p *portFlag) String() string {
	if p == nil {
		return "0"
	}
	return strconv.Itoa(int(*p))
}

func (p *portFlag) Set(s string) error {
	v, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return fmt.Errorf("%q is not a port number", s)
	}
	*p = portFlag(v)
	return nil
}
