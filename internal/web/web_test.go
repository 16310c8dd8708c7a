package web

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// fakeQuery answers a few query methods with results made from the
// request, records the last request, fails on the path "missing" and
// panics on the path "boom"; the other methods are unimplemented.
type fakeQuery struct {
	owlv1.UnimplementedQueryServiceServer
	mu   sync.Mutex
	last proto.Message
}

func (f *fakeQuery) record(m proto.Message) {
	f.mu.Lock()
	f.last = proto.Clone(m)
	f.mu.Unlock()
}

func (f *fakeQuery) lastRequest() proto.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func (f *fakeQuery) GetPathStats(_ context.Context, req *owlv1.GetPathStatsRequest) (*owlv1.GetPathStatsResponse, error) {
	f.record(req)
	switch req.GetPath() {
	case "missing":
		return nil, status.Errorf(codes.NotFound, "path %q is not configured", req.GetPath())
	case "boom":
		panic("a damaged result")
	}
	start := time.Date(2024, 5, 6, 7, 8, 9, 500_000_000, time.UTC)
	out := &owlv1.GetPathStatsResponse{Note: "one collector did not answer"}
	for e := int64(0); e < int64(max(1, req.GetLimit())) && e < 3; e++ {
		out.Stats = append(out.Stats, &owlv1.PathStats{
			Path: req.GetPath(), Epoch: 1<<40 + e, Start: timestamppb.New(start.Add(time.Duration(e) * time.Second)),
			Length: durationpb.New(time.Second), Status: owlv1.ResultStatus_RESULT_STATUS_PARTIAL, MeanNs: 1234.5 + float64(e),
			StddevNs: 0.25, Samples: 1<<60 + 3, Lost: 2, Reordered: 7, Estimator: "rda", ClockFlagged: true, UpstreamDigest: ^uint64(0),
			Quantiles:        []*owlv1.DelayQuantile{{Q: 0.5, ValueNs: 1200}, {Q: 0.99, ValueNs: 9e9, LoNs: -1, HiNs: 1e300, Exact: true}},
			UpstreamClock:    &owlv1.ClockStatus{Source: "ptp", State: owlv1.ClockState_CLOCK_STATE_HOLDOVER, OffsetNs: -5},
			UpstreamCounters: &owlv1.Counters{Packets: 10, DecodeFailures: map[string]uint64{"truncated": 1}},
			DelaySketch:      []byte{0, 1, 2, 255},
		})
	}
	return out, nil
}

func (f *fakeQuery) ListProbes(_ context.Context, req *owlv1.ListProbesRequest) (*owlv1.ListProbesResponse, error) {
	f.record(req)
	return &owlv1.ListProbesResponse{Probes: []*owlv1.ProbeInfo{{ProbeId: "up-1", Connected: true, LastSeen: timestamppb.New(time.Unix(1700000000, 1))}}, Warning: "insecure"}, nil
}

func (f *fakeQuery) TopFlows(_ context.Context, req *owlv1.TopFlowsRequest) (*owlv1.TopFlowsResponse, error) {
	f.record(req)
	return &owlv1.TopFlowsResponse{Flows: []*owlv1.FlowStats{{Path: req.GetPath(), Flow: &owlv1.FlowKey{Src: "2001:db8::1", Dst: "10.0.0.1", SrcPort: 443, Protocol: 6},
		Packets: float64(req.GetLimit()), Epochs: uint32(req.GetOrderBy())}}}, nil
}

func (f *fakeQuery) GetFlowLatencyHistoric(_ context.Context, req *owlv1.GetFlowLatencyHistoricRequest) (*owlv1.GetFlowLatencyHistoricResponse, error) {
	f.record(req)
	if req.GetUpstream() == "" {
		return nil, status.Error(codes.InvalidArgument, "upstream and downstream are required")
	}
	return &owlv1.GetFlowLatencyHistoricResponse{MeanNs: 42, Packets: 5, First: req.GetFrom(), Estimator: req.GetEstimator()}, nil
}

