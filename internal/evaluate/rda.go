package evaluate

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/gopacket/gopacket/layers"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/reconcile"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// Packets is what one observation point's cache holds of a capture: its
// packets per epoch, as (ID, offset in the epoch).
type Packets map[int64][]reconcile.Packet

// BuildPackets decodes frames into packets per epoch, on the same epoch
// grid (and with the same late packets left out) as a probe.
func BuildPackets(link layers.LinkType, frames []sim.Frame, id capture.IdentityConfig, ep epoch.Config) (Packets, error) {
	dec, err := capture.NewDecoder(link, id)
	if err != nil {
		return nil, err
	}
	out := Packets{}
	w, err := epoch.NewWindow(ep, func(int64) *[]reconcile.Packet { return new([]reconcile.Packet) },
		func(c epoch.Closed[*[]reconcile.Packet]) { out[c.Epoch] = *c.Value })
	if err != nil {
		return nil, err
	}
	foldFrames(dec, frames, w, func(l *[]reconcile.Packet, off int64, p *capture.Packet) {
		*l = append(*l, reconcile.Packet{ID: p.ID, Entry: reconcile.Entry{OffsetNS: off, Flow: p.Flow.Hash(FlowSeed)}})
	}, nil)
	return out, nil
}

// FlowSeed is the seed of the flow hashes BuildPackets gives packets.
const FlowSeed = 0xf10

// BoundaryCopies is, per epoch, what a probe that saw packets p would
// report as its boundary copies: the packets of the epoch's first copy
// window (epoch.Config.CopyWindow) it also saw in the last of the epoch
// before.
func BoundaryCopies(p Packets, ep epoch.Config) map[int64][]uint64 {
	w, l := int64(ep.CopyWindow()), int64(ep.Length)
	out := map[int64][]uint64{}
	for e, pkts := range p {
		before := p[e-1]
		if len(before) == 0 || w == 0 {
			continue
		}
		tail := map[uint64]bool{}
		for _, q := range before {
			if q.OffsetNS >= l-w {
				tail[q.ID] = true
			}
		}
		for _, q := range pkts {
			if q.OffsetNS < w && tail[q.ID] {
				out[e] = append(out[e], q.ID)
			}
		}
	}
	return out
}

// RDAConfig is how the offline evaluator sizes RDAs: the probes' RDA
// (hashing and first size) and the collector's limits.
type RDAConfig struct {
	RDA    rda.Config
	Limits reconcile.Limits
}

// RDARow sets one epoch's outcome of the production reconciliation policy
// beside its truth.
type RDARow struct {
	Truth sim.EpochTruth
	Out   reconcile.Outcome
	Err   error
}

// MeanRelErr is the relative error of the mean against the packets
// delivered within the epoch.
func (r RDARow) MeanRelErr() float64 { return relErr(r.Out.Estimate.MeanNS, r.Truth.MeanNS) }

// StddevRelErr is the relative error of the standard deviation.
func (r RDARow) StddevRelErr() float64 { return relErr(r.Out.Estimate.StddevNS, r.Truth.StddevNS) }

// CompareRDA reconciles every epoch of the truth that both sides saw with
// reconcile.Epoch, the collector's policy, answering its repairs from the
// packets in memory (reconcile.Local) as the probes' caches would, and
// given both sides' boundary copies on the grid ep.
func CompareRDA(ctx context.Context, up, down Packets, truths []sim.EpochTruth, ep epoch.Config, cfg RDAConfig) ([]RDARow, error) {
	upCopies, downCopies := BoundaryCopies(up, ep), BoundaryCopies(down, ep)
	var rows []RDARow
	for _, t := range truths {
		a, b := up[t.Epoch], down[t.Epoch]
		if a == nil || b == nil {
			continue
		}
		l := &reconcile.Local{Packets: [2][]reconcile.Packet{a, b}, RDA: cfg.RDA}
		ru, err := l.Rebuild(ctx, reconcile.Upstream, cfg.RDA.Buckets)
		if err != nil {
			return nil, err
		}
		rd, _ := l.Rebuild(ctx, reconcile.Downstream, cfg.RDA.Buckets)
		out, err := reconcile.Epoch(ctx, reconcile.Input{Up: ru, Down: rd, DownCopies: downCopies[t.Epoch], UpCopies: upCopies[t.Epoch]}, l, cfg.Limits)
		rows = append(rows, RDARow{Truth: t, Out: out, Err: err})
	}
	return rows, nil
}

// WriteRDATable prints the rows, times in microseconds. "lost" and
// "extra" are RDA's one-sided packets: lost in flight or crossing into
// the next epoch, and crossing in, reordered or duplicated.
func WriteRDATable(w io.Writer, rows []RDARow) error {
	if len(rows) == 0 {
		return ErrNoEpochs
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "epoch\tsent\tlost\tcrossed\tcrossed in\tRDA lost\tRDA extra\tdups\ttrue mean µs\tRDA mean µs\tmean err\ttrue std µs\tRDA std µs\tstd err\tbuckets\trebuilds\tdecoded\t")
	for _, r := range rows {
		t, o := r.Truth, r.Out
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\t", t.Epoch, t.Sent, t.Lost, t.Crossed, t.CrossedIn, o.Lost, o.Reordered, o.Duplicates, t.MeanNS/1e3)
		if r.Err != nil {
			fmt.Fprintf(tw, "-\t-\t%.3f\t-\t-\t%d\t%d\t%t\t\n", t.StddevNS/1e3, o.Buckets, o.Rebuilds, o.Diff.Complete())
			continue
		}
		fmt.Fprintf(tw, "%.3f\t%.2e\t%.3f\t%.3f\t%.2f%%\t%d\t%d\t%t\t\n", o.Estimate.MeanNS/1e3, r.MeanRelErr(),
			t.StddevNS/1e3, o.Estimate.StddevNS/1e3, 100*r.StddevRelErr(), o.Buckets, o.Rebuilds, o.Diff.Complete())
	}
	return tw.Flush()
}

// SummarizeRDA condenses RDA rows like Summarize does LDA rows.
func SummarizeRDA(rows []RDARow) Summary {
	return summarize(len(rows), func(i int) (bool, float64, float64, float64, float64) {
		r := rows[i]
		return r.Err == nil, r.MeanRelErr(), r.StddevRelErr(), r.Out.Estimate.Count, float64(r.Truth.SameEpoch)
	})
}

// RunFilesRDA evaluates the production reconciliation policy on two
// captures and their ground truth, prints the per-epoch table to w and
// returns the summary.
func RunFilesRDA(cfg FilesConfig, rcfg RDAConfig, w io.Writer) (Summary, error) {
	link, upFrames, downFrames, truth, err := readFiles(cfg)
	if err != nil {
		return Summary{}, err
	}
	up, err := BuildPackets(link, upFrames, cfg.Identity, cfg.Epoch)
	if err != nil {
		return Summary{}, err
	}
	down, err := BuildPackets(link, downFrames, cfg.Identity, cfg.Epoch)
	if err != nil {
		return Summary{}, err
	}
	truths := sim.EpochTruths(truth, cfg.Epoch, cfg.DownClockOffsetNS)
	slices.SortFunc(truths, func(a, b sim.EpochTruth) int { return int(a.Epoch - b.Epoch) })
	rows, err := CompareRDA(context.Background(), up, down, truths, cfg.Epoch, rcfg)
	if err != nil {
		return Summary{}, err
	}
	if err := WriteRDATable(w, rows); err != nil {
		return Summary{}, err
	}
	return SummarizeRDA(rows), nil
}
