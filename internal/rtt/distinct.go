package rtt

import (
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
)

// distinctBits is the log2 of distinct's registers: 1,024 registers of a
// byte, a standard error of 3.3% (exact to a few prefixes while fewer than
// a few hundred).
const distinctBits = 10

// distinct counts distinct prefixes in a fixed memory (HyperLogLog, with
// linear counting while few registers are set), so that a scan of many
// responders folded into "other" costs a kilobyte, not an entry each.
// The zero value is empty; two merge by taking each register's maximum.
type distinct struct {
	reg [1 << distinctBits]uint8
}

// add counts p.
func (d *distinct) add(p netip.Prefix) {
	b := p.Addr().As16()
	h := mix(mix(binary.BigEndian.Uint64(b[:8])^0x9e3779b97f4a7c15) ^ binary.BigEndian.Uint64(b[8:]) ^ uint64(p.Bits()))
	i := h >> (64 - distinctBits)
	rank := uint8(bits.LeadingZeros64(h<<distinctBits|1<<(distinctBits-1)) + 1)
	d.reg[i] = max(d.reg[i], rank)
}

// merge adds o's prefixes.
func (d *distinct) merge(o *distinct) {
	for i, r := range o.reg {
		d.reg[i] = max(d.reg[i], r)
	}
}

// count estimates the number of distinct prefixes added.
func (d *distinct) count() uint64 {
	const m = float64(len(d.reg))
	sum, zeros := 0.0, 0
	for _, r := range d.reg {
		sum += math.Ldexp(1, -int(r))
		if r == 0 {
			zeros++
		}
	}
	if zeros == len(d.reg) {
		return 0
	}
	e := 0.7213 / (1 + 1.079/m) * m * m / sum
	if e <= 2.5*m && zeros > 0 {
		e = m * math.Log(m/float64(zeros))
	}
	return uint64(math.Round(e))
}
