package console

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/httpapi"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// browserTimeout bounds the whole browser test.
const browserTimeout = 90 * time.Second

// update asks the browser test to rewrite the screenshots of the console
// committed under docs/console/: go test -run TestConsoleInBrowser
// ./console -update
var update = flag.Bool("update", false, "rewrite the console's screenshots under docs/console/")

// docsDir is where -update writes the screenshots, from this package.
var docsDir = filepath.Join("..", "docs", "console")

// narrowWidth is a phone's width: no page may be wider.
const narrowWidth = 375

// historyMinutes is how much history the browser test's console samples
// before the Live page is drawn.
const historyMinutes = 45

// screenshotsEnv, when set, asks the browser test to save a screenshot of
// each page: into the directory it names when that is an absolute path,
// else under out/console-screenshots/ at the repository root.
const screenshotsEnv = "LEASEHOLD_CONSOLE_SCREENSHOTS"

// tabLog records the statuses of the documents a tab loaded and any
// script error.
type tabLog struct {
	mu       sync.Mutex
	statuses map[string]int64 // URL path -> last status
	errors   []string
	urls     []string // every URL the tab requested
}

func (l *tabLog) listen(ev any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		if e.Request != nil {
			l.urls = append(l.urls, e.Request.URL)
		}
	case *network.EventResponseReceived:
		if e.Type == network.ResourceTypeDocument && e.Response != nil {
			path := e.Response.URL
			if i := strings.Index(path, "/ui/"); i >= 0 {
				path = path[i:]
			}
			l.statuses[path] = e.Response.Status
		}
	case *runtime.EventExceptionThrown:
		l.errors = append(l.errors, "exception")
	}
}

func (l *tabLog) status(path string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.statuses[path]
}

// cookieWatch records, for each POST the console gets, whether it carried
// a session cookie and what the console answered.
type cookieWatch struct {
	mu    sync.Mutex
	posts []string
}

func (c *cookieWatch) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		_, err := r.Cookie(cookieName)
		c.mu.Lock()
		c.posts = append(c.posts, fmt.Sprintf("%s cookie=%t origin=%s status=%d", r.URL.Path, err == nil, r.Header.Get("Origin"), rec.status))
		c.mu.Unlock()
	})
}

