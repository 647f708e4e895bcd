// Package testkit holds the small helpers that the tests of several
// packages share, each declared once: a buffer that goroutines may write
// to at once (a server's log), the browser a browser test drives, and a
// task ID no fixture hands out. Only tests import it.
package testkit

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"
)

// UnknownTask is a well-formed task ID that no fixture ever hands out.
const UnknownTask = "t_00000000deadbeef"

// SyncBuffer collects output written from several goroutines (a server's
// log, a process's stderr). Its zero value is empty and ready.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// browsers are the Chrome builds a browser test looks for in PATH, after
// Debian's /usr/bin/chromium.
var browsers = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// Browser returns the path of the Chrome build a browser test drives:
// Debian's chromium, else the first of browsers in PATH. With none, the
// test is skipped, or fails when CI is set (.ci/run installs chromium).
func Browser(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	for _, name := range browsers {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium found (looked for /usr/bin/chromium, chromium, chromium-browser, google-chrome): .ci/run must install Debian's chromium")
	}
	t.Skip("no chromium found; install it with apt-get install -y chromium")
	return ""
}

// BrowserTab starts the headless browser at path (Browser's answer) with a
// fresh profile in the test's temporary directory and a window width
// pixels wide, and returns a tab whose events reach listen (nil for none).
// ctx bounds the browser's life; the browser and the tab stop when the
// test ends.
func BrowserTab(t testing.TB, ctx context.Context, path string, width int, listen func(ev any)) context.Context {
	t.Helper()
	allocator, cancelAllocator := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(path),
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
		chromedp.WindowSize(width, 900),
	)
	t.Cleanup(cancelAllocator)
	var opts []chromedp.ContextOption
	if listen != nil {
		opts = append(opts, chromedp.WithListener(listen))
	}
	tab, cancelTab := chromedp.NewContext(allocator, opts...)
	t.Cleanup(cancelTab)
	return tab
}
