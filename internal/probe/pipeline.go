package probe

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket/layers"
	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/params"
	"github.com/owl-latency/owl/internal/synopsis/lda"
)

// assignment is a path the probe takes part in, compiled.
type assignment struct {
	path  netpath.Path
	role  owlv1.Role
	match *netpath.Matcher
}

// pathSet is an immutable set of assignments. Each epoch keeps the set it
// was opened with, so that a new configuration applies from the next epoch.
type pathSet struct {
	paths []assignment
}

// newPathSet compiles the paths of a PathConfig message.
func newPathSet(pc *owlv1.PathConfig) (*pathSet, error) {
	s := &pathSet{}
	for _, pa := range pc.GetPaths() {
		p, err := netpath.FromProto(pa.GetPath())
		if err != nil {
			return nil, err
		}
		if pa.GetRole() != owlv1.Role_ROLE_UPSTREAM && pa.GetRole() != owlv1.Role_ROLE_DOWNSTREAM {
			return nil, fmt.Errorf("path %q: role %v", p.Name, pa.GetRole())
		}
		m, _ := p.Selector.Compile() // validated by FromProto
		s.paths = append(s.paths, assignment{path: p, role: pa.GetRole(), match: m})
	}
	return s, nil
}

// epochData holds one epoch's synopses, one per path of its set.
type epochData struct {
	set     *pathSet
	ldas    []*lda.LDA
	packets []uint64
	outside uint64 // decoded packets that matched no path
}

// counters are the probe's running totals, read by metrics.
type counters struct {
	frames, packets, outside, late atomic.Uint64
	decodeFailures                 [4]atomic.Uint64 // by capture.Reason
}

// pipeline turns frames into closed epochs of synopses. It runs on one
// goroutine (the source loop): Packet, Advance and Flush are not safe for
// concurrent use.
type pipeline struct {
	params params.Params
	dec    *capture.Decoder
	decs   map[layers.LinkType]*capture.Decoder
	window *epoch.Window[*epochData]
	paths  atomic.Pointer[pathSet] // the set new epochs use
	emit   func(*owlv1.EpochReport)
	clock  func() *owlv1.ClockStatus
	stats  *counters

	// decode failures since the last report, by reason
	failSince [4]uint64
}

func newPipeline(p params.Params, emit func(*owlv1.EpochReport), clock func() *owlv1.ClockStatus, stats *counters) (*pipeline, error) {
	pl := &pipeline{params: p, decs: map[layers.LinkType]*capture.Decoder{}, emit: emit, clock: clock, stats: stats}
	var err error
	pl.window, err = epoch.NewWindow(p.Epoch, pl.open, pl.close)
	if err != nil {
		return nil, err
	}
	pl.paths.Store(&pathSet{})
	return pl, nil
}

// setLink selects the decoder for the frames that follow.
func (pl *pipeline) setLink(link layers.LinkType) error {
	if d, ok := pl.decs[link]; ok {
		pl.dec = d
		return nil
	}
	d, err := capture.NewDecoder(link, pl.params.Identity)
	if err != nil {
		return err
	}
	pl.decs[link], pl.dec = d, d
	return nil
}

// setPaths makes the next epochs use a new path set.
func (pl *pipeline) setPaths(s *pathSet) { pl.paths.Store(s) }

func (pl *pipeline) open(int64) *epochData {
	s := pl.paths.Load()
	ed := &epochData{set: s, ldas: make([]*lda.LDA, len(s.paths)), packets: make([]uint64, len(s.paths))}
	for i := range s.paths {
		ed.ldas[i], _ = lda.New(pl.params.LDA) // validated in Config
	}
	return ed
}

// frame feeds one captured frame.
func (pl *pipeline) frame(data []byte, tsNS int64) {
	pl.stats.frames.Add(1)
	var p capture.Packet
	if err := pl.dec.Decode(data, tsNS, &p); err != nil {
		r := capture.ReasonOf(err)
		pl.failSince[r]++
		pl.stats.decodeFailures[r].Add(1)
		return
	}
	pl.stats.packets.Add(1)
	ed, off, ok := pl.window.Get(p.TimeNS)
	if !ok {
		pl.stats.late.Add(1)
		return
	}
	matched := false
	for i := range ed.set.paths {
		if ed.set.paths[i].match.Match(p.Flow) {
			ed.ldas[i].Insert(p.ID, off)
			ed.packets[i]++
			matched = true
		}
	}
	if !matched {
		ed.outside++
		pl.stats.outside.Add(1)
	}
}

// flush closes every open epoch (end of a capture file).
func (pl *pipeline) flush() { pl.window.Flush() }

// close turns a closed epoch into one report per path.
func (pl *pipeline) close(c epoch.Closed[*epochData]) {
	ed := c.Value
	failures := map[string]uint64{}
	for _, r := range capture.Reasons {
		if n := pl.failSince[r]; n > 0 {
			failures[r.String()] = n
		}
	}
	pl.failSince = [4]uint64{}
	now := time.Now().UnixNano()
	clock := pl.clock()
	for i, a := range ed.set.paths {
		b, err := ed.ldas[i].MarshalBinary()
		if err != nil {
			continue // cannot happen: MarshalBinary does not fail
		}
		pl.emit(&owlv1.EpochReport{
			Path:  a.path.Name,
			Epoch: c.Epoch,
			Role:  a.role,
			Lda:   b,
			Counters: &owlv1.Counters{
				Packets:        ed.packets[i],
				Late:           c.Late,
				DecodeFailures: failures,
				OutsidePaths:   ed.outside,
			},
			Clock:        clock,
			ClosedUnixNs: now,
		})
	}
}
