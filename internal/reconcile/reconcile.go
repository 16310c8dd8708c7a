// Package reconcile turns the two sides' RDAs of a path and epoch into exact
// delay statistics (RDA paper §V-B, §V-C): it peels the subtracted RDA into
// the packets only the upstream side saw (lost) and only the downstream side
// saw (reordered, duplicated, or sent in the previous epoch), removes them
// from the side that has them using the timestamps the probes kept, and
// computes the mean over every repaired bucket and the standard deviation.
// Buckets that peeling could not empty, or whose packets could not be
// removed, are marked unusable and never folded in.
package reconcile

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/owl-latency/owl/internal/synopsis/rda"
)

// Difference is the decoded set difference of two RDAs.
type Difference struct {
	// Lost are IDs the upstream side saw and the downstream side did not.
	Lost []uint64
	// Extra are IDs only the downstream side saw: reordered across the
	// epoch boundary, duplicated in flight, or changed in flight.
	Extra []uint64
	// Residual lists, per bank, the buckets peeling left non-empty.
	Residual [][]int
	// Copies counts the residual buckets that look like copies of one
	// ID, seen more often on one side than on the other: their ID field
	// is 0 (an even number of copies) or hashes to the bucket itself (an
	// odd number, the count not ±1). No larger RDA separates copies; a
	// residual without them is, nearly always, distinct IDs sharing all
	// their buckets (with two banks, about one epoch in twelve at the
	// default sizing), which a larger RDA does separate.
	Copies int
}

// Complete reports whether peeling emptied every bucket.
func (d Difference) Complete() bool {
	for _, r := range d.Residual {
		if len(r) > 0 {
			return false
		}
	}
	return true
}

// scratch keeps the RDAs that peeling and repair work on, from one epoch
// to the next: a collector's RDA copies were a quarter of the bytes it
// allocated.
var scratch sync.Pool

// scratchRDA is an RDA from scratch, or a new one; its contents are to
// be set (SetCopy, SetDifference) and it goes back with scratch.Put.
func scratchRDA() *rda.RDA {
	if r, ok := scratch.Get().(*rda.RDA); ok {
		return r
	}
	return new(rda.RDA)
}

// Size is the number of decoded IDs.
func (d Difference) Size() int { return len(d.Lost) + len(d.Extra) }

// Peel decodes down − up (RDA Alg. 1): it repeatedly takes a pure bucket,
// records its ID as lost (count −1) or extra (+1), and deletes the ID from
// every bank, until no pure bucket is left. up and down are not modified.
// Work is bounded by the number of buckets, whatever the input.
func Peel(up, down *rda.RDA) (Difference, error) {
	diff := scratchRDA()
	defer scratch.Put(diff)
	if err := diff.SetDifference(down, up); err != nil {
		return Difference{}, err
	}
	cfg := diff.Config()
	k, m := cfg.Banks, cfg.Buckets
	var out Difference
	type pos struct{ l, i int }
	queue := make([]pos, 0, 64)
	for l := 0; l < k; l++ {
		for i := 0; i < m; i++ {
			if diff.Pure(l, i) {
				queue = append(queue, pos{l, i})
			}
		}
	}
	// Each decoded ID empties at least one bucket for good, so at most k·m
	// IDs can be decoded; the bound stops a loop on crafted input.
	for budget := k * m; len(queue) > 0 && budget > 0; {
		p := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		if !diff.Pure(p.l, p.i) {
			continue // emptied or changed since it was queued
		}
		b := diff.Buckets(p.l)[p.i]
		id := b.ID
		if b.Count > 0 {
			out.Extra = append(out.Extra, id)
			diff.Remove(id, b.SumNS)
		} else {
			out.Lost = append(out.Lost, id)
			diff.Insert(id, -b.SumNS)
		}
		budget--
		for l := 0; l < k; l++ {
			if i := diff.Index(l, id); diff.Pure(l, i) {
				queue = append(queue, pos{l, i})
			}
		}
	}
	out.Residual = make([][]int, k)
	for l := 0; l < k; l++ {
		for i, b := range diff.Buckets(l) {
			if !b.Empty() {
				out.Residual[l] = append(out.Residual[l], i)
				if b.ID == 0 || diff.Index(l, b.ID) == i {
					out.Copies++
				}
			}
		}
	}
	return out, nil
}