func (c *cookieWatch) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.posts...)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// TestConsoleInBrowser drives the console in headless chromium: an
// approver signs in, finds the waiting task, approves it and sees it
// resume and complete; a stale approval shows the refusal; a submitter
// sees neither other users' tasks nor an approve button; and a form on
// another 127.0.0.1 port, posting with the session cookie but a wrong
// CSRF token, is refused with 403 and writes nothing.
func TestConsoleInBrowser(t *testing.T) {
	browser := testkit.Browser(t)
	// Long sessions: driving the worker advances the fake clock.
	// The server names the report kind (and synthetic) in its counts by
	// kind; every other kind is counted as other.
	b := setupWith(t, func(o *httpapi.Options) { o.Kinds = []string{"report", model.KindSynthetic} },
		func(o *Options) { o.Idle, o.Lifetime, o.PageSize = 24*time.Hour, 48*time.Hour, 50 })
	watch := &cookieWatch{}
	b.srv.Config.Handler = watch.wrap(b.console)

	gated := b.submit(t, "ana", "gated", gatedPayload)
	twice := b.submit(t, "ana", "twice", `{"steps": [{"cost": 1}, {"approval": "first"}, {"approval": "second"}, {"cost": 1}]}`)
	bobs := b.submit(t, "bob", "bobs", gatedPayload)
	review := b.submit(t, "ana", "flaky", `{"steps": [{"cost": 1, "fail": "transient", "times": 9}]}`)
	for _, id := range []string{gated, twice, bobs} {
		b.drive(t, id, model.WaitingForApproval)
	}
	b.drive(t, review, model.NeedsReview)
	_, err := b.q.AddSchedule(context.Background(), model.ScheduleSpec{User: "ana", Payload: `{"steps": [{"cost": 1}]}`, CostBudget: 5,
		StepsMax: 2, Origin: epoch, Period: time.Hour}, "operator")
	require.NoError(t, err)
	require.NoError(t, b.q.SetUserLimit(context.Background(), model.UserLimit{User: "bob", RunningMax: 2, DepthMax: model.Inherit}, "operator"))

	// Three quarters of an hour of work, sampled by the console each
	// minute: cy's tasks arrive, are claimed and mostly complete.
	waitSample(t, b.console)
	for minute := range historyMinutes {
		for i := range minute%5 + 1 {
			b.submit(t, "cy", fmt.Sprintf("h%d-%d", minute, i), `{"steps": [{"cost": 1}]}`)
		}
		claimed, err := b.q.Claim(context.Background(), model.ClaimRequest{Worker: "w-history", Max: 2 + minute%3, Lease: 10 * time.Minute})
		require.NoError(t, err)
		for i, c := range claimed {
			if (minute+i)%9 == 0 {
				_, err = b.q.Fail(context.Background(), c.Claim, model.Failure{Class: model.Permanent, Message: "declined"})
			} else {
				err = b.q.Complete(context.Background(), c.Claim)
			}
			require.NoError(t, err)
		}
		b.clock.Advance(time.Minute)
		waitSample(t, b.console)
	}

	shots := screenshotDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	t.Cleanup(cancel)
	log := &tabLog{statuses: map[string]int64{}}
	tab := testkit.BrowserTab(t, ctx, browser, 1280, log.listen)

	run := func(actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		require.NoError(t, chromedp.Do(tab, actions...))
	}
	text := func(selector string) string {
		t.Helper()
		s, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS(selector)))
		require.NoError(t, err, selector)
		return strings.TrimSpace(s)
	}
	count := func(selector string) int {
		t.Helper()
		n, err := chromedp.Run(tab, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", selector)))
		require.NoError(t, err, selector)
		return n
	}
	// shot saves a screenshot of the page: the whole page into the
	// directory screenshotsEnv names, or, with -update, the window's view
	// (the files stay small) under docs/console/.
	shot := func(name string) {
		t.Helper()
		if shots == "" {
			return
		}
		var png []byte
		var err error
		if *update {
			png, err = chromedp.Run(tab, chromedp.CaptureScreenshot())
		} else {
			png, err = chromedp.Run(tab, chromedp.FullScreenshot(100))
		}
		require.NoError(t, err)
		path := filepath.Join(shots, name+".png")
		require.NoError(t, os.WriteFile(path, png, 0o644))
		t.Logf("screenshot: %s (%d bytes)", path, len(png))
	}
	widest := func() int {
		t.Helper()
		n, err := chromedp.Run(tab, chromedp.Evaluate[int]("document.documentElement.scrollWidth"))
		require.NoError(t, err)
		return n
	}
	signIn := func(secret, name string) {
		t.Helper()
		run(chromedp.Navigate(b.srv.URL+"/ui/signin"), chromedp.WaitVisible(chromedp.ID("#token")))
		if name == "approver" {
			shot("signin")
		}
		run(chromedp.SendKeys(chromedp.ID("#token"), secret), chromedp.Click(chromedp.ID("#signin")),
			chromedp.WaitVisible(chromedp.ID("#who")))
		require.Equal(t, name, text("#who"))
	}

	// The approver finds the waiting task and approves the version shown.
	signIn(approverSecret, "approver")
	shot("tasks")
	run(chromedp.Click(chromedp.CSS(`a[href="/ui/approvals"]`)), chromedp.WaitVisible(chromedp.CSS("table.approvals")))
	require.Equal(t, 3, count("table.approvals tr.task-row"))
	shot("approvals")
	run(chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-task=%q] button.approve`, gated))), chromedp.WaitVisible(chromedp.ID("#flash")))
	require.Contains(t, text("#flash"), "Approved version 1")
	require.Equal(t, "queued", text("#task-state"))
	done := b.drive(t, gated, model.Completed)
	require.Equal(t, "approver", done.ApprovedBy)
	run(chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("#task-state")))
	require.Equal(t, "completed", text("#task-state"))
	require.Equal(t, "6 of 100", text("#task-cost"))
	require.Equal(t, 2, count("figure.timeline g.bar"), "two claims: before and after the gate")
	require.Equal(t, 0, count("button.approve"))
	shot("task")

	// A stale approval: the page shows version 1, the task moves on to its
	// second gate (version 2) behind the approver's back.
	run(chromedp.Navigate(b.srv.URL+"/ui/approvals"), chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr[data-task=%q]`, twice))))
	require.NoError(t, b.q.Approve(context.Background(), twice, 1, "someone-else"))
	moved := b.drive(t, twice, model.WaitingForApproval)
	require.Equal(t, int64(2), moved.ApprovalVersion)
	run(chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-task=%q] button.approve`, twice))), chromedp.WaitVisible(chromedp.ID("#error")))
	require.Contains(t, text("#error"), "no longer at the version this page showed (1)")
	// Redirected after the POST: the refusal shows on the task's own
	// page, at the task's own URL, with the version it is at now.
	at, err := chromedp.Run(tab, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, b.srv.URL+"/ui/tasks/"+twice, at)
	require.Equal(t, int64(http.StatusOK), log.status("/ui/tasks/"+twice))
	require.Equal(t, "Approve version 2", text("button.approve"))
	still, err := b.q.Task(context.Background(), twice)
	require.NoError(t, err)
	require.Equal(t, model.WaitingForApproval, still.State)
	require.Equal(t, int64(2), still.ApprovalVersion)
	shot("stale-approval")
	run(chromedp.Click(chromedp.CSS(`form.who button`)), chromedp.WaitVisible(chromedp.ID("#token")))

	// The submitter sees only ana's tasks, and no approve button anywhere.
	signIn(anaSecret, "ana")
	require.Equal(t, 0, count(fmt.Sprintf(`tr[data-task=%q]`, bobs)))
	require.Equal(t, 1, count(fmt.Sprintf(`tr[data-task=%q]`, twice)))
	require.Equal(t, 0, count(`a[href="/ui/approvals"]`))
	shot("submitter-tasks")
	run(chromedp.Navigate(b.srv.URL+"/ui/tasks/"+twice), chromedp.WaitVisible(chromedp.ID("#task-state")))
	require.Equal(t, "waiting_for_approval", text("#task-state"))
	require.Equal(t, 0, count("button.approve"))
	require.Equal(t, 0, count(`form[action$="/approve"]`))
	shot("submitter-task")
	run(chromedp.Navigate(b.srv.URL + "/ui/tasks/" + bobs))
	require.Equal(t, int64(http.StatusNotFound), log.status("/ui/tasks/"+bobs))

	// A form on another 127.0.0.1 port posts with ana's cookie (same site,
	// so SameSite lets it through) and a wrong CSRF token.
	before := b.eventCount(t)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!DOCTYPE html><title>elsewhere</title><form method="post" action="%s/ui/tasks/%s/cancel">`+
			`<input type="hidden" name="csrf" value="guessed"><button id="go" type="submit">win a prize</button></form>`, b.srv.URL, twice)
	}))
	t.Cleanup(evil.Close)
	require.NotEqual(t, b.srv.URL, evil.URL)
	run(chromedp.Navigate(evil.URL), chromedp.Click(chromedp.ID("#go")), chromedp.WaitVisible(chromedp.ID("#error")))
	require.Equal(t, int64(http.StatusForbidden), log.status("/ui/tasks/"+twice+"/cancel"))
	shot("cross-origin-refused")
	posts := watch.all()
	require.Contains(t, posts, fmt.Sprintf("/ui/tasks/%s/cancel cookie=true origin=%s status=403", twice, evil.URL), "the forged post carried the session cookie and was refused")
	after, err := b.q.Task(context.Background(), twice)
	require.NoError(t, err)
	require.Equal(t, model.WaitingForApproval, after.State)
	require.False(t, after.CancelRequested)
	require.Equal(t, before, b.eventCount(t), "the refused post wrote nothing")

	// The submit form, as ana.
	run(chromedp.Navigate(b.srv.URL+"/ui/submit"), chromedp.WaitVisible(chromedp.ID("#submit-one")))
	shot("submit")
	run(chromedp.SendKeys(chromedp.CSS(`input[name="key"]`), "from-browser"), chromedp.Click(chromedp.ID("#submit-one")),
		chromedp.WaitVisible(chromedp.ID("#flash")))
	require.Equal(t, "Submitted.", text("#flash"))
	require.Equal(t, "queued", text("#task-state"))
	run(chromedp.Click(chromedp.CSS(`form.who button`)), chromedp.WaitVisible(chromedp.ID("#token")))

	// dee's tasks of other kinds: a report completed and one queued, and
	// a task of a kind the server does not name.
	ctxDee := context.Background()
	for i, kind := range []string{"report", "report", "stray-kind"} {
		_, err := b.q.Submit(ctxDee, model.SubmitRequest{User: "dee", Key: fmt.Sprintf("kind-%d", i), Kind: kind, Payload: `{"month": "2026-03"}`,
			CostBudget: 10, StepsMax: 2})
		require.NoError(t, err)
		if i == 0 {
			claimed, err := b.q.Claim(ctxDee, model.ClaimRequest{Worker: "w-report", Max: 1, Lease: time.Minute, Kinds: []string{"report"}})
			require.NoError(t, err)
			require.Len(t, claimed, 1)
			require.NoError(t, b.q.Complete(ctxDee, claimed[0].Claim))
		}
	}
	metrics, err := b.q.Metrics(ctxDee)
	require.NoError(t, err)

	// The operator's pages: inspect with the bounded requeue, live,
	// schedules and limits.
	signIn(operatorSecret, "operator")
	run(chromedp.Navigate(b.srv.URL+"/ui/inspect"), chromedp.WaitVisible(chromedp.CSS("table.inspect")))
	require.Equal(t, 1, count(fmt.Sprintf(`tr[data-task=%q] form[action$="/requeue"]`, review)))
	grantMax, err := chromedp.Run(tab, chromedp.AttributeValue(chromedp.CSS(fmt.Sprintf(`tr[data-task=%q] input[name="grant_cost"]`, review)), "max"))
	require.NoError(t, err)
	require.Equal(t, "10000", grantMax.Value)
	shot("inspect")
	for _, page := range []string{"live", "schedules", "limits"} {
		run(chromedp.Navigate(b.srv.URL+"/ui/"+page), chromedp.WaitVisible(chromedp.CSS("h1")))
		require.Equal(t, int64(http.StatusOK), log.status("/ui/"+page))
		if page == "live" {
			require.Equal(t, 1, count(fmt.Sprintf(`.failures a[href="/ui/tasks/%s"]`, review)), "the dead-lettered task is a recent failure")
			require.Equal(t, "1", text(`.stat[data-state="needs_review"] .num`))
			require.Equal(t, 2, count("#history figure.chart svg.chart-svg"), "depth and throughput, drawn by the server")
			require.Equal(t, 4, count("#depth-chart polyline"), "a line per active state")
			require.Equal(t, 2, count("#throughput-chart polyline"))
			require.Contains(t, text("#history-note"), fmt.Sprintf("%d samples", historyMinutes+1))
			// The outcomes: the totals, then report and synthetic by name,
			// then other (the stray kind's task, never named).
			require.Equal(t, 4, count("#outcomes tbody tr"))
			cell := func(row string, column int) string {
				return text(fmt.Sprintf("#outcomes tbody tr%s td:nth-of-type(%d)", row, column))
			}
			require.Equal(t, "all kinds", text("#outcomes tbody tr.outcome-total th"))
			require.Equal(t, fmt.Sprint(metrics.Submitted), cell(".outcome-total", 1))
			require.Equal(t, fmt.Sprint(metrics.Completions), cell(".outcome-total", 2))
			require.Equal(t, fmt.Sprint(metrics.Failures), cell(".outcome-total", 3))
			require.Equal(t, "2", cell(`[data-kind="report"]`, 1), "two reports submitted")
			require.Equal(t, "1", cell(`[data-kind="report"]`, 2), "one report completed")
			require.Equal(t, fmt.Sprint(metrics.Submitted-3), cell(`[data-kind="synthetic"]`, 1))
			require.Equal(t, fmt.Sprint(metrics.Completions-1), cell(`[data-kind="synthetic"]`, 2))
			require.Equal(t, fmt.Sprint(metrics.Failures), cell(`[data-kind="synthetic"]`, 3))
			require.Equal(t, "1", cell(`[data-kind="other"]`, 1), "the stray kind's task")
			require.Equal(t, "0", cell(`[data-kind="other"]`, 2))
			require.Equal(t, 0, count(`#outcomes tr[data-kind="stray-kind"]`), "a kind the server does not name is never shown")
			require.NotContains(t, text("#outcomes"), "stray-kind")
		}
		shot(page)
	}

	// The task list, newest first, and the search by key: a token for
	// every user names the user.
	run(chromedp.Navigate(b.srv.URL+"/ui/tasks"), chromedp.WaitVisible(chromedp.ID("#search")))
	require.Equal(t, "Created ↓", text("#sort-created"))
	shot("tasks-operator")
	run(chromedp.SendKeys(chromedp.ID("#search"), "gated"), chromedp.SendKeys(chromedp.ID("#filter-user"), "ana"),
		chromedp.Click(chromedp.ID("#filter")), chromedp.WaitVisible(chromedp.ID("#task-state")))
	at, err = chromedp.Run(tab, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, b.srv.URL+"/ui/tasks/"+gated, at)

	// A running task's page shows its lease and last heartbeat.
	urgent, err := b.q.Submit(context.Background(), model.SubmitRequest{User: "cy", Key: "running", Payload: `{"steps": [{"cost": 1}]}`,
		CostBudget: 10, StepsMax: 2, Priority: model.PriorityMax})
	require.NoError(t, err)
	running := urgent.TaskID
	claimed, err := b.q.Claim(context.Background(), model.ClaimRequest{Worker: "w9", Max: 1, Lease: 30 * time.Second})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, running, claimed[0].Claim.TaskID)
	b.clock.Advance(3 * time.Second)
	_, err = b.q.Heartbeat(context.Background(), claimed[0].Claim, 30*time.Second)
	require.NoError(t, err)
	b.clock.Advance(time.Second)
	run(chromedp.Navigate(b.srv.URL+"/ui/tasks/"+running), chromedp.WaitVisible(chromedp.ID("#task-lease")))
	require.Contains(t, text("#task-lease"), "held by w9 under fence 1")
	require.Contains(t, text("#task-lease"), "(in 29s)")
	require.Contains(t, text("#task-heartbeat"), "(1s ago)")
	shot("task-running")

	// On a phone's width no page is wider than the screen: tables scroll
	// inside their own box, forms and figures fit.
	run(chromedp.EmulateViewport(narrowWidth, 800))
	for _, path := range []string{"/ui/tasks", "/ui/tasks/" + gated, "/ui/tasks/" + running, "/ui/tasks/" + review,
		"/ui/inspect", "/ui/live", "/ui/schedules", "/ui/limits", "/ui/submit"} {
		run(chromedp.Navigate(b.srv.URL+path), chromedp.WaitVisible(chromedp.CSS("h1")))
		require.LessOrEqual(t, widest(), narrowWidth, "%s is wider than %d px", path, narrowWidth)
		switch path {
		case "/ui/tasks":
			shot("tasks-narrow")
		case "/ui/live":
			shot("live-narrow")
		}
	}
	run(chromedp.EmulateViewport(1280, 900), chromedp.Navigate(b.srv.URL+"/ui/limits"), chromedp.WaitVisible(chromedp.ID("#limits-form")))

	// The operator edits a limit on the page: the attempts before review,
	// through the same core as PUT /v1/limits, recorded under its name.
	require.Equal(t, "3", text("#limit-attempts_max"), "the default")
	run(chromedp.SetValue(chromedp.CSS(`#limits-form input[name="attempts_max"]`), "6"), chromedp.Click(chromedp.ID("#save-limits")),
		chromedp.WaitVisible(chromedp.ID("#flash")))
	require.Equal(t, "Queue-wide limits saved.", text("#flash"))
	require.Equal(t, "6", text("#limit-attempts_max"))
	limits, _, err := b.q.Limits(context.Background())
	require.NoError(t, err)
	require.Equal(t, 6, limits.AttemptsMax)
	audit, err := b.q.Audit(context.Background(), queue.AuditFilter{Actor: "operator"})
	require.NoError(t, err)
	require.Equal(t, model.EventLimitsSet, audit[len(audit)-1].Kind)
	shot("limits-edited")
	// And removes the schedule from its row.
	run(chromedp.Navigate(b.srv.URL+"/ui/schedules"), chromedp.WaitVisible(chromedp.CSS("tr.schedule-row")),
		chromedp.Click(chromedp.CSS("tr.schedule-row button.remove")), chromedp.WaitVisible(chromedp.ID("#flash")))
	require.Contains(t, text("#flash"), "removed")
	require.Equal(t, 0, count("tr.schedule-row"))
	left, err := b.q.Schedules(context.Background())
	require.NoError(t, err)
	require.Empty(t, left)
	log.mu.Lock()
	defer log.mu.Unlock()
	require.Empty(t, log.errors)
	require.NotEmpty(t, log.urls)
	for _, u := range log.urls {
		for _, secret := range []string{anaSecret, bobSecret, approverSecret, operatorSecret} {
			require.NotContains(t, u, secret, "a token in a URL")
		}
	}
}

// screenshotDir is where the screenshots go: docs/console/ with -update,
// else where screenshotsEnv asks for them, "" for none.
func screenshotDir(t *testing.T) string {
	if *update {
		return docsDir
	}
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		return ""
	}
	if !filepath.IsAbs(dir) {
		var err error
		dir, err = filepath.Abs(filepath.Join("..", "out", "console-screenshots"))
		require.NoError(t, err)
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}
