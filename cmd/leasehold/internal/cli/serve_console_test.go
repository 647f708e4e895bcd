package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/httpapi"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// TestServeMountsTheConsole checks the server serve builds: the console
// answers at /ui/ beside the JSON API, a sign-in there goes through the
// API's own tokens, and the console's session does not open the API.
func TestServeMountsTheConsole(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	q, err := queue.Open(context.Background(), queue.Options{Path: filepath.Join(t.TempDir(), "serve.db"), Clock: clock, IDs: model.NewSeededIDs(1)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	const secret = "approver-secret-0123456789"
	tokens, err := httpapi.ParseTokens("approver approve "+secret+" *", true)
	require.NoError(t, err)
	served, err := newServer(httpapi.Options{Queue: q, Tokens: tokens, Clock: clock, AuthDelay: -1})
	require.NoError(t, err)
	t.Cleanup(served.Close)
	srv := httptest.NewServer(served.mux)
	t.Cleanup(srv.Close)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	res, err := client.Get(srv.URL + "/ui/signin")
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(body)
	require.NotNil(t, csrf)
	cookies := res.Cookies()
	require.Len(t, cookies, 1)

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/ui/signin", strings.NewReader(url.Values{"csrf": {string(csrf[1])}, "token": {secret}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", srv.URL)
	req.AddCookie(cookies[0])
	res, err = client.Do(req)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	session := res.Cookies()
	require.Len(t, session, 1)

	// The session cookie is the console's alone: the API wants its token.
	req, err = http.NewRequest(http.MethodGet, srv.URL+"/v1/tasks", nil)
	require.NoError(t, err)
	req.AddCookie(session[0])
	res, err = client.Do(req)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)

	req, err = http.NewRequest(http.MethodGet, srv.URL+"/ui/tasks", nil)
	require.NoError(t, err)
	req.AddCookie(session[0])
	res, err = client.Do(req)
	require.NoError(t, err)
	body, err = io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(body), `<span id="who">approver</span>`)
}

// TestServeClosesTheConsole: when serve ends, so does the console's
// sampling of the queue's metrics (a goroutine that would otherwise poll
// a closed queue for as long as the process lives).
func TestServeClosesTheConsole(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "q.db")
	makeDB(t, db)
	tokens := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("ops operate,submit serve-secret-0123456789 *\n"), 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), cliTimeout)
	defer cancel()
	out := newWatched()
	exited := make(chan int, 1)
	go func() {
		exited <- run(&env{ctx: ctx, stdout: io.Discard, stderr: out}, []string{"serve", "--db", db, "--addr", "127.0.0.1:0", "--tokens", tokens})
	}()
	require.True(t, out.waitFor(ctx, `"msg":"serving"`, nil), "serve started: %s", out)
	require.Equal(t, 1, samplers(), "the console samples while serve runs")
	cancel()
	require.Equal(t, exitOK, <-exited, "%s", out)
	require.Zero(t, samplers(), "the console's sampling ended with serve")
}

// samplers counts the goroutines running a console's sampling loop.
func samplers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "console.(*Console).sampleLoop(")
		}
		buf = make([]byte, 2*len(buf))
	}
}
