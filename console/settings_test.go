package console

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// limitsForm is the queue-wide form's values: the limits in force, with
// changes.
func limitsForm(l model.Limits, changes map[string]string) url.Values {
	v := url.Values{}
	for _, f := range limitFields {
		v.Set(f.name, strconv.FormatInt(f.get(&l), 10))
	}
	for k, x := range changes {
		v.Set(k, x)
	}
	return v
}

func (b *bundle) limits(t *testing.T) (model.Limits, []model.UserLimit) {
	t.Helper()
	l, users, err := b.q.Limits(context.Background())
	require.NoError(t, err)
	return l, users
}

// TestOperatorEditsTheLimits: the limits page's forms change the limits
// through the API's cores. A value out of its range, or not a number, is
// refused naming the field, which the redrawn form marks while keeping
// what was entered; nothing is written. A good value is saved, recorded
// under the operator's name.
func TestOperatorEditsTheLimits(t *testing.T) {
	b := setup(t)
	op := b.client(t)
	op.signIn(operatorSecret)
	before, _ := b.limits(t)
	events := b.eventCount(t)

	for _, bad := range []struct{ field, value, says string }{
		{"attempts_max", "0", "attempts_max: must be between 1 and 100, got 0"},
		{"claim_batch_max", "100000", "claim_batch_max: must be between"},
		{"depth_max", "-1", "depth_max: must be between 0 and"},
		{"grant_cost_max", "lots", "grant_cost_max: not a whole number"},
		{"user_running_max", "", "user_running_max: required"},
	} {
		res := op.form("/ui/limits", "/ui/limits", limitsForm(before, map[string]string{bad.field: bad.value}))
		require.Equal(t, http.StatusBadRequest, res.status, bad.field)
		require.Contains(t, res.body, bad.says, bad.field)
		require.Contains(t, res.body, `<label class="invalid">`, bad.field)
		require.Contains(t, res.body, `name="`+bad.field+`" type="number" min=`, bad.field)
		require.Regexp(t, `name="`+bad.field+`" type="number" min="-?\d+" max="\d+" value="`+bad.value+`" aria-invalid="true"`, res.body,
			"the refused field is marked and keeps what was entered")
		require.Equal(t, 1, strings.Count(res.body, `aria-invalid="true"`), "only that field is marked")
		after, _ := b.limits(t)
		require.Equal(t, before, after, "a refused change writes nothing")
		require.Equal(t, events, b.eventCount(t))
	}

	res := op.form("/ui/limits", "/ui/limits", limitsForm(before, map[string]string{"attempts_max": "7", "depth_max": "500"}))
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Equal(t, "/ui/limits", res.header.Get("Location"))
	page := op.get("/ui/limits")
	require.Contains(t, page.body, "Queue-wide limits saved.")
	require.Contains(t, page.body, `<td id="limit-attempts_max">7</td>`)
	want := before
	want.AttemptsMax, want.DepthMax = 7, 500
	after, _ := b.limits(t)
	require.Equal(t, want, after)
	last, err := b.q.Audit(context.Background(), queue.AuditFilter{Actor: "operator"})
	require.NoError(t, err)
	require.Equal(t, model.EventLimitsSet, last[len(last)-1].Kind)

	// One user's override: empty inherits, a value out of range names its
	// field, a good one is saved.
	res = op.form("/ui/limits", "/ui/limits/users", url.Values{"user": {"bob"}, "running_max": {"-2"}})
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, res.body, "running_max: must be between -1 and")
	require.Contains(t, res.body, `value="-2" aria-invalid="true"`)
	res = op.form("/ui/limits", "/ui/limits/users", url.Values{"user": {"bad user!"}, "running_max": {"2"}})
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, res.body, `value="bad user!" required maxlength="64" aria-invalid="true"`)
	_, users := b.limits(t)
	require.Empty(t, users)
	res = op.form("/ui/limits", "/ui/limits/users", url.Values{"user": {"bob"}, "running_max": {"2"}, "depth_max": {""}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Contains(t, op.get("/ui/limits").body, "Limits of user bob saved.")
	_, users = b.limits(t)
	require.Equal(t, []model.UserLimit{{User: "bob", RunningMax: 2, DepthMax: model.Inherit}}, users)
}

// TestLimitsFormsFollowTheToken: an operator token for some users sees no
// queue-wide form and is refused one posted by hand (403), may set only
// its users' overrides, and a submitter may change nothing; each refusal
// writes nothing.
func TestLimitsFormsFollowTheToken(t *testing.T) {
	b := setup(t)
	before, _ := b.limits(t)
	events := b.eventCount(t)
	anaOps := b.client(t)
	anaOps.signIn(anaOpsSecret)
	page := anaOps.get("/ui/limits")
	require.Equal(t, http.StatusOK, page.status)
	require.NotContains(t, page.body, `id="limits-form"`)
	require.Contains(t, page.body, "Only a token for every user may change the queue-wide limits")
	require.Contains(t, page.body, `<select name="user"><option selected>ana</option></select>`)
	res := anaOps.form("/ui/limits", "/ui/limits", limitsForm(before, map[string]string{"attempts_max": "9"}))
	require.Equal(t, http.StatusForbidden, res.status)
	res = anaOps.form("/ui/limits", "/ui/limits/users", url.Values{"user": {"bob"}, "running_max": {"1"}})
	require.Equal(t, http.StatusForbidden, res.status)
	require.Contains(t, res.body, "bob")

	ana := b.client(t)
	ana.signIn(anaSecret)
	csrf := ana.get("/ui/submit").csrf(t)
	for path, form := range map[string]url.Values{
		"/ui/limits":       limitsForm(before, map[string]string{"attempts_max": "9"}),
		"/ui/limits/users": {"user": {"ana"}, "running_max": {"1"}},
		"/ui/schedules":    {"user": {"ana"}, "payload": {`{"steps":[]}`}, "cost_budget": {"1"}, "steps_max": {"1"}, "priority": {"0"}, "origin": {"2026-12-01T09:00:00Z"}, "period": {"1h"}},
	} {
		form.Set("csrf", csrf)
		require.Equal(t, http.StatusForbidden, ana.post(path, form).status, path)
	}
	after, users := b.limits(t)
	require.Equal(t, before, after)
	require.Empty(t, users)
	require.Equal(t, events, b.eventCount(t), "nothing refused was written")

	res = anaOps.form("/ui/limits", "/ui/limits/users", url.Values{"user": {"ana"}, "depth_max": {"3"}})
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	_, users = b.limits(t)
	require.Equal(t, []model.UserLimit{{User: "ana", RunningMax: model.Inherit, DepthMax: 3}}, users)
}

// TestOperatorAddsAndRemovesASchedule: the schedules page adds a schedule
// from its form (a bad field is refused, named and marked, and nothing is
// written) and removes one from its row; the tasks a removed schedule made
// stay.
func TestOperatorAddsAndRemovesASchedule(t *testing.T) {
	b := setup(t)
	op := b.client(t)
	op.signIn(operatorSecret)
	page := op.get("/ui/schedules")
	require.Contains(t, page.body, `name="origin" value="2026-12-01T09:00:00Z"`, "the first run defaults to now")
	good := url.Values{"user": {"ana"}, "payload": {`{"steps": [{"cost": 1}]}`}, "cost_budget": {"5"}, "steps_max": {"2"},
		"priority": {"0"}, "origin": {"2026-12-01T09:00:00Z"}, "period": {"30m"}}
	events := b.eventCount(t)
	for field, bad := range map[string]string{"period": "soon", "origin": "tomorrow", "payload": `{"steps": [{"cost": -1}]}`,
		"cost_budget": "0", "steps_max": "x", "user": "no one"} {
		form := url.Values{}
		for k, v := range good {
			form[k] = v
		}
		form.Set(field, bad)
		res := op.form("/ui/schedules", "/ui/schedules", form)
		require.Equal(t, http.StatusBadRequest, res.status, field)
		require.Contains(t, res.body, "Refused: ", field)
		require.Contains(t, res.body, field, field)
		require.Contains(t, res.body, `aria-invalid="true"`, field)
		require.Equal(t, 1, strings.Count(res.body, `aria-invalid="true"`), field)
		require.Equal(t, events, b.eventCount(t), "%s: nothing written", field)
	}
	res := op.form("/ui/schedules", "/ui/schedules", url.Values{"user": {"ana"}, "payload": {`{"steps": [{"cost": 1}]}`}, "cost_budget": {"5"},
		"steps_max": {"2"}, "priority": {"0"}, "origin": {"2026-12-01T09:00:00Z"}, "period": {"1ms"}})
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, res.body, "period: must be whole milliseconds between 1s and")

	res = op.form("/ui/schedules", "/ui/schedules", good)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	schedules, err := b.q.Schedules(context.Background())
	require.NoError(t, err)
	require.Len(t, schedules, 1)
	sch := schedules[0]
	require.Equal(t, "ana", sch.User)
	require.Equal(t, 30*time.Minute, sch.Period)
	page = op.get("/ui/schedules")
	require.Contains(t, page.body, "Schedule "+sch.ID+" added: a task for ana every 30m0s from 2026-12-01T09:00:00Z.")
	require.Contains(t, page.body, `data-schedule="`+sch.ID+`"`)
	require.Contains(t, page.body, `action="/ui/schedules/`+sch.ID+`/remove"`)

	res = op.form("/ui/schedules", "/ui/schedules/"+sch.ID+"/remove", nil)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	require.Contains(t, op.get("/ui/schedules").body, "Schedule "+sch.ID+" removed")
	schedules, err = b.q.Schedules(context.Background())
	require.NoError(t, err)
	require.Empty(t, schedules)
	res = op.form("/ui/schedules", "/ui/schedules/"+sch.ID+"/remove", nil)
	require.Equal(t, http.StatusNotFound, res.status)
	require.Contains(t, res.body, "no such schedule")
}
