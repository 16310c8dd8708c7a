package sim

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
)

// WritePcap writes frames as a nanosecond pcap.
func WritePcap(w io.Writer, link layers.LinkType, frames []Frame) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	pw := pcapgo.NewWriterNanos(bw)
	snap := uint32(65535)
	for _, f := range frames {
		snap = max(snap, uint32(len(f.Data)))
	}
	if err := pw.WriteFileHeader(snap, link); err != nil {
		return fmt.Errorf("writing pcap header: %w", err)
	}
	for i, f := range frames {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, f.TimeNS), CaptureLength: len(f.Data), Length: max(f.WireLen, len(f.Data))}
		if err := pw.WritePacket(ci, f.Data); err != nil {
			return fmt.Errorf("writing frame %d: %w", i+1, err)
		}
	}
	return bw.Flush()
}

// truthHeader is the first line of a ground-truth file.
var truthHeader = []string{"frame", "id", "up_ns", "down_ns", "copies"}

// WriteTruth writes the ground truth as CSV: frame (1-based index in the
// input), id (hex), up_ns, down_ns (empty when lost), copies.
func WriteTruth(w io.Writer, truth []Record) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(truthHeader); err != nil {
		return err
	}
	row := make([]string, len(truthHeader))
	for _, r := range truth {
		row[0] = strconv.Itoa(r.Frame)
		row[1] = fmt.Sprintf("%016x", r.ID)
		row[2] = strconv.FormatInt(r.UpNS, 10)
		row[3] = ""
		if !r.Lost {
			row[3] = strconv.FormatInt(r.DownNS, 10)
		}
		row[4] = strconv.Itoa(r.Copies)
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// ReadTruth reads a file written by WriteTruth.
func ReadTruth(r io.Reader) ([]Record, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = len(truthHeader)
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("reading ground truth header: %w", err)
	}
	if !slices.Equal(head, truthHeader) {
		return nil, fmt.Errorf("ground truth header %v, want %v", head, truthHeader)
	}
	var out []Record
	for line := 2; ; line++ {
		row, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("ground truth: %w", err)
		}
		var rec Record
		var errs [5]error
		rec.Frame, errs[0] = strconv.Atoi(row[0])
		rec.ID, errs[1] = strconv.ParseUint(row[1], 16, 64)
		rec.UpNS, errs[2] = strconv.ParseInt(row[2], 10, 64)
		if row[3] == "" {
			rec.Lost = true
		} else {
			rec.DownNS, errs[3] = strconv.ParseInt(row[3], 10, 64)
		}
		rec.Copies, errs[4] = strconv.Atoi(row[4])
		for _, e := range errs {
			if e != nil {
				return nil, fmt.Errorf("ground truth line %d: %w", line, e)
			}
		}
		out = append(out, rec)
	}
}

// EpochTruth is the ground truth of one epoch, by the upstream point's epoch.
type EpochTruth struct {
	Epoch int64
	// Sent is the number of packets the upstream point saw in the epoch.
	Sent int
	// Lost is how many of them never arrived.
	Lost int
	// SameEpoch is how many arrived within the same epoch (by the
	// downstream clock); Crossed how many arrived in a later epoch.
	SameEpoch, Crossed int
	// CrossedIn is how many packets sent in an earlier epoch the downstream
	// point saw in this one.
	CrossedIn int
	// MeanNS and StddevNS are over the packets that arrived in the same
	// epoch: what an estimator that only sees one epoch can measure.
	MeanNS, StddevNS float64
	// AllMeanNS and AllStddevNS are over every delivered packet sent in the
	// epoch, wherever it arrived.
	AllMeanNS, AllStddevNS float64
}

// moments accumulates a mean and a standard deviation.
type moments struct {
	n       int
	sum, sq float64
}

func (m *moments) add(x float64) { m.n++; m.sum += x; m.sq += x * x }

func (m moments) meanStd() (float64, float64) {
	if m.n == 0 {
		return 0, 0
	}
	mean := m.sum / float64(m.n)
	return mean, math.Sqrt(math.Max(m.sq/float64(m.n)-mean*mean, 0))
}

