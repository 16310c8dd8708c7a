package web

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// FuzzRequest sends any method name and any bytes, in a GET's q and a
// POST's body: the endpoint answers 200, or an error status with a
// {"code","message"} body, and never fails itself; what a served call
// received is the request that was sent (it reads the same again).
func FuzzRequest(f *testing.F) {
	for _, s := range []struct{ method, body string }{
		{"GetPathStats", `{"path":"loss-1pct","limit":2}`},
		{"GetPathStats", `{"path":"a","from":"2024-01-01T00:00:00Z","to":"2024-01-01T01:00:00.5Z","include_sketch":true}`},
		{"TopFlows", `{"path":"p","order_by":"ORDER_MEAN_DELAY","limit":50}`},
		{"GetFlowLatencyHistoric", `{"flow":{"src":"10.99.0.2","dst":"10.99.0.1","srcPort":8080,"dstPort":44368,"protocol":6},"upstream":"u","downstream":"d"}`},
		{"GetPathDelayDistribution", `{"path":"p","quantiles":[0.5,0.99],"cdf_at_ns":[1e3,"NaN",-5]}`},
		{"ListProbes", ``},
		{"WatchPathStats", `{}`},
		{"GetPathStats", `{"path":"boom"}`},
		{"GetPathStats", "{\"path\":\"\xff\"}"},
	} {
		f.Add(s.method, []byte(s.body))
	}
	fq := &fakeQuery{}
	h := Handler(fq, slog.New(slog.DiscardHandler))
	f.Fuzz(func(t *testing.T, method string, body []byte) {
		if method == "" || path.Clean("/api/v1/"+method) != "/api/v1/"+method || strings.ContainsAny(method, "?#%") {
			return // another path, not another method
		}
		for _, req := range []*http.Request{
			httptest.NewRequest(http.MethodPost, "/api/v1/"+url.PathEscape(method), strings.NewReader(string(body))),
			httptest.NewRequest(http.MethodGet, "/api/v1/"+url.PathEscape(method)+"?q="+url.QueryEscape(string(body)), nil),
		} {
			fq.record(nil)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			checkAnswer(t, rec, method, body, fq.lastRequest())
		}
	})
}

// checkAnswer checks one answer of FuzzRequest.
func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder, method string, body []byte, got proto.Message) {
	t.Helper()
	if rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%s %q: content type %q", method, body, rec.Header().Get("Content-Type"))
	}
	if rec.Code != http.StatusOK {
		var e apiError
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code == "" || e.Message == "" {
			t.Fatalf("%s %q: %d with body %q", method, body, rec.Code, rec.Body.Bytes())
		}
		return
	}
	if !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("%s %q: answer %q is not JSON", method, body, rec.Body.Bytes())
	}
	if got == nil || strings.TrimSpace(string(body)) == "" {
		return // a call the fake does not record, or an empty request
	}
	again := got.ProtoReflect().New().Interface()
	if err := protojson.Unmarshal(body, again); err != nil {
		t.Fatalf("%s %q: served, but reading it again fails: %v", method, body, err)
	}
	if !proto.Equal(again, got) {
		t.Fatalf("%s %q: the call got %v, the body reads %v", method, body, got, again)
	}
}
