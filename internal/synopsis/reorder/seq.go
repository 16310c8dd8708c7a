package reorder

import "github.com/owl-latency/owl/internal/capture"

// verdict is what a segment is to its flow.
type verdict uint8

const (
	// ignored: the segment ends before the first byte a window saw, so
	// the window cannot tell what it is; it is not counted.
	ignored verdict = iota
	inOrder
	reordered
	retransmitted
)

// segment is the part of a TCP packet's sequence space the definitions
// look at.
type segment struct {
	seq, span uint32
	syn, fin  bool
}

// segmentOf returns p's segment when p is a TCP packet that takes
// sequence space (data, SYN or FIN) and is not a RST. Pure ACKs do not
// move the sequence number, so they are neither in order nor out of it.
func segmentOf(p *capture.Packet) (segment, bool) {
	l4 := &p.L4
	if p.Flow.Proto != protoTCP || l4.TCPFlags&capture.TCPRst != 0 || l4.PayloadLen < 0 {
		return segment{}, false
	}
	s := segment{seq: l4.Seq, span: uint32(min(l4.PayloadLen, 1<<30)), syn: l4.TCPFlags&capture.TCPSyn != 0, fin: l4.TCPFlags&capture.TCPFin != 0}
	if s.syn {
		s.span++
	}
	if s.fin {
		s.span++
	}
	return s, s.span > 0
}

// protoTCP is TCP's IP protocol number.
const protoTCP = 6

// isRST says whether p is a TCP reset, which ends its flow.
func isRST(p *capture.Packet) bool {
	return p.Flow.Proto == protoTCP && p.L4.TCPFlags&capture.TCPRst != 0
}

// before is serial-number order (RFC 1982) on 32-bit sequence numbers.
func before(a, b uint32) bool { return int32(a-b) < 0 }

// seqState is what a window or a long flow keeps of one direction's
// sequence space: 28 bytes. Where the exact tracker remembers every byte
// range it has seen, it remembers the highest byte and one range that
// may still hold bytes not seen (every gap opened since the range was
// last empty, widened to cover them all) with the number of its bytes
// still missing.
type seqState struct {
	base    uint32 // first sequence number of the first segment seen
	next    uint32 // one past the highest byte seen
	last    uint32 // first sequence number of the predecessor
	holeLo  uint32 // [holeLo, holeHi) holds the bytes not seen yet
	holeHi  uint32
	missing uint32 // bytes of the hole not seen yet; 0: no hole
	started bool
}

// observe classifies a segment by the definitions (see the package
// comment) and updates the state.
func (s *seqState) observe(g segment) verdict {
	end := g.seq + g.span
	if !s.started {
		*s = seqState{started: true, base: g.seq, next: end, last: g.seq}
		return inOrder
	}
	if !before(g.seq, s.next) { // new bytes at or past the highest: in order
		if g.seq != s.next {
			s.openHole(s.next, g.seq)
		}
		s.next, s.last = end, g.seq
		return inOrder
	}
	if !before(s.base, end) { // wholly before the first byte seen
		return ignored
	}
	filled := s.fill(g.seq, end)
	if !filled && !before(s.next, end) {
		return retransmitted
	}
	v := inOrder
	if before(g.seq, s.last) {
		v = reordered
	}
	s.last = g.seq
	if before(s.next, end) {
		s.next = end
	}
	return v
}

// openHole records the gap [lo, hi) that a segment past the highest byte
// left. Gaps open at the highest byte, so an open hole lies below lo and
// is widened up to hi.
func (s *seqState) openHole(lo, hi uint32) {
	gap := hi - lo
	if s.missing == 0 {
		s.holeLo, s.holeHi, s.missing = lo, hi, gap
		return
	}
	s.holeHi = hi
	s.missing = uint32(min(uint64(s.missing)+uint64(gap), 1<<31))
}

// fill takes [lo, hi) out of the hole and says whether it held any of it.
func (s *seqState) fill(lo, hi uint32) bool {
	if s.missing == 0 {
		return false
	}
	if before(lo, s.holeLo) {
		lo = s.holeLo
	}
	if before(s.holeHi, hi) {
		hi = s.holeHi
	}
	if !before(lo, hi) {
		return false
	}
	n := hi - lo
	switch {
	case n >= s.missing:
		s.missing = 0
		return true
	case lo == s.holeLo:
		s.holeLo = hi
	case hi == s.holeHi:
		s.holeHi = lo
	}
	s.missing -= n
	if !before(s.holeLo, s.holeHi) {
		s.missing = 0
	}
	return true
}

// restarts says whether g opens a new connection on the same 5-tuple: a
// SYN whose sequence number is not the one the flow started with.
func (s *seqState) restarts(g segment) bool {
	return s.started && g.syn && g.seq != s.base
}

// flowHash is a flow direction's hash under seed: each 64-bit half of the
// two addresses, a word of the ports and protocol and the tag are
// multiplied by their own odd constant, summed with the seed and mixed (the splitmix64
// finalizer). Cheaper than hashing the key's bytes; 0 is never returned,
// so that 0 marks a free slot.
func flowHash(f *capture.FlowKey, seed uint64) uint64 {
	sh, sl := capture.AddrWords(f.Src)
	dh, dl := capture.AddrWords(f.Dst)
	ends := uint64(f.SrcPort)<<48 | uint64(f.DstPort)<<32 | uint64(f.Proto)
	h := seed + sh*0x9e3779b97f4a7c15 + sl*0xc2b2ae3d27d4eb4f + dh*0x165667b19e3779f9 + dl*0xd6e8feb86659fd93 +
		ends*0xff51afd7ed558ccd + uint64(f.Tag)*0xc4ceb9fe1a85ec53
	return mix(h) | 1
}

// mix is the splitmix64 finalizer.
func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
