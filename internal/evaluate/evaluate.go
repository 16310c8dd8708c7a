// Package evaluate runs the two captures of a path through owl's decoding,
// epochs and synopses offline and sets the estimates beside the ground truth
// that package sim recorded. It backs cmd/evaluate, the demo and the accuracy
// tests.
package evaluate

import (
	"errors"
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"github.com/gopacket/gopacket/layers"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/lda"
)

// Side is what one observation point built from its capture.
type Side struct {
	// LDAs holds the LDA of every epoch that saw a packet.
	LDAs map[int64]*lda.LDA
	// Packets counts decoded packets; Failed counts frames by the reason
	// they yielded no packet.
	Packets int
	Failed  map[capture.Reason]int
	// Late counts packets whose epoch had closed when they came.
	Late uint64
}

// Build decodes frames and folds them into one LDA per epoch.
func Build(link layers.LinkType, frames []sim.Frame, id capture.IdentityConfig, ep epoch.Config, cfg lda.Config) (*Side, error) {
	dec, err := capture.NewDecoder(link, id)
	if err != nil {
		return nil, err
	}
	if _, err := lda.New(cfg); err != nil {
		return nil, err
	}
	s := &Side{LDAs: map[int64]*lda.LDA{}, Failed: map[capture.Reason]int{}}
	w, err := epoch.NewWindow(ep, func(int64) *lda.LDA {
		l, _ := lda.New(cfg) // cfg was validated above
		return l
	}, func(c epoch.Closed[*lda.LDA]) {
		s.LDAs[c.Epoch] = c.Value
		s.Late += c.Late
	})
	if err != nil {
		return nil, err
	}
	s.Packets = foldFrames(dec, frames, w, func(l *lda.LDA, off int64, p *capture.Packet) {
		l.Insert(p.ID, off)
	}, func(err error) { s.Failed[capture.ReasonOf(err)]++ })
	return s, nil
}

// foldFrames decodes frames, as a probe does, and hands each packet to
// fold with its epoch's value and its offset in the epoch; a frame that
// does not decode goes to failed (nil: skipped), a packet whose epoch had
// closed is counted late by w. It closes every epoch at the end and
// returns the number of packets decoded.
func foldFrames[T any](dec *capture.Decoder, frames []sim.Frame, w *epoch.Window[T], fold func(v T, offNS int64, p *capture.Packet), failed func(error)) int {
	var p capture.Packet
	decoded := 0
	for _, f := range frames {
		if err := dec.Decode(f.Data, f.TimeNS, &p); err != nil {
			if failed != nil {
				failed(err)
			}
			continue
		}
		decoded++
		if v, off, ok := w.Get(p.TimeNS); ok {
			fold(v, off, &p)
		}
	}
	w.Flush()
	return decoded
}

// LDARow sets one epoch's LDA estimate beside its truth.
type LDARow struct {
	Truth sim.EpochTruth
	Est   lda.Estimate
	// Err is set when the LDAs gave no estimate (no usable row).
	Err error
}

// MeanRelErr is |estimated − true| / true mean, over packets delivered
// within the epoch.
func (r LDARow) MeanRelErr() float64 { return relErr(r.Est.MeanNS, r.Truth.MeanNS) }

// StddevRelErr is the relative error of the standard deviation.
func (r LDARow) StddevRelErr() float64 { return relErr(r.Est.StddevNS, r.Truth.StddevNS) }

func relErr(est, truth float64) float64 {
	if truth == 0 {
		return math.Abs(est)
	}
	return math.Abs(est-truth) / math.Abs(truth)
}

// CompareLDA estimates every epoch of the truth from the two sides' LDAs.
// Epochs that one side never saw are skipped.
func CompareLDA(up, down *Side, truths []sim.EpochTruth, opts lda.Options) []LDARow {
	var rows []LDARow
	for _, t := range truths {
		a, b := up.LDAs[t.Epoch], down.LDAs[t.Epoch]
		if a == nil || b == nil {
			continue
		}
		est, err := lda.EstimatePair(a, b, opts)
		rows = append(rows, LDARow{Truth: t, Est: est, Err: err})
	}
	return rows
}

// Summary condenses the rows of one run.
type Summary struct {
	Epochs                    int
	Failed                    int // epochs without an estimate
	MeanRelErr, MaxMeanRelErr float64
	StdRelErr, MaxStdRelErr   float64
	SampleShare               float64 // effective samples / packets delivered in-epoch
}

// Summarize averages the errors of the rows that have an estimate.
func Summarize(rows []LDARow) Summary {
	return summarize(len(rows), func(i int) (bool, float64, float64, float64, float64) {
		r := rows[i]
		return r.Err == nil, r.MeanRelErr(), r.StddevRelErr(), float64(r.Est.Samples), float64(r.Truth.SameEpoch)
	})
}

// summarize condenses n rows; row says of the i-th whether it has an
// estimate, its mean and standard deviation errors, its samples and the
// packets delivered within its epoch.
func summarize(n int, row func(i int) (ok bool, meanErr, stdErr, samples, delivered float64)) Summary {
	var s Summary
	var samples, delivered float64
	for i := range n {
		s.Epochs++
		ok, me, se, n, d := row(i)
		if !ok {
			s.Failed++
			continue
		}
		s.MeanRelErr += me
		s.StdRelErr += se
		s.MaxMeanRelErr = max(s.MaxMeanRelErr, me)
		s.MaxStdRelErr = max(s.MaxStdRelErr, se)
		samples += n
		delivered += d
	}
	if n := float64(s.Epochs - s.Failed); n > 0 {
		s.MeanRelErr /= n
		s.StdRelErr /= n
	}
	if delivered > 0 {
		s.SampleShare = samples / delivered
	}
	return s
}

// ErrNoEpochs is returned when the captures share no epoch.
var ErrNoEpochs = errors.New("the captures share no epoch")

// WriteLDATable prints the rows as an aligned table, times in microseconds.
func WriteLDATable(w io.Writer, rows []LDARow) error {
	if len(rows) == 0 {
		return ErrNoEpochs
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "epoch\tsent\tlost\tcrossed\tlost~\ttrue mean µs\tLDA mean µs\tmean err\ttrue std µs\tLDA std µs\tstd err\tsamples\tusable rows\t")
	for _, r := range rows {
		t := r.Truth
		if r.Err != nil {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.0f\t%.3f\t-\t-\t%.3f\t-\t-\t0\t%d/%d\t\n",
				t.Epoch, t.Sent, t.Lost, t.Crossed, r.Est.LostPackets, t.MeanNS/1e3, t.StddevNS/1e3, r.Est.UsableRows, r.Est.Rows)
			continue
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.0f\t%.3f\t%.3f\t%.3f%%\t%.3f\t%.3f\t%.2f%%\t%d\t%d/%d\t\n",
			t.Epoch, t.Sent, t.Lost, t.Crossed, r.Est.LostPackets,
			t.MeanNS/1e3, r.Est.MeanNS/1e3, 100*r.MeanRelErr(),
			t.StddevNS/1e3, r.Est.StddevNS/1e3, 100*r.StddevRelErr(),
			r.Est.Samples, r.Est.UsableRows, r.Est.Rows)
	}
	return tw.Flush()
}
