// Package netpath defines paths: an ordered pair of observation points and a
// selector naming the packets that travel from the first to the second (LDS
// §2.1, "single stream"). The collector configures paths; probes use the
// selectors to sort packets into them.
package netpath

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
)

// Path is a configured path.
type Path struct {
	Name       string   `yaml:"name"`
	Upstream   string   `yaml:"upstream"`
	Downstream string   `yaml:"downstream"`
	Selector   Selector `yaml:"selector"`
}

// Selector names the packets of a path. Empty lists match everything.
type Selector struct {
	SrcCIDRs []string `yaml:"src_cidrs"`
	DstCIDRs []string `yaml:"dst_cidrs"`
	// Protocol is an IP protocol number or name (tcp, udp, icmp, icmpv6);
	// empty or 0 matches any.
	Protocol string   `yaml:"protocol"`
	SrcPorts []string `yaml:"src_ports"`
	DstPorts []string `yaml:"dst_ports"`
}

// Other is the path's observation point other than probe: the
// downstream one for the upstream one, else the upstream one.
func (p Path) Other(probe string) string {
	if probe == p.Upstream {
		return p.Downstream
	}
	return p.Upstream
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// ValidName reports whether s can name a path or an observation point:
// letters, digits and ._:- , at most 128 characters.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// Validate reports a malformed path.
func (p Path) Validate() error {
	if !ValidName(p.Name) {
		return fmt.Errorf("path name %q: use 1–128 letters, digits or ._:-", p.Name)
	}
	if !ValidName(p.Upstream) || !ValidName(p.Downstream) {
		return fmt.Errorf("path %q: upstream %q and downstream %q must be observation point names", p.Name, p.Upstream, p.Downstream)
	}
	if p.Upstream == p.Downstream {
		return fmt.Errorf("path %q: upstream and downstream are both %q", p.Name, p.Upstream)
	}
	if _, err := p.Selector.Compile(); err != nil {
		return fmt.Errorf("path %q: %w", p.Name, err)
	}
	return nil
}

// Matcher is a compiled selector.
type Matcher struct {
	src, dst         []netip.Prefix
	proto            uint8
	srcPort, dstPort []portRange
}

type portRange struct{ lo, hi uint16 }

var protocols = map[string]uint8{"icmp": 1, "tcp": 6, "udp": 17, "gre": 47, "esp": 50, "icmpv6": 58, "sctp": 132}

// Compile parses the selector.
func (s Selector) Compile() (*Matcher, error) {
	m := &Matcher{}
	var err error
	if m.src, err = prefixes(s.SrcCIDRs); err != nil {
		return nil, fmt.Errorf("src_cidrs: %w", err)
	}
	if m.dst, err = prefixes(s.DstCIDRs); err != nil {
		return nil, fmt.Errorf("dst_cidrs: %w", err)
	}
	if p := strings.ToLower(strings.TrimSpace(s.Protocol)); p != "" {
		if n, ok := protocols[p]; ok {
			m.proto = n
		} else if n, err := strconv.ParseUint(p, 10, 8); err == nil {
			m.proto = uint8(n)
		} else {
			return nil, fmt.Errorf("protocol %q: want a number 0–255 or one of tcp, udp, icmp, icmpv6, gre, esp, sctp", s.Protocol)
		}
	}
	if m.srcPort, err = ports(s.SrcPorts); err != nil {
		return nil, fmt.Errorf("src_ports: %w", err)
	}
	if m.dstPort, err = ports(s.DstPorts); err != nil {
		return nil, fmt.Errorf("dst_ports: %w", err)
	}
	return m, nil
}

func prefixes(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		s = strings.TrimSpace(s)
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("%q is neither a CIDR nor an address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("%q has bits set past its /%d: write %s (or %s/%d for the one address)", s, p.Bits(), p.Masked(), p.Addr(), p.Addr().BitLen())
		}
		out = append(out, p)
	}
	return out, nil
}

func ports(ss []string) ([]portRange, error) {
	var out []portRange
	for _, s := range ss {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(s), "-")
		a, err := strconv.ParseUint(lo, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("port %q: want N or N-M", s)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 16); err != nil || b < a {
				return nil, fmt.Errorf("port range %q: want N-M with N ≤ M", s)
			}
		}
		out = append(out, portRange{uint16(a), uint16(b)})
	}
	return out, nil
}

// Match reports whether a packet of flow f belongs to the path.
func (m *Matcher) Match(f capture.FlowKey) bool {
	if m.proto != 0 && f.Proto != m.proto {
		return false
	}
	return matchAddr(m.src, f.Src) && matchAddr(m.dst, f.Dst) &&
		matchPort(m.srcPort, f.SrcPort) && matchPort(m.dstPort, f.DstPort)
}

