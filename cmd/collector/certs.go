package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/owl-latency/owl/internal/security"
)

const certsUsage = `usage: collector certs -dir DIR [-probes ID,...] [-collectors NAME,...] [-readers NAME,...] [-hosts HOST,...] [-valid DURATION]

Writes a development CA and certificates for owl's mTLS (docs/security.md):
DIR/ca.crt and ca.key (made once, reused after), ROLE-NAME.crt and .key per
name (issued again when they exist), gossip.key (cluster.key_file) and
reader-tokens (reader_tokens_file), both kept when they exist. Use your own
CA in production.

`

// certs runs `collector certs` with args (those after "certs") and
// returns the exit status: 0, 1 when files could not be written, 2 for a
// usage error.
func certs(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("collector certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, certsUsage)
		fs.PrintDefaults()
	}
	dir := fs.String("dir", "certs", "directory of the CA and the certificates (created 0700)")
	var spec security.DevSpec
	fs.Func("probes", "probe ids (comma-separated): client certificates owl://probe/ID", listFlag(&spec.Probes))
	fs.Func("collectors", "collector names (comma-separated): server and client certificates owl://collector/NAME", listFlag(&spec.Collectors))
	fs.Func("readers", "reader names (comma-separated): client certificates owl://reader/NAME and a bearer token each", listFlag(&spec.Readers))
	fs.Func("hosts", "DNS names and IP addresses in every collector certificate besides localhost, 127.0.0.1 and ::1 (comma-separated)", listFlag(&spec.Hosts))
	fs.DurationVar(&spec.Valid, "valid", security.DefaultDevValid, "validity of the new certificates")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "collector certs: unexpected arguments %q (lists are comma-separated)\n", fs.Args())
		return 2
	}
	if spec.Valid <= 0 {
		fmt.Fprintf(stderr, "collector certs: -valid %v must be positive\n", spec.Valid)
		return 2
	}
	if err := spec.Validate(); err != nil {
		fmt.Fprintln(stderr, "collector certs:", err)
		return 2
	}
	_, caErr := os.Stat(security.CAFile(*dir))
	_, gossipErr := os.Stat(security.GossipKeyFile(*dir))
	if err := security.MakeDevCerts(*dir, spec); err != nil {
		fmt.Fprintln(stderr, "collector certs:", err)
		return 1
	}
	printCerts(stdout, *dir, spec, caErr == nil, gossipErr == nil)
	return 0
}

// listFlag appends the comma-separated values of a flag to *list.
func listFlag(list *[]string) func(string) error {
	return func(v string) error {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				*list = append(*list, s)
			}
		}
		return nil
	}
}

// printCerts says what MakeDevCerts wrote in dir and how to use it.
func printCerts(w io.Writer, dir string, spec security.DevSpec, caReused, gossipKept bool) {
	fmt.Fprintf(w, "in %s (new certificates valid %v):\n", dir, spec.Valid)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	ca := "made"
	if caReused {
		ca = "reused: certificates made before still chain to it"
	}
	fmt.Fprintf(tw, "  %s\tthe CA, every component's tls.ca (%s); ca.key stays here\n", filepath.Base(security.CAFile(dir)), ca)
	for _, g := range []struct {
		role  security.Role
		names []string
	}{{security.RoleCollector, spec.Collectors}, {security.RoleProbe, spec.Probes}, {security.RoleReader, spec.Readers}} {
		for _, n := range g.names {
			cert, _ := security.CertFiles(dir, g.role, n)
			what := security.URI(g.role, n).String()
			if g.role == security.RoleCollector {
				what += " for " + strings.Join(append([]string{"localhost", "127.0.0.1", "::1"}, spec.Hosts...), ", ")
			}
			fmt.Fprintf(tw, "  %s, .key\t%s\n", filepath.Base(cert), what)
		}
	}
	gossip := "made"
	if gossipKept {
		gossip = "kept"
	}
	fmt.Fprintf(tw, "  %s\tcluster.key_file (%s)\n", filepath.Base(security.GossipKeyFile(dir)), gossip)
	if len(spec.Readers) > 0 {
		fmt.Fprintf(tw, "  %s\treader_tokens_file: a NAME TOKEN line per reader\n", filepath.Base(security.ReaderTokensFile(dir)))
	}
	tw.Flush()
	caFile := security.CAFile(dir)
	if len(spec.Collectors) > 0 {
		c, k := security.CertFiles(dir, security.RoleCollector, spec.Collectors[0])
		fmt.Fprintf(w, "collector -tls-cert %s -tls-key %s -tls-ca %s", c, k, caFile)
		if len(spec.Readers) > 0 {
			fmt.Fprintf(w, " -reader-tokens %s", security.ReaderTokensFile(dir))
		}
		fmt.Fprintln(w, " ...")
	}
	if len(spec.Probes) > 0 {
		c, k := security.CertFiles(dir, security.RoleProbe, spec.Probes[0])
		fmt.Fprintf(w, "probe -id %s -tls-cert %s -tls-key %s -tls-ca %s ...\n", spec.Probes[0], c, k, caFile)
	}
	if len(spec.Readers) > 0 {
		c, k := security.CertFiles(dir, security.RoleReader, spec.Readers[0])
		fmt.Fprintf(w, "try: grpcurl -cacert %s -cert %s -key %s localhost:7700 list\n", caFile, c, k)
	}
}
