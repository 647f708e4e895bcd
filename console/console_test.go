package console

import (
	"context"
	"fmt"
	"html"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/model"
)

func TestSignInMakesAFreshSession(t *testing.T) {
	b := setup(t)
	c := b.client(t)
	form := c.get("/ui/signin")
	require.Equal(t, http.StatusOK, form.status)
	anonymous := c.cookie
	require.NotEmpty(t, anonymous, "the sign-in form comes with a session for its CSRF token")
	setCookie := form.header.Get("Set-Cookie")
	for _, attr := range []string{"HttpOnly", "SameSite=Strict", "Path=/ui/"} {
		require.Contains(t, setCookie, attr)
	}
	require.NotContains(t, form.body, anaSecret)

	res := c.post("/ui/signin", url.Values{"csrf": {form.csrf(t)}, "token": {anaSecret}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.NotEqual(t, anonymous, c.cookie, "sign-in issues a new session ID")
	require.NotContains(t, res.header.Get("Location"), anaSecret, "no token in a URL")
	require.NotContains(t, res.header.Get("Set-Cookie"), anaSecret, "the cookie holds a session ID, not the token")
	require.Equal(t, 1, b.backend.auths)

	tasks := c.get("/ui/tasks")
	require.Equal(t, http.StatusOK, tasks.status)
	require.Contains(t, tasks.body, `<span id="who">ana</span>`)
	require.Contains(t, tasks.body, "Signed in as ana.")

	// The anonymous session it replaced is gone.
	old := b.client(t)
	old.cookie = anonymous
	require.Equal(t, http.StatusSeeOther, old.get("/ui/tasks").status)
}

func TestSignInRefusesAWrongToken(t *testing.T) {
	b := setup(t)
	c := b.client(t)
	form := c.get("/ui/signin")
	res := c.post("/ui/signin", url.Values{"csrf": {form.csrf(t)}, "token": {"not-a-token-at-all-0000"}})
	require.Equal(t, http.StatusUnauthorized, res.status)
	require.Contains(t, res.body, "That token was not recognised.")
	require.NotContains(t, res.body, "not-a-token-at-all-0000", "the page does not echo the secret")
	require.Equal(t, http.StatusSeeOther, c.get("/ui/tasks").status, "still signed out")

	// Sign-in itself needs the form's CSRF token: no login forgery.
	form = c.get("/ui/signin")
	res = c.post("/ui/signin", url.Values{"csrf": {"forged"}, "token": {anaSecret}})
	require.Equal(t, http.StatusForbidden, res.status)
	require.Equal(t, 1, b.backend.auths, "the token was not even checked")
}

func TestSessionExpiresAndSignOutRevokes(t *testing.T) {
	b := setup(t)
	c := b.client(t)
	c.signIn(anaSecret)
	b.clock.Advance(9 * time.Minute)
	require.Equal(t, http.StatusOK, c.get("/ui/tasks").status, "used within the idle period")
	b.clock.Advance(9 * time.Minute)
	require.Equal(t, http.StatusOK, c.get("/ui/tasks").status, "each use restarts the idle period")
	b.clock.Advance(10 * time.Minute)
	res := c.get("/ui/tasks")
	require.Equal(t, http.StatusSeeOther, res.status, "idle for 10 minutes: expired")
	require.Equal(t, "/ui/signin", res.header.Get("Location"))

	// The absolute lifetime holds however busy the session is.
	c.signIn(anaSecret)
	for range 6 { // 54 minutes, never idle for 10
		b.clock.Advance(9 * time.Minute)
		require.Equal(t, http.StatusOK, c.get("/ui/tasks").status)
	}
	b.clock.Advance(9 * time.Minute) // 63 minutes since sign-in
	require.Equal(t, http.StatusSeeOther, c.get("/ui/tasks").status, "past the one-hour lifetime")

	// Sign-out revokes the session on the server, not just in the browser.
	c.signIn(anaSecret)
	id := c.cookie
	res = c.form("/ui/tasks", "/ui/signout", nil)
	require.Equal(t, http.StatusSeeOther, res.status)
	stolen := b.client(t)
	stolen.cookie = id
	require.Equal(t, http.StatusSeeOther, stolen.get("/ui/tasks").status, "a copied cookie is dead after sign-out")
}

func TestForgedPostsAreRefusedAndWriteNothing(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "ana", "k1", `{"steps": [{"cost": 1}]}`)
	c := b.client(t)
	c.signIn(anaSecret)
	before := b.eventCount(t)

	// No CSRF token, a wrong one, and the right one from another origin.
	res := c.post(taskPath(id)+"/cancel", url.Values{})
	require.Equal(t, http.StatusForbidden, res.status)
	res = c.post(taskPath(id)+"/cancel", url.Values{"csrf": {"wrong"}})
	require.Equal(t, http.StatusForbidden, res.status)
	require.Contains(t, res.body, "security token did not match")
	token := c.get(taskPath(id)).csrf(t)
	c.origin = "http://127.0.0.1:1"
	res = c.post(taskPath(id)+"/cancel", url.Values{"csrf": {token}})
	require.Equal(t, http.StatusForbidden, res.status)
	require.Contains(t, res.body, "another origin")

	task, err := b.q.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, before, b.eventCount(t), "refused posts wrote no event")

	// The same post from the console's own origin goes through.
	c.origin = b.srv.URL
	res = c.post(taskPath(id)+"/cancel", url.Values{"csrf": {token}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	task, err = b.q.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, model.Cancelled, task.State)
	require.Equal(t, "ana", task.CancelledBy)
}

func TestApproveNamesTheVersionShown(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "ana", "gate", gatedPayload)
	waiting := b.drive(t, id, model.WaitingForApproval)
	c := b.client(t)
	c.signIn(approverSecret)

	list := c.get("/ui/approvals")
	require.Equal(t, http.StatusOK, list.status)
	require.Contains(t, list.body, `data-task="`+id+`"`)
	require.Contains(t, list.body, "Approve version 1")
	require.Equal(t, int64(1), waiting.ApprovalVersion)

	// A stale version is refused: the browser is sent to the task as it
	// is now (redirect after POST), whose page says why, once.
	res := c.form("/ui/approvals", taskPath(id)+"/approve", url.Values{"version": {"7"}})
	require.Equal(t, http.StatusSeeOther, res.status)
	require.Equal(t, taskPath(id), res.header.Get("Location"))
	shown := c.get(taskPath(id))
	require.Equal(t, http.StatusOK, shown.status)
	require.Contains(t, shown.body, `id="error" role="alert">Refused: task `+id+` is no longer at the version this page showed (7)`)
	require.Contains(t, shown.body, "Approve version 1", "the page offers the version it shows now")
	require.NotContains(t, c.get(taskPath(id)).body, "no longer at the version", "the refusal is shown once")
	task, err := b.q.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, model.WaitingForApproval, task.State)

	res = c.form("/ui/approvals", taskPath(id)+"/approve", url.Values{"version": {"1"}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	page := c.get(res.header.Get("Location"))
	require.Contains(t, page.body, "Approved version 1")
	require.Contains(t, page.body, `id="task-state">queued<`)
	done := b.drive(t, id, model.Completed)
	require.Equal(t, "approver", done.ApprovedBy)
	page = c.get(taskPath(id))
	require.Contains(t, page.body, `id="task-state">completed<`)
	require.Contains(t, page.body, `<figure class="timeline" id="task-timeline">`)
	require.NotContains(t, page.body, `class="kind`, "no FIXTURE or LIVE label: the timeline is the queue's own record")
	require.Contains(t, page.body, `data-fence="2"`, "the resumed claim is drawn")
}

// TestRejectNamesTheVersionShown: the reject button names the version its
// page showed, and the queue refuses it once the task has paused again at a
// later gate (the race a check before the call could not close): the page
// says why and nothing is written.
func TestRejectNamesTheVersionShown(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "ana", "gate", `{"steps": [{"approval": "manager"}, {"cost": 1}, {"approval": "board"}]}`)
	first := b.drive(t, id, model.WaitingForApproval)
	require.Equal(t, int64(1), first.ApprovalVersion)
	c := b.client(t)
	c.signIn(approverSecret)
	shown := c.get(taskPath(id))
	require.Contains(t, shown.body, "Reject version 1")

	// Someone else approves the first gate; the task runs on to the second.
	require.NoError(t, b.q.Approve(context.Background(), id, 1, "other"))
	second := b.drive(t, id, model.WaitingForApproval)
	require.Equal(t, int64(2), second.ApprovalVersion)
	require.Equal(t, "board", second.ApprovalGate)

	events := b.eventCount(t)
	res := c.form(taskPath(id), taskPath(id)+"/reject", url.Values{"version": {"1"}})
	require.Equal(t, http.StatusSeeOther, res.status)
	require.Equal(t, taskPath(id), res.header.Get("Location"))
	require.Contains(t, c.get(taskPath(id)).body, "no longer at the version this page showed (1)")
	task, err := b.q.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, second, task, "a stale rejection changes nothing")
	require.Equal(t, events, b.eventCount(t), "and records nothing")

	res = c.form(taskPath(id), taskPath(id)+"/reject", url.Values{"version": {"2"}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	task, err = b.q.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, model.Cancelled, task.State)
	require.Equal(t, model.ApprovalRejected, task.Reason)
	require.Equal(t, "approver", task.CancelledBy)
}

