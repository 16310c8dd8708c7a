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
	tr := newColTraffic(cfg, rng)
	ms := measureColate(cfg, tr)
	var rows []ColateRow
	for _, jb := range colateJobs(cfg) {
		row, err := runColateJob(cfg, tr, ms, jb)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	if cfg.Output != nil {
		writeColateTable(cfg, ms, rows)
	}
	return rows, nil
}

// colPkt is one packet as one observation point sees it.
type colPkt struct {
	flow uint64
	id   uint64
	ts   int64
}

// colTraffic is the triangle's traffic: the packets each point sees, the
// flows by hash, and the time grid.
type colTraffic struct {
	at     [3][]colPkt
	flows  map[uint64]*colFlow
	spanNS int64
	nSpans int64
}

// newColTraffic draws the traffic on all six links; flows live within one
// span so that each is one vector pair.
func newColTraffic(cfg ColateConfig, rng *rand.Rand) *colTraffic {
	tr := &colTraffic{flows: map[uint64]*colFlow{}, spanNS: int64(cfg.Span), nSpans: int64(cfg.Duration / cfg.Span)}
	for a := range 3 {
		for b := range 3 {
			if a == b {
				continue
			}
			for e := range tr.nSpans {
				left := int(cfg.LinkRate * cfg.Span.Seconds())
				for left > 0 {
					size := min(left, int(20/math.Pow(1-rng.Float64(), 1/1.1)))
					left -= size
					tr.addFlow(rng, a, b, e, size)
				}
			}
		}
	}
	return tr
}

// addFlow draws one flow of size packets from point a to point b in span
// e and records its packets at both ends.
func (tr *colTraffic) addFlow(rng *rand.Rand, a, b int, e int64, size int) {
	spanNS := tr.spanNS
	fh := rng.Uint64()
	base := 50e3 + rng.Float64()*rng.Float64()*5e6 // 50 µs to 5 ms
	f := &colFlow{src: a, dst: b, vector: e}
	tr.flows[fh] = f
	for range size {
		ts := e*spanNS + rng.Int64N(spanNS-int64(20*time.Millisecond))
		d := int64(base * (0.5 + 0.5*rng.ExpFloat64()))
		id := rng.Uint64()
		tr.at[a] = append(tr.at[a], colPkt{fh, id, ts})
		tr.at[b] = append(tr.at[b], colPkt{fh, id, ts + d})
		f.sumNS += float64(d)
		f.sqNS2 += float64(d) * float64(d)
		f.n++
		f.delays = append(f.delays, d)
		f.ids = append(f.ids, id)
	}
}

// colMeasures are the solver's inputs measured on the traffic (§5).
type colMeasures struct {
	tMin, tMax, rho float64
	tX              float64 // mean sum of a vector's relative timestamps
	vectorSum       float64 // what the solver is given: t_X, or 0 as the paper
}

// measureColate measures the per-flow timestamp sums within a vector at
// the sender, ρ = (t_R − t_S)/(t_R + t_S), and t_X.
func measureColate(cfg ColateConfig, tr *colTraffic) colMeasures {
	spanNS := tr.spanNS
	var sums, rhos []float64
	tS := map[uint64]float64{}
	for _, p := range tr.at[0] {
		if f := tr.flows[p.flow]; f.src == 0 {
			tS[p.flow] += float64(p.ts - f.vector*spanNS)
		}
	}
	for fh, s := range tS {
		f := tr.flows[fh]
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
		for _, p := range tr.at[x] {
			tX += float64(p.ts % spanNS)
		}
	}
	tX /= float64(3 * tr.nSpans)
	vectorSum := tX
	if cfg.PaperThreshold {
		vectorSum = 0
	}
	return colMeasures{
		tMin:      float64(cfg.MinPackets) * float64(spanNS) / 2,
		tMax:      sums[len(sums)-1],
		rho:       rhos[len(rhos)/2],
		tX:        tX,
		vectorSum: vectorSum,
	}
}

