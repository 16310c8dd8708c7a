package collector

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// TestWebPageAnswersAsGRPC: the HTTP listener serves the page, and its
// JSON endpoint answers what the query service answers over gRPC.
func TestWebPageAnswersAsGRPC(t *testing.T) {
	c := newTest(t, testConfig(t))
	defer c.Close()
	for e := int64(1); e <= 5; e++ {
		r := &owlv1.PathStats{Path: "p", Epoch: e, Start: timestamppb.New(epochTime(e, 0)), Status: owlv1.ResultStatus_RESULT_STATUS_OK,
			MeanNs: 1000 + float64(e), Samples: 10, Quantiles: []*owlv1.DelayQuantile{{Q: 0.99, ValueNs: 2000}}}
		if err := c.store.PutResult(r, true); err != nil {
			t.Fatal(err)
		}
	}
	h := c.httpHandler()
	q := queryService{c: c}
	ctx := context.Background()
	for _, tc := range []struct {
		method string
		req    proto.Message
		want   func() (proto.Message, error)
		got    proto.Message
	}{
		{"GetPathStats", &owlv1.GetPathStatsRequest{Path: "p", Limit: 1},
			func() (proto.Message, error) {
				return q.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: "p", Limit: 1})
			}, &owlv1.GetPathStatsResponse{}},
		{"GetPathStats", &owlv1.GetPathStatsRequest{Path: "p", From: timestamppb.New(epochTime(2, 0)), To: timestamppb.New(epochTime(4, 0))},
			func() (proto.Message, error) {
				return q.GetPathStats(ctx, &owlv1.GetPathStatsRequest{Path: "p", From: timestamppb.New(epochTime(2, 0)), To: timestamppb.New(epochTime(4, 0))})
			}, &owlv1.GetPathStatsResponse{}},
		{"ListPaths", &owlv1.ListPathsRequest{}, func() (proto.Message, error) { return q.ListPaths(ctx, &owlv1.ListPathsRequest{}) }, &owlv1.ListPathsResponse{}},
		{"ListProbes", &owlv1.ListProbesRequest{}, func() (proto.Message, error) { return q.ListProbes(ctx, &owlv1.ListProbesRequest{}) }, &owlv1.ListProbesResponse{}},
		{"ListCollectors", &owlv1.ListCollectorsRequest{}, func() (proto.Message, error) { return q.ListCollectors(ctx, &owlv1.ListCollectorsRequest{}) }, &owlv1.ListCollectorsResponse{}},
	} {
		want, err := tc.want()
		if err != nil {
			t.Fatal(err)
		}
		body, _ := protojson.Marshal(tc.req)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/"+tc.method+"?q="+url.QueryEscape(string(body)), nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.method, rec.Code, rec.Body)
		}
		if err := protojson.Unmarshal(rec.Body.Bytes(), tc.got); err != nil {
			t.Fatalf("%s: %v", tc.method, err)
		}
		if !proto.Equal(tc.got, want) {
			t.Errorf("%s %v: web answered\n%v\ngRPC\n%v", tc.method, tc.req, tc.got, want)
		}
	}
	if got := (&owlv1.GetPathStatsResponse{}); protojson.Unmarshal(getHTTP(t, h, "/api/v1/GetPathStats?q="+url.QueryEscape(`{"path":"p","limit":1}`), http.StatusOK), got) != nil ||
		len(got.GetStats()) != 1 || got.GetStats()[0].GetEpoch() != 5 {
		t.Errorf("the latest result: %v", got)
	}
	getHTTP(t, h, "/api/v1/GetPathStats?q="+url.QueryEscape(`{"path":"nowhere"}`), http.StatusNotFound)
	if page := getHTTP(t, h, "/", http.StatusOK); !strings.Contains(string(page), `id="view"`) {
		t.Errorf("/ is not the page: %.200s", page)
	}
	getHTTP(t, h, "/metrics", http.StatusOK)
}

// TestWebPageOff: with web_page off, neither the page nor its endpoint
// is served, and the metrics still are.
func TestWebPageOff(t *testing.T) {
	cfg := testConfig(t)
	cfg.WebPage = false
	c := newTest(t, cfg)
	defer c.Close()
	h := c.httpHandler()
	getHTTP(t, h, "/", http.StatusNotFound)
	getHTTP(t, h, "/api/v1/ListPaths", http.StatusNotFound)
	getHTTP(t, h, "/metrics", http.StatusOK)
}

// getHTTP asks h for target and checks the status; it returns the body.
func getHTTP(t *testing.T, h http.Handler, target string, want int) []byte {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	ctx, cancel := context.WithTimeout(req.Context(), 10*time.Second)
	defer cancel()
	h.ServeHTTP(rec, req.WithContext(ctx))
	b, _ := io.ReadAll(rec.Body)
	if rec.Code != want {
		t.Errorf("GET %s: %d %.200s, want %d", target, rec.Code, b, want)
	}
	return b
}
