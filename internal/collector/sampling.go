package collector

import "math"

// A path's large flows (flows.lds_large_packets) get their delays one of
// two ways: from the LDS, or from the packet sample once it holds at
// least flows.sample_min_delays of a large flow's packets. Where the rate
// for params.sample.target alone gives them fewer, the collector weighs
// the two by the bytes recent reports took: the LDS and a sample at the
// target's rate, or no LDS and a sample dense enough for the large flows.
// The second holds each sampled flow's exact delays where an LDS cell
// mixes in other flows' packets, and from about 15,000 to 65,000 packets
// an epoch it is the smaller (docs/benchmarks.md).

// SampleCost is what a path's recent reports took: bytes per sampled
// entry and LDS bytes per packet, of the upstream side (0: not seen yet).
type SampleCost struct {
	EntryBytes, LDSPacketBytes float64
}

// denseShift is the lowest rate 2^-k at which a flow of large packets
// gives at least minDelays sampled ones, or −1 when none does.
func denseShift(large, minDelays int) int {
	if large < minDelays || minDelays < 1 {
		return -1
	}
	return int(math.Floor(math.Log2(float64(large) / float64(minDelays))))
}

// denseSlack is how much more than the LDS and the target's sample a
// dense sample may cost before a path that samples densely goes back to
// the LDS: the two costs move from epoch to epoch, and each change of
// rate costs the epochs about it their per-flow results.
const denseSlack = 1.25

// SamplingFor is the sampling rate 2^-shift a path's probes use and
// whether they send no LDS, for a path whose busiest recent epoch had
// peak packets, target the rate params.sample.target asks for at that
// peak (sample.ShiftFor) and cost what recent reports took. off is
// whether the probes send no LDS now, named whether the top flows name
// their sampled packets (the newest epoch's, or the last known), and
// maxEntries params.sample.max_entries, half of which a dense sample may
// reach at most. With flows.lds "always", or without LDS sizing, it is
// (target, false).
func (c Config) SamplingFor(peak uint64, target int, cost SampleCost, off, named bool, maxEntries int) (shift int, ldsOff bool) {
	fc := c.Flows
	dense := denseShift(fc.LDSLargePackets, fc.SampleMinDelays)
	if fc.LDS != ldsAuto || fc.LDSMinCols == 0 || dense < 0 || !named {
		return target, false
	}
	if target <= dense {
		return target, true
	}
	if cost.EntryBytes == 0 || cost.LDSPacketBytes == 0 || peak>>dense > uint64(maxEntries/2) {
		return target, false
	}
	denseBytes := float64(peak>>dense) * cost.EntryBytes
	ldsBytes := cost.LDSPacketBytes*float64(peak) + float64(peak>>target)*cost.EntryBytes
	if denseBytes < ldsBytes || off && denseBytes <= denseSlack*ldsBytes {
		return dense, true
	}
	return target, false
}
