// Package exact is an epoch's exact list of packets: every packet a probe
// saw on a path in one epoch, with its identity, time, and flow. A probe
// ships it in place of its synopses when it is the smaller of the two
// (quiet paths: the fixed-size LDA, RDA and LDS cost far more than listing
// a few hundred packets), and the collector rebuilds from it exactly the
// synopses the probe would have sent, so that the rest of reconciliation is
// the same whatever a side shipped.
package exact

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/owl-latency/owl/internal/synopsis"
)

// MaxPackets bounds a list: a probe sends a list only when it is smaller
// than its synopses, far below this.
const MaxPackets = 1 << 17

// MaxWeight bounds a flow's weight (the LDS's own bound).
const MaxWeight = 1 << 16

// Packet is one packet of the list: its identity, its time from the
// epoch's start, and its flow's LDS hash and weight.
type Packet struct {
	ID       uint64
	OffsetNS int64
	Flow     uint64
	Weight   uint64
}

// List is one side's exact list of one path and epoch.
type List struct {
	// Packets by ID, then time (MarshalBinary sorts them).
	Packets []Packet
}

const version = 1

// sortPackets orders by ID, then time.
func sortPackets(ps []Packet) {
	synopsis.SortByKey(ps, func(p Packet) uint64 { return p.ID }, func(a, b Packet) int {
		return cmp.Compare(a.OffsetNS, b.OffsetNS)
	})
}

// MarshalBinary is the wire form, after sorting the packets:
//
//	envelope (kind 'X', version 1) | flows (uvarint) | per flow: hash
//	(8 LE), weight (uvarint) |
//	packets (uvarint) | per packet by ID: the first ID whole (8 LE), the
//	others as differences (uvarint), offset (varint), flow index (uvarint)
//
// Flows are numbered in the order their first packet comes by ID.
func (l *List) MarshalBinary() ([]byte, error) {
	if len(l.Packets) > MaxPackets {
		return nil, fmt.Errorf("%d packets exceed the list's limit %d", len(l.Packets), MaxPackets)
	}
	sortPackets(l.Packets)
	type flow struct{ hash, weight uint64 }
	index := make(map[flow]uint64)
	var flows []flow
	idx := make([]uint64, len(l.Packets))
	for i, p := range l.Packets {
		f := flow{p.Flow, p.Weight}
		n, ok := index[f]
		if !ok {
			n = uint64(len(flows))
			index[f] = n
			flows = append(flows, f)
		}
		idx[i] = n
	}
	b := synopsis.AppendHeader(make([]byte, 0, 32+10*len(flows)+16*len(l.Packets)), synopsis.KindList, version)
	b = binary.AppendUvarint(b, uint64(len(flows)))
	for _, f := range flows {
		b = binary.LittleEndian.AppendUint64(b, f.hash)
		b = binary.AppendUvarint(b, f.weight)
	}
	b = binary.AppendUvarint(b, uint64(len(l.Packets)))
	for i, p := range l.Packets {
		if i == 0 {
			b = binary.LittleEndian.AppendUint64(b, p.ID)
		} else {
			b = binary.AppendUvarint(b, p.ID-l.Packets[i-1].ID)
		}
		b = binary.AppendVarint(b, p.OffsetNS)
		b = binary.AppendUvarint(b, idx[i])
	}
	return b, nil
}

// Decode parses a wire form, rejecting truncated, oversized, unsorted or
// trailing input and out-of-range weights and flow indices with an error
// wrapping synopsis.ErrFormat.
func Decode(b []byte) (*List, error) {
	r, err := synopsis.NewReader(b, synopsis.KindList, version)
	if err != nil {
		return nil, err
	}
	l := &List{}
	// A flow takes at least 9 bytes, a packet at least 3 (the first 10):
	// check before allocating.
	nf := r.Uvarint("flows", min(uint64(r.Remaining()/9), MaxPackets))
	if !r.Need("flows", 9*int(nf)) {
		return nil, r.Err()
	}
	flows := make([]Packet, nf)
	for i := range flows {
		flows[i].Flow = r.Uint64("flow hash")
		flows[i].Weight = r.Uvarint("flow weight", MaxWeight)
		if r.Err() == nil && flows[i].Weight == 0 {
			r.Fail("flow weight", "must be at least 1")
		}
	}
	np := r.Uvarint("packets", min(uint64(r.Remaining()/3), MaxPackets))
	if r.Err() != nil {
		return nil, r.Err()
	}
	if np > 0 && nf == 0 {
		r.Fail("flows", "packets without flows")
		return nil, r.Err()
	}
	l.Packets = make([]Packet, 0, np)
	var id uint64
	for i := range np {
		if i == 0 {
			id = r.Uint64("first id")
		} else {
			d := r.Uvarint("id difference", math.MaxUint64-id)
			id += d
		}
		off := r.Varint("offset")
		f := r.Uvarint("flow index", nf-1)
		if r.Err() != nil {
			return nil, r.Err()
		}
		if i > 0 {
			if last := l.Packets[i-1]; last.ID == id && last.OffsetNS > off {
				r.Fail("offset", "copies of an id out of time order")
				return nil, r.Err()
			}
		}
		l.Packets = append(l.Packets, Packet{ID: id, OffsetNS: off, Flow: flows[f].Flow, Weight: flows[f].Weight})
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	return l, nil
}