func matchAddr(ps []netip.Prefix, a netip.Addr) bool {
	if len(ps) == 0 {
		return true
	}
	a = a.Unmap()
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func matchPort(rs []portRange, p uint16) bool {
	if len(rs) == 0 {
		return true
	}
	for _, r := range rs {
		if p >= r.lo && p <= r.hi {
			return true
		}
	}
	return false
}

// ToProto converts a path to its API form.
func (p Path) ToProto() *owlv1.Path {
	return &owlv1.Path{Name: p.Name, Upstream: p.Upstream, Downstream: p.Downstream, Selector: p.Selector.ToProto()}
}

// ToProto converts a selector to its API form.
func (s Selector) ToProto() *owlv1.Selector {
	return &owlv1.Selector{SrcCidrs: s.SrcCIDRs, DstCidrs: s.DstCIDRs, Protocol: uint32(mustProto(s.Protocol)),
		SrcPorts: s.SrcPorts, DstPorts: s.DstPorts}
}

// SelectorFromProto converts and compiles an API selector.
func SelectorFromProto(s *owlv1.Selector) (Selector, error) {
	var out Selector
	if s == nil {
		return out, nil
	}
	out = Selector{SrcCIDRs: s.GetSrcCidrs(), DstCIDRs: s.GetDstCidrs(), SrcPorts: s.GetSrcPorts(), DstPorts: s.GetDstPorts()}
	if s.GetProtocol() > 255 {
		return Selector{}, fmt.Errorf("protocol %d out of range", s.GetProtocol())
	}
	if s.GetProtocol() != 0 {
		out.Protocol = strconv.Itoa(int(s.GetProtocol()))
	}
	_, err := out.Compile()
	return out, err
}

// FlowToProto converts a flow key to its API form.
func FlowToProto(f capture.FlowKey) *owlv1.FlowKey {
	return &owlv1.FlowKey{Src: f.Src.String(), Dst: f.Dst.String(), SrcPort: uint32(f.SrcPort), DstPort: uint32(f.DstPort), Protocol: uint32(f.Proto)}
}

// FlowFromProto parses an API flow key.
func FlowFromProto(f *owlv1.FlowKey) (capture.FlowKey, error) {
	var k capture.FlowKey
	if f == nil {
		return k, errors.New("no flow given")
	}
	var err error
	if k.Src, err = netip.ParseAddr(f.GetSrc()); err != nil {
		return k, fmt.Errorf("flow src: %w", err)
	}
	if k.Dst, err = netip.ParseAddr(f.GetDst()); err != nil {
		return k, fmt.Errorf("flow dst: %w", err)
	}
	if f.GetSrcPort() > 65535 || f.GetDstPort() > 65535 || f.GetProtocol() > 255 {
		return k, fmt.Errorf("flow ports %d, %d or protocol %d out of range", f.GetSrcPort(), f.GetDstPort(), f.GetProtocol())
	}
	k.SrcPort, k.DstPort, k.Proto = uint16(f.GetSrcPort()), uint16(f.GetDstPort()), uint8(f.GetProtocol())
	return k, nil
}

// AppendPackedFlow appends the packed form of a flow key (TopFlow.key):
// both addresses, 4 bytes each for IPv4 and 16 for IPv6, the ports
// big-endian and the protocol. It returns b unchanged and false for a
// flow whose addresses are of two families, which only the text form
// carries.
func AppendPackedFlow(b []byte, f capture.FlowKey) ([]byte, bool) {
	switch {
	case f.Src.Is4() && f.Dst.Is4():
		s, d := f.Src.As4(), f.Dst.As4()
		b = append(append(b, s[:]...), d[:]...)
	case f.Src.Is6() && f.Dst.Is6():
		s, d := f.Src.As16(), f.Dst.As16()
		b = append(append(b, s[:]...), d[:]...)
	default:
		return b, false
	}
	b = binary.BigEndian.AppendUint16(b, f.SrcPort)
	b = binary.BigEndian.AppendUint16(b, f.DstPort)
	return append(b, f.Proto), true
}

// packedFlowLen is the length of a packed flow key of addresses n bytes
// long.
func packedFlowLen(n int) int { return 2*n + 5 }

// PackedFlow parses the packed form of a flow key.
func PackedFlow(b []byte) (capture.FlowKey, error) {
	var k capture.FlowKey
	n := 0
	switch len(b) {
	case packedFlowLen(4):
		n = 4
	case packedFlowLen(16):
		n = 16
	default:
		return k, fmt.Errorf("packed flow key of %d bytes, want %d (IPv4) or %d (IPv6)", len(b), packedFlowLen(4), packedFlowLen(16))
	}
	k.Src, _ = netip.AddrFromSlice(b[:n])
	k.Dst, _ = netip.AddrFromSlice(b[n : 2*n])
	k.SrcPort = binary.BigEndian.Uint16(b[2*n:])
	k.DstPort = binary.BigEndian.Uint16(b[2*n+2:])
	k.Proto = b[2*n+4]
	return k, nil
}

// TopFlowKey is a top flow's key, from its packed form where it has one
// and else from its text form.
func TopFlowKey(tf *owlv1.TopFlow) (capture.FlowKey, error) {
	if b := tf.GetKey(); len(b) > 0 {
		if tf.GetFlow() != nil {
			return capture.FlowKey{}, errors.New("top flow with both a packed and a text key")
		}
		return PackedFlow(b)
	}
	return FlowFromProto(tf.GetFlow())
}

func mustProto(s string) uint8 {
	m, err := Selector{Protocol: s}.Compile()
	if err != nil {
		return 0
	}
	return m.proto
}

// FromProto converts an API path and validates it.
func FromProto(pp *owlv1.Path) (Path, error) {
	if pp == nil {
		return Path{}, errors.New("empty path")
	}
	p := Path{Name: pp.GetName(), Upstream: pp.GetUpstream(), Downstream: pp.GetDownstream()}
	sel, err := SelectorFromProto(pp.GetSelector())
	if err != nil {
		return Path{}, fmt.Errorf("path %q: %w", p.Name, err)
	}
	p.Selector = sel
	return p, p.Validate()
}
