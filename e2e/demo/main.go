// Command demo runs owl end to end on loopback with the bundled capture: it
// builds the binaries, makes the two captures of three paths with tracegen
// (Weibull delays; 0, 0.1% and 1% loss), starts a collector and six probes
// as separate processes, waits for the results, and prints them as queried
// over the collector's gRPC API, next to the ground truth.
//
//	go run ./e2e/demo            # what `make demo` runs
//	go run ./e2e/demo -keep      # leave the collector up for grpcurl
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/e2e/harness"
	"github.com/owl-latency/owl/internal/capture"
	"github.com/owl-latency/owl/internal/epoch"
	"github.com/owl-latency/owl/internal/netpath"
	"github.com/owl-latency/owl/internal/security"
	"github.com/owl-latency/owl/internal/sim"
)

func main() {
	keep := flag.Bool("keep", false, "keep the collector running after the demo (Ctrl-C to stop)")
	dir := flag.String("dir", "", "working directory (default: a new temporary one)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*dir, *keep); err != nil {
		log.Error("demo failed", "err", err)
		os.Exit(1)
	}
}

var losses = []struct {
	name string
	loss string
	args []string // more tracegen flags
}{
	{"loss-0", "0", nil},
	{"loss-0.1pct", "0.001", nil},
	{"loss-1pct", "0.01", nil},
	{"loss-1pct-reorder-dup", "0.01", []string{"-reorder", "0.01", "-reorder-extra", "20ms", "-duplicate", "0.002"}},
}

func run(dir string, keep bool) error {
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "owl-demo-"); err != nil {
			return err
		}
	}
	root, err := harness.ModuleRoot()
	if err != nil {
		return err
	}
	// Every connection is mTLS, with a development CA kept beside the
	// logs so that grpcurl can use it.
	if err := harness.UseCertsDir(filepath.Join(dir, "certs")); err != nil {
		return err
	}
	fmt.Printf("building owl into %s/bin ...\n", dir)
	env, err := harness.NewEnv(dir)
	if err != nil {
		return err
	}
	defer func() { _ = env.Close() }()

	paths, err := makeCaptures(env, root, dir)
	if err != nil {
		return err
	}
	coll, addrs, err := startCollector(env, dir, paths)
	if err != nil {
		return err
	}
	if err := replayProbes(env, dir, addrs.GRPC); err != nil {
		return err
	}
	conn, err := harness.Dial(addrs.GRPC)
	if err != nil {
		return err
	}
	defer conn.Close()
	q := owlv1.NewQueryServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := printPathTables(ctx, q, coll, dir); err != nil {
		return err
	}
	if err := colateTable(ctx, q, root, filepath.Join(dir, losses[0].name+"-truth.csv"), losses[0].name); err != nil {
		return err
	}
	printHints(dir, addrs.GRPC)
	if keep {
		fmt.Println("collector kept running; Ctrl-C to stop")
		sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		<-sig.Done()
	}
	return coll.Stop(10 * time.Second)
}

// makeCaptures runs tracegen once per entry of losses to make the two
// captures and the ground truth of each path in dir, and returns the
// collector config's lines for the paths.
func makeCaptures(env *harness.Env, root, dir string) (string, error) {
	var paths strings.Builder
	for i, l := range losses {
		prefix := filepath.Join(dir, l.name)
		args := append([]string{"-in", filepath.Join(root, "testdata", "trace.pcap"), "-out", prefix, "-loss", l.loss, "-seed", fmt.Sprint(i + 1)}, l.args...)
		tg, err := env.Start("tracegen-"+l.name, "tracegen", args...)
		if err != nil {
			return "", err
		}
		if err := tg.Wait(time.Minute); err != nil {
			return "", fmt.Errorf("tracegen: %v\n%s", err, tg.Log())
		}
		fmt.Print(tg.Log())
		fmt.Fprintf(&paths, "  - {name: %s, upstream: up-%s, downstream: down-%s}\n", l.name, l.name, l.name)
	}
	return paths.String(), nil
}

