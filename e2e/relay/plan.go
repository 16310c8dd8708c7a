package main

import (
	"hash/maphash"
	"math/rand/v2"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/sim"
)

// flowSlots is how many flows' last due times a planner keeps for
// -flow-order: flows whose hashes share a slot share an order, which only
// makes them more orderly.
const flowSlots = 4096

// planner draws what happens to each frame a → b. Not safe for concurrent
// use: one goroutine reads the frames.
type planner struct {
	imp       sim.Impairment
	flowOrder bool
	rnd       *rand.Rand
	dec       *capture.Decoder // for the source address and the flow
	pkt       capture.Packet
	seed      maphash.Seed
	flowDue   []time.Time // by flow hash: when its last frame not held back falls due
}

// newPlanner returns a planner of cfg's impairments.
func newPlanner(cfg config) (*planner, error) {
	dec, err := capture.NewDecoder(layers.LinkTypeEthernet, capture.DefaultIdentityConfig())
	if err != nil {
		return nil, err
	}
	p := &planner{imp: cfg.imp, flowOrder: cfg.flowOrder, rnd: rand.New(rand.NewPCG(cfg.imp.Seed, 0x72656c6179)),
		dec: dec, seed: maphash.MakeSeed()}
	if cfg.flowOrder {
		p.flowDue = make([]time.Time, flowSlots)
	}
	return p, nil
}

// plan says when a frame that arrived at now leaves: never (dropped: no
// time), once, or twice (duplicated), in due[:n]. Frames leave in order
// of their due times, so a frame due earlier than one before it
// overtakes it.
func (p *planner) plan(frame []byte, now time.Time, due *[2]time.Time) (n int) {
	if p.rnd.Float64() < p.imp.Loss {
		return 0
	}
	at := now.Add(time.Duration(p.imp.Delay.SampleNS(p.rnd)))
	decoded := (len(p.imp.PrefixReorder) > 0 || p.flowOrder) && p.dec.Decode(frame, now.UnixNano(), &p.pkt) == nil
	reorder := p.imp.Reorder
	if decoded {
		reorder = sim.ReorderOf(p.imp.PrefixReorder, p.pkt.Flow.Src, reorder)
	}
	switch {
	case reorder > 0 && p.rnd.Float64() < reorder:
		at = at.Add(time.Duration(1 + p.rnd.Int64N(int64(p.imp.ReorderExtra))))
	case p.flowOrder && decoded:
		last := &p.flowDue[maphash.Comparable(p.seed, p.pkt.Flow)%flowSlots]
		if at.Before(*last) {
			at = *last
		}
		*last = at
	}
	due[0], n = at, 1
	if p.imp.Duplicate > 0 && p.rnd.Float64() < p.imp.Duplicate {
		due[1], n = at.Add(time.Duration(1+p.rnd.Int64N(int64(p.imp.DuplicateGap)))), 2
	}
	return n
}
