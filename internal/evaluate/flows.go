package evaluate

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"

	"github.com/gopacket/gopacket/layers"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/lds"
	"github.com/owl-latency/owl/internal/synopsis/rap"
)

// FlowSide is what one observation point built for per-flow estimates.
type FlowSide struct {
	LDS map[int64]*lds.LDS
	RAP map[int64]*rap.Table[capture.FlowKey]
}

// BuildFlows decodes frames and folds them into one LDS and one RAP table
// (of rapSize counters) per epoch.
func BuildFlows(link layers.LinkType, frames []sim.Frame, id capture.IdentityConfig, ep epoch.Config, cfg lds.Config, rapSize int) (*FlowSide, error) {
	dec, err := capture.NewDecoder(link, id)
	if err != nil {
		return nil, err
	}
	if _, err := lds.New(cfg); err != nil {
		return nil, err
	}
	type both struct {
		l *lds.LDS
		r *rap.Table[capture.FlowKey]
	}
	s := &FlowSide{LDS: map[int64]*lds.LDS{}, RAP: map[int64]*rap.Table[capture.FlowKey]{}}
	w, err := epoch.NewWindow(ep, func(e int64) both {
		l, _ := lds.New(cfg)
		return both{l, rap.New[capture.FlowKey](rapSize, uint64(e))}
	}, func(c epoch.Closed[both]) {
		s.LDS[c.Epoch], s.RAP[c.Epoch] = c.Value.l, c.Value.r
	})
	if err != nil {
		return nil, err
	}
	foldFrames(dec, frames, w, func(v both, off int64, p *capture.Packet) {
		fh := p.Flow.Hash(cfg.Seed)
		v.l.Insert(fh, p.ID, off, 1)
		v.r.Add(fh, &p.Flow)
	}, nil)
	return s, nil
}

// FlowRow is one flow's estimate beside its truth.
type FlowRow struct {
	Truth *sim.FlowTruth
	Est   lds.FlowEstimate
	Err   error
}

// RelErr is the relative error of the flow's mean.
func (r FlowRow) RelErr() float64 { return relErr(r.Est.MeanNS, r.Truth.MeanNS) }

// CompareFlows estimates every flow of the truth that delivered at least
// minPackets packets within its epoch.
func CompareFlows(up, down *FlowSide, truths map[int64]map[capture.FlowKey]*sim.FlowTruth, seed uint64, opts lds.Options, minPackets int) []FlowRow {
	var rows []FlowRow
	for e, flows := range truths {
		a, b := up.LDS[e], down.LDS[e]
		if a == nil || b == nil {
			continue
		}
		for _, ft := range flows {
			if ft.SameEpoch < minPackets {
				continue
			}
			est, err := lds.EstimateFlow(a, b, ft.Flow.Hash(seed), 1, opts)
			rows = append(rows, FlowRow{Truth: ft, Est: est, Err: err})
		}
	}
	return rows
}

// SizeBin is a range of flow sizes, [Lo, Hi).
type SizeBin struct{ Lo, Hi int }

// DefaultBins are the paper's flow-size bins (Fig. 10).
var DefaultBins = []SizeBin{{100, 500}, {500, 1000}, {1000, 5000}, {5000, math.MaxInt}}

// BinStats summarises the relative errors of the flows in a size bin.
type BinStats struct {
	Bin               SizeBin
	Flows, NoEstimate int
	Median, P95       float64
}

// Bin groups rows by their flow's delivered packets.
func Bin(rows []FlowRow, bins []SizeBin) []BinStats {
	out := make([]BinStats, len(bins))
	for i, b := range bins {
		out[i].Bin = b
		var errs []float64
		for _, r := range rows {
			n := r.Truth.SameEpoch
			if n < b.Lo || n >= b.Hi {
				continue
			}
			out[i].Flows++
			if r.Err != nil {
				out[i].NoEstimate++
				errs = append(errs, 1) // as the paper: a flow without estimate counts as error 1
				continue
			}
			errs = append(errs, r.RelErr())
		}
		if len(errs) > 0 {
			slices.Sort(errs)
			out[i].Median = errs[len(errs)/2]
			out[i].P95 = errs[min(len(errs)-1, len(errs)*95/100)]
		}
	}
	return out
}

// WriteBins prints bin statistics.
func WriteBins(w io.Writer, title string, bins []BinStats) error {
	fmt.Fprintln(w, title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "flow packets\tflows\tno estimate\tmedian rel. err\tp95 rel. err\t")
	for _, b := range bins {
		hi := fmt.Sprint(b.Bin.Hi - 1)
		if b.Bin.Hi == math.MaxInt {
			hi = "…"
		}
		fmt.Fprintf(tw, "%d–%s\t%d\t%d\t%.3f%%\t%.3f%%\t\n", b.Bin.Lo, hi, b.Flows, b.NoEstimate, 100*b.Median, 100*b.P95)
	}
	return tw.Flush()
}
