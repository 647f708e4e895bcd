package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/wire"
)

// e2eTimeout bounds the end-to-end test's calls.
const e2eTimeout = 2 * time.Minute

// TestProgramEndToEnd runs the built program and uses it as its users
// would, over HTTP with its own tokens: the clerk submits a report and an
// invoice; payloads their validators refuse, a kind the program does not
// serve and a user the clerk does not act for are refused, naming the
// path, and write nothing; each task is waited for by long-polls until
// the program's own worker has completed it, and its kind and result are
// read through the API (the task, the list by kind, the events). SIGTERM
// then stops the program gracefully.
func TestProgramEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
	defer cancel()
	p := startProgram(t)
	clerk, manager := p.client(t, clerkSecret), p.client(t, managerSecret)

	status, body := p.post(t, "/", "", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "a billing office", "the program's own page, beside the API")

	ids := make([]string, len(reportAndInvoice))
	for i, s := range reportAndInvoice {
		res, err := clerk.Submit(ctx, s.req)
		require.NoError(t, err, s.req.Key)
		require.False(t, res.Replay)
		ids[i] = res.TaskID
	}

	refusals := []struct {
		name, body string
		status     int
		code       string
		field      string
	}{
		{"a quantity out of bounds", submitBody(t, "globex", "invoice-8", "invoice",
			`{"customer":"globex","lines":[{"item":"paper","quantity":1,"cents":450},{"item":"toner","quantity":0,"cents":7900}]}`),
			http.StatusBadRequest, "bad_input", "payload.lines[1].quantity"},
		{"a quantity of the wrong type", submitBody(t, "globex", "invoice-9", "invoice",
			`{"customer":"globex","lines":[{"item":"paper","quantity":"two","cents":450}]}`),
			http.StatusBadRequest, "bad_input", "payload.lines[0].quantity"},
		{"an invoice without a customer", submitBody(t, "globex", "invoice-10", "invoice", `{"lines":[{"item":"paper","quantity":1,"cents":1}]}`),
			http.StatusBadRequest, "bad_input", "payload.customer"},
		{"a report without its month", submitBody(t, "acme", "report-x", "report", `{"month":"March"}`),
			http.StatusBadRequest, "bad_input", "payload.month"},
		{"a kind the program does not serve", submitBody(t, "acme", "mail-1", "email", `{}`),
			http.StatusBadRequest, "bad_input", "kind"},
		{"the synthetic kind", submitBody(t, "acme", "synthetic-1", "", `{"steps":[{"cost":1}]}`),
			http.StatusBadRequest, "bad_input", "kind"},
		{"a user the clerk does not act for", submitBody(t, "initech", "report-y", "report", `{"month":"2026-03"}`),
			http.StatusForbidden, "forbidden", "user"},
	}
	for _, r := range refusals {
		status, body := p.post(t, "/v1/tasks", clerkSecret, r.body)
		require.Equal(t, r.status, status, "%s: %s", r.name, body)
		var e wire.Error
		require.NoError(t, json.Unmarshal([]byte(body), &e), "%s: %s", r.name, body)
		require.Equal(t, r.code, e.Code, "%s: %s", r.name, body)
		require.Equal(t, r.field, e.Field, "%s: %s", r.name, body)
		require.NotContains(t, body, "toner", "%s: a refusal quotes no payload value", r.name)
	}
	all, err := manager.List(ctx, client.ListOptions{})
	require.NoError(t, err)
	require.Len(t, all.Tasks, len(reportAndInvoice), "the refused requests wrote nothing")

	for i, s := range reportAndInvoice {
		task := waitEnded(ctx, t, clerk, ids[i])
		require.Equal(t, model.Completed, task.State, "%s: %+v", s.req.Key, task)
		require.Equal(t, s.req.Kind, task.Kind)
		require.Equal(t, s.result, task.Result, "%s: its result, through the API", s.req.Key)
		require.Equal(t, s.cost, task.CostUsed, s.req.Key)
		require.Equal(t, s.steps, task.StepsUsed, s.req.Key)
		require.Equal(t, 1, task.Attempt, "%s: done on its first claim", s.req.Key)

		page, err := manager.List(ctx, client.ListOptions{Kind: s.req.Kind})
		require.NoError(t, err)
		require.Len(t, page.Tasks, 1, s.req.Kind)
		require.Equal(t, ids[i], page.Tasks[0].ID)
		require.Equal(t, s.result, page.Tasks[0].Result, "a listed task carries its result")

		events, err := clerk.Events(ctx, ids[i])
		require.NoError(t, err)
		var claimedBy string
		for _, e := range events {
			if e.Kind == model.EventClaimed {
				claimedBy = e.Actor
			}
		}
		require.Equal(t, workerID, claimedBy, "%s: the program's own worker ran it", s.req.Key)
	}
	p.stop(t)
}

// TestProgramRefusesMissingSecrets: without its tokens' secrets in the
// environment the program serves nothing and exits 2, naming the
// variables.
func TestProgramRefusesMissingSecrets(t *testing.T) {
	cmd := exec.Command(programPath, "--addr", "127.0.0.1:0", "--db", t.TempDir()+"/embed.db")
	cmd.Env = []string{managerSecretEnv + "=" + managerSecret}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	require.Equal(t, 2, exit.ExitCode(), "%s", out)
	require.Contains(t, string(out), clerkSecretEnv)
	require.NotContains(t, string(out), "serving")
}

// submitBody is the JSON of a submit; kind "" leaves kind out.
func submitBody(t *testing.T, user, key, kind, payload string) string {
	t.Helper()
	b, err := json.Marshal(wire.SubmitRequestOf(model.SubmitRequest{User: user, Key: key, Kind: kind, Payload: payload,
		CostBudget: 5, StepsMax: 2}))
	require.NoError(t, err)
	return string(b)
}

// post sends body (a GET when body is "") with secret as the bearer
// token, when it is not "", and returns the status and the body.
func (p *program) post(t *testing.T, path, secret, body string) (int, string) {
	t.Helper()
	method := http.MethodPost
	if body == "" {
		method = http.MethodGet
	}
	req, err := http.NewRequest(method, p.base+path, strings.NewReader(body))
	require.NoError(t, err)
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}
