package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/model"
)

// browserTimeout bounds the browser test.
const browserTimeout = 3 * time.Minute

// documentStatuses records the status of each document a tab loaded, by
// path.
type documentStatuses struct {
	mu       sync.Mutex
	statuses map[string]int64
}

func (d *documentStatuses) listen(ev any) {
	e, ok := ev.(*network.EventResponseReceived)
	if !ok || e.Type != network.ResourceTypeDocument || e.Response == nil {
		return
	}
	path := e.Response.URL
	if i := strings.Index(path, "/ui/"); i >= 0 {
		path = path[i:]
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.statuses[path] = e.Response.Status
}

func (d *documentStatuses) of(path string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.statuses[path]
}

// TestProgramConsoleInBrowser drives the built program's console in
// headless chromium, as console/browser_test.go drives the console: the
// clerk signs in with the program's own token and finds the report and
// the invoice the program's worker completed, each listed with its kind,
// and on its page its kind, state and result. The manager, who acts for
// every user, sees them too; a wrong token is refused at the sign-in.
func TestProgramConsoleInBrowser(t *testing.T) {
	browser := testkit.Browser(t)
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	t.Cleanup(cancel)
	p := startProgram(t)
	clerk := p.client(t, clerkSecret)
	ids := make([]string, len(reportAndInvoice))
	for i, s := range reportAndInvoice {
		res, err := clerk.Submit(ctx, s.req)
		require.NoError(t, err, s.req.Key)
		ids[i] = res.TaskID
		require.Equal(t, model.Completed, waitEnded(ctx, t, clerk, res.TaskID).State, s.req.Key)
	}

	statuses := &documentStatuses{statuses: map[string]int64{}}
	tab := testkit.BrowserTab(t, ctx, browser, 1280, statuses.listen)

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
	// fact is the value of the task page's row headed name.
	fact := func(name string) string {
		t.Helper()
		s, err := chromedp.Run(tab, chromedp.Evaluate[string](fmt.Sprintf(
			`[...document.querySelectorAll("#task-facts tr")].filter(r => r.querySelector("th")?.textContent === %q).map(r => r.querySelector("td").textContent).join("|")`,
			name)))
		require.NoError(t, err, name)
		return strings.TrimSpace(s)
	}
	signIn := func(secret, name string) {
		t.Helper()
		run(chromedp.Navigate(p.base+"/ui/signin"), chromedp.WaitVisible(chromedp.ID("#token")),
			chromedp.SendKeys(chromedp.ID("#token"), secret), chromedp.Click(chromedp.ID("#signin")),
			chromedp.WaitVisible(chromedp.ID("#who")))
		require.Equal(t, name, text("#who"))
	}
	seesTasks := func(who string) {
		t.Helper()
		run(chromedp.Navigate(p.base+"/ui/tasks"), chromedp.WaitVisible(chromedp.CSS("table.tasks")))
		for i, s := range reportAndInvoice {
			row := fmt.Sprintf("tr[data-task=%q]", ids[i])
			require.Equal(t, "completed", text(row+" td:nth-child(5)"), "%s: %s's state in the list", who, s.req.Key)
			require.Equal(t, s.req.Kind, text(row+" td:nth-child(3)"), "%s: %s's kind in the list", who, s.req.Key)
			require.Equal(t, s.req.User, text(row+" td:nth-child(2)"), "%s: %s's user in the list", who, s.req.Key)
		}
		for i, s := range reportAndInvoice {
			run(chromedp.Navigate(p.base+"/ui/tasks/"+ids[i]), chromedp.WaitVisible(chromedp.ID("#task-result")))
			require.Equal(t, int64(200), statuses.of("/ui/tasks/"+ids[i]))
			require.Equal(t, "completed", text("#task-state"), "%s: %s", who, s.req.Key)
			require.Equal(t, s.req.Kind, fact("Kind"), "%s: %s", who, s.req.Key)
			require.Equal(t, s.result, text("#task-result"), "%s: %s's result on its page", who, s.req.Key)
			require.Equal(t, fmt.Sprintf("%d of %d", s.steps, s.req.StepsMax), text("#task-steps"), "%s: %s", who, s.req.Key)
		}
	}

	// A secret that is no token of the program's is refused at sign-in.
	run(chromedp.Navigate(p.base+"/ui/signin"), chromedp.WaitVisible(chromedp.ID("#token")),
		chromedp.SendKeys(chromedp.ID("#token"), "not-a-token-of-this-program"), chromedp.Click(chromedp.ID("#signin")),
		chromedp.WaitVisible(chromedp.ID("#token")))
	n, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll("#who").length`))
	require.NoError(t, err)
	require.Zero(t, n, "no one is signed in")

	signIn(clerkSecret, "clerk")
	seesTasks("clerk")
	run(chromedp.Click(chromedp.CSS(`form.who button`)), chromedp.WaitVisible(chromedp.ID("#token")))
	signIn(managerSecret, "manager")
	seesTasks("manager")
	p.stop(t)
}