func TestSubmitterSeesOnlyItsUsersAndNoApproveButton(t *testing.T) {
	b := setup(t)
	mine := b.submit(t, "ana", "a1", gatedPayload)
	theirs := b.submit(t, "bob", "b1", gatedPayload)
	b.drive(t, mine, model.WaitingForApproval)
	b.drive(t, theirs, model.WaitingForApproval)
	c := b.client(t)
	c.signIn(anaSecret)

	list := c.get("/ui/tasks")
	require.Contains(t, list.body, mine)
	require.NotContains(t, list.body, theirs)
	require.NotContains(t, list.body, "/ui/approvals", "no approvals link")
	page := c.get(taskPath(mine))
	require.Equal(t, http.StatusOK, page.status)
	require.NotContains(t, page.body, "Approve version")
	require.NotContains(t, page.body, "/approve")

	other := c.get(taskPath(theirs))
	require.Equal(t, http.StatusNotFound, other.status, "another user's task is not found")
	require.NotContains(t, other.body, "bob")
	filtered := c.get("/ui/tasks?user=bob")
	require.Equal(t, http.StatusOK, filtered.status)
	require.NotContains(t, filtered.body, theirs)
	require.Contains(t, filtered.body, "No tasks.")

	// Posting an approval by hand is refused by the backend, not only hidden.
	before := b.eventCount(t)
	res := c.form(taskPath(mine), taskPath(mine)+"/approve", url.Values{"version": {"1"}})
	require.Equal(t, http.StatusForbidden, res.status)
	res = c.form(taskPath(mine), taskPath(theirs)+"/cancel", nil)
	require.Equal(t, http.StatusNotFound, res.status)
	require.Equal(t, before, b.eventCount(t))
}

