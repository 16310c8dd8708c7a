package params

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/owl-latency/owl/internal/cli"
	"github.com/owl-latency/owl/internal/synopsis/colate"
	"github.com/owl-latency/owl/internal/synopsis/lds"
)

// BindFlags binds the parameters to flags of fs, with the current values as
// defaults: -id-seed, -payload-bytes, -nat-safe, -epoch, -grace, -lda-rows,
// -lda-banks, -lda-seed, -rda-banks, -rda-buckets, -rda-seed, -rda-check.
func (p *Params) BindFlags(fs *flag.FlagSet) {
	p.Identity.BindFlags(fs)
	fs.DurationVar(&p.Epoch.Length, "epoch", p.Epoch.Length, "epoch length δ")
	fs.DurationVar(&p.Epoch.Grace, "grace", p.Epoch.Grace, "how long an epoch stays open after its end for late packets")
	fs.IntVar(&p.LDA.Rows, "lda-rows", p.LDA.Rows, "LDA rows per bank")
	fs.Var(cli.Uint8List{P: &p.LDA.BankSampleLog2}, "lda-banks", "LDA bank sampling exponents: bank j samples 2^-e_j − 2^-e_{j+1} of the packets")
	fs.Uint64Var(&p.LDA.Seed, "lda-seed", p.LDA.Seed, "LDA hash seed")
	fs.IntVar(&p.RDA.Banks, "rda-banks", p.RDA.Banks, "RDA banks (hash functions)")
	fs.IntVar(&p.RDA.Buckets, "rda-buckets", p.RDA.Buckets, "RDA buckets per bank to start with (the collector resizes)")
	fs.Uint64Var(&p.RDA.Seed, "rda-seed", p.RDA.Seed, "RDA hash seed")
	fs.BoolVar(&p.RDA.Check, "rda-check", p.RDA.Check, "RDA 32-bit check field in every bucket")
	fs.IntVar(&p.LDS.Rows, "lds-rows", p.LDS.Rows, "LDS rows")
	fs.IntVar(&p.LDS.Cols, "lds-cols", p.LDS.Cols, "LDS cells per row")
	fs.IntVar(&p.LDS.K, "lds-k", p.LDS.K, "LDS virtual LDA length k (cells per flow and row)")
	fs.Var(cli.Uint8List{P: &p.LDS.RowSampleLog2}, "lds-sampling", "LDS per-row sampling exponents: row r samples 2^-e_r of the packets")
	fs.Uint64Var(&p.LDS.Seed, "lds-seed", p.LDS.Seed, "LDS hash seed")
	fs.BoolVar(&p.Colate.Enabled, "colate", p.Colate.Enabled, "record one COLATE vector of all packets per epoch (per-flow delay between any two points, queried later)")
	fs.IntVar(&p.Colate.Counters, "colate-counters", p.Colate.Counters, "COLATE counters n per vector")
	fs.IntVar(&p.Colate.Subvector, "colate-subvector", p.Colate.Subvector, "COLATE counters m per flow (even)")
	fs.IntVar(&p.Colate.Bits, "colate-bits", p.Colate.Bits, "COLATE counter width b; a vector whose counter outgrows it is marked overflowed")
	fs.Uint64Var(&p.Colate.Seed, "colate-seed", p.Colate.Seed, "COLATE hash seed")
	fs.DurationVar(&p.Colate.Unit, "colate-unit", p.Colate.Unit, "COLATE timestamp unit")
	fs.Var(colateSolve{p}, "colate-solve", "set -colate-counters, -colate-subvector and -colate-bits from the COLATE solver (§5): RAM_BITS,ALPHA,BETA,TMIN,TMAX,RHO (see colate-params); enables -colate")
	fs.Var(ldsSize{p}, "lds-size", "size the LDS rows and cells from FLOWS,LARGE,EPS: expected flows per epoch, share of them large enough to measure (e.g. 0.04), target probability of only large collisions (LDS §3); uses -lds-k, give it first")
}

// ldsSize sets the LDS shape from sizing inputs (lds.Size).
type ldsSize struct{ p *Params }

func (v ldsSize) String() string {
	if v.p == nil {
		return ""
	}
	return fmt.Sprintf("rows %d cols %d", v.p.LDS.Rows, v.p.LDS.Cols)
}

func (v ldsSize) Set(s string) error {
	f := strings.Split(s, ",")
	if len(f) != 3 {
		return fmt.Errorf("want FLOWS,LARGE,EPS, got %q", s)
	}
	flows, err1 := strconv.Atoi(strings.TrimSpace(f[0]))
	large, err2 := strconv.ParseFloat(strings.TrimSpace(f[1]), 64)
	eps, err3 := strconv.ParseFloat(strings.TrimSpace(f[2]), 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("want FLOWS,LARGE,EPS numbers: %w", err)
	}
	rows, cols, err := lds.Size(flows, large, eps, v.p.LDS.K)
	if err != nil {
		return err
	}
	v.p.LDS.Rows, v.p.LDS.Cols = rows, cols
	if len(v.p.LDS.RowSampleLog2) != rows {
		v.p.LDS.RowSampleLog2 = nil // one rate per row no longer fits: sample every packet
	}
	return nil
}

// colateSolve sets the COLATE shape from the solver's inputs.
type colateSolve struct{ p *Params }

func (v colateSolve) String() string {
	if v.p == nil {
		return ""
	}
	return fmt.Sprintf("n %d m %d b %d", v.p.Colate.Counters, v.p.Colate.Subvector, v.p.Colate.Bits)
}

func (v colateSolve) Set(s string) error {
	q, err := colate.ParseRequirement(s)
	if err != nil {
		return err
	}
	sol, err := colate.Solve(q)
	if err != nil {
		return err
	}
	v.p.Colate.Enabled = true
	v.p.Colate.Counters, v.p.Colate.Subvector, v.p.Colate.Bits = sol.Counters, sol.Subvector, sol.Bits
	return nil
}
