package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

// maxRequestBytes bounds a request, in a POST body or a GET's q: the
// largest meaningful one (a thousand CDF points) takes some 25 KB.
const maxRequestBytes = 256 << 10

// marshal writes responses with the proto's field names (mean_ns), as
// grpcurl and the proto show them.
var marshal = protojson.MarshalOptions{UseProtoNames: true}

// api answers /api/v1/{method} with a call of q. The methods are the
// QueryService's unary ones, taken from its service descriptor: every
// read call, and neither the watch stream nor another service's calls.
type api struct {
	q       owlv1.QueryServiceServer
	log     *slog.Logger
	methods map[string]grpc.MethodHandler
	names   []string
}

func newAPI(q owlv1.QueryServiceServer, log *slog.Logger) *api {
	a := &api{q: q, log: log, methods: map[string]grpc.MethodHandler{}}
	for _, m := range owlv1.QueryService_ServiceDesc.Methods {
		a.methods[m.MethodName] = m.Handler
		a.names = append(a.names, m.MethodName)
	}
	slices.Sort(a.names)
	return a
}

// requestError is a request that could not be read: not protojson of
// the method's request (400), or over maxRequestBytes (413).
type requestError struct {
	httpCode int
	msg      string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{httpCode: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

func tooLarge(format string, args ...any) error {
	return &requestError{httpCode: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf(format, args...)}
}

// serve decodes the request (GET: the q parameter; POST: the body; both
// protojson, empty meaning an empty request), calls the method and
// writes its response.
func (a *api) serve(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("method")
	h, ok := a.methods[name]
	if !ok {
		a.notFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeErrorStatus(w, http.StatusMethodNotAllowed, codes.Unimplemented, r.Method+" "+r.URL.Path+": ask with GET or POST")
		return
	}
	raw, err := requestBytes(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	resp, err := a.call(r.Context(), name, h, raw)
	if err != nil {
		writeError(w, err)
		return
	}
	b, err := marshal.Marshal(resp.(proto.Message))
	if err != nil {
		writeError(w, status.Errorf(codes.Internal, "encoding the %s response: %v", name, err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// requestBytes is the request's protojson text, at most maxRequestBytes.
func requestBytes(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		q := r.URL.Query().Get("q")
		if len(q) > maxRequestBytes {
			return nil, tooLarge("q of %d bytes, over the limit of %d", len(q), maxRequestBytes)
		}
		return []byte(q), nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	var overLimit *http.MaxBytesError
	if errors.As(err, &overLimit) {
		return nil, tooLarge("body over the limit of %d bytes", maxRequestBytes)
	}
	if err != nil {
		return nil, badRequest("reading the body: %v", err)
	}
	return b, nil
}

// call decodes raw into the method's request and calls it, as the gRPC
// server would: a memory fault (a damaged store's mapped file) or a panic
// fails this call alone.
func (a *api) call(ctx context.Context, name string, h grpc.MethodHandler, raw []byte) (resp any, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			a.log.Error("a web query failed with a panic; the collector goes on", "method", name, "panic", p, "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "the collector failed on this call: %v", p)
		}
	}()
	var decodeErr error
	dec := func(m any) error {
		if len(strings.TrimSpace(string(raw))) == 0 {
			return nil
		}
		if err := protojson.Unmarshal(raw, m.(proto.Message)); err != nil {
			decodeErr = badRequest("%s request: %v", name, err)
			return decodeErr
		}
		return nil
	}
	resp, err = h(a.q, ctx, dec, nil)
	if decodeErr != nil {
		return nil, decodeErr
	}
	return resp, err
}

// list answers the names of the methods served.
func (a *api) list(w http.ResponseWriter, _ *http.Request) {
	b, _ := json.Marshal(map[string][]string{"methods": a.names})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// notFound answers a path under /api/ that names no method.
func (a *api) notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, status.Errorf(codes.NotFound, "%s: no such query method; GET /api/v1/ lists them", r.URL.Path))
}

// apiError is the body of an error answer: the gRPC code's name
// (InvalidArgument, NotFound...) and its message.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeError writes err as an apiError with the HTTP status of its gRPC
// code; a request that could not be read is InvalidArgument, with its
// own status (400, 413).
func writeError(w http.ResponseWriter, err error) {
	var re *requestError
	if errors.As(err, &re) {
		writeErrorStatus(w, re.httpCode, codes.InvalidArgument, re.msg)
		return
	}
	st, _ := status.FromError(err) // Unknown for an error without a status
	writeErrorStatus(w, httpStatus(st.Code()), st.Code(), st.Message())
}

// writeErrorStatus writes an apiError of code and msg with HTTP status
// httpCode.
func writeErrorStatus(w http.ResponseWriter, httpCode int, code codes.Code, msg string) {
	b, _ := json.Marshal(apiError{Code: code.String(), Message: msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(httpCode)
	_, _ = w.Write(b)
}

// httpStatus is the HTTP status of a gRPC code, as gRPC's HTTP mappings
// (grpc-gateway, Google's API design guide) give it.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.Canceled:
		return 499 // client closed request
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError // Unknown, Internal, DataLoss
}
