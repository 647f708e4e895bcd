package console

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// flakyPayload fails transiently more often than a task has attempts, so
// it ends in review.
const flakyPayload = `{"steps": [{"cost": 1, "fail": "transient", "times": 9}]}`

func TestRequeueIsBoundedAndShowsTheMaximum(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "ana", "flaky", flakyPayload)
	b.drive(t, id, model.NeedsReview)
	c := b.client(t)
	c.signIn(operatorSecret)
	inspect := c.get("/ui/inspect")
	require.Equal(t, http.StatusOK, inspect.status)
	require.Contains(t, inspect.body, `data-task="`+id+`"`)
	require.Contains(t, inspect.body, `name="grant_cost" type="number" min="0" max="10000"`)
	require.Contains(t, inspect.body, "at most 10000")

	before := b.eventCount(t)
	res := c.form("/ui/inspect", taskPath(id)+"/requeue", url.Values{"grant_cost": {"10001"}, "grant_steps": {"1"}})
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, res.body, "grant_cost")
	require.Equal(t, before, b.eventCount(t), "a grant past the maximum writes nothing")

	res = c.form("/ui/inspect", taskPath(id)+"/requeue", url.Values{"grant_cost": {"5"}, "grant_steps": {"2"}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	task, err := b.q.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, int64(105), task.CostBudget)
	require.Equal(t, 12, task.StepsMax)
}

func TestResolveAndScopes(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "ana", "flaky", flakyPayload)
	b.drive(t, id, model.NeedsReview)

	// A submitter sees no review forms and its hand-made post is refused.
	ana := b.client(t)
	ana.signIn(anaSecret)
	page := ana.get(taskPath(id))
	require.NotContains(t, page.body, "/resolve")
	require.NotContains(t, page.body, "/requeue")
	res := ana.form(taskPath(id), taskPath(id)+"/resolve", url.Values{"as": {"completed"}})
	require.Equal(t, http.StatusForbidden, res.status)
	require.Equal(t, http.StatusForbidden, ana.get("/ui/inspect").status)

	op := b.client(t)
	op.signIn(operatorSecret)
	res = op.form(taskPath(id), taskPath(id)+"/resolve", url.Values{"as": {"queued"}})
	require.Equal(t, http.StatusBadRequest, res.status, "only a terminal state resolves")
	res = op.form(taskPath(id), taskPath(id)+"/resolve", url.Values{"as": {"failed"}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	task, err := b.q.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.OperatorResolved, task.Reason)
}

func TestSubmitFormActsOnlyForTheTokensUsers(t *testing.T) {
	b := setup(t)
	c := b.client(t)
	c.signIn(anaSecret)
	form := c.get("/ui/submit")
	require.Contains(t, form.body, `<select name="user"><option selected>ana</option></select>`, "ana's token names one user")

	values := url.Values{"user": {"ana"}, "key": {"one"}, "payload": {`{"steps": [{"cost": 1}]}`}, "cost_budget": {"10"}, "steps_max": {"3"}, "priority": {"0"}}
	res := c.form("/ui/submit", "/ui/submit", values)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	id := strings.TrimPrefix(res.header.Get("Location"), "/ui/tasks/")
	task, err := b.q.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, "ana", task.User)

	before := b.eventCount(t)
	values.Set("user", "bob")
	values.Set("key", "two")
	res = c.form("/ui/submit", "/ui/submit", values)
	require.Equal(t, http.StatusForbidden, res.status, "submitting as another user")
	values.Set("user", "ana")
	values.Set("payload", `{"steps": "many"}`)
	res = c.form("/ui/submit", "/ui/submit", values)
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, res.body, "payload")
	require.Contains(t, res.body, `value="two"`, "the form keeps what was typed")
	require.Equal(t, before, b.eventCount(t), "refused submits wrote nothing")
}

