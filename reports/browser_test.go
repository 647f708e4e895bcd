package reports

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// browserTimeout bounds the whole browser test: start, load, checks and
// the screenshot.
const browserTimeout = 30 * time.Second

// pageWidth is the width the page must read well at.
const pageWidth = 1280

// findBrowser looks for Debian's chromium, then other Chrome builds in
// PATH. It returns "" when there is none.
func findBrowser() string {
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	return ""
}

// pageEvents collects what the page reports while it loads: console errors,
// uncaught exceptions, browser log errors and any request that leaves the
// file.
type pageEvents struct {
	mu       sync.Mutex
	errors   []string
	requests []string
}

func (p *pageEvents) listen(ev any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range e.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			p.errors = append(p.errors, "console."+string(e.Type)+": "+strings.Join(args, " "))
		}
	case *runtime.EventExceptionThrown:
		text := "exception"
		if d := e.ExceptionDetails; d != nil {
			text += ": " + d.Text
			if d.Exception != nil {
				text += " " + d.Exception.Description
			}
		}
		p.errors = append(p.errors, text)
	case *log.EventEntryAdded:
		if e.Entry != nil && e.Entry.Level == log.EntryLevelError {
			p.errors = append(p.errors, "log "+string(e.Entry.Source)+": "+e.Entry.Text+" "+e.Entry.URL)
		}
	case *network.EventRequestWillBeSent:
		if e.Request != nil && !strings.HasPrefix(e.Request.URL, "file://") && !strings.HasPrefix(e.Request.URL, "data:") {
			p.requests = append(p.requests, e.Request.URL)
		}
	}
}

func (p *pageEvents) snapshot() (errors, requests []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.errors...), append([]string(nil), p.requests...)
}

// openInBrowser starts headless chromium with a fresh profile and loads
// the file at path, recording console errors, exceptions and requests
// from the start of the tab. It skips the test when no browser is found,
// unless CI is set.
func openInBrowser(t *testing.T, path string) (context.Context, *pageEvents) {
	t.Helper()
	browser := findBrowser()
	if browser == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no chromium found (looked for /usr/bin/chromium, chromium, chromium-browser, google-chrome): .ci/run must install Debian's chromium")
		}
		t.Skip("no chromium found; install it with apt-get install -y chromium")
	}
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	t.Cleanup(cancel)
	allocator, cancelAllocator := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(browser),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "profile")),
		chromedp.WindowSize(pageWidth, 900),
	)
	t.Cleanup(cancelAllocator)
	events := &pageEvents{}
	tab, cancelTab := chromedp.NewContext(allocator, chromedp.WithListener(events.listen))
	t.Cleanup(cancelTab)
	require.NoError(t, chromedp.Do(tab,
		chromedp.EmulateViewport(pageWidth, 900),
		chromedp.Navigate("file://"+path),
	))
	return tab, events
}

// TestBrowserCatchesErrors loads a page that logs an error, throws and
// asks for an outside resource, and checks that the browser test would
// see each of them: the checks of TestHTMLInBrowser can fail.
func TestBrowserCatchesErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.html")
	bad := `<!DOCTYPE html><html><head><title>bad</title></head><body>` +
		`<img src="http://127.0.0.1:9/missing.png" alt="">` +
		`<script>console.error("deliberate"); throw new Error("thrown");</script></body></html>`
	require.NoError(t, os.WriteFile(path, []byte(bad), 0o644))
	tab, events := openInBrowser(t, path)
	require.NoError(t, chromedp.Do(tab, chromedp.Sleep(200*time.Millisecond)))
	errors, requests := events.snapshot()
	joined := strings.Join(errors, "\n")
	require.Contains(t, joined, `console.error: "deliberate"`)
	require.Contains(t, joined, "thrown")
	require.Contains(t, strings.Join(requests, "\n"), "http://127.0.0.1:9/missing.png")
}