func TestTaskListPages(t *testing.T) {
	b := setup(t)
	var ids []string
	for _, k := range []string{"k1", "k2", "k3", "k4", "k5"} {
		ids = append(ids, b.submit(t, "ana", k, `{"steps": [{"cost": 1}]}`))
	}
	c := b.client(t)
	c.signIn(operatorSecret)
	first := c.get("/ui/tasks?order=oldest")
	require.Equal(t, 3, strings.Count(first.body, `class="task-row"`))
	next := nextLink(t, first.body)
	b.submit(t, "ana", "k6", `{"steps": [{"cost": 1}]}`) // added while paging
	second := c.get(next)
	require.Equal(t, 3, strings.Count(second.body, `class="task-row"`))
	for _, id := range ids[3:] {
		require.Contains(t, second.body, id)
	}
	require.NotContains(t, second.body, ids[2], "no task repeats across pages")

	filtered := c.get("/ui/tasks?state=cancelled")
	require.Contains(t, filtered.body, "No tasks.")
	bad := c.get("/ui/tasks?state=sleeping")
	require.Equal(t, http.StatusBadRequest, bad.status)
	require.Contains(t, bad.body, "state")
}

func nextLink(t *testing.T, body string) string {
	t.Helper()
	_, rest, ok := strings.Cut(body, `id="next-page" href="`)
	require.True(t, ok, "no next page link")
	link, _, _ := strings.Cut(rest, `"`)
	return strings.ReplaceAll(link, "&amp;", "&")
}

