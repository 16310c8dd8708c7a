package security

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/exporter-toolkit/web"
)

// ServeHTTP serves srv on l: with webConfigFile set, TLS and basic
// authentication as Prometheus exporters do (prometheus/exporter-toolkit's
// web configuration file, read again at each connection); without, plain
// HTTP.
func ServeHTTP(l net.Listener, srv *http.Server, webConfigFile string, log *slog.Logger) error {
	return web.Serve(l, srv, &web.FlagConfig{WebConfigFile: &webConfigFile}, log)
}

// ValidateWebConfig checks a web configuration file.
func ValidateWebConfig(path string) error {
	if path == "" {
		return nil
	}
	if err := web.Validate(path); err != nil {
		return fmt.Errorf("web_config_file %s: %w", path, err)
	}
	return nil
}
