// Package web serves owl's web page: a single page (static files embedded
// in the binary, a vendored chart library, no build step) and the JSON
// endpoint it reads, which answers each read call of the QueryService by
// calling the collector's own implementation, so that the page shows what
// the gRPC API answers.
package web

import (
	"embed"
	"io/fs"
	"log/slog"
	"net/http"

	owlv1 "github.com/owl-latency/owl/api/owl/v1"
)

//go:embed static
var static embed.FS

// contentPolicy keeps the page to its own origin: scripts, styles, data
// and frames from anywhere else are refused by the browser. Chart
// libraries set element styles, hence the inline styles.
const contentPolicy = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// Handler serves the page under / and the JSON endpoint under /api/v1/,
// answering from q (the collector's QueryService). Errors of the calls
// are answered to the client; log gets those of the server itself (a
// call that panicked). Authentication is the listener's job (the
// collector's web configuration).
func Handler(q owlv1.QueryServiceServer, log *slog.Logger) http.Handler {
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always holds static
	}
	a := newAPI(q, log)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/{$}", a.list)
	mux.HandleFunc("/api/v1/{method}", a.serve)
	mux.HandleFunc("/api/", a.notFound)
	mux.Handle("/", staticFiles(http.FileServerFS(files)))
	return secureHeaders(mux)
}

// secureHeaders adds the headers that keep the page from being framed,
// sniffed or made to load anything from elsewhere.
func secureHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", contentPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}

// staticFiles serves the files to GET and HEAD only, and makes browsers
// check them again: they change with the binary, and embedded files carry
// no modification time.
func staticFiles(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}
