package sim

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/owl-latency/owl/internal/capture"
)

// Frame is a captured frame that owns its bytes.
type Frame struct {
	Data    []byte
	TimeNS  int64
	WireLen int
}

// Impairment says what happens to packets between the two observation points.
type Impairment struct {
	// Delay draws each packet's one-way delay.
	Delay DelayModel
	// Loss is the probability that a packet is lost.
	Loss float64
	// Reorder is the probability that a packet is held back by an extra
	// delay, uniform in (0, ReorderExtra], so that later packets overtake it.
	Reorder      float64
	ReorderExtra time.Duration
	// PrefixReorder, for the packets whose source address is in one of its
	// prefixes (the longest that holds it), takes the place of Reorder: a
	// path that reorders some senders' traffic more than others'.
	PrefixReorder []PrefixReorder
	// Duplicate is the probability that a delivered packet arrives twice;
	// the copy comes up to DuplicateGap later.
	Duplicate    float64
	DuplicateGap time.Duration
	// DownClockOffset is added to every downstream timestamp and not to the
	// ground truth: the downstream clock's error.
	DownClockOffset time.Duration
	// FlowDelay, when set, adds to every packet of a flow one extra delay
	// drawn once per flow, so that flows differ (different routes or
	// queues), as per-flow estimators must tell apart.
	FlowDelay DelayModel
	// Seed makes the draws repeatable.
	Seed uint64
}

// Validate reports probabilities out of range or a missing delay model.
func (m Impairment) Validate() error {
	if m.Delay == nil {
		return errors.New("impairment needs a delay model")
	}
	for _, p := range []struct {
		name string
		v    float64
	}{{"loss", m.Loss}, {"reorder", m.Reorder}, {"duplicate", m.Duplicate}} {
		if p.v < 0 || p.v > 1 {
			return fmt.Errorf("impairment %s probability %g out of [0, 1]", p.name, p.v)
		}
	}
	if err := validatePrefixReorders(m.PrefixReorder); err != nil {
		return err
	}
	if m.reorders() && m.ReorderExtra <= 0 {
		return errors.New("impairment reorder needs a positive reorder extra delay")
	}
	if m.ReorderExtra < 0 || m.DuplicateGap < 0 {
		return errors.New("impairment delays must not be negative")
	}
	return nil
}

// reorders says whether any packet may be held back.
func (m Impairment) reorders() bool {
	if m.Reorder > 0 {
		return true
	}
	for _, p := range m.PrefixReorder {
		if p.Reorder > 0 {
			return true
		}
	}
	return false
}

// Record is the ground truth of one IP packet of the input.
type Record struct {
	// Frame is the packet's 1-based index in the input capture.
	Frame int
	ID    uint64
	Flow  capture.FlowKey
	// UpNS is when the upstream point saw the packet.
	UpNS int64
	// DownNS is when the first copy reached the downstream point, by the
	// true clock (without DownClockOffset). Meaningless when Lost.
	DownNS int64
	Lost   bool
	// Copies is how many copies the downstream point saw (0 when lost).
	Copies int
}

// DelayNS is the packet's one-way delay.
func (r Record) DelayNS() int64 { return r.DownNS - r.UpNS }

// Trace is the output of Impair: what each point recorded and the truth.
type Trace struct {
	Link     layers.LinkType
	Up, Down []Frame
	Truth    []Record
	// NonIP counts frames without an IP packet: they pass with the delay
	// model's delay and are not in Truth.
	NonIP int
	// DownClockOffsetNS is the offset the downstream timestamps carry.
	DownClockOffsetNS int64
}