// EpochTruths summarises the truth per upstream epoch. downOffsetNS is the
// downstream clock's offset: it decides which epoch the downstream point put
// a packet in, not its delay.
func EpochTruths(truth []Record, cfg epoch.Config, downOffsetNS int64) []EpochTruth {
	type acc struct {
		t         EpochTruth
		same, all moments
	}
	byEpoch := map[int64]*acc{}
	crossedIn := map[int64]int{}
	for _, r := range truth {
		e, _ := cfg.Of(r.UpNS)
		a := byEpoch[e]
		if a == nil {
			a = &acc{t: EpochTruth{Epoch: e}}
			byEpoch[e] = a
		}
		a.t.Sent++
		if r.Lost {
			a.t.Lost++
			continue
		}
		d := float64(r.DelayNS())
		a.all.add(d)
		if de, _ := cfg.Of(r.DownNS + downOffsetNS); de == e {
			a.t.SameEpoch++
			a.same.add(d)
		} else {
			a.t.Crossed++
			crossedIn[de]++
		}
	}
	out := make([]EpochTruth, 0, len(byEpoch))
	for _, a := range byEpoch {
		a.t.MeanNS, a.t.StddevNS = a.same.meanStd()
		a.t.AllMeanNS, a.t.AllStddevNS = a.all.meanStd()
		a.t.CrossedIn = crossedIn[a.t.Epoch]
		out = append(out, a.t)
	}
	slices.SortFunc(out, func(a, b EpochTruth) int { return cmp.Compare(a.Epoch, b.Epoch) })
	return out
}

// FlowTruth is the ground truth of one flow in one epoch.
type FlowTruth struct {
	Flow capture.FlowKey
	// Sent, Lost: packets the upstream point saw in the epoch, and lost.
	Sent, Lost int
	// SameEpoch packets arrived within the epoch; MeanNS and StddevNS are
	// over them.
	SameEpoch        int
	MeanNS, StddevNS float64
}

// FlowTruths summarises the truth per upstream epoch and flow.
func FlowTruths(truth []Record, cfg epoch.Config, downOffsetNS int64) map[int64]map[capture.FlowKey]*FlowTruth {
	out := map[int64]map[capture.FlowKey]*FlowTruth{}
	sums := map[*FlowTruth]*moments{}
	for _, r := range truth {
		e, _ := cfg.Of(r.UpNS)
		m := out[e]
		if m == nil {
			m = map[capture.FlowKey]*FlowTruth{}
			out[e] = m
		}
		ft := m[r.Flow]
		if ft == nil {
			ft = &FlowTruth{Flow: r.Flow}
			m[r.Flow] = ft
		}
		ft.Sent++
		if r.Lost {
			ft.Lost++
			continue
		}
		if de, _ := cfg.Of(r.DownNS + downOffsetNS); de == e {
			ft.SameEpoch++
			m := sums[ft]
			if m == nil {
				m = &moments{}
				sums[ft] = m
			}
			m.add(float64(r.DelayNS()))
		}
	}
	for ft, m := range sums {
		ft.MeanNS, ft.StddevNS = m.meanStd()
	}
	return out
}

// FlowDelay is one flow's delivered packets and the sums of their delays
// over a whole run.
type FlowDelay struct {
	Packets         int
	SumNS, SumSqNS2 float64
}

// MeanNS is the flow's mean delay.
func (f *FlowDelay) MeanNS() float64 { return f.SumNS / float64(f.Packets) }

// StddevNS is the flow's delay standard deviation.
func (f *FlowDelay) StddevNS() float64 {
	m := f.MeanNS()
	return math.Sqrt(max(f.SumSqNS2/float64(f.Packets)-m*m, 0))
}

// FlowDelays sums the delays of the delivered packets of each flow of the
// capture the truth was made from (its flow keys come from decoding it).
func FlowDelays(truth []Record, capturePath string, id capture.IdentityConfig) (map[capture.FlowKey]*FlowDelay, error) {
	link, frames, err := ReadCapture(capturePath)
	if err != nil {
		return nil, err
	}
	dec, err := capture.NewDecoder(link, id)
	if err != nil {
		return nil, err
	}
	out := map[capture.FlowKey]*FlowDelay{}
	for _, r := range truth {
		var p capture.Packet
		if r.Lost || r.Frame < 1 || r.Frame > len(frames) || dec.Decode(frames[r.Frame-1].Data, 0, &p) != nil {
			continue
		}
		f := out[p.Flow]
		if f == nil {
			f = &FlowDelay{}
			out[p.Flow] = f
		}
		d := float64(r.DownNS - r.UpNS)
		f.Packets++
		f.SumNS += d
		f.SumSqNS2 += d * d
	}
	return out, nil
}