// startCollector starts the collector with the given paths and COLATE on,
// storing its data under dir.
func startCollector(env *harness.Env, dir, paths string) (*harness.Proc, harness.Addrs, error) {
	// COLATE on as well: every probe keeps one vector of all its packets
	// per epoch, so that any flow between any two of them can be asked
	// for afterwards.
	cfg := fmt.Sprintf("grpc_listen: 127.0.0.1:0\nhttp_listen: 127.0.0.1:0\ndata_dir: %s\npair_timeout: 5s\nparams:\n  colate: {enabled: true, counters: %d}\npaths:\n%s",
		filepath.Join(dir, "data"), colateCounters, paths)
	coll, addrs, err := env.StartCollector("collector", cfg)
	if err != nil {
		return nil, addrs, err
	}
	fmt.Printf("collector on %s (gRPC) and %s (metrics); %d probes replaying ...\n", addrs.GRPC, addrs.HTTP, 2*len(losses))
	fmt.Printf("web page: http://%s/ (live while the demo runs; -keep leaves it up)\n", addrs.HTTP)
	return coll, addrs, nil
}

// replayProbes starts an upstream and a downstream probe per path, each
// replaying its capture to the collector at grpcAddr, and waits for all of
// them to finish.
func replayProbes(env *harness.Env, dir, grpcAddr string) error {
	var probes []*harness.Proc
	for _, l := range losses {
		for _, side := range []string{"up", "down"} {
			p, err := env.Start(side+"-"+l.name, "probe", "-id", side+"-"+l.name, "-collector", grpcAddr,
				"-file", filepath.Join(dir, l.name+"-"+side+".pcap")) // parameters come from the collector
			if err != nil {
				return err
			}
			probes = append(probes, p)
		}
	}
	for _, p := range probes {
		if err := p.Wait(2 * time.Minute); err != nil {
			return fmt.Errorf("probe %s: %v\n%s", p.Name, err, p.Log())
		}
	}
	return nil
}

// printPathTables waits for every path's results over gRPC and prints each
// beside its ground truth.
func printPathTables(ctx context.Context, q owlv1.QueryServiceClient, coll *harness.Proc, dir string) error {
	for _, l := range losses {
		truths, err := epochTruths(filepath.Join(dir, l.name+"-truth.csv"))
		if err != nil {
			return err
		}
		stats, err := harness.WaitStats(ctx, q, l.name, len(truths))
		if err != nil {
			return fmt.Errorf("%v\n%s", err, coll.Log())
		}
		fmt.Printf("\n=== path %s: GetPathStats over gRPC vs ground truth (loss %s %s; 1 s epochs)\n", l.name, l.loss, strings.Join(l.args, " "))
		printTable(stats, truths)
	}
	return nil
}

// printHints tells where the demo's files are and how to query the
// collector at grpcAddr by hand.
func printHints(dir, grpcAddr string) {
	fmt.Printf("\nlogs, captures and data in %s\n", dir)
	certs, _ := harness.CertsDir()
	cert, key := security.CertFiles(certs, security.RoleReader, harness.ReaderName)
	tls := fmt.Sprintf("-cacert %s -cert %s -key %s", security.CAFile(certs), cert, key)
	fmt.Printf("try: grpcurl %s -d '{\"path\":\"loss-1pct\",\"limit\":2}' %s owl.v1.QueryService/GetPathStats\n", tls, grpcAddr)
	fmt.Printf("     grpcurl %s -d '{\"flow\":{\"src\":\"10.99.0.2\",\"dst\":\"10.99.0.1\",\"srcPort\":8080,\"dstPort\":44368,\"protocol\":6},\"upstream\":\"up-loss-0\",\"downstream\":\"down-loss-0\"}' %s owl.v1.QueryService/GetFlowLatencyHistoric\n", tls, grpcAddr)
}

// colateCounters is the demo's COLATE vector size (n).
const colateCounters = 16384