func newServer(t *testing.T) (*fakeQuery, *httptest.Server) {
	t.Helper()
	f := &fakeQuery{}
	srv := httptest.NewServer(Handler(f, slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)
	return f, srv
}

// call asks the endpoint for method with the protojson request body, by
// GET (in q) or POST, and returns the status and the body.
func call(t *testing.T, srv *httptest.Server, httpMethod, method, body string) (int, []byte) {
	t.Helper()
	var resp *http.Response
	var err error
	u := srv.URL + "/api/v1/" + method
	if httpMethod == http.MethodGet {
		if body != "" {
			u += "?q=" + url.QueryEscape(body)
		}
		resp, err = http.Get(u)
	} else {
		resp, err = http.Post(u, "application/json", strings.NewReader(body))
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestSameAsDirectCall: for each method and each of GET and POST, the
// endpoint's answer decodes to the message a direct call returns, and
// the server got the request that was sent.
func TestSameAsDirectCall(t *testing.T) {
	f, srv := newServer(t)
	direct := &fakeQuery{}
	ctx := context.Background()
	from := timestamppb.New(time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC))
	cases := []struct {
		method string
		req    proto.Message
		resp   proto.Message // a new message of the response type
		call   func() (proto.Message, error)
	}{
		{"GetPathStats", &owlv1.GetPathStatsRequest{Path: "a", Limit: 3, From: from}, &owlv1.GetPathStatsResponse{},
			func() (proto.Message, error) {
				return direct.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: "a", Limit: 3, From: from})
			}},
		{"ListProbes", &owlv1.ListProbesRequest{}, &owlv1.ListProbesResponse{},
			func() (proto.Message, error) { return direct.ListProbes(ctx, &owlv1.ListProbesRequest{}) }},
		{"TopFlows", &owlv1.TopFlowsRequest{Path: "b", Limit: 50, OrderBy: owlv1.TopFlowsRequest_ORDER_LOSS}, &owlv1.TopFlowsResponse{},
			func() (proto.Message, error) {
				return direct.TopFlows(ctx, &owlv1.TopFlowsRequest{Path: "b", Limit: 50, OrderBy: owlv1.TopFlowsRequest_ORDER_LOSS})
			}},
		{"GetFlowLatencyHistoric", &owlv1.GetFlowLatencyHistoricRequest{Upstream: "u", Downstream: "d", From: from, Estimator: "paper",
			Flow: &owlv1.FlowKey{Src: "10.0.0.1", Dst: "10.0.0.2", SrcPort: 1, DstPort: 65535, Protocol: 17}}, &owlv1.GetFlowLatencyHistoricResponse{},
			func() (proto.Message, error) {
				return direct.GetFlowLatencyHistoric(ctx, &owlv1.GetFlowLatencyHistoricRequest{Upstream: "u", From: from, Estimator: "paper"})
			}},
	}
	for _, tc := range cases {
		want, err := tc.call()
		if err != nil {
			t.Fatal(err)
		}
		body, err := protojson.Marshal(tc.req)
		if err != nil {
			t.Fatal(err)
		}
		for _, hm := range []string{http.MethodGet, http.MethodPost} {
			t.Run(tc.method+"/"+hm, func(t *testing.T) {
				code, b := call(t, srv, hm, tc.method, string(body))
				if code != http.StatusOK {
					t.Fatalf("status %d: %s", code, b)
				}
				got := proto.Clone(tc.resp)
				if err := protojson.Unmarshal(b, got); err != nil {
					t.Fatalf("answer %s: %v", b, err)
				}
				if !proto.Equal(got, want) {
					t.Errorf("answer\n%v\nwant\n%v", got, want)
				}
				if !proto.Equal(f.lastRequest(), tc.req) {
					t.Errorf("server got %v, sent %v", f.lastRequest(), tc.req)
				}
			})
		}
	}
}

// TestProtoFieldNames: answers use the proto's field names (mean_ns), as
// the page and docs/web.md read them.
func TestProtoFieldNames(t *testing.T) {
	_, srv := newServer(t)
	code, b := call(t, srv, http.MethodGet, "GetPathStats", `{"path":"a","limit":1}`)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, b)
	}
	var m struct {
		Stats []map[string]any `json:"stats"`
	}
	if err := json.Unmarshal(b, &m); err != nil || len(m.Stats) != 1 {
		t.Fatalf("%s: %v", b, err)
	}
	for _, k := range []string{"mean_ns", "stddev_ns", "clock_flagged", "upstream_clock", "quantiles"} {
		if _, ok := m.Stats[0][k]; !ok {
			t.Errorf("no field %s in %s", k, b)
		}
	}
	if _, ok := m.Stats[0]["meanNs"]; ok {
		t.Errorf("JSON names instead of proto names: %s", b)
	}
}

