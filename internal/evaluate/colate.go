package evaluate

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/owl-latency/owl/internal/synopsis/colate"
)

// ColateConfig is the COLATE paper's multi-point setting (§6.2.1): three
// observation points in a triangle, every one sending to and receiving
// from the two others (six links), on synthetic traffic with Pareto flow
// sizes and per-flow delays. Each point keeps one counter vector per span,
// all points on one time grid, one n and one seed.
type ColateConfig struct {
	// LinkRate is packets per second on each of the six links.
	LinkRate float64
	// Duration of the traffic.
	Duration time.Duration
	// Span of a vector.
	Span time.Duration
	// RAMBits is M for every point.
	RAMBits float64
	// Requirements to solve for, one row each.
	Requirements [][2]float64 // (α, β)
	// Shapes are (n, m) to evaluate as well, whatever the solver says.
	Shapes [][2]int
	// PaperThreshold solves as the paper does (vectors dumped at a sum of
	// T); by default the solver takes the vectors' measured sum t_X, as
	// owl closes one vector per epoch.
	PaperThreshold bool
	// MinPackets is the smallest flow (packets per vector) the guarantee
	// is asked for: t_min is the timestamp sum of such a flow.
	MinPackets int
	// Gamma is the virtual repetitions per flow for the standard
	// deviation.
	Gamma  int
	Seed   uint64
	Output io.Writer
}

// DefaultColateConfig is 2,000 packets/s per link for 10 s, 1 s vectors,
// 1 MB of counters per point, the paper's medium and high requirements.
func DefaultColateConfig() ColateConfig {
	return ColateConfig{LinkRate: 2000, Duration: 10 * time.Second, Span: time.Second, RAMBits: 8 << 20,
		Requirements: [][2]float64{{0.95, 0.05}, {0.99, 0.01}}, MinPackets: 100, Gamma: 1000, Seed: 1}
}

// ColateRow is one requirement's outcome.
type ColateRow struct {
	Alpha, Beta float64
	Params      colate.Parameters
	Err         error
	Flows       int     // qualifying flow-vector pairs
	Within      float64 // fraction within β of the true mean (paper's Eq. 4)
	// WithinRobust is the fraction within β with the robust estimate
	// (see colate/robust.go), Within1 within 1% with it.
	WithinRobust, Within1 float64
	// StddevWithin5 is the fraction of flows whose standard deviation
	// (Gamma virtual repetitions) is within 5% of the truth; StddevMedian
	// the median relative error. ExactWithin5 and ExactMedian are the
	// same with the exact expectation over pairings.
	StddevWithin5, StddevMedian, ExactWithin5, ExactMedian float64
	// OracleWithin5 bounds what any estimator of the standard deviation
	// can do from these counters: the share of flows within 5% for an
	// oracle that knows, of each of the flow's m counters, the exact sum
	// of its packets' delays and their number (no other flow's noise, no
	// loss) and takes the unbiased estimate from those group sums.
	OracleWithin5 float64
	Fixed         bool    // Params given, not solved
	BitsPerPkt    float64 // counters only
	FlowBitsPerP  float64 // the per-vector flow counts on top
}

type colFlow struct {
	src, dst int
	sumNS    float64 // of delays
	sqNS2    float64 // of squared delays
	n        int
	vector   int64 // the grid span it lives in (flows stay in one)
	delays   []int64
	ids      []uint64
}

// oracleStddev is the standard deviation of a flow's delays estimated from
// their group sums alone, the groups being the flow's m counters (packet
// id → counter j as Insert picks it). With G non-empty groups of c_j
// packets summing to D_j and mean μ, E[Σ_j (D_j − c_j μ)² / c_j] =
// (G − 1)/(p − 1) · Σ_i (d_i − μ)² over random assignments, which gives
// the unbiased estimate; it needs G ≥ 2.
func oracleStddev(delays []int64, ids []uint64, m int) (float64, bool) {
	c := make([]float64, m)
	d := make([]float64, m)
	var sum float64
	for i, x := range delays {
		j, _ := bits.Mul64(ids[i], uint64(m))
		c[j]++
		d[j] += float64(x)
		sum += float64(x)
	}
	p := float64(len(delays))
	mu := sum / p
	var between float64
	g := 0
	for j := range m {
		if c[j] == 0 {
			continue
		}
		g++
		e := d[j] - c[j]*mu
		between += e * e / c[j]
	}
	if g < 2 {
		return 0, false
	}
	return math.Sqrt((p - 1) / float64(g-1) * between / p), true
}