// colateTable asks GetFlowLatencyHistoric for the trace's five heaviest
// flows between the two points of a lossless path, and prints the answers
// beside each flow's true mean over the whole run.
func colateTable(ctx context.Context, q owlv1.QueryServiceClient, root, truthPath, path string) error {
	f, err := os.Open(truthPath)
	if err != nil {
		return err
	}
	truth, err := sim.ReadTruth(f)
	f.Close()
	if err != nil {
		return err
	}
	flows, err := sim.FlowDelays(truth, filepath.Join(root, "testdata", "trace.pcap"), capture.DefaultIdentityConfig())
	if err != nil {
		return err
	}
	keys := make([]capture.FlowKey, 0, len(flows))
	for k := range flows {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b capture.FlowKey) int { return flows[b].Packets - flows[a].Packets })
	fmt.Printf("\n=== COLATE: GetFlowLatencyHistoric between up-%s and down-%s (no path needed) vs ground truth, the five heaviest flows\n", path, path)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "flow\tpackets\ttrue mean µs\towl mean µs\terr\t± µs (95%)\tpaper's estimator µs\tbits/packet\t")
	for _, k := range keys[:min(5, len(keys))] {
		res, err := q.GetFlowLatencyHistoric(ctx, &owlv1.GetFlowLatencyHistoricRequest{Flow: netpath.FlowToProto(k), Upstream: "up-" + path, Downstream: "down-" + path})
		if err != nil {
			return fmt.Errorf("GetFlowLatencyHistoric: %w", err)
		}
		paper, err := q.GetFlowLatencyHistoric(ctx, &owlv1.GetFlowLatencyHistoricRequest{Flow: netpath.FlowToProto(k), Upstream: "up-" + path, Downstream: "down-" + path, Estimator: "paper"})
		if err != nil {
			return fmt.Errorf("GetFlowLatencyHistoric: %w", err)
		}
		mean := flows[k].MeanNS()
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.2f%%\t%.3f\t%.3f\t%.0f\t\n", k, res.GetPackets(), mean/1e3, res.GetMeanNs()/1e3,
			100*rel(res.GetMeanNs(), mean), res.GetHalfWidthNs()/1e3, paper.GetMeanNs()/1e3, res.GetBitsPerPacket())
	}
	return tw.Flush()
}

func epochTruths(path string) ([]sim.EpochTruth, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	truth, err := sim.ReadTruth(f)
	if err != nil {
		return nil, err
	}
	return sim.EpochTruths(truth, epoch.DefaultConfig(), 0), nil
}

func printTable(stats []*owlv1.PathStats, truths []sim.EpochTruth) {
	byEpoch := map[int64]*owlv1.PathStats{}
	for _, s := range stats {
		byEpoch[s.GetEpoch()] = s
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "epoch\tsent\tlost\towl lost\tcrossed\towl matched\ttrue mean µs\towl mean µs\terr\tLDA mean µs\tLDA err\ttrue std µs\towl std µs\terr\tsamples\testimator\tRDA m\tbytes\t")
	for _, t := range truths {
		s := byEpoch[t.Epoch]
		if s == nil || s.GetStatus() != owlv1.ResultStatus_RESULT_STATUS_OK {
			fmt.Fprintf(tw, "%d\t%d\t%d\t-\t%d\t-\t%.3f\t-\t-\t-\t-\t%.3f\t-\t-\t-\t%v\t\t\t\n", t.Epoch, t.Sent, t.Lost, t.Crossed, t.AllMeanNS/1e3, t.AllStddevNS/1e3, s.GetStatus())
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%d\t%d\t%.3f\t%.3f\t%.1e\t%.3f\t%.2f%%\t%.3f\t%.3f\t%.2f%%\t%d\t%s\t%d\t%d\t\n",
			s.GetStart().AsTime().Format("15:04:05"), t.Sent, t.Lost, s.GetLost(), t.Crossed, s.GetBoundaryMatched(),
			t.AllMeanNS/1e3, s.GetMeanNs()/1e3, rel(s.GetMeanNs(), t.AllMeanNS),
			s.GetLdaMeanNs()/1e3, 100*rel(s.GetLdaMeanNs(), t.MeanNS),
			t.AllStddevNS/1e3, s.GetStddevNs()/1e3, 100*rel(s.GetStddevNs(), t.AllStddevNS),
			s.GetSamples(), s.GetEstimator(), s.GetRdaBuckets(), s.GetExchangedBytes())
	}
	tw.Flush()
}

func rel(est, truth float64) float64 {
	if truth == 0 {
		return math.Abs(est)
	}
	return math.Abs(est-truth) / truth
}
