package console

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzForms posts arbitrary form bodies, with the session's CSRF token, to
// every form route as an operator that may also submit: nothing answers
// 5xx (the queue is up) or panics, and the session survives every post
// but sign-out.
func FuzzForms(f *testing.F) {
	for _, seed := range []string{"", "version=1", "version=-1", "version=99999999999999999999", "grant_cost=5&grant_steps=1",
		"grant_cost=-1&grant_steps=99999999999", "as=completed", "as=running", "as=",
		"user=ana&key=k&payload=%7B%7D&cost_budget=1&steps_max=1&priority=0",
		"user=%00&key=k&payload=%5B&cost_budget=1&steps_max=99999999999&priority=0&run_at=yesterday",
		"batch=%7B%7D", "batch=" + url.QueryEscape(`{"user":"ana","key":"z","payload":{"steps":[{"cost":1}]},"cost_budget":1,"steps_max":1}`),
		"batch=" + url.QueryEscape(strings.Repeat("{}\n", 1001)), "token=x", "%zz", "csrf=&csrf=", strings.Repeat("a=b&", 100),
		"depth_max=1&user_depth_max=1&user_running_max=1&attempts_max=1&grant_cost_max=1&grant_steps_max=1&claim_batch_max=1",
		"depth_max=99999999999999999999&attempts_max=-1", "user=ana&running_max=-1&depth_max=", "user=&running_max=x",
		"user=ana&payload=%7B%22steps%22%3A%5B%5D%7D&cost_budget=1&steps_max=1&priority=0&origin=2026-12-01T09%3A00%3A00Z&period=1h",
		"user=ana&payload=%5B&cost_budget=1&steps_max=1&priority=0&origin=x&period=-1h"} {
		for route := range 12 {
			f.Add(uint8(route), seed)
		}
	}
	b := setup(f)
	gated := b.submit(f, "ana", "gated", gatedPayload)
	operator := b.client(f)
	operator.signIn(operatorSecret)
	csrf := operator.get("/ui/tasks").csrf(f)
	routes := []string{taskPath(gated) + "/cancel", taskPath(gated) + "/approve", taskPath(gated) + "/reject",
		taskPath(gated) + "/requeue", taskPath(gated) + "/resolve", "/ui/submit", "/ui/submit/bulk", "/ui/tasks/t_zz/requeue",
		"/ui/limits", "/ui/limits/users", "/ui/schedules", "/ui/schedules/s_zz/remove"}
	f.Fuzz(func(t *testing.T, route uint8, body string) {
		c := b.client(t)
		c.cookie = operator.cookie
		path := routes[int(route)%len(routes)]
		req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(body+"&csrf="+csrf))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", c.base)
		res := c.do(req)
		require.Less(t, res.status, 500, "%s %q: %s", path, body, res.body)
		require.Equal(t, http.StatusOK, c.get("/ui/tasks").status, "the session survives")
		task, err := b.q.Task(t.Context(), gated)
		require.NoError(t, err)
		require.True(t, task.State.Valid())
	})
}
