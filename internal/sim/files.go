package sim

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/owl-latency/owl/internal/capture"
)

// Outputs names the files GenerateFiles writes for an output prefix.
type Outputs struct {
	Up, Down, Truth string
}

// OutputsFor returns PREFIX-up.pcap, PREFIX-down.pcap and PREFIX-truth.csv.
func OutputsFor(prefix string) Outputs {
	return Outputs{Up: prefix + "-up.pcap", Down: prefix + "-down.pcap", Truth: prefix + "-truth.csv"}
}

// Summary tells what GenerateFiles did.
type Summary struct {
	Frames, Packets, Lost, Duplicated, NonIP int
	MeanDelayNS                              float64
}

// Shape changes an input capture's timing before it is impaired.
type Shape struct {
	// Rate, when positive, spaces the frames evenly at this many per
	// second from the first one's time, in their order.
	Rate float64
	// Repeat, when above 1, plays the input this many times, copy k
	// shifted by k×Every.
	Repeat int
	// Every is the shift between copies (0: the input's span, rounded up
	// to a whole second, plus one second).
	Every time.Duration
}

// Apply returns frames shaped by s (frames itself when s changes
// nothing). Copies share the frames' bytes.
func (s Shape) Apply(frames []Frame) []Frame {
	if len(frames) == 0 || s.Rate <= 0 && s.Repeat <= 1 {
		return frames
	}
	base := slices.Clone(frames)
	if s.Rate > 0 {
		for i := range base {
			base[i].TimeNS = frames[0].TimeNS + int64(float64(i)*1e9/s.Rate)
		}
	}
	n := max(s.Repeat, 1)
	every := int64(s.Every)
	if every <= 0 {
		span := base[len(base)-1].TimeNS - base[0].TimeNS
		every = (span/1e9 + 2) * 1e9
	}
	out := make([]Frame, 0, n*len(base))
	for k := range n {
		for _, f := range base {
			f.TimeNS += int64(k) * every
			out = append(out, f)
		}
	}
	return out
}

// GenerateFiles reads the capture at in, impairs it and writes the two
// captures and the ground truth.
func GenerateFiles(in string, out Outputs, id capture.IdentityConfig, m Impairment) (Summary, error) {
	return GenerateShaped(in, Shape{}, out, id, m)
}

// GenerateShaped is GenerateFiles of the input shaped by shape.
func GenerateShaped(in string, shape Shape, out Outputs, id capture.IdentityConfig, m Impairment) (Summary, error) {
	link, frames, err := ReadCapture(in)
	if err != nil {
		return Summary{}, err
	}
	return generate(link, shape.Apply(frames), out, id, m)
}

// GenerateSynthetic is GenerateFiles of synthetic traffic.
func GenerateSynthetic(c SynthConfig, shape Shape, out Outputs, id capture.IdentityConfig, m Impairment) (Summary, error) {
	link, frames, err := Synthesize(c)
	if err != nil {
		return Summary{}, err
	}
	return generate(link, shape.Apply(frames), out, id, m)
}

// generate impairs frames and writes the captures and the truth.
func generate(link layers.LinkType, frames []Frame, out Outputs, id capture.IdentityConfig, m Impairment) (Summary, error) {
	t, err := Impair(link, frames, id, m)
	if err != nil {
		return Summary{}, err
	}
	write := func(path string, f func(*os.File) error) error {
		fh, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := f(fh); err != nil {
			fh.Close()
			return fmt.Errorf("writing %s: %w", path, err)
		}
		return fh.Close()
	}
	if err := write(out.Up, func(f *os.File) error { return WritePcap(f, link, t.Up) }); err != nil {
		return Summary{}, err
	}
	if err := write(out.Down, func(f *os.File) error { return WritePcap(f, link, t.Down) }); err != nil {
		return Summary{}, err
	}
	if err := write(out.Truth, func(f *os.File) error { return WriteTruth(f, t.Truth) }); err != nil {
		return Summary{}, err
	}
	s := Summary{Frames: len(frames), Packets: len(t.Truth), NonIP: t.NonIP}
	var sum float64
	for _, r := range t.Truth {
		switch {
		case r.Lost:
			s.Lost++
		default:
			sum += float64(r.DelayNS())
			if r.Copies > 1 {
				s.Duplicated++
			}
		}
	}
	if n := s.Packets - s.Lost; n > 0 {
		s.MeanDelayNS = sum / float64(n)
	}
	return s, nil
}
