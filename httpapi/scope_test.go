package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// Through the HTTP server the scope recorded is the one the token used and
// the actor is the token's name; a token outside its scope is refused with
// 403, a requeue grant above the configured maximum with 400, and neither
// changes anything.
func TestServeRecordsTheTokensScope(t *testing.T) {
	a := setupAPI(t)
	ctx := context.Background()
	review := func(key string) string {
		t.Helper()
		id := a.submit(t, "carol", key, urgent)
		c := a.claim(t, id)
		intent, err := a.q.RecordIntent(ctx, c, 0)
		require.NoError(t, err)
		to, err := a.q.Fail(ctx, c, model.Failure{Class: model.Uncertain, OpID: intent.OpID, Message: "no answer"})
		require.NoError(t, err)
		require.Equal(t, model.NeedsReview, to)
		return id
	}
	// Each of these claims the one urgent queued task: drive them all
	// before any is requeued or approved.
	parked, resolved := review("r1"), review("r2")
	gated, version := a.paused(t, "carol", "g1")
	rejected, rejectVersion := a.paused(t, "carol", "g2")
	cancelled := a.submit(t, "carol", "c1", nil)
	scopeOf := func(id string, kind model.EventKind) string {
		e := a.event(t, id, kind)
		return e.Actor + " " + e.Scope
	}
	require.Equal(t, "alice "+model.ScopeSubmit, scopeOf(cancelled, model.EventSubmitted), "a submit records the token and the submit scope")

	// Out of scope: 403, and nothing written.
	rows := a.counts(t)
	parkedBefore := a.task(t, parked)
	approve := fmt.Sprintf(`{"version": %d}`, version)
	for _, c := range []struct{ name, secret, path, body string }{
		{"an approver resolving", secretApprove, "/v1/tasks/" + parked + "/resolve", `{"as": "failed"}`},
		{"an approver requeueing", secretApprove, "/v1/tasks/" + parked + "/requeue", `{"grant_cost": 1, "grant_steps": 1}`},
		{"a submitter approving", secretSubmit, "/v1/tasks/" + gated + "/approve", approve},
		{"a submitter resolving", secretSubmit, "/v1/tasks/" + parked + "/resolve", `{"as": "failed"}`},
		{"an operator approving", secretOperate, "/v1/tasks/" + gated + "/approve", approve},
	} {
		t.Run(c.name, func(t *testing.T) {
			msg := a.refused(t, http.MethodPost, c.path, c.secret, c.body, http.StatusForbidden, "")
			require.Contains(t, msg, "lacks the")
		})
	}
	// Above the configured maximum grant: 400 naming the grant.
	requeue := "/v1/tasks/" + parked + "/requeue"
	costMax, stepsMax := strconv.FormatInt(model.DefaultLimits.GrantCostMax, 10), strconv.Itoa(model.DefaultLimits.GrantStepsMax)
	for _, c := range []struct{ body, field, max string }{
		{fmt.Sprintf(`{"grant_cost": %d, "grant_steps": 0}`, model.DefaultLimits.GrantCostMax+1), "grant_cost", costMax},
		{fmt.Sprintf(`{"grant_cost": 0, "grant_steps": %d}`, model.DefaultLimits.GrantStepsMax+1), "grant_steps", stepsMax},
		{`{"grant_cost": 9223372036854775807, "grant_steps": 0}`, "grant_cost", costMax},
	} {
		msg := a.refused(t, http.MethodPost, requeue, secretOperate, c.body, http.StatusBadRequest, c.field)
		require.Contains(t, msg, c.max, "the refusal names the maximum")
	}
	require.Equal(t, rows, a.counts(t), "refused requests write nothing")
	require.Equal(t, parkedBefore, a.task(t, parked))
	require.Equal(t, "waiting_for_approval", a.task(t, gated)["state"])

	// Within scope: the token's name is the actor, its scope recorded.
	a.call(t, http.MethodPost, requeue, secretOperate, `{"grant_cost": 5, "grant_steps": 1}`, http.StatusOK)
	require.Equal(t, "olga "+model.ScopeOperate, scopeOf(parked, model.EventRequeued))
	a.call(t, http.MethodPost, "/v1/tasks/"+gated+"/approve", secretApprove, approve, http.StatusOK)
	require.Equal(t, "bob "+model.ScopeApprove, scopeOf(gated, model.EventApproved))
	a.call(t, http.MethodPost, "/v1/tasks/"+cancelled+"/cancel", secretSubmit, "", http.StatusOK)
	require.Equal(t, "alice "+model.ScopeSubmit, scopeOf(cancelled, model.EventCancelled))
	a.call(t, http.MethodPost, "/v1/tasks/"+resolved+"/resolve", secretRoot, `{"as": "failed"}`, http.StatusOK)
	require.Equal(t, "root "+model.ScopeOperate, scopeOf(resolved, model.EventResolved), "a token with every scope records the one the route needs")
	a.call(t, http.MethodPost, "/v1/tasks/"+rejected+"/reject", secretRoot, fmt.Sprintf(`{"version": %d}`, rejectVersion), http.StatusOK)
	require.Equal(t, "root "+model.ScopeApprove, scopeOf(rejected, model.EventRejected))
	a.call(t, http.MethodPut, "/v1/limits/users/carol", secretOperate, `{"running_max": 2}`, http.StatusOK)
	all, err := a.q.Audit(ctx, queue.AuditFilter{Actor: "olga"})
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, model.EventLimitsSet, all[1].Kind)
	require.Equal(t, model.ScopeOperate, all[1].Scope)

	// The request log names the tokens, never their secrets.
	a.requireNoSecrets(t)
}
