package probe

import (
	"github.com/owl-latency/owl/internal/synopsis/exact"
)

// minListBytes is the least a listed packet costs on the wire (its ID's
// difference, time and flow index): a cache longer than the synopses'
// bytes over this is not worth listing.
const minListBytes = 10

// exactList returns the wire form of an epoch's exact list of a path's
// packets, when the probe ships lists and the list is at most
// synopsesBytes, the synopses it would replace (half of them when reports
// travel gzipped: the synopses' empty cells compress where a list of
// random IDs and times hardly does; at 10,000 packets a list of 0.92 of
// the synopses' raw bytes came out 1.13 times their gzipped bytes,
// BenchmarkReportBytes); nil otherwise. A list
// needs every packet of the epoch (a complete cache) and an RDA to
// replace (the collector rebuilds LDA, RDA and LDS from it, and samples
// the whole list).
func (r *reporter) exactList(c *epochCache, hasRDA bool, synopsesBytes int) []byte {
	if r.gzipped {
		synopsesBytes /= 2
	}
	if !r.exactLists || !hasRDA || !c.complete || c.len() > exact.MaxPackets || c.len()*minListBytes > synopsesBytes {
		return nil
	}
	l := &exact.List{Packets: make([]exact.Packet, 0, c.len())}
	c.each(func(e entry) {
		l.Packets = append(l.Packets, exact.Packet{ID: e.id, OffsetNS: e.offsetNS(), Flow: e.flow, Weight: uint64(e.weight())})
	})
	b, err := l.MarshalBinary()
	if err != nil || len(b) > synopsesBytes {
		return nil
	}
	return b
}
