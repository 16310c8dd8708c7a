package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// The web page's tests drive Debian's chromium, headless, over the
// DevTools protocol (chromedp). A view of the page is ready when
// main#view carries its name in data-view and data-ready="1".

// ErrNoChromium is returned by ChromiumPath when no chromium is installed
// (scripts/deps.sh installs Debian's when run as root).
var ErrNoChromium = errors.New("chromium is not installed (scripts/deps.sh installs it when run as root)")

// ChromiumPath finds the chromium binary: $OWL_CHROMIUM, else chromium or
// chromium-browser on PATH.
func ChromiumPath() (string, error) {
	if p := os.Getenv("OWL_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoChromium
}

// Browser is one headless chromium with one tab, its profile in a
// directory of its own.
type Browser struct {
	ctx    context.Context // the tab's
	cancel func()
	width  int
	height int
}

// BrowserConfig says how to start a Browser.
type BrowserConfig struct {
	// ExecPath is the chromium binary (ChromiumPath when empty).
	ExecPath string
	// ProfileDir is the user data directory; it must be empty or new.
	ProfileDir string
	// Width and Height are the viewport's, in CSS pixels (1280×800 when
	// zero).
	Width, Height int
	// Log, when set, receives chromium's own output.
	Log *os.File
}

// NewBrowser starts chromium and opens its tab. Close ends it.
func NewBrowser(cfg BrowserConfig) (*Browser, error) {
	if cfg.ExecPath == "" {
		p, err := ChromiumPath()
		if err != nil {
			return nil, err
		}
		cfg.ExecPath = p
	}
	if cfg.Width == 0 || cfg.Height == 0 {
		cfg.Width, cfg.Height = 1280, 800
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(cfg.ExecPath),
		chromedp.UserDataDir(cfg.ProfileDir),
		chromedp.Headless,
		chromedp.NoSandbox, // tests run as root, where the sandbox refuses to start
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.WindowSize(cfg.Width, cfg.Height),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	}
	if cfg.Log != nil {
		opts = append(opts, chromedp.CombinedOutput(cfg.Log))
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	tctx, tcancel := chromedp.NewContext(actx)
	b := &Browser{ctx: tctx, width: cfg.Width, height: cfg.Height, cancel: func() { tcancel(); acancel() }}
	// The first Run starts the browser; it lives as long as tctx.
	if err := chromedp.Do(tctx, chromedp.EmulateViewport(int64(cfg.Width), int64(cfg.Height))); err != nil {
		b.Close()
		return nil, fmt.Errorf("starting %s: %w", cfg.ExecPath, err)
	}
	return b, nil
}

// Close ends the browser and waits for its processes.
func (b *Browser) Close() { b.cancel() }

// Load opens url in a fresh document (about:blank first, so that a
// route of the same page is loaded anew rather than followed as a hash
// change) and waits up to timeout for view to be ready. It returns the
// time from asking for the page to seeing it ready, as the test saw it.
func (b *Browser) Load(url, view string, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		return 0, fmt.Errorf("opening about:blank: %w", err)
	}
	t0 := time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		return 0, fmt.Errorf("opening %s: %w", url, err)
	}
	if _, err := b.waitReady(ctx, view); err != nil {
		return 0, fmt.Errorf("%s: %w", url, err)
	}
	return time.Since(t0), nil
}

// Route follows a route of the loaded page (sets location.hash, as a
// click on a link does) and waits up to timeout for view to be ready
// again. It returns the time from the route's change to the view's
// ready, as the page's clock (performance.now) saw it. The page marks
// the view not ready ("0") in its hashchange handler, which runs before
// the one Route adds, so the wait starts from there.
func (b *Browser) Route(hash, view string, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	t0, err := chromedp.Run(ctx, chromedp.Evaluate[float64](fmt.Sprintf(`new Promise((done) => {
		const t0 = performance.now();
		addEventListener('hashchange', () => done(t0), {once: true});
		location.hash = %s;
	})`, jsString(hash)), chromedp.EvalAwaitPromise))
	if err != nil {
		return 0, fmt.Errorf("following %s: %w", hash, err)
	}
	t1, err := b.waitReady(ctx, view)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", hash, err)
	}
	return time.Duration((t1 - t0) * float64(time.Millisecond)), nil
}

// readyJS waits (each animation frame) until main#view shows the view
// named by %s (a JavaScript string), with its data, and is then
// performance.now().
const readyJS = `new Promise((done) => {
	const check = () => {
		const m = document.querySelector('main#view');
		if (m && m.dataset.view === %s && m.dataset.ready === '1') {
			done(performance.now());
		} else {
			requestAnimationFrame(check);
		}
	};
	check();
})`

// stateJS says what the page shows, for a failure message.
const stateJS = `(() => {
	const m = document.querySelector('main#view');
	if (!m) return 'no main#view: ' + document.body.innerText.slice(0, 300);
	return 'main#view data-view=' + m.dataset.view + ' data-ready=' + m.dataset.ready + ': ' + m.innerText.slice(0, 300);
})()`

// waitReady waits until view is ready or ctx ends, and returns the
// page's performance.now() when it saw it ready. It evaluates in the
// document's current context (chromedp's Poll may pick the context of
// the document before a navigation).
func (b *Browser) waitReady(ctx context.Context, view string) (float64, error) {
	at, err := chromedp.Run(ctx, chromedp.Evaluate[float64](fmt.Sprintf(readyJS, jsString(view)), chromedp.EvalAwaitPromise))
	if err == nil {
		return at, nil
	}
	sctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	state, serr := chromedp.Run(sctx, chromedp.Evaluate[string](stateJS))
	if serr != nil {
		state = serr.Error()
	}
	return 0, fmt.Errorf("view %q not ready: %w (page: %s)", view, err, state)
}

// Eval evaluates a JavaScript expression in the tab and decodes its
// JSON value into a T.
func Eval[T any](b *Browser, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// Screenshot takes a PNG of the page at the viewport's width, from the
// top down to the page's height but at most maxHeight CSS pixels (the
// viewport's height when maxHeight is 0).
func (b *Browser) Screenshot(maxHeight int) ([]byte, error) {
	if maxHeight <= 0 {
		maxHeight = b.height
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	return chromedp.Run(ctx, func(ctx context.Context, t *chromedp.Target) ([]byte, error) {
		m, err := cdp.Call(ctx, t, page.GetLayoutMetrics, cdp.Empty{})
		if err != nil {
			return nil, err
		}
		h := float64(maxHeight)
		if cs := m.CSSContentSize; cs != nil {
			h = math.Min(math.Max(cs.Height, float64(b.height)), h)
		}
		r, err := cdp.Call(ctx, t, page.CaptureScreenshot, page.CaptureScreenshotParams{
			Format:                page.CaptureScreenshotFormatPng,
			CaptureBeyondViewport: ptr(true),
			FromSurface:           ptr(true),
			Clip:                  &page.Viewport{X: 0, Y: 0, Width: float64(b.width), Height: math.Ceil(h), Scale: 1},
		})
		if err != nil {
			return nil, err
		}
		return r.Data, nil
	})
}

func ptr[T any](v T) *T { return &v }

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