// RunColate generates the triangle's traffic once, solves the paper's
// equations for each requirement with t_min, t_max and ρ measured on that
// traffic (as §5 prescribes), records every point's vectors at the solved
// n, m, b, and counts the flows whose mean is within β.
func RunColate(cfg ColateConfig) ([]ColateRow, error) {
	rng := rand.New(rand.NewPCG(cfg.Seed, 77))
	spanNS := int64(cfg.Span)
	type pkt struct {
		flow uint64
		id   uint64
		ts   int64
	}
	var at [3][]pkt
	flows := map[uint64]*colFlow{}
	// Flows live within one span so that each is one vector pair.
	nSpans := int64(cfg.Duration / cfg.Span)
	for a := range 3 {
		for b := range 3 {
			if a == b {
				continue
			}
			for e := range nSpans {
				left := int(cfg.LinkRate * cfg.Span.Seconds())
				for left > 0 {
					size := min(left, int(20/math.Pow(1-rng.Float64(), 1/1.1)))
					left -= size
					fh := rng.Uint64()
					base := 50e3 + rng.Float64()*rng.Float64()*5e6 // 50 µs to 5 ms
					f := &colFlow{src: a, dst: b, vector: e}
					flows[fh] = f
					for range size {
						ts := e*spanNS + rng.Int64N(spanNS-int64(20*time.Millisecond))
						d := int64(base * (0.5 + 0.5*rng.ExpFloat64()))
						id := rng.Uint64()
						at[a] = append(at[a], pkt{fh, id, ts})
						at[b] = append(at[b], pkt{fh, id, ts + d})
						f.sumNS += float64(d)
						f.sqNS2 += float64(d) * float64(d)
						f.n++
						f.delays = append(f.delays, d)
						f.ids = append(f.ids, id)
					}
				}
			}
		}
	}
	// Measurements for the solver (§5): per-flow timestamp sums within a
	// vector at the sender, and ρ = (t_R − t_S)/(t_R + t_S).
	var sums, rhos []float64
	tS := map[uint64]float64{}
	for _, p := range at[0] {
		if f := flows[p.flow]; f.src == 0 {
			tS[p.flow] += float64(p.ts - f.vector*spanNS)
		}
	}
	for fh, s := range tS {
		f := flows[fh]
		sums = append(sums, s)
		if f.n >= cfg.MinPackets {
			rhos = append(rhos, f.sumNS/(2*s+f.sumNS))
		}
	}
	slices.Sort(sums)
	slices.Sort(rhos)
	// t_X: the mean sum of a vector's relative timestamps, over points
	// and spans.
	var tX float64
	for x := range 3 {
		for _, p := range at[x] {
			tX += float64(p.ts % spanNS)
		}
	}
	tX /= float64(3 * nSpans)
	vectorSum := tX
	if cfg.PaperThreshold {
		vectorSum = 0
	}
	tMax := sums[len(sums)-1]
	tMin := float64(cfg.MinPackets) * float64(spanNS) / 2
	rho := rhos[len(rhos)/2]
	var rows []ColateRow
	type job struct {
		req   [2]float64
		shape [2]int
	}
	var jobs []job
	for _, req := range cfg.Requirements {
		jobs = append(jobs, job{req: req})
	}
	for _, sh := range cfg.Shapes {
		jobs = append(jobs, job{req: [2]float64{0.95, 0.05}, shape: sh})
	}
	for _, jb := range jobs {
		req := jb.req
		row := ColateRow{Alpha: req[0], Beta: req[1]}
		var p colate.Parameters
		var err error
		if jb.shape[0] > 0 {
			p = colate.Parameters{Counters: jb.shape[0], Subvector: jb.shape[1], Bits: 64}
			row.Fixed = true
		} else {
			p, err = colate.Solve(colate.Requirement{RAMBits: cfg.RAMBits, Alpha: req[0], Beta: req[1], TMin: tMin, TMax: tMax, Rho: rho, VectorSum: vectorSum})
		}
		row.Params, row.Err = p, err
		if err != nil {
			rows = append(rows, row)
			continue
		}
		vc := colate.Config{Counters: p.Counters, Subvector: p.Subvector, Bits: min(64, p.Bits), Span: cfg.Span, Unit: time.Nanosecond, Seed: cfg.Seed}
		vecs := [3][]*colate.Vector{}
		var packets, flowEntries float64
		for x := range 3 {
			for e := range nSpans + 1 {
				v, err := colate.New(vc, e*spanNS)
				if err != nil {
					return nil, err
				}
				vecs[x] = append(vecs[x], v)
			}
			for _, pk := range at[x] {
				vecs[x][pk.ts/spanNS].Insert(pk.flow, pk.id, pk.ts)
			}
			for _, v := range vecs[x] {
				packets += float64(v.Packets())
				flowEntries += float64(v.Flows())
			}
		}
		row.FlowBitsPerP = flowEntries * 96 / packets // a hash and a count per flow, as on the wire
		within, withinR, within1 := 0, 0, 0
		var sdErrs, sdExact, sdOracle []float64
		for fh, f := range flows {
			if f.n < cfg.MinPackets {
				continue
			}
			est, err := colate.Mean(vecs[f.src][f.vector:f.vector+2], vecs[f.dst][f.vector:f.vector+2], fh)
			if err != nil {
				continue
			}
			q := colate.NewQuery(fh, cfg.Gamma, nil).Robust()
			for e := f.vector; e <= f.vector+1; e++ {
				if err := q.Add(vecs[f.src][e], vecs[f.dst][e]); err != nil {
					return nil, err
				}
			}
			rob, err := q.Estimate()
			if err != nil {
				continue
			}
			// The same with the exact expectation over pairings.
			qx := colate.NewQuery(fh, 0, nil).Robust()
			for e := f.vector; e <= f.vector+1; e++ {
				if err := qx.Add(vecs[f.src][e], vecs[f.dst][e]); err != nil {
					return nil, err
				}
			}
			exact, _ := qx.Estimate()
			row.Flows++
			mu := f.sumNS / float64(f.n)
			if math.Abs(est.MeanNS-mu) <= req[1]*mu {
				within++
			}
			if math.Abs(rob.MeanNS-mu) <= req[1]*mu {
				withinR++
			}
			if math.Abs(rob.MeanNS-mu) <= 0.01*mu {
				within1++
			}
			sd := math.Sqrt(math.Max(f.sqNS2/float64(f.n)-mu*mu, 0))
			sdErrs = append(sdErrs, math.Abs(rob.StddevNS-sd)/sd)
			sdExact = append(sdExact, math.Abs(exact.StddevNS-sd)/sd)
			oracle, ok := oracleStddev(f.delays, f.ids, p.Subvector)
			if !ok {
				oracle = math.Inf(1)
			}
			sdOracle = append(sdOracle, math.Abs(oracle-sd)/sd)
		}
		if row.Flows > 0 {
			row.Within = float64(within) / float64(row.Flows)
			row.WithinRobust = float64(withinR) / float64(row.Flows)
			row.Within1 = float64(within1) / float64(row.Flows)
		}
		row.StddevWithin5, row.StddevMedian = within5(sdErrs)
		row.ExactWithin5, row.ExactMedian = within5(sdExact)
		row.OracleWithin5, _ = within5(sdOracle)
		// Stored as the wire form does: each vector's counters at the
		// width its largest needs.
		var bits float64
		for x := range 3 {
			for _, v := range vecs[x] {
				b, _ := v.MarshalBinary()
				bits += 8 * float64(len(b))
			}
		}
		row.BitsPerPkt = bits/packets - row.FlowBitsPerP
		rows = append(rows, row)
	}
	if cfg.Output != nil {
		mode := "solver with the vectors' sum t_X (one vector per span)"
		if cfg.PaperThreshold {
			mode = "the paper's solver (vectors dumped at T)"
		}
		fmt.Fprintf(cfg.Output, "COLATE triangle: 3 points, 6 links × %.0f packets/s, %v, %v vectors, M = %.0f bits; measured t_min %.3g (flows of %d packets), t_max %.3g, ρ %.3g, t_X %.3g; %s\n",
			cfg.LinkRate, cfg.Duration, cfg.Span, cfg.RAMBits, tMin, cfg.MinPackets, tMax, rho, tX, mode)
		w := tabwriter.NewWriter(cfg.Output, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(w, "α\tβ\tn\tm\tb\tT\tflows\twithin β (paper)\twithin β (robust)\twithin 1% (robust)\tσ within 5% (γ, exact; oracle bound)\tσ median error (γ, exact)\tbits/packet (counters)\t(+ flow counts)\t")
		for _, r := range rows {
			if r.Err != nil {
				fmt.Fprintf(w, "%.2f\t%.2f\t%v\t\t\t\t\t\t\t\t\t\t\t\t\n", r.Alpha, r.Beta, r.Err)
				continue
			}
			a, b := fmt.Sprintf("%.2f", r.Alpha), fmt.Sprintf("%.2f", r.Beta)
			if r.Fixed {
				a, b = "given", "n, m"
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%.3g\t%d\t%.1f%%\t%.1f%%\t%.1f%%\t%.1f%%, %.1f%%; %.1f%%\t%.2f, %.2f\t%.2f\t%.2f\t\n", a, b, r.Params.Counters, r.Params.Subvector,
				r.Params.Bits, r.Params.Threshold, r.Flows, 100*r.Within, 100*r.WithinRobust, 100*r.Within1, 100*r.StddevWithin5, 100*r.ExactWithin5, 100*r.OracleWithin5,
				r.StddevMedian, r.ExactMedian, r.BitsPerPkt, r.FlowBitsPerP)
		}
		w.Flush()
	}
	return rows, nil
}

// within5 returns the share of relative errors at most 5% and their median.
func within5(errs []float64) (share, median float64) {
	if len(errs) == 0 {
		return 0, 0
	}
	slices.Sort(errs)
	n := 0
	for _, e := range errs {
		if e <= 0.05 {
			n++
		}
	}
	return float64(n) / float64(len(errs)), errs[len(errs)/2]
}
