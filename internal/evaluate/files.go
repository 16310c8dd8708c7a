package evaluate

import (
	"fmt"

	"github.com/gopacket/gopacket/layers"
	"io"
	"os"

	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/sim"
	"github.com/owl-latency/owl/internal/synopsis/lda"
)

// FilesConfig names the inputs of an offline evaluation and the settings
// of the observation points.
type FilesConfig struct {
	Up, Down, Truth string
	// DownClockOffset is the offset tracegen gave the downstream clock.
	DownClockOffsetNS int64
	Identity          capture.IdentityConfig
	Epoch             epoch.Config
	LDA               lda.Config
	Estimate          lda.Options
}

// RunFiles evaluates LDA on two captures and their ground truth, prints the
// per-epoch table to w and returns the summary.
func RunFiles(cfg FilesConfig, w io.Writer) (Summary, error) {
	link, upFrames, downFrames, truth, err := readFiles(cfg)
	if err != nil {
		return Summary{}, err
	}
	up, err := Build(link, upFrames, cfg.Identity, cfg.Epoch, cfg.LDA)
	if err != nil {
		return Summary{}, err
	}
	down, err := Build(link, downFrames, cfg.Identity, cfg.Epoch, cfg.LDA)
	if err != nil {
		return Summary{}, err
	}
	rows := CompareLDA(up, down, sim.EpochTruths(truth, cfg.Epoch, cfg.DownClockOffsetNS), cfg.Estimate)
	if err := WriteLDATable(w, rows); err != nil {
		return Summary{}, err
	}
	return Summarize(rows), nil
}

// readFiles reads the two captures and the ground truth.
func readFiles(cfg FilesConfig) (layers.LinkType, []sim.Frame, []sim.Frame, []sim.Record, error) {
	link, upFrames, err := sim.ReadCapture(cfg.Up)
	if err != nil {
		return 0, nil, nil, nil, err
	}
	downLink, downFrames, err := sim.ReadCapture(cfg.Down)
	if err != nil {
		return 0, nil, nil, nil, err
	}
	if link != downLink {
		return 0, nil, nil, nil, fmt.Errorf("captures have different link types: %v and %v", link, downLink)
	}
	tf, err := os.Open(cfg.Truth)
	if err != nil {
		return 0, nil, nil, nil, err
	}
	defer tf.Close()
	truth, err := sim.ReadTruth(tf)
	if err != nil {
		return 0, nil, nil, nil, fmt.Errorf("%s: %w", cfg.Truth, err)
	}
	return link, upFrames, downFrames, truth, nil
}