func TestBulkSubmitIsAllOrNothing(t *testing.T) {
	b := setup(t)
	c := b.client(t)
	c.signIn(operatorSecret)
	batch := `{"user": "ana", "key": "b1", "payload": {"steps": [{"cost": 1}]}, "cost_budget": 10, "steps_max": 5}

{"user": "bob", "key": "b2", "payload": {"steps": [{"cost": 1}]}, "cost_budget": 10, "steps_max": 5}`
	res := c.form("/ui/submit", "/ui/submit/bulk", url.Values{"batch": {batch}})
	require.Equal(t, http.StatusOK, res.status, res.body)
	require.Contains(t, res.body, "Submitted 2 requests in one transaction.")
	require.Equal(t, 2, strings.Count(res.body, `class="bulk-row"`))

	before := b.eventCount(t)
	bad := batch + "\n" + `{"user": "ana", "key": "b3", "payload": {"steps": [{"cost": 1}]}, "cost_budget": 0, "steps_max": 5}`
	res = c.form("/ui/submit", "/ui/submit/bulk", url.Values{"batch": {bad}})
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, res.body, "line 4")
	require.Contains(t, res.body, "cost_budget")
	res = c.form("/ui/submit", "/ui/submit/bulk", url.Values{"batch": {`{"user": "ana", "nonsense": 1}`}})
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, res.body, "line 1")
	require.Equal(t, before, b.eventCount(t), "a refused batch wrote nothing")

	ana := b.client(t)
	ana.signIn(anaSecret)
	res = ana.form("/ui/submit", "/ui/submit/bulk", url.Values{"batch": {strings.ReplaceAll(batch, `"key": "b`, `"key": "c`)}})
	require.Equal(t, http.StatusForbidden, res.status, "ana's batch names bob")
	require.Contains(t, res.body, "line 3")
	require.Equal(t, before, b.eventCount(t))
}

func TestLiveSchedulesAndLimitsNeedOperate(t *testing.T) {
	b := setup(t)
	b.submit(t, "ana", "q1", `{"steps": [{"cost": 1}]}`)
	b.clock.Advance(90_000_000_000) // 90 s
	op := b.client(t)
	op.signIn(operatorSecret)
	live := op.get("/ui/live")
	require.Equal(t, http.StatusOK, live.status)
	require.Contains(t, live.body, `<meta http-equiv="refresh" content="5">`)
	require.Contains(t, live.body, `<span class="num">1m30s</span>`)
	require.Contains(t, op.get("/ui/limits").body, "10000 cost, 1000 steps")
	require.Contains(t, op.get("/ui/schedules").body, "No schedules yet.")

	ana := b.client(t)
	ana.signIn(anaSecret)
	for _, path := range []string{"/ui/live", "/ui/limits", "/ui/schedules", "/ui/inspect"} {
		require.Equal(t, http.StatusForbidden, ana.get(path).status, path)
	}
}

func TestEveryPostFormCarriesTheCSRFToken(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "ana", "gate", gatedPayload)
	b.drive(t, id, model.WaitingForApproval)
	review := b.submit(t, "ana", "flaky", flakyPayload)
	b.drive(t, review, model.NeedsReview)
	c := b.client(t)
	c.signIn(operatorSecret)
	approver := b.client(t)
	approver.signIn(approverSecret)
	for _, p := range []page{c.get("/ui/tasks"), c.get(taskPath(review)), c.get("/ui/inspect"), c.get("/ui/submit"),
		c.get("/ui/limits"), c.get("/ui/schedules"),
		approver.get("/ui/approvals"), approver.get(taskPath(id)), b.client(t).get("/ui/signin")} {
		forms := strings.Count(p.body, `method="post"`)
		require.Positive(t, forms)
		require.Equal(t, forms, strings.Count(p.body, `<input type="hidden" name="csrf" value="`), p.body)
		require.NotContains(t, p.body, `method="get" action="/ui/sign`)
	}
}

// TestResolveNeedsAChoice: the resolve form chooses no state for the
// operator, and a resolve without one is refused, saying so, and writes
// nothing.
func TestResolveNeedsAChoice(t *testing.T) {
	b := setup(t)
	id := b.submit(t, "ana", "flaky", flakyPayload)
	b.drive(t, id, model.NeedsReview)
	op := b.client(t)
	op.signIn(operatorSecret)
	for _, path := range []string{taskPath(id), "/ui/inspect"} {
		page := op.get(path)
		require.Contains(t, page.body, `<select name="as" required><option value="" selected>choose…</option>`, path)
		require.NotRegexp(t, `<option value="(completed|failed|cancelled)" selected`, page.body, path)
	}
	before := b.eventCount(t)
	res := op.form(taskPath(id), taskPath(id)+"/resolve", url.Values{})
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, res.body, "choose the state to resolve the task as (completed, failed or cancelled); nothing was changed")
	res = op.form(taskPath(id), taskPath(id)+"/resolve", url.Values{"as": {""}})
	require.Equal(t, http.StatusBadRequest, res.status)
	task, err := b.q.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, model.NeedsReview, task.State)
	require.Equal(t, before, b.eventCount(t))
}

