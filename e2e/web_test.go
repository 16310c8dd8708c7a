package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
	"github.com/owl-latency/owl/e2e/harness"
	"github.com/owl-latency/owl/internal/epoch"
)

// The collector's web page, in a real browser (Debian's chromium,
// headless): what a person would see against what the gRPC API says.
// The page's DOM contract: each view renders into
// main#view[data-view], marked data-ready="1" once its data is drawn;
// the overview's table#paths has a tr[data-path] per path with
// td[data-field][data-value] cells holding the API's raw values; the
// path view exposes its chart's data as window.owlSeries and its CDF as
// window.owlCDF; window.owlFirstRenderMS is performance.now() at the
// first view's first render.

// webPaths are the trace test's paths: all packets, and the TCP ones.
const webPaths = pathAB + `  - name: a-to-b-tcp
    upstream: op-a
    downstream: op-b
    selector:
      protocol: tcp
`

// firstRenderBound is the bound on the page's first render.
const firstRenderBound = time.Second

// needBrowser skips a test of the page where no chromium is installed.
func needBrowser(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	if _, err := harness.ChromiumPath(); errors.Is(err, harness.ErrNoChromium) {
		t.Skip(err)
	}
}

// newBrowser starts a headless chromium for the test, 1280×800, its
// output in the test's directory.
func newBrowser(t *testing.T, env *harness.Env) *harness.Browser {
	t.Helper()
	lf, err := os.Create(filepath.Join(env.Dir, "chromium.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lf.Close() })
	b, err := harness.NewBrowser(harness.BrowserConfig{ProfileDir: t.TempDir(), Log: lf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// screenshotDir is where the views' screenshots go: $OWL_WEB_SCREENSHOTS
// (docs/web keeps one of each), else the test's temporary directory.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("OWL_WEB_SCREENSHOTS"); d != "" {
		if !filepath.IsAbs(d) {
			root, err := harness.ModuleRoot()
			if err != nil {
				t.Fatal(err)
			}
			d = filepath.Join(root, d)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// screenshot saves the viewport (1280×800) of the view shown as dir/name.png.
func screenshot(t *testing.T, b *harness.Browser, dir, name string) {
	t.Helper()
	png, err := b.Screenshot(0)
	if err != nil {
		t.Errorf("screenshot of %s: %v", name, err)
		return
	}
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Error(err)
		return
	}
	t.Logf("screenshot %s (%d KiB)", p, len(png)>>10)
}

// TestWebTrace runs a collector fed by two probes replaying the bundled
// trace across an impaired path, and looks at each view of its page:
// the overview shows every path with the API's latest numbers, the path
// view's chart one point per epoch with the API's values and a CDF that
// rises to 1, the flows and probe views their rows; a screenshot of each.
func TestWebTrace(t *testing.T) {
	needBrowser(t)
	if os.Getenv("OWL_E2E_RACE") == "1" {
		t.Skip("the page's queries run the collector's query code, which the other tests run race-built already")
	}
	env, out, truths := setup(t)
	coll, addrs, err := env.StartCollector("collector", collectorYAML(filepath.Join(env.Dir, "data"), "127.0.0.1:0", webPaths))
	if err != nil {
		t.Fatal(err)
	}
	runProbes(t, env, addrs.GRPC, out)
	q := query(t, addrs.GRPC)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stats, err := harness.WaitStats(ctx, q, "a-to-b", len(truths))
	if err != nil {
		t.Fatalf("%v\n%s", err, coll.Log())
	}
	if err := settle(ctx, q, []string{"a-to-b", "a-to-b-tcp"}); err != nil {
		t.Fatalf("%v\n%s", err, coll.Log())
	}
	b := newBrowser(t, env)
	shots := screenshotDir(t)
	base := "http://" + addrs.HTTP + "/"

	if _, err := b.Load(base+"#/", "overview", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	checkOverview(t, b, q)
	screenshot(t, b, shots, "overview")

	grid := epoch.DefaultConfig()
	from, to := time.Unix(0, grid.StartNS(stats[0].GetEpoch())), time.Unix(0, grid.StartNS(stats[len(stats)-1].GetEpoch()))
	if _, err := b.Route(pathRoute("a-to-b", from, to), "path", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	checkPathView(t, b, q, "a-to-b", from, to)
	checkCDF(t, b, "window.owlCDF", "path a-to-b", pathCDF(q, "a-to-b", from, to))
	checkEpochRows(t, b, q, "a-to-b", from, to)
	screenshot(t, b, shots, "path")

	if _, err := b.Route("#/flows/a-to-b", "flows", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	top, err := q.TopFlows(ctx, &owlv1.TopFlowsRequest{Path: "a-to-b"})
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, b, "tr[data-flow]", "flows of a-to-b", len(top.GetFlows()))
	screenshot(t, b, shots, "flows")

	if _, err := b.Route("#/probe/op-a", "probe", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	prefixes, err := q.TopRTTPrefixes(ctx, &owlv1.TopRTTPrefixesRequest{Probe: "op-a"})
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, b, "tr[data-prefix]", "prefixes of op-a", len(prefixes.GetPrefixes()))
	checkRTTCDF(t, b, q, "op-a")
	screenshot(t, b, shots, "probe")
}

// pathRoute is the page's route to a path's view over epochs starting
// in [from, to].
func pathRoute(path string, from, to time.Time) string {
	v := url.Values{"from": {from.UTC().Format(time.RFC3339)}, "to": {to.UTC().Format(time.RFC3339)}}
	return "#/path/" + url.PathEscape(path) + "?" + v.Encode()
}

// settle waits until the paths' results stop changing (boundary
// matching revises an epoch when the next one comes): the same answers
// twice, a second apart.
func settle(ctx context.Context, q owlv1.QueryServiceClient, paths []string) error {
	var last []*owlv1.PathStats
	for {
		var now []*owlv1.PathStats
		for _, p := range paths {
			r, err := q.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: p, Limit: 100000})
			if err != nil {
				return fmt.Errorf("GetPathStats %s: %w", p, err)
			}
			now = append(now, r.GetStats()...)
		}
		if len(now) > 0 && slices.EqualFunc(now, last, func(a, b *owlv1.PathStats) bool {
			return a.GetEpoch() == b.GetEpoch() && a.GetComputed().AsTime().Equal(b.GetComputed().AsTime()) && a.GetMeanNs() == b.GetMeanNs()
		}) {
			return nil
		}
		last = now
		select {
		case <-ctx.Done():
			return fmt.Errorf("results still changing: %w", ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// pageCells is the overview's paths table: each path's cells, field →
// data-value (absent when the cell has no data-value attribute).
const pageCells = `Object.fromEntries([...document.querySelectorAll('table#paths tr[data-path]')].map((tr) =>
	[tr.dataset.path, Object.fromEntries([...tr.querySelectorAll('td[data-field]')]
		.filter((td) => td.hasAttribute('data-value')).map((td) => [td.dataset.field, td.dataset.value]))]))`

// pageRowKeys lists the values of a data attribute of a table's rows.
func pageRowKeys(t *testing.T, b *harness.Browser, table, attr string) []string {
	t.Helper()
	keys, err := harness.Eval[[]string](b, fmt.Sprintf(`[...document.querySelectorAll('table#%s tr[data-%s]')].map((tr) => tr.getAttribute('data-%s'))`, table, attr, attr))
	if err != nil {
		t.Fatalf("reading table#%s: %v", table, err)
	}
	slices.Sort(keys)
	return keys
}

// checkOverview compares the overview with the API: a row for every
// path and nothing else, each cell's raw value the API's for the path's
// latest result; a row for every probe and cluster member.
func checkOverview(t *testing.T, b *harness.Browser, q owlv1.QueryServiceClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	paths, err := q.ListPaths(ctx, &owlv1.ListPathsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	cells, err := harness.Eval[map[string]map[string]string](b, pageCells)
	if err != nil {
		t.Fatalf("reading table#paths: %v", err)
	}
	var names []string
	for _, p := range paths.GetPaths() {
		names = append(names, p.GetName())
		r, err := q.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: p.GetName(), Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		row, ok := cells[p.GetName()]
		switch {
		case !ok:
			t.Errorf("overview: no row for path %s", p.GetName())
		case len(r.GetStats()) == 0:
			t.Logf("overview: path %s has no result yet; its row: %v", p.GetName(), row)
		default:
			checkLatest(t, row, r.GetStats()[0])
		}
	}
	for name := range cells {
		if !slices.Contains(names, name) {
			t.Errorf("overview: a row for %s, which the API does not list", name)
		}
	}
	t.Logf("overview: %d paths, as the API lists", len(cells))
	probes, err := q.ListProbes(ctx, &owlv1.ListProbesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range probes.GetProbes() {
		ids = append(ids, p.GetProbeId())
	}
	slices.Sort(ids)
	if got := pageRowKeys(t, b, "probes", "probe"); !slices.Equal(got, ids) {
		t.Errorf("overview: probes %v, the API lists %v", got, ids)
	}
	members, err := q.ListCollectors(ctx, &owlv1.ListCollectorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ms []string
	for _, m := range members.GetCollectors() {
		ms = append(ms, m.GetName())
	}
	slices.Sort(ms)
	if got := pageRowKeys(t, b, "members", "member"); !slices.Equal(got, ms) {
		t.Errorf("overview: members %v, the API lists %v", got, ms)
	}
}

// checkLatest compares a path's overview cells with its latest result.
func checkLatest(t *testing.T, row map[string]string, r *owlv1.PathStats) {
	t.Helper()
	where := fmt.Sprintf("overview, path %s", r.GetPath())
	want := map[string]func(string) bool{
		"epoch":     func(v string) bool { n, err := strconv.ParseInt(v, 10, 64); return err == nil && n == r.GetEpoch() },
		"mean_ns":   floatIs(r.GetMeanNs()),
		"lost":      floatIs(r.GetLost()),
		"samples":   func(v string) bool { n, err := strconv.ParseUint(v, 10, 64); return err == nil && n == r.GetSamples() },
		"estimator": func(v string) bool { return v == r.GetEstimator() },
		"status": func(v string) bool {
			return v == r.GetStatus().String() || v == strconv.Itoa(int(r.GetStatus()))
		},
	}
	apiValue := map[string]any{"epoch": r.GetEpoch(), "mean_ns": r.GetMeanNs(), "lost": r.GetLost(), "samples": r.GetSamples(),
		"estimator": r.GetEstimator(), "status": r.GetStatus()}
	if p99, ok := quantileOf(r, 0.99); ok {
		want["p99_ns"], apiValue["p99_ns"] = floatIs(p99), p99
	} else if v := row["p99_ns"]; v != "" {
		t.Errorf("%s (epoch %d): p99_ns %q, where the API gives no p99", where, r.GetEpoch(), v)
	}
	for f, ok := range want {
		v, has := row[f]
		switch {
		case !has:
			t.Errorf("%s: no %s cell with a data-value (the API's is %v)", where, f, apiValue[f])
		case !ok(v):
			t.Errorf("%s: %s %q, the API's latest result (epoch %d) has %v", where, f, v, r.GetEpoch(), apiValue[f])
		}
	}
}

// floatIs matches the page's rendering of x: a JavaScript number's
// shortest form reads back as the same float64.
func floatIs(x float64) func(string) bool {
	return func(v string) bool {
		f, err := strconv.ParseFloat(v, 64)
		return err == nil && (f == x || math.IsNaN(f) && math.IsNaN(x))
	}
}

// quantileOf is a result's q-quantile of the delay, if it has one.
func quantileOf(r *owlv1.PathStats, q float64) (float64, bool) {
	for _, d := range r.GetQuantiles() {
		if d.GetQ() == q {
			return d.GetValueNs(), true
		}
	}
	return 0, false
}

// seriesFields are window.owlSeries's arrays besides epoch, each with
// the API's value of a result (ok false where it has none).
var seriesFields = []struct {
	name string
	of   func(r *owlv1.PathStats) (float64, bool)
}{
	{"mean_ns", func(r *owlv1.PathStats) (float64, bool) { return r.GetMeanNs(), estimated(r) }},
	{"p50_ns", func(r *owlv1.PathStats) (float64, bool) { return quantileOf(r, 0.5) }},
	{"p99_ns", func(r *owlv1.PathStats) (float64, bool) { return quantileOf(r, 0.99) }},
	{"stddev_ns", func(r *owlv1.PathStats) (float64, bool) { return r.GetStddevNs(), estimated(r) }},
	{"lost", func(r *owlv1.PathStats) (float64, bool) { return r.GetLost(), estimated(r) }},
	{"reordered", func(r *owlv1.PathStats) (float64, bool) { return float64(r.GetReordered()), estimated(r) }},
}

// estimated says whether a result carries delay estimates.
func estimated(r *owlv1.PathStats) bool {
	s := r.GetStatus()
	return s == owlv1.ResultStatus_RESULT_STATUS_OK || s == owlv1.ResultStatus_RESULT_STATUS_PARTIAL
}

// checkPathView compares the path view's chart data, window.owlSeries,
// with GetPathStats over the same range: one point per result, in epoch
// order, each value the API's (null only where the API has none). It
// returns the number of results.
func checkPathView(t *testing.T, b *harness.Browser, q owlv1.QueryServiceClient, path string, from, to time.Time) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := q.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: path, From: timestamppb.New(from), To: timestamppb.New(to), Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	stats := resp.GetStats()
	series, err := harness.Eval[map[string][]any](b, `window.owlSeries`)
	if err != nil {
		t.Fatalf("path %s: reading window.owlSeries: %v", path, err)
	}
	var bad []string
	mismatch := func(format string, args ...any) {
		if len(bad) < 10 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	for _, f := range append([]string{"epoch"}, fieldNames()...) {
		if len(series[f]) != len(stats) {
			mismatch("%s has %d points, the API %d results", f, len(series[f]), len(stats))
		}
	}
	for i, r := range stats {
		if e, ok := jsNumber(at(series["epoch"], i)); !ok || int64(e) != r.GetEpoch() {
			mismatch("point %d: epoch %v, the API's result %d", i, at(series["epoch"], i), r.GetEpoch())
			continue
		}
		for _, f := range seriesFields {
			want, has := f.of(r)
			got, ok := jsNumber(at(series[f.name], i))
			switch {
			case !has && at(series[f.name], i) == nil:
			case !has:
				mismatch("epoch %d: %s %v where the API has none (status %v)", r.GetEpoch(), f.name, at(series[f.name], i), r.GetStatus())
			case !ok || got != want:
				mismatch("epoch %d: %s %v, the API %v", r.GetEpoch(), f.name, at(series[f.name], i), want)
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("path %s, window.owlSeries against GetPathStats from %v to %v:\n\t%s", path, from.UTC(), to.UTC(), strings.Join(bad, "\n\t"))
	}
	if len(stats) == 0 {
		t.Errorf("path %s: the API has no result from %v to %v to compare with", path, from.UTC(), to.UTC())
	}
	t.Logf("path %s: %d points per series, as the API's %d results", path, len(series["epoch"]), len(stats))
	return len(stats)
}

func fieldNames() []string {
	var out []string
	for _, f := range seriesFields {
		out = append(out, f.name)
	}
	return out
}

// at is a[i], nil past its end.
func at(a []any, i int) any {
	if i < len(a) {
		return a[i]
	}
	return nil
}

// jsNumber reads a number of the page's data: a JSON number, or a
// decimal string (protojson's form of a 64-bit integer).
func jsNumber(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case string:
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil
	}
	return 0, false
}

// cdfAt is the API's CDF at the given delays (ns).
type cdfAt func(ctx context.Context, atNS []float64) ([]*owlv1.CDFPoint, error)

// pathCDF is the API's delay CDF of a path over epochs starting in
// [from, to].
func pathCDF(q owlv1.QueryServiceClient, path string, from, to time.Time) cdfAt {
	return func(ctx context.Context, atNS []float64) ([]*owlv1.CDFPoint, error) {
		r, err := q.GetPathDelayDistribution(ctx, &owlv1.GetPathDelayDistributionRequest{Path: path,
			From: timestamppb.New(from), To: timestamppb.New(to), CdfAtNs: atNS})
		return r.GetCdf(), err
	}
}

// checkCDF checks a CDF the page draws ([[delay_ns, fraction], ...]):
// not empty, delays and fractions non-decreasing, fractions in [0, 1],
// ending at 1, and each fraction the API's at that delay.
func checkCDF(t *testing.T, b *harness.Browser, expr, what string, api cdfAt) {
	t.Helper()
	cdf, err := harness.Eval[[][]float64](b, expr)
	if err != nil {
		t.Errorf("%s: reading %s: %v", what, expr, err)
		return
	}
	if err := cdfError(cdf); err != nil {
		t.Errorf("%s: %s: %v", what, expr, err)
		return
	}
	at := make([]float64, len(cdf))
	for i, p := range cdf {
		at[i] = p[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want, err := api(ctx, at)
	if err != nil {
		t.Fatalf("%s: the API's CDF: %v", what, err)
	}
	if len(want) != len(cdf) {
		t.Fatalf("%s: the API answers %d CDF points for %d asked", what, len(want), len(cdf))
	}
	for i, p := range cdf {
		if math.Abs(p[1]-want[i].GetFraction()) > 1e-12 {
			t.Errorf("%s: %s at %.0f ns is %v, the API's %v", what, expr, p[0], p[1], want[i].GetFraction())
			break
		}
	}
	t.Logf("%s: CDF of %d points from %.1f µs to %.1f µs, as the API's", what, len(cdf), cdf[0][0]/1e3, cdf[len(cdf)-1][0]/1e3)
}

// cdfError says what is wrong with a CDF, if anything.
func cdfError(cdf [][]float64) error {
	if len(cdf) == 0 {
		return errors.New("empty")
	}
	for i, p := range cdf {
		if len(p) != 2 {
			return fmt.Errorf("point %d is %v, not [delay_ns, fraction]", i, p)
		}
		if p[1] < 0 || p[1] > 1 || math.IsNaN(p[1]) {
			return fmt.Errorf("point %d: fraction %v outside [0, 1]", i, p[1])
		}
		if i > 0 && (p[0] < cdf[i-1][0] || p[1] < cdf[i-1][1]) {
			return fmt.Errorf("falls from %v to %v at point %d", cdf[i-1], p, i)
		}
	}
	if last := cdf[len(cdf)-1][1]; math.Abs(last-1) > 1e-9 {
		return fmt.Errorf("ends at %v, not 1", last)
	}
	return nil
}

// checkRTTCDF checks each of the probe view's RTT CDFs (kind → CDF)
// as checkCDF does, against the probe's round-trip times of that kind
// over all its epochs.
func checkRTTCDF(t *testing.T, b *harness.Browser, q owlv1.QueryServiceClient, probe string) {
	t.Helper()
	kinds, err := harness.Eval[[]string](b, `Object.keys(window.owlRTTCDF || {})`)
	if err != nil {
		t.Errorf("reading window.owlRTTCDF: %v", err)
		return
	}
	for _, kind := range kinds {
		checkCDF(t, b, "window.owlRTTCDF["+jsQuote(kind)+"]", "probe "+probe+", RTT of "+kind,
			func(ctx context.Context, atNS []float64) ([]*owlv1.CDFPoint, error) {
				r, err := q.GetRTTDistribution(ctx, &owlv1.GetRTTDistributionRequest{Probe: probe, Kind: kind, CdfAtNs: atNS})
				return r.GetCdf(), err
			})
	}
	t.Logf("probe %s: RTT CDFs of %d kinds", probe, len(kinds))
}

// jsQuote is s as a JavaScript string literal.
func jsQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// checkEpochRows checks that the path view's table has a row for each
// of the API's results in the range, and no other.
func checkEpochRows(t *testing.T, b *harness.Browser, q owlv1.QueryServiceClient, path string, from, to time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := q.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: path, From: timestamppb.New(from), To: timestamppb.New(to), Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range resp.GetStats() {
		want = append(want, strconv.FormatInt(r.GetEpoch(), 10))
	}
	slices.Sort(want)
	rows, err := harness.Eval[[]string](b, `[...document.querySelectorAll('main#view tr[data-epoch]')].map((tr) => tr.dataset.epoch)`)
	slices.Sort(rows)
	if err != nil || !slices.Equal(rows, want) {
		t.Errorf("path view of %s: rows of epochs %v (%v), the API's results %v", path, rows, err, want)
	}
}

// checkRows checks that a view shows rows where the API has data.
func checkRows(t *testing.T, b *harness.Browser, sel, what string, api int) {
	t.Helper()
	rows, err := harness.Eval[int](b, fmt.Sprintf(`document.querySelectorAll('main#view %s').length`, sel))
	switch {
	case err != nil:
		t.Errorf("%s: %v", what, err)
	case api > 0 && rows == 0:
		t.Errorf("%s: no rows (%s), the API has %d", what, sel, api)
	default:
		t.Logf("%s: %d rows, the API has %d", what, rows, api)
	}
}

// TestWebFirstRender times the page on a collector holding an hour of
// 1 s epochs on 10 paths (results written into its store beforehand):
// the overview's first render, and a path's view over the hour, opened
// in a fresh document and reached from the overview, must each be ready
// within firstRenderBound; the path's chart must have a point per epoch
// with the API's values. Each is timed up to renderTries times (a fresh
// document each time) and fails when no try is within the bound: one
// slow try is the machine's (CI runs other packages' tests beside this
// one on two cores), every try slow is the page's.
func TestWebFirstRender(t *testing.T) {
	needBrowser(t)
	if os.Getenv("OWL_E2E_RACE") == "1" {
		t.Skip("times the page: a race-built collector answers several times slower, and the page is the same")
	}
	env := newEnv(t)
	h, yaml := hourHistory(time.Now())
	dataDir := filepath.Join(env.Dir, "data")
	t0 := time.Now()
	if err := harness.WriteHistory(dataDir, h); err != nil {
		t.Fatal(err)
	}
	epochs := h.Last - h.First + 1
	t.Logf("wrote %d results (%d paths × %d epochs) in %v", int64(len(h.Paths))*epochs, len(h.Paths), epochs, time.Since(t0).Round(time.Millisecond))
	_, addrs, err := env.StartCollector("collector", collectorYAML(dataDir, "127.0.0.1:0", yaml))
	if err != nil {
		t.Fatal(err)
	}
	q := query(t, addrs.GRPC)
	b := newBrowser(t, env)
	base := "http://" + addrs.HTTP + "/"
	path := h.Paths[3]
	from, to := time.Unix(0, h.Grid.StartNS(h.First)), time.Unix(0, h.Grid.StartNS(h.Last))
	route := pathRoute(path, from, to)

	timeRender(t, b, "overview", func() (time.Duration, error) {
		if _, err := b.Load(base+"#/", "overview", 30*time.Second); err != nil {
			return 0, err
		}
		return firstRender(b)
	})
	checkOverview(t, b, q)
	timeRender(t, b, "path view of "+path+" over the hour, opened directly", func() (time.Duration, error) {
		if _, err := b.Load(base+route, "path", 30*time.Second); err != nil {
			return 0, err
		}
		return firstRender(b)
	})
	timeRender(t, b, "path view of "+path+" over the hour, from the overview", func() (time.Duration, error) {
		if _, err := b.Load(base+"#/", "overview", 30*time.Second); err != nil {
			return 0, err
		}
		if _, err := harness.Eval[any](b, `performance.clearResourceTimings()`); err != nil {
			return 0, err
		}
		return b.Route(route, "path", 30*time.Second)
	})
	if n := checkPathView(t, b, q, path, from, to); int64(n) != epochs {
		t.Errorf("path %s: the API has %d results over the hour, %d were written", path, n, epochs)
	}
	checkCDF(t, b, "window.owlCDF", "path "+path, pathCDF(q, path, from, to))
	points, err := harness.Eval[int](b, `window.owlSeries.epoch.length`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("path view of %s: %d points drawn per series", path, points)
}

// hourHistory is an hour of 1 s epochs on 10 paths, ending two epochs
// before now, and the paths' YAML.
func hourHistory(now time.Time) (harness.History, string) {
	grid := epoch.DefaultConfig()
	e, _ := grid.Of(now.UnixNano())
	h := harness.History{First: e - 3601, Last: e - 2, Grid: grid, Seed: 20}
	var yaml string
	for i := range 10 {
		name := fmt.Sprintf("rack%d-to-core", i)
		h.Paths = append(h.Paths, name)
		yaml += fmt.Sprintf("  - name: %s\n    upstream: rack%d\n    downstream: core%d\n", name, i, i)
	}
	return h, yaml
}

// renderTries is how many times a render is timed before it fails.
const renderTries = 3

// timeRender runs render, which shows a view and returns how long it
// took, until it takes at most firstRenderBound, at most renderTries
// times; it logs each time and the page's requests of the last try,
// and fails when no try was within the bound.
func timeRender(t *testing.T, b *harness.Browser, what string, render func() (time.Duration, error)) {
	t.Helper()
	var took []time.Duration
	for range renderTries {
		d, err := render()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		took = append(took, d.Round(time.Millisecond))
		if d <= firstRenderBound {
			break
		}
	}
	reqs, err := harness.Eval[[]string](b, requestsJS)
	if err != nil {
		t.Errorf("%s: reading the page's requests: %v", what, err)
	}
	t.Logf("%s: ready in %v (tries %v); the page's requests (start+duration, bytes):\n\t%s", what, took[len(took)-1], took, strings.Join(reqs, "\n\t"))
	if last := took[len(took)-1]; last > firstRenderBound || last <= 0 {
		t.Errorf("%s: ready in %v in each of %d tries, over %v", what, took, len(took), firstRenderBound)
	}
}

// requestsJS lists the document's requests: start and duration in ms,
// body bytes and URL.
const requestsJS = `performance.getEntriesByType('resource').map((e) =>
	Math.round(e.startTime) + '+' + Math.round(e.duration) + ' ms ' + e.encodedBodySize + ' B ' + decodeURIComponent(e.name.replace(location.origin, '')).slice(0, 120))`

// firstRender is window.owlFirstRenderMS of a freshly loaded document.
func firstRender(b *harness.Browser) (time.Duration, error) {
	ms, err := harness.Eval[float64](b, `window.owlFirstRenderMS`)
	if err != nil {
		return 0, fmt.Errorf("reading window.owlFirstRenderMS: %w", err)
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}
