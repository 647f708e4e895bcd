package reports

import (
	"context"
	"fmt"
	"os"
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

	"github.com/leasehold/leasehold/internal/testkit"
)

// browserTimeout bounds the whole browser test: start, load, checks and
// the screenshot.
const browserTimeout = 30 * time.Second

// pageWidth is the width the page must read well at.
const pageWidth = 1280

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
	browser := testkit.Browser(t)
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	t.Cleanup(cancel)
	events := &pageEvents{}
	tab := testkit.BrowserTab(t, ctx, browser, pageWidth, events.listen)
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
	require.Equal(t, 1, count("details.kind-section.fixture#fixture"))
	require.Equal(t, 1, count("details.kind-section.live#live"))
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

	shot, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "screenshot.png"), shot, 0o644))
	saved := screenshotPath(t)
	require.NoError(t, os.WriteFile(saved, shot, 0o644))
	t.Logf("screenshot: %s (and %s)", saved, filepath.Join(dir, "screenshot.png"))

	require.NoError(t, chromedp.Do(tab, chromedp.Evaluate[chromedp.Void](`document.querySelectorAll("details").forEach(d => d.open = true)`)))
	// Unfolded, every SVG text is drawn with a real size (fonts load, nothing
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

// foldedHeightMax bounds the evidence page's height, folded, at pageWidth:
// the header, the index and the acceptance checks, with every other
// section one line (the real page was 44,304 px tall, every section open).
const foldedHeightMax = 2400

// longReport is the sample report grown to the real page's bulk: eight
// sweeps, each with an 80-cell coverage map, and a 400-line trace of the
// failed attempt.
func longReport() Report {
	r := sampleReport()
	base := r.Fixture.Sweeps[0]
	r.Fixture.Sweeps = nil
	for i := range 8 {
		sw := base
		sw.Scenario = fmt.Sprintf("scenario-%d", i)
		for c := range 80 {
			sw.Coverage = append(sw.Coverage, CoverageCell{Cell: fmt.Sprintf("transition cell-%d", c), Seeds: 1 + c, Declared: c%2 == 0})
		}
		r.Fixture.Sweeps = append(r.Fixture.Sweeps, sw)
	}
	for i := range 400 {
		r.Failed.Trace = append(r.Failed.Trace, fmt.Sprintf("%d w1 step t_7f3a fence 1 -> ok", i))
	}
	return r
}

// TestHTMLFoldsItsSections: the evidence page opens on its verdict, an
// index of its sections with each one's verdict, and the acceptance
// checks; every other section is folded (<details>) and the page at
// 1280 px is at most foldedHeightMax tall. Unfolded, everything is there.
func TestHTMLFoldsItsSections(t *testing.T) {
	path := filepath.Join(t.TempDir(), "index.html")
	file, err := os.Create(path)
	require.NoError(t, err)
	r := longReport()
	require.NoError(t, HTML(file, r))
	require.NoError(t, file.Close())
	tab, events := openInBrowser(t, path)
	require.NoError(t, chromedp.Do(tab, chromedp.WaitVisible(chromedp.ID("verdict"))))
	eval := func(js string) int {
		t.Helper()
		n, err := chromedp.Run(tab, chromedp.Evaluate[int](js))
		require.NoError(t, err, js)
		return n
	}
	height := func() int { return eval("document.documentElement.scrollHeight") }

	folded := height()
	t.Logf("page height folded: %d px", folded)
	require.LessOrEqual(t, folded, foldedHeightMax)

	// The index lists every section in page order, each with a verdict
	// where it has one, and comes before them; the checks come first.
	entries, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#index li")].map(li =>
		li.dataset.section + " " + (li.querySelector(".badge") ? li.querySelector(".badge").textContent : "-"))`))
	require.NoError(t, err)
	require.Equal(t, []string{"checks FAIL", "fixture PASS", "live FAIL", "failed PASS", "versions -", "commands -"}, entries)
	order, err := chromedp.Run(tab, chromedp.Evaluate[[]string](`[...document.querySelectorAll("body > nav, body > details")].map(e => e.id)`))
	require.NoError(t, err)
	require.Equal(t, []string{"index", "checks", "fixture", "live", "failed", "versions", "commands"}, order)
	require.Equal(t, 1, eval(`document.querySelectorAll("body > details[open]").length`), "only the checks are open")
	require.Equal(t, 1, eval(`document.querySelector("#checks").open ? 1 : 0`))
	require.Equal(t, len(r.Checks), eval(`[...document.querySelectorAll("tbody.check")].filter(e => e.checkVisibility()).length`), "every check is visible")
	require.Equal(t, 0, eval(`[...document.querySelectorAll("table.coverage, pre.trace, figure")].filter(e => e.checkVisibility()).length`), "the folded sections show nothing but their titles")

	// Unfolded, every section and sub-section shows what it holds.
	require.NoError(t, chromedp.Do(tab, chromedp.Evaluate[chromedp.Void](`document.querySelectorAll("details").forEach(d => d.open = true)`)))
	require.Equal(t, len(r.Fixture.Sweeps), eval(`[...document.querySelectorAll("table.coverage")].filter(e => e.checkVisibility()).length`))
	require.Equal(t, len(r.Failed.Trace), eval(`document.querySelector("pre.trace").textContent.split("\n").length`))
	require.Greater(t, eval(`[...document.querySelectorAll("figure")].filter(e => e.checkVisibility()).length`), 3)
	open := height()
	t.Logf("page height unfolded: %d px", open)
	require.Greater(t, open, 4*folded)
	errors, requests := events.snapshot()
	require.Empty(t, errors)
	require.Empty(t, requests)
}