// TestHTMLInBrowser renders the sample report, loads it in headless
// chromium from the file, and checks that it shows what it must with no
// console error and no request leaving the file. It saves a full-page
// screenshot to out/evidence/screenshot.png (or a temporary directory)
// and to the test's own temporary directory.
func TestHTMLInBrowser(t *testing.T) {
	dir := t.TempDir()
	indexPath := filepath.Join(dir, "index.html")
	file, err := os.Create(indexPath)
	require.NoError(t, err)
	require.NoError(t, HTML(file, sampleReport()))
	require.NoError(t, file.Close())

	tab, events := openInBrowser(t, indexPath)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.ID("verdict"))))

	count := func(selector string) int {
		t.Helper()
		n, err := chromedp.Run(tab, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", selector)))
		require.NoError(t, err, selector)
		return n
	}
	text := func(selector string) string {
		t.Helper()
		s, err := chromedp.Run(tab, chromedp.Evaluate[string](fmt.Sprintf("document.querySelector(%q).textContent", selector)))
		require.NoError(t, err, selector)
		return strings.TrimSpace(s)
	}

	r := sampleReport()
	results := 0
	for _, c := range r.Checks {
		results += len(c.Results)
	}
	require.Equal(t, "FAIL", text("#verdict"))
	require.Equal(t, results, count("tr.check-row"))
	require.Equal(t, results, count("tr.check-row .kind"), "every check row shows FIXTURE or LIVE")
	require.Equal(t, 1, count("section.kind-section.fixture#fixture"))
	require.Equal(t, 1, count("section.kind-section.live#live"))
	require.GreaterOrEqual(t, count("figure.timeline"), 2)
	require.GreaterOrEqual(t, count("figure.timeline g.lane"), 4)
	require.Greater(t, count("g.bar"), 0)
	require.Greater(t, count("g.mark"), 0)
	require.Equal(t, 1, count("g.violation"))
	require.Equal(t, len(groupSeries(r.Live.Series)), count("figure.chart"))
	require.Equal(t, 0, count("#fixture figure.chart"), "no live chart in the fixture section")
	require.Equal(t, 0, count("#fixture figure.timeline.live"), "no live timeline in the fixture section")
	require.Equal(t, 0, count("#live figure.timeline.fixture"), "no fixture timeline in the live section")
	require.Equal(t, count("g.bar"), count("g.bar > title"), "every bar has hover text")
	require.Equal(t, count("g.mark"), count("g.mark > title")+1, "every mark but the violation's glyph has hover text")
	require.Equal(t, 1, count("g.violation > title"))

	// The page fits its width: nothing pushes it sideways at 1280 px.
	scrollWidth, err := chromedp.Run(tab, chromedp.Evaluate[int]("document.documentElement.scrollWidth"))
	require.NoError(t, err)
	require.LessOrEqual(t, scrollWidth, pageWidth, "the page is wider than the window")

	// Every SVG text is drawn with a real size (fonts load, nothing
	// collapses) and no timeline label runs off its SVG.
	offending, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`(() => {
		const bad = [];
		for (const svg of document.querySelectorAll("figure.timeline svg.timeline-svg")) {
			const box = svg.getBoundingClientRect();
			for (const t of svg.querySelectorAll("text")) {
				const r = t.getBoundingClientRect();
				if (r.width === 0 && t.textContent.trim() !== "") bad.push("empty: " + t.textContent);
				if (r.left < box.left - 1 || r.right > box.right + 1) bad.push("outside: " + t.textContent);
			}
		}
		return bad;
	})()`))
	require.NoError(t, err)
	require.Empty(t, offending)

	shot, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "screenshot.png"), shot, 0o644))
	saved := screenshotPath(t)
	require.NoError(t, os.WriteFile(saved, shot, 0o644))
	t.Logf("screenshot: %s (and %s)", saved, filepath.Join(dir, "screenshot.png"))

	errors, requests := events.snapshot()
	require.Empty(t, errors, "the page logged errors")
	require.Empty(t, requests, "the page made requests outside its file")
}

// screenshotPath is out/evidence/screenshot.png at the repository root
// when that directory can be made, else a file in a temporary directory.
func screenshotPath(t *testing.T) string {
	dir := filepath.Join("..", "out", "evidence")
	if err := os.MkdirAll(dir, 0o755); err == nil {
		return filepath.Join(dir, "screenshot.png")
	}
	return filepath.Join(t.TempDir(), "screenshot.png")
}