// TestLiveListsOnlyTasksStillFailed: a task that went to review and was
// requeued and completed since is no longer among the recent failures; one
// still in review is.
func TestLiveListsOnlyTasksStillFailed(t *testing.T) {
	b := setup(t)
	healed := b.submit(t, "ana", "healed", `{"steps": [{"cost": 1, "fail": "transient", "times": 3}]}`)
	b.drive(t, healed, model.NeedsReview)
	stuck := b.submit(t, "ana", "stuck", flakyPayload)
	b.drive(t, stuck, model.NeedsReview)
	require.NoError(t, b.q.Requeue(context.Background(), healed, model.Grant{Cost: 1, Steps: 1}, "operator"))
	require.Equal(t, model.Completed, b.drive(t, healed, model.Completed).State)
	op := b.client(t)
	op.signIn(operatorSecret)
	live := op.get("/ui/live")
	require.Equal(t, http.StatusOK, live.status)
	require.Contains(t, live.body, `class="failure-row" data-task="`+stuck+`"`)
	require.NotContains(t, live.body, `data-task="`+healed+`"`, "a completed task is no failure")
}

// TestTaskPageShowsTheLease: while a task runs its page shows who holds
// the lease under which fence, when it expires (or how long ago it ran
// out) and the last heartbeat; once it is reaped, neither.
func TestTaskPageShowsTheLease(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	id := b.submit(t, "ana", "long", `{"steps": [{"cost": 1}]}`)
	claimed, err := b.q.Claim(ctx, model.ClaimRequest{Worker: "w9", Max: 1, Lease: 30 * time.Second})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	c := claimed[0].Claim
	b.clock.Advance(4 * time.Second)
	_, err = b.q.Heartbeat(ctx, c, 30*time.Second)
	require.NoError(t, err)
	b.clock.Advance(time.Second)
	running, err := b.q.Task(ctx, id)
	require.NoError(t, err)
	require.Equal(t, model.Running, running.State)
	require.Equal(t, epoch.Add(34*time.Second), running.LeaseUntil)

	op := b.client(t)
	op.signIn(operatorSecret)
	page := op.get(taskPath(id))
	require.Equal(t, http.StatusOK, page.status)
	require.Contains(t, page.body, `id="task-lease">held by w9 under fence 1; expires 2026-12-01T09:00:34Z <span class="muted">(in 29s)</span>`)
	require.Contains(t, page.body, `id="task-heartbeat">2026-12-01T09:00:04Z <span class="muted">(1s ago)</span>`)
	b.clock.Advance(time.Minute)
	require.Contains(t, op.get(taskPath(id)).body, "(ran out 31s ago)")

	_, err = b.q.Reap(ctx)
	require.NoError(t, err)
	page = op.get(taskPath(id))
	require.Contains(t, page.body, `id="task-state">queued<`)
	require.NotContains(t, page.body, `id="task-lease"`)
	require.NotContains(t, page.body, `id="task-heartbeat"`)
}

// TestTaskIDsAreTheQueuesTaskIDs: the console holds a task ID in a path
// to the rule the queue and the API hold it to (model.CheckTaskID, with
// its words), refusing anything else before any action, and takes every
// ID the rule allows.
func TestTaskIDsAreTheQueuesTaskIDs(t *testing.T) {
	b := setup(t)
	c := b.client(t)
	c.signIn(operatorSecret)
	before := b.eventCount(t)
	for _, id := range []string{"t_a%20b", "t_x.s1", "task_1", "t_" + strings.Repeat("a", 63)} {
		page := c.get(taskPath(id))
		require.Equal(t, http.StatusBadRequest, page.status, "%s: %s", id, page.body)
		require.Contains(t, page.body, model.TaskIDRule, id)
		res := c.form("/ui/tasks", taskPath(id)+"/cancel", nil)
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", id, res.body)
		require.Contains(t, res.body, model.TaskIDRule, id)
	}
	require.Equal(t, before, b.eventCount(t), "a refused ID changes nothing")
	page := c.get(taskPath("t_ABC-def"))
	require.Equal(t, http.StatusNotFound, page.status, "a well-formed ID of no task is not found: %s", page.body)
}