// Usable marks, per bank, the buckets that may enter an estimate.
type Usable [][]bool

// NewUsable returns a mask with every bucket usable except the residual ones.
func NewUsable(cfg rda.Config, d Difference) Usable {
	u := make(Usable, cfg.Banks)
	for l := range u {
		u[l] = make([]bool, cfg.Buckets)
		for i := range u[l] {
			u[l][i] = true
		}
		if l < len(d.Residual) {
			for _, i := range d.Residual[l] {
				u[l][i] = false
			}
		}
	}
	return u
}

// Exclude marks the buckets of id unusable in every bank.
func (u Usable) Exclude(r *rda.RDA, id uint64) {
	for l := range u {
		u[l][r.Index(l, id)] = false
	}
}

// Repair removes packets from one side's RDA: the lost ones from the
// upstream RDA, the extra ones from the downstream RDA, each with the
// timestamp offset the side recorded for it. An ID missing from offsets
// (the probe could not find it, or the choice between two copies is not
// ours to make) is not removed: its buckets are marked unusable instead.
// It returns how many IDs it removed.
func Repair(r *rda.RDA, ids []uint64, offsets map[uint64]int64, u Usable) int {
	n := 0
	for _, id := range ids {
		off, ok := offsets[id]
		if !ok {
			u.Exclude(r, id)
			continue
		}
		r.Remove(id, off)
		n++
	}
	return n
}

// Estimate is the delay statistics of a repaired pair of RDAs.
type Estimate struct {
	// MeanNS is exact when every bucket is usable: both sides' buckets
	// then hold the same packets, and integer sums lose nothing.
	MeanNS float64
	// SumNS and Count are the delay sum and packet count behind the mean
	// of one bank (the first with every bucket usable, else the pooled
	// usable buckets of all banks divided by the number of banks).
	SumNS float64
	Count float64
	// StddevNS is from the selected estimator; StddevCollapsedNS and
	// StddevCenteredNS are both estimators (RDA Alg. 2–3, and every
	// usable bucket's deviation from the mean).
	StddevNS, StddevCollapsedNS, StddevCenteredNS float64
	// UsableBuckets and Buckets count over all banks; ExcludedBuckets
	// counts buckets that hold packets but were left out (residual after
	// peeling, or holding a packet that could not be repaired). The mean
	// is exact when it is zero and peeling was complete.
	UsableBuckets, Buckets, ExcludedBuckets int
}

// ErrNoSamples is returned when no bucket can be used.
var ErrNoSamples = errors.New("no usable buckets")

// StddevMethod picks the standard deviation estimator.
type StddevMethod uint8

// Standard deviation estimators.
const (
	// StddevCentered uses every usable bucket's deviation from the mean
	// (the default: measured better on ground truth, see the tests).
	StddevCentered StddevMethod = iota
	// StddevCollapsed is the paper's selective collapse (Alg. 2, 3).
	StddevCollapsed
)

// Compute estimates the delay statistics from repaired RDAs. A bucket
// enters only if it is marked usable and both sides now agree on it (same
// ID xor, count and check): a disagreement left by a false decode is caught
// here.
func Compute(up, down *rda.RDA, u Usable, method StddevMethod) (Estimate, error) {
	if err := up.Config().Compatible(down.Config()); err != nil {
		return Estimate{}, err
	}
	cfg := up.Config()
	est := Estimate{Buckets: cfg.Banks * cfg.Buckets}
	pair := bucketPair{up: up, down: down, u: u}
	// Mean: every usable bucket of every bank. A bank whose buckets are all
	// usable holds every common packet once; then the pooled ratio is the
	// exact mean.
	isum, icnt := pair.sums(cfg, &est)
	sum, cnt := float64(isum), float64(icnt)
	if icnt == 0 {
		return est, ErrNoSamples
	}
	est.MeanNS = sum / cnt
	est.SumNS, est.Count = sum/float64(cfg.Banks), cnt/float64(cfg.Banks)
	est.StddevCenteredNS = pair.centeredStddev(cfg, est.MeanNS)
	est.StddevCollapsedNS = pair.collapsedStddev(cfg, est.MeanNS)
	est.StddevNS = est.StddevCenteredNS
	if method == StddevCollapsed {
		est.StddevNS = est.StddevCollapsedNS
	}
	return est, nil
}

