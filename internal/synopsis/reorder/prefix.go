package reorder

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/owl-latency/owl/internal/capture"
)

// PrefixConfig says how flows are grouped: by the prefix of V4Bits (IPv4)
// or V6Bits (IPv6) of their source address, or of their destination with
// ByDestination; at most Max prefixes in a report, chosen by a Selector
// (those that showed reordering in earlier epochs, then those with the
// most packets measured; the others are summed in Other).
//
// The source is the default because a point sees the reordering that
// happened upstream of it, on the path from the sender: grouping the data
// a point receives by its senders' prefixes names the paths that reorder.
// ByDestination suits a point that sees the traffic after the paths of
// interest, towards the receivers (a point at the receivers' edge sees the
// same flows either way; only the side named changes).
type PrefixConfig struct {
	V4Bits        int  `yaml:"ipv4_bits"`
	V6Bits        int  `yaml:"ipv6_bits"`
	Max           int  `yaml:"max"`
	ByDestination bool `yaml:"by_destination"`
}

// DefaultPrefixConfig is /24 and /48 source prefixes, 64 in a report.
func DefaultPrefixConfig() PrefixConfig { return PrefixConfig{V4Bits: 24, V6Bits: 48, Max: 64} }

// MaxPrefixes bounds PrefixConfig.Max.
const MaxPrefixes = 4096

// Validate checks the bounds.
func (c PrefixConfig) Validate() error {
	if c.V4Bits < 0 || c.V4Bits > 32 || c.V6Bits < 0 || c.V6Bits > 128 {
		return fmt.Errorf("reorder prefix lengths /%d (IPv4) and /%d (IPv6) out of range", c.V4Bits, c.V6Bits)
	}
	if c.Max < 0 || c.Max > MaxPrefixes {
		return fmt.Errorf("reorder max prefixes %d out of [0, %d]", c.Max, MaxPrefixes)
	}
	return nil
}

// PrefixOf is the prefix the flow is counted in.
func (c PrefixConfig) PrefixOf(f *capture.FlowKey) netip.Prefix {
	a := f.Src
	if c.ByDestination {
		a = f.Dst
	}
	a = a.Unmap()
	bits := c.V6Bits
	if a.Is4() {
		bits = c.V4Bits
	}
	p, _ := a.Prefix(bits) // bits in range (Validate); an invalid address gives the zero prefix
	return p
}

// prefixEntry is one prefix's counts for the epoch: 80 bytes.
type prefixEntry struct {
	addr [16]byte // the prefix's address, IPv4 in its 4 first bytes
	bits uint8
	is4  bool
	// open counts the windows and long flows that will count into the
	// entry: the entry stays across epochs while they do.
	open  uint32
	stats Stats
}

func (e *prefixEntry) prefix() netip.Prefix {
	a := netip.AddrFrom16(e.addr)
	if e.is4 {
		a = netip.AddrFrom4([4]byte(e.addr[:4]))
	}
	return netip.PrefixFrom(a, int(e.bits))
}

// otherEntry is the index of the entry that counts flows whose prefix
// found no room.
const otherEntry = 0

// prefixTable holds at most cap prefixes in a dense array (entry 0 is
// Other), found through an open-addressing index of twice as many slots.
type prefixTable struct {
	entries []prefixEntry
	index   []uint32 // entry+1; 0 is a free slot
	remap   []uint32 // scratch for compact
}

// prefixIndexBytes is the index's memory per prefix: two 4-byte slots.
const prefixIndexBytes = 8

func newPrefixTable(n int) prefixTable {
	slots := 1
	for slots < 2*n {
		slots <<= 1
	}
	return prefixTable{entries: make([]prefixEntry, 1, n+1), index: make([]uint32, slots), remap: make([]uint32, n+1)}
}

// prefixHash places a prefix in the index.
func prefixHash(addr *[16]byte, bits uint8) uint64 {
	return mix(binary.BigEndian.Uint64(addr[:8])*0x9e3779b97f4a7c15 ^ mix(binary.BigEndian.Uint64(addr[8:])+uint64(bits)))
}

// lookup returns p's entry, adding it when there is room; false when the
// table is full.
func (t *prefixTable) lookup(p netip.Prefix) (uint32, bool) {
	if !p.IsValid() {
		return otherEntry, false
	}
	var addr [16]byte
	is4 := p.Addr().Is4()
	if is4 {
		a4 := p.Addr().As4()
		copy(addr[:], a4[:])
	} else {
		addr = p.Addr().As16()
	}
	bits := uint8(p.Bits())
	mask := uint64(len(t.index) - 1)
	for i := prefixHash(&addr, bits) & mask; ; i = (i + 1) & mask {
		e := t.index[i]
		if e == 0 {
			if len(t.entries) == cap(t.entries) {
				return otherEntry, false
			}
			t.entries = append(t.entries, prefixEntry{addr: addr, bits: bits, is4: is4})
			t.index[i] = uint32(len(t.entries))
			return uint32(len(t.entries) - 1), true
		}
		if x := &t.entries[e-1]; x.addr == addr && x.bits == bits && x.is4 == is4 {
			return e - 1, true
		}
	}
}

// compact starts an epoch: it keeps the entries that windows or long
// flows still point to, with their counts zeroed, and returns where each
// old entry went (otherEntry for those dropped).
func (t *prefixTable) compact() []uint32 {
	clear(t.index)
	remap := t.remap[:len(t.entries)]
	remap[otherEntry] = otherEntry
	kept := t.entries[:1] // written behind the reads: len(kept) ≤ old
	kept[0].stats = Stats{}
	mask := uint64(len(t.index) - 1)
	for old := 1; old < len(t.entries); old++ {
		e := t.entries[old]
		if e.open == 0 {
			remap[old] = otherEntry
			continue
		}
		e.stats = Stats{}
		kept = append(kept, e)
		remap[old] = uint32(len(kept) - 1)
		i := prefixHash(&e.addr, e.bits) & mask
		for t.index[i] != 0 {
			i = (i + 1) & mask
		}
		t.index[i] = uint32(len(kept))
	}
	t.entries = kept
	return remap
}