// Impair sends the frames of a single-point capture across a simulated path.
// The upstream capture holds the input frames as they are; the downstream one
// holds the frames that survive, one hop older (IPv4 TTL and checksum, IPv6
// hop limit rewritten, as a router would), at their arrival times, in time
// order.
func Impair(link layers.LinkType, in []Frame, id capture.IdentityConfig, m Impairment) (*Trace, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	dec, err := capture.NewDecoder(link, id)
	if err != nil {
		return nil, err
	}
	r := rand.New(rand.NewPCG(m.Seed, 0x6f776c73696d))
	t := &Trace{Link: link, Up: in, DownClockOffsetNS: int64(m.DownClockOffset)}
	type arrival struct {
		f   Frame
		seq int
	}
	var down []arrival
	deliver := func(f Frame, atNS int64) {
		data := slices.Clone(f.Data)
		ageOneHop(link, data)
		down = append(down, arrival{Frame{Data: data, TimeNS: atNS + int64(m.DownClockOffset), WireLen: f.WireLen}, len(down)})
	}
	flowExtra := map[capture.FlowKey]int64{}
	for i, f := range in {
		var p capture.Packet
		if err := dec.Decode(f.Data, f.TimeNS, &p); err != nil {
			t.NonIP++
			deliver(f, f.TimeNS+m.Delay.SampleNS(r))
			continue
		}
		rec := Record{Frame: i + 1, ID: p.ID, Flow: p.Flow, UpNS: f.TimeNS}
		if r.Float64() < m.Loss {
			rec.Lost = true
			t.Truth = append(t.Truth, rec)
			continue
		}
		d := m.Delay.SampleNS(r)
		if m.FlowDelay != nil {
			x, ok := flowExtra[p.Flow]
			if !ok {
				x = m.FlowDelay.SampleNS(r)
				flowExtra[p.Flow] = x
			}
			d += x
		}
		reorder := m.Reorder
		if len(m.PrefixReorder) > 0 {
			reorder = ReorderOf(m.PrefixReorder, p.Flow.Src, m.Reorder)
		}
		if reorder > 0 && r.Float64() < reorder {
			d += 1 + r.Int64N(int64(m.ReorderExtra))
		}
		rec.DownNS = f.TimeNS + d
		rec.Copies = 1
		deliver(f, rec.DownNS)
		if m.Duplicate > 0 && r.Float64() < m.Duplicate {
			rec.Copies = 2
			gap := int64(1)
			if m.DuplicateGap > 0 {
				gap += r.Int64N(int64(m.DuplicateGap))
			}
			deliver(f, rec.DownNS+gap)
		}
		t.Truth = append(t.Truth, rec)
	}
	slices.SortFunc(down, func(a, b arrival) int {
		return cmp.Or(cmp.Compare(a.f.TimeNS, b.f.TimeNS), cmp.Compare(a.seq, b.seq))
	})
	t.Down = make([]Frame, len(down))
	for i, a := range down {
		t.Down[i] = a.f
	}
	return t, nil
}

// ageOneHop does to an IP packet what a router does: IPv4 TTL minus one with
// the header checksum recomputed, IPv6 hop limit minus one. Frames of other
// link types or without IP are left alone.
func ageOneHop(link layers.LinkType, frame []byte) {
	off := ipOffset(link, frame)
	if off < 0 || off >= len(frame) {
		return
	}
	ip := frame[off:]
	switch ip[0] >> 4 {
	case 4:
		ihl := int(ip[0]&0x0f) * 4
		if ihl < 20 || len(ip) < ihl {
			return
		}
		if ip[8] > 1 {
			ip[8]--
		}
		ip[10], ip[11] = 0, 0
		binary.BigEndian.PutUint16(ip[10:12], gopacket.FoldChecksum(gopacket.ComputeChecksum(ip[:ihl], 0)))
	case 6:
		if len(ip) >= 40 && ip[7] > 1 {
			ip[7]--
		}
	}
}

// ipOffset returns where the IP header starts in a frame, or −1.
func ipOffset(link layers.LinkType, frame []byte) int {
	switch link {
	case layers.LinkTypeEthernet:
		off := 12
		for off+2 <= len(frame) {
			et := binary.BigEndian.Uint16(frame[off:])
			switch et {
			case 0x8100, 0x88a8, 0x9100: // VLAN tags
				off += 4
			case 0x0800, 0x86dd:
				return off + 2
			default:
				return -1
			}
		}
		return -1
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6:
		return 0
	case layers.LinkTypeLinuxSLL:
		return 16
	case layers.LinkTypeLinuxSLL2:
		return 20
	case layers.LinkTypeNull, layers.LinkTypeLoop:
		return 4
	}
	return -1
}

// ReadCapture loads every frame of a capture file into memory.
func ReadCapture(path string) (layers.LinkType, []Frame, error) {
	src, err := capture.OpenFile(path)
	if err != nil {
		return 0, nil, err
	}
	defer src.Close()
	var out []Frame
	for {
		f, err := src.Next()
		if err == io.EOF {
			return src.LinkType(), out, nil
		}
		if err != nil {
			return 0, nil, err
		}
		out = append(out, Frame{Data: slices.Clone(f.Data), TimeNS: f.TimeNS, WireLen: src.WireLen()})
	}
}