// colJob is one row to evaluate: a requirement to solve for, or a given
// shape (n, m) when shape[0] > 0.
type colJob struct {
	req   [2]float64
	shape [2]int
}

// colateJobs lists the requirements, then the given shapes.
func colateJobs(cfg ColateConfig) []colJob {
	var jobs []colJob
	for _, req := range cfg.Requirements {
		jobs = append(jobs, colJob{req: req})
	}
	for _, sh := range cfg.Shapes {
		jobs = append(jobs, colJob{req: [2]float64{0.95, 0.05}, shape: sh})
	}
	return jobs
}

// runColateJob solves (or takes) the job's parameters, records every
// point's vectors with them and scores the flows; a solver error goes in
// the row, other errors are returned.
func runColateJob(cfg ColateConfig, tr *colTraffic, ms colMeasures, jb colJob) (ColateRow, error) {
	req := jb.req
	row := ColateRow{Alpha: req[0], Beta: req[1]}
	var p colate.Parameters
	var err error
	if jb.shape[0] > 0 {
		p = colate.Parameters{Counters: jb.shape[0], Subvector: jb.shape[1], Bits: 64}
		row.Fixed = true
	} else {
		p, err = colate.Solve(colate.Requirement{RAMBits: cfg.RAMBits, Alpha: req[0], Beta: req[1], TMin: ms.tMin, TMax: ms.tMax, Rho: ms.rho, VectorSum: ms.vectorSum})
	}
	row.Params, row.Err = p, err
	if err != nil {
		return row, nil
	}
	vecs, packets, flowEntries, err := recordColate(cfg, tr, p)
	if err != nil {
		return row, err
	}
	row.FlowBitsPerP = flowEntries * 96 / packets // a hash and a count per flow, as on the wire
	if err := row.score(cfg, tr, vecs, p.Subvector); err != nil {
		return row, err
	}
	row.BitsPerPkt = colateWireBits(vecs)/packets - row.FlowBitsPerP
	return row, nil
}

// recordColate records every point's packets in one vector per span (and
// one more) and counts the packets and flow entries they hold.
func recordColate(cfg ColateConfig, tr *colTraffic, p colate.Parameters) (vecs [3][]*colate.Vector, packets, flowEntries float64, err error) {
	spanNS := tr.spanNS
	vc := colate.Config{Counters: p.Counters, Subvector: p.Subvector, Bits: min(64, p.Bits), Span: cfg.Span, Unit: time.Nanosecond, Seed: cfg.Seed}
	for x := range 3 {
		for e := range tr.nSpans + 1 {
			v, err := colate.New(vc, e*spanNS)
			if err != nil {
				return vecs, 0, 0, err
			}
			vecs[x] = append(vecs[x], v)
		}
		for _, pk := range tr.at[x] {
			vecs[x][pk.ts/spanNS].Insert(pk.flow, pk.id, pk.ts)
		}
		for _, v := range vecs[x] {
			packets += float64(v.Packets())
			flowEntries += float64(v.Flows())
		}
	}
	return vecs, packets, flowEntries, nil
}

// colScore accumulates the per-flow outcomes of one row.
type colScore struct {
	within, withinR, within1  int
	sdErrs, sdExact, sdOracle []float64
}

// score estimates every qualifying flow from the vectors and fills in the
// row's accuracy figures; m is the subvector size.
func (row *ColateRow) score(cfg ColateConfig, tr *colTraffic, vecs [3][]*colate.Vector, m int) error {
	var sc colScore
	for fh, f := range tr.flows {
		if f.n < cfg.MinPackets {
			continue
		}
		ok, err := sc.addFlow(cfg.Gamma, row.Beta, m, vecs, fh, f)
		if err != nil {
			return err
		}
		if ok {
			row.Flows++
		}
	}
	if row.Flows > 0 {
		row.Within = float64(sc.within) / float64(row.Flows)
		row.WithinRobust = float64(sc.withinR) / float64(row.Flows)
		row.Within1 = float64(sc.within1) / float64(row.Flows)
	}
	row.StddevWithin5, row.StddevMedian = within5(sc.sdErrs)
	row.ExactWithin5, row.ExactMedian = within5(sc.sdExact)
	row.OracleWithin5, _ = within5(sc.sdOracle)
	return nil
}