// bucketPair is the two sides' repaired RDAs and the usable mask.
type bucketPair struct {
	up, down *rda.RDA
	u        Usable
}

// ok reports whether bucket i of bank l is usable and both sides agree
// on it (same ID xor, count and check) and it holds packets.
func (p bucketPair) ok(l, i int) bool {
	if !p.u[l][i] {
		return false
	}
	a, b := p.up.Buckets(l)[i], p.down.Buckets(l)[i]
	return a.ID == b.ID && a.Count == b.Count && a.Check == b.Check && a.Count > 0
}

// sums returns the delay sum and packet count over every usable bucket,
// counting in est the usable buckets and the excluded non-empty ones.
func (p bucketPair) sums(cfg rda.Config, est *Estimate) (isum, icnt int64) {
	for l := 0; l < cfg.Banks; l++ {
		for i := 0; i < cfg.Buckets; i++ {
			if !p.ok(l, i) {
				if !p.up.Buckets(l)[i].Empty() || !p.down.Buckets(l)[i].Empty() {
					est.ExcludedBuckets++
				}
				continue
			}
			a, b := p.up.Buckets(l)[i], p.down.Buckets(l)[i]
			est.UsableBuckets++
			isum += b.SumNS - a.SumNS
			icnt += a.Count
		}
	}
	return isum, icnt
}

// centeredStddev is the standard deviation from every usable bucket's
// deviation from the mean (zero when no bank allows it).
func (p bucketPair) centeredStddev(cfg rda.Config, mean float64) float64 {
	// Centered: Σ (R_i − c_i·μ)² has expectation σ²·(C − Σc_i²/C) per bank.
	var sq, dof float64
	for l := 0; l < cfg.Banks; l++ {
		var bsq, bc, bc2 float64
		for i := 0; i < cfg.Buckets; i++ {
			if !p.ok(l, i) {
				continue
			}
			a, b := p.up.Buckets(l)[i], p.down.Buckets(l)[i]
			c := float64(a.Count)
			r := float64(b.SumNS-a.SumNS) - c*mean
			bsq += r * r
			bc += c
			bc2 += c * c
		}
		if bc > 0 {
			sq += bsq
			dof += bc - bc2/bc
		}
	}
	if dof > 0 {
		return math.Sqrt(sq / dof)
	}
	return 0
}

// collapsedStddev is the standard deviation by the paper's selective
// collapse (Alg. 2, 3; zero when no pair of buckets allows it).
func (p bucketPair) collapsedStddev(cfg rda.Config, mean float64) float64 {
	// Selective collapse: pair consecutive usable non-empty buckets of a
	// bank, whatever their position, and sign the second of each pair.
	var csq, ccount float64
	for l := 0; l < cfg.Banks; l++ {
		var prev = -1
		for i := 0; i < cfg.Buckets; i++ {
			if !p.ok(l, i) {
				continue
			}
			if prev < 0 {
				prev = i
				continue
			}
			ap, bp := p.up.Buckets(l)[prev], p.down.Buckets(l)[prev]
			aq, bq := p.up.Buckets(l)[i], p.down.Buckets(l)[i]
			d := float64((bp.SumNS - bq.SumNS) - (ap.SumNS - aq.SumNS))
			csq += d * d
			ccount += float64(ap.Count + aq.Count)
			prev = -1
		}
	}
	if ccount > 0 {
		return math.Sqrt(math.Max(csq/ccount-mean*mean, 0))
	}
	return 0
}

// Size suggests the buckets per bank for a set difference of about d
// packets: 2·d (Theorem 2) with 25% headroom, within [min, max].
func Size(d, min, max int) int {
	m := int(math.Ceil(2.5 * float64(d)))
	if m < min {
		m = min
	}
	if m > max {
		m = max
	}
	return m
}

// String renders a difference's size for logs.
func (d Difference) String() string {
	res := 0
	for _, r := range d.Residual {
		res += len(r)
	}
	return fmt.Sprintf("%d lost, %d extra, %d residual buckets", len(d.Lost), len(d.Extra), res)
}
