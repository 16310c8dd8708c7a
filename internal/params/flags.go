package params

import (
	"flag"

	"github.com/owl-latency/owl/internal/cli"
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
}
