package harness

import (
	"bytes"
	"errors"
	"image/png"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// routedPage is a page with two views on hash routes that renders each
// after a delay, as the collector's page does after its queries.
const routedPage = `<!doctype html>
<html><body><main id="view"></main>
<script>
const main = document.getElementById('view');
function route() {
	const h = location.hash || '#/';
	const view = h.startsWith('#/path/') ? 'path' : 'overview';
	main.dataset.view = view;
	main.dataset.ready = '0';
	main.textContent = 'loading';
	setTimeout(() => {
		main.innerHTML = '<table id="t"><tr data-n="1"><td>' + view + '</td></tr></table>' + '<div style="height:3000px"></div>';
		window.owlSeries = {epoch: [1, 2, 3]};
		if (window.owlFirstRenderMS === undefined) window.owlFirstRenderMS = performance.now();
		main.dataset.ready = '1';
	}, 150);
}
addEventListener('hashchange', route);
route();
</script></body></html>`

func newTestBrowser(t *testing.T) *Browser {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a browser")
	}
	if _, err := ChromiumPath(); errors.Is(err, ErrNoChromium) {
		t.Skip(err)
	}
	b, err := NewBrowser(BrowserConfig{ProfileDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// TestBrowser drives a small routed page: load, follow a route, read
// values, take a screenshot.
func TestBrowser(t *testing.T) {
	b := newTestBrowser(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(routedPage))
	}))
	defer srv.Close()

	took, err := b.Load(srv.URL+"/#/", "overview", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if took < 150*time.Millisecond {
		t.Errorf("ready after %v, before the page's 150 ms render", took)
	}
	first, err := Eval[float64](b, `window.owlFirstRenderMS`)
	if err != nil || first < 150 {
		t.Errorf("owlFirstRenderMS %v, %v", first, err)
	}
	// A route to a view of the same kind waits for its own render, not
	// the ready mark of the one before.
	for _, hash := range []string{"#/path/a", "#/path/b"} {
		took, err := b.Route(hash, "path", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if took < 150*time.Millisecond {
			t.Errorf("%s ready after %v, before the page's 150 ms render", hash, took)
		}
	}
	series, err := Eval[map[string][]int64](b, `window.owlSeries`)
	if err != nil || len(series["epoch"]) != 3 {
		t.Errorf("owlSeries %v, %v", series, err)
	}
	if _, err := b.Load(srv.URL+"/#/", "path", 3*time.Second); err == nil || !strings.Contains(err.Error(), "data-view=overview") {
		t.Errorf("waiting for a view the page does not show: %v", err)
	}

	// The failed wait above may have given up before the overview's
	// render on a loaded machine: wait for it, so that the page is taller
	// than the viewport when the screenshot is taken.
	if _, err := b.Load(srv.URL+"/#/", "overview", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	shot, err := b.Screenshot(1200)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatal(err)
	}
	if sz := img.Bounds().Size(); sz.X != 1280 || sz.Y != 1200 {
		t.Errorf("screenshot %v, want 1280×1200 (the page is taller)", sz)
	}
}