// TestMethodsServed: the endpoint serves exactly the QueryService's unary
// calls: the watch stream and the other services' calls are not found.
func TestMethodsServed(t *testing.T) {
	_, srv := newServer(t)
	code, b := call(t, srv, http.MethodGet, "", "")
	if code != http.StatusOK {
		t.Fatalf("list: %d %s", code, b)
	}
	var list struct{ Methods []string }
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	want := []string{"GetFlowLatencyHistoric", "GetFlowStats", "GetPathDelayDistribution", "GetPathStats", "GetRTTDistribution", "ListColateVectors",
		"ListCollectors", "ListPaths", "ListProbes", "ListReorderedPrefixes", "TopFlows", "TopRTTPrefixes"}
	if !slices.Equal(list.Methods, want) {
		t.Errorf("methods %v\nwant %v", list.Methods, want)
	}
	for _, m := range want {
		// Each is routed to its call (the fake's unimplemented ones
		// answer 501).
		if code, b := call(t, srv, http.MethodPost, m, "{}"); code == http.StatusNotFound {
			t.Errorf("%s: %d %s", m, code, b)
		}
	}
	for _, m := range []string{"WatchPathStats", "Connect", "Replicate", "TakePending", "Export", "getPathStats", "GetPathStats/x", "%2e%2e"} {
		code, b := call(t, srv, http.MethodPost, m, "{}")
		if code != http.StatusNotFound {
			t.Errorf("%s: %d %s, want 404", m, code, b)
		}
	}
	resp, err := http.Get(srv.URL + "/api/v2/GetPathStats")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("/api/v2/: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// TestErrors: requests that cannot be read, calls that fail and calls
// that panic get the right HTTP status and a {"code","message"} body.
func TestErrors(t *testing.T) {
	_, srv := newServer(t)
	big := `{"path":"` + strings.Repeat("x", maxRequestBytes) + `"}`
	cases := []struct {
		name, httpMethod, method, body string
		status                         int
		code, message                  string
	}{
		{"not JSON", http.MethodPost, "GetPathStats", "{path:", 400, "InvalidArgument", "GetPathStats request"},
		{"not JSON in q", http.MethodGet, "GetPathStats", "[1,2]", 400, "InvalidArgument", "GetPathStats request"},
		{"unknown field", http.MethodPost, "GetPathStats", `{"paht":"a"}`, 400, "InvalidArgument", "paht"},
		{"wrong type", http.MethodPost, "GetPathStats", `{"limit":"many"}`, 400, "InvalidArgument", "limit"},
		{"bad enum", http.MethodPost, "TopFlows", `{"order_by":"ORDER_BEST"}`, 400, "InvalidArgument", "ORDER_BEST"},
		{"bad timestamp", http.MethodPost, "GetPathStats", `{"from":"yesterday"}`, 400, "InvalidArgument", "yesterday"},
		{"rejected by the server", http.MethodPost, "GetFlowLatencyHistoric", `{}`, 400, "InvalidArgument", "upstream and downstream are required"},
		{"not found", http.MethodPost, "GetPathStats", `{"path":"missing"}`, 404, "NotFound", `path "missing" is not configured`},
		{"panic", http.MethodPost, "GetPathStats", `{"path":"boom"}`, 500, "Internal", "a damaged result"},
		{"unimplemented", http.MethodPost, "ListPaths", ``, 501, "Unimplemented", "ListPaths"},
		{"body too large", http.MethodPost, "GetPathStats", big, 413, "InvalidArgument", "limit"},
		{"q too large", http.MethodGet, "GetPathStats", big, 413, "InvalidArgument", "limit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, b := call(t, srv, tc.httpMethod, tc.method, tc.body)
			var e apiError
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("body %q: %v", b, err)
			}
			if status != tc.status || e.Code != tc.code || !strings.Contains(e.Message, tc.message) {
				t.Errorf("got %d %+v, want %d %s with %q", status, e, tc.status, tc.code, tc.message)
			}
		})
	}
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/api/v1/GetPathStats", strings.NewReader("{}"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %d", resp.StatusCode)
	}
}

