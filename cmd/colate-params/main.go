// Command colate-params solves COLATE's parameter equations (the paper's
// §5: Eqs. 13, 14, 15 and 22) for a point's RAM and a required
// reliability α and confidence interval β, and prints the vector shape
// with the probe and collector flags that set it, and what the vectors
// will cost to store.
//
// The solver's inputs t_min, t_max and ρ are sums of timestamps; they are
// derived here from what an operator knows (one vector per epoch):
//
//	t_min = min-packets × epoch/2   (the smallest flow the guarantee covers)
//	t_max = max-packets × epoch/2   (the largest flow in one epoch)
//	ρ     = delay / (epoch + delay) (a typical delay against the timestamps)
//
// or given directly with -tmin, -tmax and -rho (in nanoseconds).
//
// The paper's solver assumes a vector is dumped when its sum reaches T;
// owl closes one every epoch, so by default the noise is taken from the
// vector's expected sum t_X = rate·epoch·epoch/2 (-paper-threshold solves
// as the paper does).
//
//	colate-params -ram 1MiB -alpha 0.95 -beta 0.05 -rate 100000
package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/owl-latency/owl/internal/synopsis/colate"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "colate-params:", err)
		os.Exit(2)
	}
}

func run(args []string, out *os.File) error {
	fs := flag.NewFlagSet("colate-params", flag.ContinueOnError)
	ram := fs.String("ram", "1MiB", "RAM per point for the counter vector (bytes; KiB, MiB, GiB suffixes)")
	alpha := fs.Float64("alpha", 0.95, "required reliability α")
	beta := fs.Float64("beta", 0.05, "required confidence interval β (relative to the mean)")
	epoch := fs.Duration("epoch", time.Second, "epoch length (one vector per epoch)")
	rate := fs.Float64("rate", 10_000, "packets per second at the point (for the storage figures)")
	minPackets := fs.Float64("min-packets", 100, "smallest flow, in packets per epoch, the guarantee must cover")
	maxPackets := fs.Float64("max-packets", 0, "largest flow in packets per epoch (0: the point's whole rate)")
	delay := fs.Duration("delay", 100*time.Microsecond, "typical one-way delay between points")
	tmin := fs.Float64("tmin", 0, "t_min in ns, overriding -min-packets")
	tmax := fs.Float64("tmax", 0, "t_max in ns, overriding -max-packets")
	rho := fs.Float64("rho", 0, "ρ, overriding -delay")
	paper := fs.Bool("paper-threshold", false, "solve as the paper does, for vectors dumped when their sum reaches T (owl closes one per epoch)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bytes, err := parseBytes(*ram)
	if err != nil {
		return fmt.Errorf("-ram: %w", err)
	}
	if *epoch <= 0 || *rate <= 0 {
		return errors.New("-epoch and -rate must be positive")
	}
	half := float64(*epoch) / 2
	q := colate.Requirement{RAMBits: 8 * bytes, Alpha: *alpha, Beta: *beta, TMin: *tmin, TMax: *tmax, Rho: *rho}
	if q.TMin == 0 {
		q.TMin = *minPackets * half
	}
	if q.TMax == 0 {
		mp := *maxPackets
		if mp == 0 {
			mp = *rate * epoch.Seconds()
		}
		q.TMax = mp * half
	}
	if q.Rho == 0 {
		q.Rho = float64(*delay) / float64(*epoch+*delay)
	}
	packets := *rate * epoch.Seconds()
	sum := packets * half
	if !*paper {
		q.VectorSum = sum
	}
	fmt.Fprintf(out, "inputs: M = %.0f bits, α = %g, β = %g, t_min = %.4g, t_max = %.4g, ρ = %.4g, t_X = %.4g (epoch %v, %.0f packets/s)\n",
		q.RAMBits, q.Alpha, q.Beta, q.TMin, q.TMax, q.Rho, q.VectorSum, *epoch, *rate)
	p, err := colate.Solve(q)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "n (counters)     %d\nm (subvector)    %d\nb (bits)         %d\nT (threshold)    %.4g\nA, B (per point) %.4g, %.4g\n",
		p.Counters, p.Subvector, p.Bits, p.Threshold, p.A, p.B)
	// A vector's counters reach about rate·epoch packets × epoch/2 in
	// total, spread over the counters the packets hit (at most one each;
	// fewer when a flow's packets share its m counters); the wire form
	// stores each counter at the width the largest needs, or only the
	// non-zero ones (and a mark per counter) when that is smaller.
	if sum > p.Threshold {
		fmt.Fprintf(out, "note: at %.0f packets/s a vector's sum (%.3g) passes T: the solver's guarantee assumes fewer packets per epoch (or a shorter -epoch)\n", *rate, sum)
	}
	n := float64(p.Counters)
	nonzero := n * -math.Expm1(-packets/n)
	width := math.Min(64, math.Ceil(math.Log2(math.Max(2, 4*sum/math.Max(1, nonzero)))))
	vectorBytes := math.Min(n*width, n+nonzero*width) / 8
	perDay := vectorBytes * (24 * time.Hour).Seconds() / epoch.Seconds()
	fmt.Fprintf(out, "storage: at most about %.0f bytes per vector (counters at ~%.0f bits), %.3g bits per packet, %.3g GB per day per point (plus the flow counts)\n",
		vectorBytes, width, 8*vectorBytes/packets, perDay/1e9)
	fmt.Fprintf(out, "probe and collector flags: -colate -colate-counters %d -colate-subvector %d -colate-bits %d -epoch %v\n",
		p.Counters, p.Subvector, min(64, p.Bits), *epoch)
	fmt.Fprintf(out, "or in params: colate: {enabled: true, counters: %d, subvector: %d, bits: %d}\n", p.Counters, p.Subvector, min(64, p.Bits))
	return nil
}

// parseBytes reads a byte count with an optional KiB/MiB/GiB (or KB/MB/GB)
// suffix.
func parseBytes(s string) (float64, error) {
	mult := 1.0
	for _, u := range []struct {
		suffix string
		m      float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.m
			break
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%q is not a positive size", s)
	}
	return v * mult, nil
}
