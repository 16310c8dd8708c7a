package sim

import (
	"fmt"
	"os"

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

// GenerateFiles reads the capture at in, impairs it and writes the two
// captures and the ground truth.
func GenerateFiles(in string, out Outputs, id capture.IdentityConfig, m Impairment) (Summary, error) {
	link, frames, err := ReadCapture(in)
	if err != nil {
		return Summary{}, err
	}
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