func TestLogsNeverHoldASecret(t *testing.T) {
	var logs testkit.SyncBuffer
	b := setup(t, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	c := b.client(t)
	form := c.get("/ui/signin")
	res := c.post("/ui/signin", url.Values{"csrf": {form.csrf(t)}, "token": {"wrong-secret-0123456789"}})
	require.Equal(t, http.StatusUnauthorized, res.status)
	c.signIn(operatorSecret)
	res = c.post("/ui/signout", url.Values{"csrf": {"forged-" + operatorSecret}})
	require.Equal(t, http.StatusForbidden, res.status)
	text := logs.String()
	require.Contains(t, text, `"token":"operator"`, "the sign-in is logged by token name")
	require.Contains(t, text, "wrong CSRF token")
	for _, secret := range []string{"wrong-secret-0123456789", operatorSecret, c.cookie} {
		require.NotContains(t, text, secret)
	}
}

// rowIDs are the task rows' IDs in the page's order.
func rowIDs(body string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`class="task-row" data-task="([^"]+)"`).FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// href is the link with the element ID id.
func href(t *testing.T, body, id string) string {
	t.Helper()
	m := regexp.MustCompile(`id="` + id + `" href="([^"]+)"`).FindStringSubmatch(body)
	require.NotNil(t, m, "no link %s", id)
	return html.UnescapeString(m[1])
}

// TestTaskListNewestFirstKeepsItsFilters: the list opens newest first;
// its next, first-page and sort links keep the filters in the URL; the
// other order lists the same tasks the other way.
func TestTaskListNewestFirstKeepsItsFilters(t *testing.T) {
	b := setup(t)
	var anas []string
	for i := range 5 {
		anas = append(anas, b.submit(t, "ana", fmt.Sprintf("k%d", i), `{"steps": [{"cost": 1}]}`))
		b.submit(t, "bob", fmt.Sprintf("k%d", i), `{"steps": [{"cost": 1}]}`)
		b.clock.Advance(time.Second)
	}
	c := b.client(t)
	c.signIn(operatorSecret)
	require.Len(t, rowIDs(c.get("/ui/tasks").body), 3)

	newest := slices.Clone(anas)
	slices.Reverse(newest)
	first := c.get("/ui/tasks?user=ana&state=queued")
	require.Equal(t, http.StatusOK, first.status)
	require.Equal(t, newest[:3], rowIDs(first.body))
	require.Contains(t, first.body, `aria-sort="descending"`)
	next := href(t, first.body, "next-page")
	require.Contains(t, next, "state=queued")
	require.Contains(t, next, "user=ana")
	second := c.get(next)
	require.Equal(t, newest[3:], rowIDs(second.body))
	require.Equal(t, "/ui/tasks?state=queued&user=ana", href(t, second.body, "first-page"))

	sorted := href(t, first.body, "sort-created")
	require.Equal(t, "/ui/tasks?order=oldest&state=queued&user=ana", sorted)
	oldest := c.get(sorted)
	require.Equal(t, anas[:3], rowIDs(oldest.body))
	require.Contains(t, oldest.body, `aria-sort="ascending"`)
	require.Contains(t, href(t, oldest.body, "next-page"), "order=oldest")
	require.Equal(t, anas[3:], rowIDs(c.get(href(t, oldest.body, "next-page")).body))
	require.Equal(t, "/ui/tasks?state=queued&user=ana", href(t, oldest.body, "sort-created"))

	// A token bound to ana sees her tasks newest first, and no one else's.
	ana := b.client(t)
	ana.signIn(anaSecret)
	require.Equal(t, newest[:3], rowIDs(ana.get("/ui/tasks").body))
	require.Empty(t, rowIDs(ana.get("/ui/tasks?user=bob").body))

	bad := c.get("/ui/tasks?order=sideways")
	require.Equal(t, http.StatusBadRequest, bad.status)
	require.Contains(t, bad.body, "order: want newest or oldest")
}

// TestSearchByIDOrKey: a task ID or an idempotency key leads to the task;
// a token for every user names the user for a key; nobody finds a task
// their token may not see.
func TestSearchByIDOrKey(t *testing.T) {
	b := setup(t)
	mine := b.submit(t, "ana", "order-7", `{"steps": [{"cost": 1}]}`)
	theirs := b.submit(t, "bob", "order-9", `{"steps": [{"cost": 1}]}`)
	shared := b.submit(t, "bob", "order-7", `{"steps": [{"cost": 1}]}`)
	op := b.client(t)
	op.signIn(operatorSecret)

	res := op.get("/ui/tasks?q=" + mine)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Equal(t, taskPath(mine), res.header.Get("Location"))
	res = op.get("/ui/tasks?q=order-9&user=bob")
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Equal(t, taskPath(theirs), res.header.Get("Location"))
	res = op.get("/ui/tasks?q=order-7")
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, res.body, "name the user to search by idempotency key")
	res = op.get("/ui/tasks?q=t_00000000000000ff")
	require.Equal(t, http.StatusNotFound, res.status)
	require.Contains(t, res.body, `id="search-result">No task that this token may see`)
	require.Empty(t, rowIDs(res.body))
	res = op.get("/ui/tasks?q=" + strings.Repeat("k", 129))
	require.Equal(t, http.StatusBadRequest, res.status)

	// A token bound to ana searches her keys without naming her, and
	// finds neither bob's key nor bob's task by its ID.
	ana := b.client(t)
	ana.signIn(anaSecret)
	res = ana.get("/ui/tasks?q=order-7")
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Equal(t, taskPath(mine), res.header.Get("Location"))
	for _, path := range []string{"/ui/tasks?q=order-9", "/ui/tasks?q=order-9&user=bob", "/ui/tasks?q=" + theirs, "/ui/tasks?q=" + shared} {
		res = ana.get(path)
		require.Equal(t, http.StatusNotFound, res.status, path)
		require.Empty(t, rowIDs(res.body), path)
		require.NotContains(t, res.body, `href="/ui/tasks/`+theirs, path)
		require.NotContains(t, res.body, `href="/ui/tasks/`+shared, path)
	}
}