// addFlow estimates one flow (paper's mean, robust with gamma virtual
// repetitions, robust exact) and scores it; it reports whether the flow
// counted, i.e. whether the paper's and the robust estimates succeeded.
func (sc *colScore) addFlow(gamma int, beta float64, m int, vecs [3][]*colate.Vector, fh uint64, f *colFlow) (bool, error) {
	est, err := colate.Mean(vecs[f.src][f.vector:f.vector+2], vecs[f.dst][f.vector:f.vector+2], fh)
	if err != nil {
		return false, nil
	}
	q, err := robustQuery(vecs, fh, f, gamma)
	if err != nil {
		return false, err
	}
	rob, err := q.Estimate()
	if err != nil {
		return false, nil
	}
	// The same with the exact expectation over pairings.
	qx, err := robustQuery(vecs, fh, f, 0)
	if err != nil {
		return false, err
	}
	exact, _ := qx.Estimate()
	mu := f.sumNS / float64(f.n)
	if math.Abs(est.MeanNS-mu) <= beta*mu {
		sc.within++
	}
	if math.Abs(rob.MeanNS-mu) <= beta*mu {
		sc.withinR++
	}
	if math.Abs(rob.MeanNS-mu) <= 0.01*mu {
		sc.within1++
	}
	sd := math.Sqrt(math.Max(f.sqNS2/float64(f.n)-mu*mu, 0))
	sc.sdErrs = append(sc.sdErrs, math.Abs(rob.StddevNS-sd)/sd)
	sc.sdExact = append(sc.sdExact, math.Abs(exact.StddevNS-sd)/sd)
	oracle, ok := oracleStddev(f.delays, f.ids, m)
	if !ok {
		oracle = math.Inf(1)
	}
	sc.sdOracle = append(sc.sdOracle, math.Abs(oracle-sd)/sd)
	return true, nil
}

// robustQuery is a robust query for the flow with gamma virtual
// repetitions (0: the exact expectation), given its vector and the next.
func robustQuery(vecs [3][]*colate.Vector, fh uint64, f *colFlow, gamma int) (*colate.Query, error) {
	q := colate.NewQuery(fh, gamma, nil).Robust()
	for e := f.vector; e <= f.vector+1; e++ {
		if err := q.Add(vecs[f.src][e], vecs[f.dst][e]); err != nil {
			return nil, err
		}
	}
	return q, nil
}

// colateWireBits is the vectors' size stored as the wire form does: each
// vector's counters at the width its largest needs.
func colateWireBits(vecs [3][]*colate.Vector) float64 {
	var bits float64
	for x := range 3 {
		for _, v := range vecs[x] {
			b, _ := v.MarshalBinary()
			bits += 8 * float64(len(b))
		}
	}
	return bits
}

// writeColateTable prints the measurements and one line per row.
func writeColateTable(cfg ColateConfig, ms colMeasures, rows []ColateRow) {
	mode := "solver with the vectors' sum t_X (one vector per span)"
	if cfg.PaperThreshold {
		mode = "the paper's solver (vectors dumped at T)"
	}
	fmt.Fprintf(cfg.Output, "COLATE triangle: 3 points, 6 links × %.0f packets/s, %v, %v vectors, M = %.0f bits; measured t_min %.3g (flows of %d packets), t_max %.3g, ρ %.3g, t_X %.3g; %s\n",
		cfg.LinkRate, cfg.Duration, cfg.Span, cfg.RAMBits, ms.tMin, cfg.MinPackets, ms.tMax, ms.rho, ms.tX, mode)
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
