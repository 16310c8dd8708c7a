package collector

import (
	"fmt"
	"math"
	"strings"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// judgeClocks puts the two probes' clocks on a result: the ± they put on
// the mean (the sum of their uncertainties over the epoch, since the
// one-way delay is the difference of two clocks' readings), and a flag when
// that ± is more than share of the mean or a clock was not synchronized.
// A flagged result is kept and served like any other: the flag says how
// far to trust it.
func judgeClocks(res *owlv1.PathStats, share float64) {
	up, down := res.GetUpstreamClock(), res.GetDownstreamClock()
	res.ClockUncertaintyNs = float64(up.GetUncertaintyNs() + down.GetUncertaintyNs())
	var notes []string
	for _, s := range []struct {
		side string
		c    *owlv1.ClockStatus
	}{{"upstream", up}, {"downstream", down}} {
		switch st := s.c.GetState(); st {
		case owlv1.ClockState_CLOCK_STATE_UNSYNCHRONIZED, owlv1.ClockState_CLOCK_STATE_ACQUIRING:
			note := fmt.Sprintf("%s clock %s", s.side, stateName(st))
			if d := s.c.GetDetail(); d != "" {
				note += " (" + d + ")"
			}
			notes = append(notes, note)
		}
	}
	if (res.GetStatus() == owlv1.ResultStatus_RESULT_STATUS_OK || res.GetStatus() == owlv1.ResultStatus_RESULT_STATUS_PARTIAL) && res.ClockUncertaintyNs > share*math.Abs(res.GetMeanNs()) {
		notes = append(notes, fmt.Sprintf("clock uncertainty ±%.0f ns is more than %.0f%% of the mean %.0f ns",
			res.ClockUncertaintyNs, 100*share, res.GetMeanNs()))
	}
	res.ClockFlagged = len(notes) > 0
	res.ClockNote = strings.Join(notes, "; ")
}

// stateName is a clock state in lower case without its prefix.
func stateName(s owlv1.ClockState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "CLOCK_STATE_"))
}
