package sim

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// PrefixReorder is a reordering probability for the packets sent from one
// prefix: a path to the point that reorders some senders' traffic more
// than others'.
type PrefixReorder struct {
	Prefix netip.Prefix
	// Reorder is the probability that a packet whose source address is in
	// Prefix is held back (Impairment.Reorder, for those packets).
	Reorder float64
}

func (p PrefixReorder) String() string { return fmt.Sprintf("%v=%g", p.Prefix, p.Reorder) }

// ParsePrefixReorder reads PREFIX=PROBABILITY, e.g. "10.1.2.0/24=0.02" or
// "2001:db8::/48=0.1". An address without a length is its own prefix
// (/32 or /128); host bits are cleared.
func ParsePrefixReorder(s string) (PrefixReorder, error) {
	ps, rs, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		return PrefixReorder{}, fmt.Errorf("per-prefix reordering %q: want PREFIX=PROBABILITY, e.g. 10.1.2.0/24=0.02", s)
	}
	var p netip.Prefix
	var err error
	if strings.Contains(ps, "/") {
		p, err = netip.ParsePrefix(ps)
	} else {
		var a netip.Addr
		if a, err = netip.ParseAddr(ps); err == nil {
			p = netip.PrefixFrom(a, a.BitLen())
		}
	}
	if err != nil {
		return PrefixReorder{}, fmt.Errorf("per-prefix reordering %q: bad prefix: %w", s, err)
	}
	r, err := strconv.ParseFloat(rs, 64)
	if err != nil || !(r >= 0 && r <= 1) {
		return PrefixReorder{}, fmt.Errorf("per-prefix reordering %q: probability %q not in [0, 1]", s, rs)
	}
	return PrefixReorder{Prefix: p.Masked(), Reorder: r}, nil
}

// PrefixReorders is a flag that adds a PrefixReorder each time it is
// given.
type PrefixReorders struct{ P *[]PrefixReorder }

func (l PrefixReorders) String() string {
	if l.P == nil {
		return ""
	}
	out := make([]string, len(*l.P))
	for i, p := range *l.P {
		out[i] = p.String()
	}
	return strings.Join(out, ",")
}

// Set parses one PREFIX=PROBABILITY, or several separated by commas.
func (l PrefixReorders) Set(s string) error {
	for _, f := range strings.Split(s, ",") {
		p, err := ParsePrefixReorder(f)
		if err != nil {
			return err
		}
		*l.P = append(*l.P, p)
	}
	return nil
}

// validatePrefixReorders reports probabilities out of range, invalid
// prefixes and a prefix given twice.
func validatePrefixReorders(ps []PrefixReorder) error {
	seen := map[netip.Prefix]bool{}
	for _, p := range ps {
		switch {
		case !p.Prefix.IsValid():
			return fmt.Errorf("per-prefix reordering %v: invalid prefix", p)
		case !(p.Reorder >= 0 && p.Reorder <= 1):
			return fmt.Errorf("per-prefix reordering %v: probability out of [0, 1]", p)
		case seen[p.Prefix.Masked()]:
			return fmt.Errorf("per-prefix reordering: %v given twice", p.Prefix)
		}
		seen[p.Prefix.Masked()] = true
	}
	return nil
}

// ReorderOf is the probability that a packet from src is held back: that
// of the longest of ps that holds src, else def.
func ReorderOf(ps []PrefixReorder, src netip.Addr, def float64) float64 {
	src = src.Unmap()
	best := -1
	for _, p := range ps {
		if p.Prefix.Bits() > best && p.Prefix.Contains(src) {
			best, def = p.Prefix.Bits(), p.Reorder
		}
	}
	return def
}