// TestHTTPStatus: every gRPC code maps to the HTTP status of gRPC's HTTP
// mappings.
func TestHTTPStatus(t *testing.T) {
	want := map[codes.Code]int{codes.OK: 200, codes.Canceled: 499, codes.Unknown: 500, codes.InvalidArgument: 400, codes.DeadlineExceeded: 504,
		codes.NotFound: 404, codes.AlreadyExists: 409, codes.PermissionDenied: 403, codes.ResourceExhausted: 429, codes.FailedPrecondition: 400,
		codes.Aborted: 409, codes.OutOfRange: 400, codes.Unimplemented: 501, codes.Internal: 500, codes.Unavailable: 503, codes.DataLoss: 500,
		codes.Unauthenticated: 401}
	for c, w := range want {
		if got := httpStatus(c); got != w {
			t.Errorf("%v: %d, want %d", c, got, w)
		}
	}
}

// TestStaticFiles: the page's files are served with their content types
// and the headers that keep the page to its own origin.
func TestStaticFiles(t *testing.T) {
	_, srv := newServer(t)
	for path, ctype := range map[string]string{
		"/":                         "text/html; charset=utf-8",
		"/app.js":                   "text/javascript; charset=utf-8",
		"/style.css":                "text/css; charset=utf-8",
		"/vendor/uPlot.iife.min.js": "text/javascript; charset=utf-8",
		"/vendor/uPlot.min.css":     "text/css; charset=utf-8",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != ctype || len(b) == 0 {
			t.Errorf("%s: %d %q, %d bytes; want 200 %q", path, resp.StatusCode, resp.Header.Get("Content-Type"), len(b), ctype)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: headers %v", path, resp.Header)
		}
	}
	resp, err := http.Get(srv.URL + "/" + "nothing.js")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a missing file: %d", resp.StatusCode)
	}
	resp, err = http.Post(srv.URL+"/", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d", resp.StatusCode)
	}
}

// external matches a reference to another origin (absolute or
// scheme-relative) in an attribute, a CSS url() or @import, or a fetch.
var external = regexp.MustCompile(`(?i)((src|href|action)\s*=\s*["']?\s*|url\(\s*["']?\s*|@import\s+["']?|fetch\(\s*["'` + "`" + `])(https?:)?//`)

// TestNothingExternal: no embedded file makes the browser load anything
// from elsewhere, and every file index.html names is embedded.
func TestNothingExternal(t *testing.T) {
	files, err := fs.Sub(static, "static")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = fs.WalkDir(files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(files, path)
		if err != nil {
			return err
		}
		n++
		if m := external.Find(b); m != nil {
			t.Errorf("%s refers to another origin: %q", path, m)
		}
		return nil
	})
	if err != nil || n < 7 {
		t.Fatalf("walked %d files: %v", n, err)
	}
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllSubmatch(index, -1)
	if len(refs) < 4 {
		t.Fatalf("index.html names %d files", len(refs))
	}
	for _, m := range refs {
		ref := string(m[1])
		if strings.HasPrefix(ref, "data:") || strings.HasPrefix(ref, "#") {
			continue
		}
		if _, err := fs.Stat(files, ref); err != nil {
			t.Errorf("index.html names %s, not embedded: %v", ref, err)
		}
	}
}

// TestExternalPattern: the pattern TestNothingExternal relies on finds
// the references it is meant to find, and not the local ones.
func TestExternalPattern(t *testing.T) {
	for _, s := range []string{`<script src="https://cdn.example/x.js">`, `<link href='//cdn.example/x.css'>`, `url(http://x/y.png)`,
		`@import "https://x/y.css"`, "fetch(`https://x/api`)", `<form action="http://x">`} {
		if !external.MatchString(s) {
			t.Errorf("not caught: %s", s)
		}
	}
	for _, s := range []string{`<script src="app.js">`, `<link href="vendor/uPlot.min.css">`, `fetch('api/v1/' + m)`, `// see https://example.org`} {
		if external.MatchString(s) {
			t.Errorf("caught: %s", s)
		}
	}
}
