package httpapi

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/wire"
	"github.com/leasehold/leasehold/worker"
)

// The API tests run the real server on a loopback listener against a queue
// on a file, with a fake clock so that waits and run times are exact. Each
// test builds one fixture and walks it through many requests: opening a
// database is the expensive part under -race.

// Token secrets. No test output, event, log line or metric may contain one.
const (
	secretSubmit  = "sub-secret-0123456789"
	secretApprove = "apr-secret-0123456789"
	secretOperate = "opr-secret-0123456789"
	secretRoot    = "all-secret-0123456789"
)

var allSecrets = []string{secretSubmit, secretApprove, secretOperate, secretRoot}

const testTokens = `# leasehold API tokens for the tests
alice submit ` + secretSubmit + `

bob approve ` + secretApprove + `
olga operate ` + secretOperate + `
root submit,approve,operate ` + secretRoot + `
`

// apiEpoch is the fake clock's start.
var apiEpoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// api is one running server and the queue behind it.
type api struct {
	q      *queue.Queue
	path   string
	clock  *clockwork.FakeClock
	base   string
	client *http.Client
	logs   *testkit.SyncBuffer
	stop   func(t *testing.T)
}

// setupAPI starts a server; edit, if given, changes the queue's options.
func setupAPI(t *testing.T, edit ...func(*queue.Options)) *api {
	t.Helper()
	return setupAPIWith(t, nil, edit...)
}

// setupAPIWith is setupAPI with server, if not nil, changing the
// server's options after the tests' own (the fake clock, no slowing of
// failed authentication).
func setupAPIWith(t *testing.T, server func(*Options), edit ...func(*queue.Options)) *api {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "api.db")
	clock := clockwork.NewFakeClockAt(apiEpoch)
	o := queue.Options{Path: path, Clock: clock, IDs: model.NewSeededIDs(41), BusyTimeout: 50 * time.Millisecond,
		Validators: map[string]model.PayloadValidator{model.KindSynthetic: worker.ValidateSynthetic}} // as openQueue sets it
	for _, e := range edit {
		e(&o)
	}
	q, err := queue.Open(ctx, o)
	require.NoError(t, err)
	tokens, err := ParseTokens(testTokens+boundTokens, false)
	require.NoError(t, err)
	logs := &testkit.SyncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	so := Options{Queue: q, Tokens: tokens, Logger: logger, Clock: clock, AuthDelay: -1}
	if server != nil {
		server(&so)
	}
	s, err := New(so)
	require.NoError(t, err)
	go func() { done <- s.Serve(serveCtx, ln, nil) }()
	transport := &http.Transport{}
	a := &api{q: q, path: path, clock: clock, base: "http://" + ln.Addr().String(), logs: logs,
		client: &http.Client{Transport: &conformance{t: t, next: transport}, Timeout: 60 * time.Second}}
	stopped := false
	a.stop = func(t *testing.T) {
		if stopped {
			return
		}
		stopped = true
		cancel()
		require.NoError(t, <-done, "serve returns nil after its context is cancelled")
		transport.CloseIdleConnections()
	}
	t.Cleanup(func() {
		a.stop(t)
		require.NoError(t, q.Close())
	})
	return a
}

// do sends one request; secret "" sends no Authorization header.
func (a *api) do(t *testing.T, method, path, secret, body string) (int, http.Header, []byte) {
	t.Helper()
	header := http.Header{}
	if secret != "" {
		header.Set("Authorization", "Bearer "+secret)
	}
	return a.doHeader(t, method, path, header, body)
}

func (a *api) doHeader(t *testing.T, method, path string, header http.Header, body string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}

// call sends a request that must answer want with a JSON object, and
// returns the object.
func (a *api) call(t *testing.T, method, path, secret, body string, want int) map[string]any {
	t.Helper()
	status, header, b := a.do(t, method, path, secret, body)
	require.Equal(t, want, status, "%s %s: %s", method, path, b)
	require.Equal(t, "application/json", header.Get("Content-Type"), "%s %s", method, path)
	var out map[string]any
	require.NoError(t, json.Unmarshal(b, &out), "%s %s: %s", method, path, b)
	return out
}

// list sends a request that must answer 200 with a JSON array.
func (a *api) list(t *testing.T, path, secret string) []map[string]any {
	t.Helper()
	status, _, b := a.do(t, http.MethodGet, path, secret, "")
	require.Equal(t, http.StatusOK, status, "GET %s: %s", path, b)
	var out []map[string]any
	require.NoError(t, json.Unmarshal(b, &out), "GET %s: %s", path, b)
	return out
}

// refused sends a request that must be refused with status, naming field
// ("" for no field), and returns the error message.
func (a *api) refused(t *testing.T, method, path, secret, body string, status int, field string) string {
	t.Helper()
	got, header, b := a.do(t, method, path, secret, body)
	require.Equal(t, status, got, "%s %s: %s", method, path, b)
	require.Equal(t, "application/json", header.Get("Content-Type"), "%s %s", method, path)
	var e wire.Error
	require.NoError(t, json.Unmarshal(b, &e), "%s %s: %s", method, path, b)
	require.NotEmpty(t, e.Error, "%s %s", method, path)
	require.Equal(t, field, e.Field, "%s %s: %s", method, path, b)
	return e.Error
}

// task reads a task through the API with the root token.
func (a *api) task(t *testing.T, id string) map[string]any {
	t.Helper()
	return a.call(t, http.MethodGet, "/v1/tasks/"+id, secretRoot, "", http.StatusOK)
}

// submitBody returns a valid submit body, changed by edit.
func submitJSON(t *testing.T, user, key string, edit func(map[string]any)) string {
	t.Helper()
	b := map[string]any{"user": user, "key": key, "payload": json.RawMessage(`{"steps":[{"cost":1}]}`),
		"cost_budget": 10, "steps_max": 5}
	if edit != nil {
		edit(b)
	}
	out, err := json.Marshal(b)
	require.NoError(t, err)
	return string(out)
}

// submit submits through the API and returns the new task's ID.
func (a *api) submit(t *testing.T, user, key string, edit func(map[string]any)) string {
	t.Helper()
	out := a.call(t, http.MethodPost, "/v1/tasks", secretSubmit, submitJSON(t, user, key, edit), http.StatusCreated)
	require.Equal(t, false, out["replay"])
	id, _ := out["task_id"].(string)
	require.NoError(t, model.CheckTaskID(id))
	return id
}

func urgent(b map[string]any) { b["priority"] = model.PriorityMax }

// claim claims the next task, which must be id (submitted urgent).
func (a *api) claim(t *testing.T, id string) model.Claim {
	t.Helper()
	claimed, err := a.q.Claim(context.Background(), model.ClaimRequest{Worker: "w1", Max: 1, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, id, claimed[0].Claim.TaskID)
	return claimed[0].Claim
}

// paused drives a new urgent task to waiting_for_approval and returns its
// ID and the version an approval must name.
func (a *api) paused(t *testing.T, user, key string) (string, int64) {
	t.Helper()
	id := a.submit(t, user, key, urgent)
	c := a.claim(t, id)
	to, err := a.q.Pause(context.Background(), c, 0, "manager")
	require.NoError(t, err)
	require.Equal(t, model.WaitingForApproval, to)
	return id, c.Fence
}

// counts returns the rows of the tables a submit writes.
func (a *api) counts(t *testing.T) [3]int {
	t.Helper()
	db, err := sql.Open("sqlite", a.path+"?mode=ro")
	require.NoError(t, err)
	defer db.Close()
	var out [3]int
	for i, table := range []string{"tasks", "events", "users"} {
		require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+table).Scan(&out[i]))
	}
	return out
}

// event returns the one event of kind for task.
func (a *api) event(t *testing.T, task string, kind model.EventKind) model.Event {
	t.Helper()
	events, err := a.q.Events(context.Background(), task)
	require.NoError(t, err)
	var found []model.Event
	for _, e := range events {
		if e.Kind == kind {
			found = append(found, e)
		}
	}
	require.Len(t, found, 1, "events of kind %s for task %q: %+v", kind, task, events)
	return found[0]
}

// requireNoSecrets checks /metrics, then stops the server and checks its
// log and the audit trail: no token secret may appear in any of them.
func (a *api) requireNoSecrets(t *testing.T) {
	t.Helper()
	status, _, metrics := a.do(t, http.MethodGet, "/metrics", "", "")
	require.Equal(t, http.StatusOK, status)
	a.stop(t)
	events, err := a.q.Events(context.Background(), "")
	require.NoError(t, err)
	require.NotEmpty(t, events)
	var trail strings.Builder
	for _, e := range events {
		fmt.Fprintf(&trail, "%+v\n", e)
	}
	logs := a.logs.String()
	require.Contains(t, logs, `"msg":"request"`, "the server logs its requests")
	for i, s := range allSecrets {
		require.False(t, strings.Contains(string(metrics), s), "token secret %d in /metrics", i)
		require.False(t, strings.Contains(logs, s), "token secret %d in the server log", i)
		require.False(t, strings.Contains(trail.String(), s), "token secret %d in the audit trail", i)
	}
}

func TestServeSubmitAndRead(t *testing.T) {
	a := setupAPI(t)

	// 201: a new task, its ID and replay false.
	body := submitJSON(t, "carol", "order-1", func(b map[string]any) { b["deadline"] = apiEpoch.Add(time.Hour).Format(time.RFC3339) })
	created := a.call(t, http.MethodPost, "/v1/tasks", secretSubmit, body, http.StatusCreated)
	require.Equal(t, false, created["replay"])
	id := created["task_id"].(string)
	require.NoError(t, model.CheckTaskID(id))

	// 200: the exact request again is a replay naming the original task;
	// the payload's key order and spacing do not change the request.
	replayed := a.call(t, http.MethodPost, "/v1/tasks", secretRoot, body, http.StatusOK)
	require.Equal(t, map[string]any{"task_id": id, "replay": true}, replayed)
	respaced := strings.Replace(body, `{"steps":[{"cost":1}]}`, `{ "steps" : [ {"cost": 1} ] }`, 1)
	require.NotEqual(t, body, respaced)
	replayed = a.call(t, http.MethodPost, "/v1/tasks", secretSubmit, respaced, http.StatusOK)
	require.Equal(t, id, replayed["task_id"])

	// 409: a changed request under the used key; the original is untouched.
	before, err := a.q.Task(context.Background(), id)
	require.NoError(t, err)
	rows := a.counts(t)
	changed := submitJSON(t, "carol", "order-1", func(b map[string]any) {
		b["payload"] = json.RawMessage(`{"steps":[{"cost":2}]}`)
		b["deadline"] = apiEpoch.Add(time.Hour).Format(time.RFC3339)
	})
	msg := a.refused(t, http.MethodPost, "/v1/tasks", secretSubmit, changed, http.StatusConflict, "key")
	require.Contains(t, msg, id)
	after, err := a.q.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, before, after)
	require.Equal(t, rows, a.counts(t))
	record := a.task(t, id)
	require.Equal(t, "queued", record["state"])
	require.EqualValues(t, 10, record["cost_budget"])

	// 400: every invalid field is named, and nothing is written.
	invalid := []struct {
		name  string
		edit  func(map[string]any)
		field string
	}{
		{"zero budget", func(b map[string]any) { b["cost_budget"] = 0 }, "cost_budget"},
		{"budget too large", func(b map[string]any) { b["cost_budget"] = model.CostBudgetMax + 1 }, "cost_budget"},
		{"zero steps", func(b map[string]any) { b["steps_max"] = 0 }, "steps_max"},
		{"priority out of range", func(b map[string]any) { b["priority"] = model.PriorityMax + 1 }, "priority"},
		{"user with a space", func(b map[string]any) { b["user"] = "car ol" }, "user"},
		{"no user", func(b map[string]any) { delete(b, "user") }, "user"},
		{"key with a space", func(b map[string]any) { b["key"] = "order 2" }, "key"},
		{"no payload", func(b map[string]any) { delete(b, "payload") }, "payload"},
		{"payload not an object", func(b map[string]any) { b["payload"] = json.RawMessage(`[1,2]`) }, "payload"},
		{"payload a string", func(b map[string]any) { b["payload"] = "steps" }, "payload"},
		{"payload unknown field", func(b map[string]any) { b["payload"] = json.RawMessage(`{"foo":1}`) }, "payload.foo"},
		{"payload steps not an array", func(b map[string]any) { b["payload"] = json.RawMessage(`{"steps":"x"}`) }, "payload.steps"},
		{"payload negative cost", func(b map[string]any) { b["payload"] = json.RawMessage(`{"steps":[{"cost":-1}]}`) }, "payload.steps[0].cost"},
		{"payload fail kind", func(b map[string]any) {
			b["payload"] = json.RawMessage(`{"steps":[{"cost":1},{"cost":1},{"fail":"sometimes"}]}`)
		}, "payload.steps[2].fail"},
		{"deadline not a time", func(b map[string]any) { b["deadline"] = "tomorrow" }, "deadline"},
		{"deadline passed", func(b map[string]any) { b["deadline"] = apiEpoch.Add(-time.Minute).Format(time.RFC3339) }, "deadline"},
		{"deadline before run_at", func(b map[string]any) {
			b["run_at"] = apiEpoch.Add(2 * time.Hour).Format(time.RFC3339)
			b["deadline"] = apiEpoch.Add(time.Hour).Format(time.RFC3339)
		}, "deadline"},
		{"run_at not a time", func(b map[string]any) { b["run_at"] = "1700000000" }, "run_at"},
		{"run_at in year 1", func(b map[string]any) { b["run_at"] = "0001-01-01T00:00:01Z" }, "run_at"},
		{"budget a string", func(b map[string]any) { b["cost_budget"] = "ten" }, "cost_budget"},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			a.refused(t, http.MethodPost, "/v1/tasks", secretSubmit, submitJSON(t, "carol", "order-2", tc.edit), http.StatusBadRequest, tc.field)
		})
	}
	require.Equal(t, rows, a.counts(t))

	// 400 for a body that is not one JSON object of known fields.
	for name, body := range map[string]string{
		"malformed":     `{"user": "carol", "key":`,
		"not an object": `[1, 2, 3]`,
		"empty":         ` `,
		"trailing data": submitJSON(t, "carol", "order-3", nil) + `{}`,
	} {
		t.Run(name, func(t *testing.T) {
			a.refused(t, http.MethodPost, "/v1/tasks", secretSubmit, body, http.StatusBadRequest, "body")
		})
	}
	msg = a.refused(t, http.MethodPost, "/v1/tasks", secretSubmit,
		submitJSON(t, "carol", "order-3", func(b map[string]any) { b["budget"] = 5 }), http.StatusBadRequest, "body")
	require.Contains(t, msg, `"budget"`, "the unknown field is named")

	// A payload over its limit but inside the request limit is a 400 naming
	// payload; a body over the request limit is a 413.
	pad := func(n int) func(map[string]any) {
		return func(b map[string]any) {
			b["payload"] = json.RawMessage(`{"pad":"` + strings.Repeat("x", n) + `"}`)
		}
	}
	a.refused(t, http.MethodPost, "/v1/tasks", secretSubmit, submitJSON(t, "carol", "big-1", pad(model.PayloadBytesMax+1)), http.StatusBadRequest, "payload")
	a.refused(t, http.MethodPost, "/v1/tasks", secretSubmit, submitJSON(t, "carol", "big-2", pad(requestBytesMax)), http.StatusRequestEntityTooLarge, "body")
	require.Equal(t, rows, a.counts(t), "refused submits write nothing")

	// GET: 200 with the snake_case record, times RFC 3339 UTC.
	record = a.call(t, http.MethodGet, "/v1/tasks/"+id, secretSubmit, "", http.StatusOK)
	for _, field := range []string{"id", "user", "state", "reason", "version", "attempt", "cost_used", "cost_budget",
		"steps_used", "steps_max", "cancel_requested", "cancelled_by", "approved_by", "run_at", "deadline",
		"created_at", "updated_at"} {
		require.Contains(t, record, field)
	}
	require.Equal(t, id, record["id"])
	require.Equal(t, "carol", record["user"])
	require.Equal(t, "queued", record["state"])
	require.Equal(t, "", record["reason"])
	require.EqualValues(t, 0, record["version"])
	require.EqualValues(t, 0, record["attempt"])
	require.EqualValues(t, 0, record["cost_used"])
	require.EqualValues(t, 5, record["steps_max"])
	require.Equal(t, false, record["cancel_requested"])
	require.Equal(t, apiEpoch.Format(time.RFC3339), record["created_at"])
	require.Equal(t, apiEpoch.Format(time.RFC3339), record["run_at"])
	require.Equal(t, apiEpoch.Add(time.Hour).Format(time.RFC3339), record["deadline"])
	for _, field := range []string{"run_at", "deadline", "created_at", "updated_at"} {
		ts, err := time.Parse(time.RFC3339Nano, record[field].(string))
		require.NoError(t, err, field)
		require.Equal(t, time.UTC, ts.Location(), field)
	}
	// Every reader scope may read a task.
	for _, secret := range []string{secretApprove, secretOperate} {
		require.Equal(t, id, a.call(t, http.MethodGet, "/v1/tasks/"+id, secret, "", http.StatusOK)["id"])
	}

	// 404 for an unknown task; 400 for what cannot be a task ID.
	a.refused(t, http.MethodGet, "/v1/tasks/"+testkit.UnknownTask, secretSubmit, "", http.StatusNotFound, "id")
	for _, bad := range []string{"nope", "t_X.Z", "t_" + strings.Repeat("a", 64), "1%20OR%201"} {
		a.refused(t, http.MethodGet, "/v1/tasks/"+bad, secretSubmit, "", http.StatusBadRequest, "id")
	}

	// The task's events, in order; 404 for an unknown task.
	events := a.list(t, "/v1/tasks/"+id+"/events", secretSubmit)
	require.Len(t, events, 1)
	require.Equal(t, "submitted", events[0]["kind"])
	require.Equal(t, "alice", events[0]["actor"], "the actor is the token's name")
	require.Equal(t, "carol", events[0]["user"], "and the task's user is beside it")
	a.refused(t, http.MethodGet, "/v1/tasks/"+testkit.UnknownTask+"/events", secretSubmit, "", http.StatusNotFound, "id")

	// The mux's own refusals.
	a.refused(t, http.MethodGet, "/v1/nothing", secretRoot, "", http.StatusNotFound, "")
	status, header, b := a.do(t, http.MethodDelete, "/v1/tasks", secretRoot, "")
	require.Equal(t, http.StatusMethodNotAllowed, status)
	require.Equal(t, "GET, POST, HEAD", header.Get("Allow"))
	require.JSONEq(t, `{"error":"DELETE \"/v1/tasks\": method not allowed (allowed: GET, POST, HEAD)","code":"method_not_allowed"}`, string(b))

	a.requireNoSecrets(t)
}

func TestServeQueueFull(t *testing.T) {
	a := setupAPI(t)
	limits := a.call(t, http.MethodGet, "/v1/limits", secretOperate, "", http.StatusOK)["limits"].(map[string]any)
	require.EqualValues(t, model.DefaultLimits.DepthMax, limits["depth_max"])

	limits["depth_max"] = 1
	put, err := json.Marshal(limits)
	require.NoError(t, err)
	got := a.call(t, http.MethodPut, "/v1/limits", secretOperate, string(put), http.StatusOK)
	require.EqualValues(t, 1, got["limits"].(map[string]any)["depth_max"])

	first := submitJSON(t, "carol", "k1", nil)
	id := a.call(t, http.MethodPost, "/v1/tasks", secretSubmit, first, http.StatusCreated)["task_id"]
	rows := a.counts(t)
	msg := a.refused(t, http.MethodPost, "/v1/tasks", secretSubmit, submitJSON(t, "dave", "k1", nil), http.StatusTooManyRequests, "")
	require.Contains(t, msg, "queue full")
	require.Equal(t, rows, a.counts(t), "a refused submit is not half-written (not even its user)")
	// A replay is not a new task: it is answered even when the queue is full.
	require.Equal(t, id, a.call(t, http.MethodPost, "/v1/tasks", secretSubmit, first, http.StatusOK)["task_id"])

	// Per user: carol may have one active task, others are unlimited.
	limits["depth_max"] = 0
	put, err = json.Marshal(limits)
	require.NoError(t, err)
	a.call(t, http.MethodPut, "/v1/limits", secretOperate, string(put), http.StatusOK)
	got = a.call(t, http.MethodPut, "/v1/limits/users/carol", secretOperate, `{"depth_max": 1}`, http.StatusOK)
	require.Equal(t, []any{map[string]any{"user": "carol", "running_max": float64(model.Inherit), "depth_max": float64(1)}}, got["users"])
	rows = a.counts(t)
	msg = a.refused(t, http.MethodPost, "/v1/tasks", secretSubmit, submitJSON(t, "carol", "k2", nil), http.StatusTooManyRequests, "")
	require.Contains(t, msg, "queue full")
	require.Equal(t, rows, a.counts(t))
	a.submit(t, "dave", "k1", nil)

	// Cancelling carol's task makes room for her next one.
	a.call(t, http.MethodPost, fmt.Sprintf("/v1/tasks/%s/cancel", id), secretSubmit, "", http.StatusOK)
	a.submit(t, "carol", "k2", nil)

	a.requireNoSecrets(t)
}

func TestServeCancelApproveReject(t *testing.T) {
	a := setupAPI(t)
	ctx := context.Background()

	// Cancel a queued task: 200, cancelled by the token's name.
	queued := a.submit(t, "carol", "c1", nil)
	out := a.call(t, http.MethodPost, "/v1/tasks/"+queued+"/cancel", secretSubmit, "", http.StatusOK)
	require.Equal(t, "cancelled", out["state"])
	require.Equal(t, "cancelled_by_caller", out["reason"])
	require.Equal(t, "alice", out["cancelled_by"])
	require.Equal(t, "alice", a.event(t, queued, model.EventCancelled).Actor)
	// Cancelling it again changes nothing.
	out = a.call(t, http.MethodPost, "/v1/tasks/"+queued+"/cancel", secretOperate, "", http.StatusOK)
	require.Equal(t, "alice", out["cancelled_by"])

	// Cancel a running task: the request is recorded, the state stays.
	running := a.submit(t, "carol", "c2", urgent)
	rc := a.claim(t, running)
	out = a.call(t, http.MethodPost, "/v1/tasks/"+running+"/cancel", secretOperate, "", http.StatusOK)
	require.Equal(t, "running", out["state"])
	require.Equal(t, true, out["cancel_requested"])
	require.Equal(t, "olga", out["cancelled_by"])
	require.Equal(t, "olga", a.event(t, running, model.EventCancelRequested).Actor)
	// Once its worker has stopped it, nothing waits to be cancelled.
	require.NoError(t, a.q.AcknowledgeCancel(ctx, rc))
	out = a.task(t, running)
	require.Equal(t, "cancelled", out["state"])
	require.Equal(t, false, out["cancel_requested"])
	require.Equal(t, "olga", out["cancelled_by"])

	// 409 for a completed task; 404 for an unknown one.
	done := a.submit(t, "carol", "c3", urgent)
	require.NoError(t, a.q.Complete(ctx, a.claim(t, done)))
	a.refused(t, http.MethodPost, "/v1/tasks/"+done+"/cancel", secretSubmit, "", http.StatusConflict, "id")
	require.Equal(t, "completed", a.task(t, done)["state"])
	a.refused(t, http.MethodPost, "/v1/tasks/"+testkit.UnknownTask+"/cancel", secretSubmit, "", http.StatusNotFound, "id")
	a.refused(t, http.MethodPost, "/v1/tasks/bogus/cancel", secretSubmit, "", http.StatusBadRequest, "id")

	// Approve a task at its gate (both gated tasks are parked first: an
	// approved one is queued again, ahead of any later claim).
	gated, version := a.paused(t, "carol", "a1")
	rejected, rejectVersion := a.paused(t, "carol", "a2")
	record := a.task(t, gated)
	require.Equal(t, "waiting_for_approval", record["state"])
	require.EqualValues(t, version, record["approval_version"])
	a.refused(t, http.MethodPost, "/v1/tasks/"+gated+"/approve", secretApprove, `{}`, http.StatusBadRequest, "version")
	a.refused(t, http.MethodPost, "/v1/tasks/"+gated+"/approve", secretApprove, ``, http.StatusBadRequest, "body")
	a.refused(t, http.MethodPost, "/v1/tasks/"+gated+"/approve", secretApprove, `{"version": "one"}`, http.StatusBadRequest, "version")
	a.refused(t, http.MethodPost, "/v1/tasks/"+gated+"/approve", secretApprove, fmt.Sprintf(`{"version": %d}`, version-1), http.StatusConflict, "version")
	a.refused(t, http.MethodPost, "/v1/tasks/"+gated+"/approve", secretApprove, fmt.Sprintf(`{"version": %d}`, version+1), http.StatusConflict, "version")
	require.Equal(t, "waiting_for_approval", a.task(t, gated)["state"], "a refused approval changes nothing")
	out = a.call(t, http.MethodPost, "/v1/tasks/"+gated+"/approve", secretApprove, fmt.Sprintf(`{"version": %d}`, version), http.StatusOK)
	require.Equal(t, "queued", out["state"])
	require.Equal(t, "bob", out["approved_by"])
	require.EqualValues(t, version, out["version"])
	require.Equal(t, "bob", a.event(t, gated, model.EventApproved).Actor)
	// It is no longer waiting: approving or rejecting again is a conflict.
	a.refused(t, http.MethodPost, "/v1/tasks/"+gated+"/approve", secretApprove, fmt.Sprintf(`{"version": %d}`, version), http.StatusConflict, "id")
	a.refused(t, http.MethodPost, "/v1/tasks/"+gated+"/reject", secretApprove, fmt.Sprintf(`{"version": %d}`, version), http.StatusConflict, "id")
	a.refused(t, http.MethodPost, "/v1/tasks/"+testkit.UnknownTask+"/approve", secretApprove, `{"version": 1}`, http.StatusNotFound, "id")

	// Reject names the version shown, as approve does: a missing, malformed
	// or stale one is refused and changes nothing.
	rows := a.counts(t)
	a.refused(t, http.MethodPost, "/v1/tasks/"+rejected+"/reject", secretRoot, ``, http.StatusBadRequest, "body")
	a.refused(t, http.MethodPost, "/v1/tasks/"+rejected+"/reject", secretRoot, `{}`, http.StatusBadRequest, "version")
	a.refused(t, http.MethodPost, "/v1/tasks/"+rejected+"/reject", secretRoot, `{"version": -1}`, http.StatusBadRequest, "version")
	a.refused(t, http.MethodPost, "/v1/tasks/"+rejected+"/reject", secretRoot, fmt.Sprintf(`{"version": %d, "why": 1}`, rejectVersion), http.StatusBadRequest, "body")
	a.refused(t, http.MethodPost, "/v1/tasks/"+rejected+"/reject", secretRoot, fmt.Sprintf(`{"version": %d}`, rejectVersion-1), http.StatusConflict, "version")
	a.refused(t, http.MethodPost, "/v1/tasks/"+rejected+"/reject", secretRoot, fmt.Sprintf(`{"version": %d}`, rejectVersion+1), http.StatusConflict, "version")
	require.Equal(t, rows, a.counts(t), "a refused rejection writes nothing")
	require.Equal(t, "waiting_for_approval", a.task(t, rejected)["state"])
	// Reject: cancelled with approval_rejected, by the token's name.
	out = a.call(t, http.MethodPost, "/v1/tasks/"+rejected+"/reject", secretRoot, fmt.Sprintf(`{"version": %d}`, rejectVersion), http.StatusOK)
	require.Equal(t, "cancelled", out["state"])
	require.Equal(t, "approval_rejected", out["reason"])
	require.Equal(t, "root", out["cancelled_by"])
	require.Equal(t, "root", a.event(t, rejected, model.EventRejected).Actor)

	a.requireNoSecrets(t)
}

func TestServeOperator(t *testing.T) {
	a := setupAPI(t)
	ctx := context.Background()

	// Two tasks in needs_review: one with an effect whose outcome is unknown.
	uncertain := a.submit(t, "carol", "r1", urgent)
	c := a.claim(t, uncertain)
	intent, err := a.q.RecordIntent(ctx, c, 0)
	require.NoError(t, err)
	to, err := a.q.Fail(ctx, c, model.Failure{Class: model.Uncertain, OpID: intent.OpID, Message: "provider timed out"})
	require.NoError(t, err)
	require.Equal(t, model.NeedsReview, to)
	parked := a.submit(t, "carol", "r2", urgent)
	to, err = a.q.Fail(ctx, a.claim(t, parked), model.Failure{Class: model.Uncertain, Message: "lost reply"})
	require.NoError(t, err)
	require.Equal(t, model.NeedsReview, to)

	// Inspect shows both, with the effect that has no receipt.
	inspected := a.list(t, "/v1/inspect", secretOperate)
	byID := map[string]map[string]any{}
	for _, in := range inspected {
		byID[in["task"].(map[string]any)["id"].(string)] = in
	}
	require.Contains(t, byID, uncertain)
	require.Contains(t, byID, parked)
	require.Equal(t, []any{intent.OpID}, byID[uncertain]["effects_without_receipt"])
	require.NotEmpty(t, byID[uncertain]["advice"])

	// Settle the effect: 400 for a bad operation or a missing finding, 404
	// for an unknown operation, 200 once, then 409.
	settle := "/v1/effects/" + intent.OpID + "/settle"
	a.refused(t, http.MethodPost, "/v1/effects/nonsense/settle", secretOperate, `{"applied": true}`, http.StatusBadRequest, "op")
	// A task ID with a step that is not a non-negative number is no
	// operation ID either: 400, not a lookup that fails.
	for _, bad := range []string{".sXYZ", ".s-1", ".s01", ".s"} {
		a.refused(t, http.MethodPost, "/v1/effects/"+uncertain+bad+"/settle", secretOperate, `{"applied": true}`, http.StatusBadRequest, "op")
	}
	a.refused(t, http.MethodPost, settle, secretOperate, `{}`, http.StatusBadRequest, "applied")
	a.refused(t, http.MethodPost, "/v1/effects/"+testkit.UnknownTask+".s0/settle", secretOperate, `{"applied": true}`, http.StatusNotFound, "op")
	out := a.call(t, http.MethodPost, settle, secretOperate, `{"applied": true}`, http.StatusOK)
	require.Equal(t, map[string]any{"op_id": intent.OpID, "applied": true, "by": "olga"}, out)
	a.refused(t, http.MethodPost, settle, secretOperate, `{"applied": false}`, http.StatusConflict, "op")
	require.Equal(t, "olga", a.event(t, uncertain, model.EventEffectSettled).Actor)

	// Limits: GET; a PUT changes the limits it names and leaves the others
	// (one naming none, or an unknown field, is refused); a full PUT sets
	// them all.
	limits := a.call(t, http.MethodGet, "/v1/limits", secretOperate, "", http.StatusOK)
	require.Equal(t, []any{}, limits["users"])
	l := limits["limits"].(map[string]any)
	require.EqualValues(t, model.DefaultLimits.GrantCostMax, l["grant_cost_max"])
	a.refused(t, http.MethodPut, "/v1/limits", secretOperate, `{"DepthMax": 5}`, http.StatusBadRequest, "body")
	a.refused(t, http.MethodPut, "/v1/limits", secretOperate, `{}`, http.StatusBadRequest, "body")
	a.refused(t, http.MethodPut, "/v1/limits", secretOperate, `{"depth_max": 5, "attempts_max": 0}`, http.StatusBadRequest, "attempts_max")
	limits = a.call(t, http.MethodPut, "/v1/limits", secretOperate, `{"depth_max": 5}`, http.StatusOK)
	l["depth_max"] = 5.0
	require.Equal(t, l, limits["limits"], "only depth_max changed")
	l["grant_cost_max"], l["grant_steps_max"] = 20.0, 2.0
	put, err := json.Marshal(l)
	require.NoError(t, err)
	limits = a.call(t, http.MethodPut, "/v1/limits", secretOperate, string(put), http.StatusOK)
	require.Equal(t, l, limits["limits"])
	got, _, err := a.q.Limits(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 20, got.GrantCostMax)

	// Requeue: the grant is required and bounded by the configured maximum.
	requeue := "/v1/tasks/" + uncertain + "/requeue"
	a.refused(t, http.MethodPost, requeue, secretOperate, `{}`, http.StatusBadRequest, "grant_cost")
	a.refused(t, http.MethodPost, requeue, secretOperate, `{"grant_cost": 21, "grant_steps": 0}`, http.StatusBadRequest, "grant_cost")
	a.refused(t, http.MethodPost, requeue, secretOperate, `{"grant_cost": -1, "grant_steps": 0}`, http.StatusBadRequest, "grant_cost")
	a.refused(t, http.MethodPost, requeue, secretOperate, `{"grant_cost": 0, "grant_steps": 3}`, http.StatusBadRequest, "grant_steps")
	require.Equal(t, "needs_review", a.task(t, uncertain)["state"], "a refused requeue changes nothing")
	out = a.call(t, http.MethodPost, requeue, secretOperate, `{"grant_cost": 20, "grant_steps": 2}`, http.StatusOK)
	require.Equal(t, "queued", out["state"])
	require.EqualValues(t, 30, out["cost_budget"])
	require.EqualValues(t, 7, out["steps_max"])
	require.Equal(t, "olga", a.event(t, uncertain, model.EventRequeued).Actor)
	a.refused(t, http.MethodPost, requeue, secretOperate, `{"grant_cost": 0, "grant_steps": 0}`, http.StatusConflict, "id")
	a.refused(t, http.MethodPost, "/v1/tasks/"+testkit.UnknownTask+"/requeue", secretOperate, `{"grant_cost": 0, "grant_steps": 0}`, http.StatusNotFound, "id")

	// Resolve: only to a terminal state.
	resolve := "/v1/tasks/" + parked + "/resolve"
	for _, as := range []string{"running", "queued", "done", ""} {
		a.refused(t, http.MethodPost, resolve, secretOperate, fmt.Sprintf(`{"as": %q}`, as), http.StatusBadRequest, "as")
	}
	out = a.call(t, http.MethodPost, resolve, secretOperate, `{"as": "failed"}`, http.StatusOK)
	require.Equal(t, "failed", out["state"])
	require.Equal(t, "operator_resolved", out["reason"])
	require.Equal(t, "olga", a.event(t, parked, model.EventResolved).Actor)
	a.refused(t, http.MethodPost, resolve, secretOperate, `{"as": "completed"}`, http.StatusConflict, "id")

	// Per-user limits.
	out = a.call(t, http.MethodPut, "/v1/limits/users/carol", secretOperate, `{"running_max": 2}`, http.StatusOK)
	require.Equal(t, []any{map[string]any{"user": "carol", "running_max": float64(2), "depth_max": float64(model.Inherit)}}, out["users"])
	a.refused(t, http.MethodPut, "/v1/limits/users/carol", secretOperate, `{"running_max": -2}`, http.StatusBadRequest, "running_max")
	a.refused(t, http.MethodPut, "/v1/limits/users/carol", secretOperate, `{}`, http.StatusBadRequest, "body")
	out = a.call(t, http.MethodPut, "/v1/limits/users/carol", secretOperate, `{"depth_max": 3}`, http.StatusOK)
	require.Equal(t, []any{map[string]any{"user": "carol", "running_max": float64(2), "depth_max": float64(3)}}, out["users"],
		"a user's limit not named keeps its value")
	a.refused(t, http.MethodPut, "/v1/limits/users/car%20ol", secretOperate, `{"depth_max": 1}`, http.StatusBadRequest, "user")

	// Schedules: add, list, remove, remove again.
	schedule := `{"user": "carol", "payload": {"steps": [{"cost": 1}]}, "cost_budget": 5, "steps_max": 2,
		"origin": "2026-03-01T10:00:00Z", "period_ms": 60000}`
	added := a.call(t, http.MethodPost, "/v1/schedules", secretOperate, schedule, http.StatusCreated)
	sid, _ := added["id"].(string)
	require.True(t, strings.HasPrefix(sid, model.ScheduleIDPrefix), "%v", added)
	require.Equal(t, "carol", added["user"])
	require.EqualValues(t, 60000, added["period_ms"])
	require.Equal(t, "2026-03-01T10:00:00Z", added["origin"])
	a.refused(t, http.MethodPost, "/v1/schedules", secretOperate, strings.Replace(schedule, "60000", "5", 1), http.StatusBadRequest, "period_ms")
	// A period whose conversion to a duration would overflow (2^58 ms plus
	// an hour became a one-hour schedule) is refused naming period_ms.
	for _, huge := range []string{"288230376155311744", "4611686018427387904", "9223372036854775807", "-9223372036854775808"} {
		msg := a.refused(t, http.MethodPost, "/v1/schedules", secretOperate, strings.Replace(schedule, "60000", huge, 1), http.StatusBadRequest, "period_ms")
		require.Contains(t, msg, "period_ms: must be from 1000 to 31622400000, got "+huge)
	}
	msg := a.refused(t, http.MethodPost, "/v1/schedules", secretOperate, strings.Replace(schedule, "60000", "1e30", 1), http.StatusBadRequest, "period_ms")
	require.Equal(t, "period_ms: must be a whole number from 1000 to 31622400000, got the number 1e30", msg)
	a.refused(t, http.MethodPost, "/v1/schedules", secretOperate, strings.Replace(schedule, "2026-03-01T10:00:00Z", "0001-01-01T00:00:00Z", 1), http.StatusBadRequest, "origin")
	a.refused(t, http.MethodPost, "/v1/schedules", secretOperate, strings.Replace(schedule, "2026-03-01T10:00:00Z", "soon", 1), http.StatusBadRequest, "origin")
	schedules := a.list(t, "/v1/schedules", secretOperate)
	require.Len(t, schedules, 1)
	require.Equal(t, sid, schedules[0]["id"])
	status, _, b := a.do(t, http.MethodDelete, "/v1/schedules/"+sid, secretOperate, "")
	require.Equal(t, http.StatusNoContent, status, "%s", b)
	require.Empty(t, b)
	a.refused(t, http.MethodDelete, "/v1/schedules/"+sid, secretOperate, "", http.StatusNotFound, "id")
	a.refused(t, http.MethodDelete, "/v1/schedules/s%20x", secretOperate, "", http.StatusBadRequest, "id")
	a.refused(t, http.MethodDelete, "/v1/schedules/bad%20id%21", secretOperate, "", http.StatusBadRequest, "id")
	require.Empty(t, a.list(t, "/v1/schedules", secretOperate))

	// The actors of the events that concern no task.
	all, err := a.q.Events(ctx, "")
	require.NoError(t, err)
	kinds := map[model.EventKind]int{}
	for _, e := range all {
		switch e.Kind {
		case model.EventLimitsSet, model.EventScheduleAdded, model.EventScheduleRemoved:
			require.Equal(t, "olga", e.Actor, "%+v", e)
			kinds[e.Kind]++
		}
	}
	require.Equal(t, map[model.EventKind]int{model.EventLimitsSet: 4, model.EventScheduleAdded: 1, model.EventScheduleRemoved: 1}, kinds)

	a.requireNoSecrets(t)
}

func TestServeAuthentication(t *testing.T) {
	a := setupAPI(t)
	id := a.submit(t, "carol", "s1", nil)
	rows := a.counts(t)

	routes := []struct{ method, path, body string }{
		{http.MethodPost, "/v1/tasks", submitJSON(t, "carol", "s2", nil)},
		{http.MethodGet, "/v1/tasks/" + id, ""},
		{http.MethodPost, "/v1/tasks/" + id + "/cancel", ""},
		{http.MethodPost, "/v1/tasks/" + id + "/approve", `{"version": 0}`},
		{http.MethodGet, "/v1/inspect", ""},
		{http.MethodPut, "/v1/limits", `{"depth_max": 1}`},
	}
	headers := map[string]string{
		"no header":           "",
		"empty bearer":        "Bearer ",
		"scheme only":         "Bearer",
		"basic":               "Basic " + secretRoot,
		"no scheme":           secretRoot,
		"wrong token":         "Bearer not-a-configured-token",
		"secret with a tail":  "Bearer " + secretRoot + "x",
		"secret cut short":    "Bearer " + secretRoot[:len(secretRoot)-1],
		"token name":          "Bearer root",
		"two secrets":         "Bearer " + secretSubmit + " " + secretOperate,
		"space before secret": "Bearer  " + secretRoot,
	}
	for name, value := range headers {
		for _, r := range routes {
			t.Run(name+" "+r.method+" "+r.path, func(t *testing.T) {
				h := http.Header{}
				if value != "" {
					h.Set("Authorization", value)
				}
				status, header, b := a.doHeader(t, r.method, r.path, h, r.body)
				require.Equal(t, http.StatusUnauthorized, status, "%s", b)
				require.Equal(t, `Bearer realm="leasehold"`, header.Get("WWW-Authenticate"))
				var e wire.Error
				require.NoError(t, json.Unmarshal(b, &e))
				require.NotEmpty(t, e.Error)
			})
		}
	}
	require.Equal(t, rows, a.counts(t), "unauthenticated requests write nothing")

	// Forbidden: each token is confined to its scopes, whatever the task.
	gated, version := a.paused(t, "carol", "s3")
	rows = a.counts(t)
	approve := fmt.Sprintf(`{"version": %d}`, version)
	forbidden := []struct {
		who, secret, method, path, body string
	}{
		{"submitter approving", secretSubmit, http.MethodPost, "/v1/tasks/" + gated + "/approve", approve},
		{"submitter rejecting", secretSubmit, http.MethodPost, "/v1/tasks/" + gated + "/reject", approve},
		{"submitter requeueing", secretSubmit, http.MethodPost, "/v1/tasks/" + id + "/requeue", `{"grant_cost": 0, "grant_steps": 0}`},
		{"submitter resolving", secretSubmit, http.MethodPost, "/v1/tasks/" + id + "/resolve", `{"as": "failed"}`},
		{"submitter settling", secretSubmit, http.MethodPost, "/v1/effects/" + id + ".s0/settle", `{"applied": true}`},
		{"submitter inspecting", secretSubmit, http.MethodGet, "/v1/inspect", ""},
		{"submitter reading limits", secretSubmit, http.MethodGet, "/v1/limits", ""},
		{"submitter setting limits", secretSubmit, http.MethodPut, "/v1/limits", `{"depth_max": 1}`},
		{"submitter setting a user limit", secretSubmit, http.MethodPut, "/v1/limits/users/carol", `{"depth_max": 1}`},
		{"submitter listing schedules", secretSubmit, http.MethodGet, "/v1/schedules", ""},
		{"submitter adding a schedule", secretSubmit, http.MethodPost, "/v1/schedules", `{}`},
		{"submitter removing a schedule", secretSubmit, http.MethodDelete, "/v1/schedules/s_1", ""},
		{"approver submitting", secretApprove, http.MethodPost, "/v1/tasks", submitJSON(t, "carol", "s4", nil)},
		{"approver cancelling", secretApprove, http.MethodPost, "/v1/tasks/" + id + "/cancel", ""},
		{"approver requeueing", secretApprove, http.MethodPost, "/v1/tasks/" + id + "/requeue", `{"grant_cost": 0, "grant_steps": 0}`},
		{"approver resolving", secretApprove, http.MethodPost, "/v1/tasks/" + id + "/resolve", `{"as": "failed"}`},
		{"approver settling", secretApprove, http.MethodPost, "/v1/effects/" + id + ".s0/settle", `{"applied": true}`},
		{"approver inspecting", secretApprove, http.MethodGet, "/v1/inspect", ""},
		{"approver reading limits", secretApprove, http.MethodGet, "/v1/limits", ""},
		{"approver setting limits", secretApprove, http.MethodPut, "/v1/limits", `{"depth_max": 1}`},
		{"approver setting a user limit", secretApprove, http.MethodPut, "/v1/limits/users/carol", `{"depth_max": 1}`},
		{"approver adding a schedule", secretApprove, http.MethodPost, "/v1/schedules", `{}`},
		{"operator submitting", secretOperate, http.MethodPost, "/v1/tasks", submitJSON(t, "carol", "s5", nil)},
		{"operator approving", secretOperate, http.MethodPost, "/v1/tasks/" + gated + "/approve", approve},
		{"operator rejecting", secretOperate, http.MethodPost, "/v1/tasks/" + gated + "/reject", approve},
	}
	for _, f := range forbidden {
		t.Run(f.who, func(t *testing.T) {
			status, header, b := a.do(t, f.method, f.path, f.secret, f.body)
			require.Equal(t, http.StatusForbidden, status, "%s", b)
			require.Empty(t, header.Get("WWW-Authenticate"), "a known token is not asked to authenticate again")
			var e wire.Error
			require.NoError(t, json.Unmarshal(b, &e))
			require.Contains(t, e.Error, "lacks the")
		})
	}
	require.Equal(t, rows, a.counts(t), "forbidden requests write nothing")
	require.Equal(t, "waiting_for_approval", a.task(t, gated)["state"])
	require.Equal(t, "queued", a.task(t, id)["state"])

	// The token with every scope may do each of those.
	a.call(t, http.MethodPost, "/v1/tasks/"+gated+"/approve", secretRoot, approve, http.StatusOK)
	a.call(t, http.MethodPost, "/v1/tasks", secretRoot, submitJSON(t, "carol", "s6", nil), http.StatusCreated)
	a.list(t, "/v1/inspect", secretRoot)
	a.call(t, http.MethodGet, "/v1/limits", secretRoot, "", http.StatusOK)
	a.call(t, http.MethodPost, "/v1/tasks/"+id+"/cancel", secretRoot, "", http.StatusOK)

	// The scheme's name is case-insensitive; the secret is not.
	for _, scheme := range []string{"bearer", "BEARER", "bEaReR"} {
		h := http.Header{}
		h.Set("Authorization", scheme+" "+secretRoot)
		status, _, b := a.doHeader(t, http.MethodGet, "/v1/tasks/"+id, h, "")
		require.Equal(t, http.StatusOK, status, "%s: %s", scheme, b)
	}
	h0 := http.Header{}
	h0.Set("Authorization", "Bearer "+strings.ToUpper(secretRoot))
	status0, _, _ := a.doHeader(t, http.MethodGet, "/v1/tasks/"+id, h0, "")
	require.Equal(t, http.StatusUnauthorized, status0, "the secret is compared exactly")

	// Headers beyond the server's bound are refused before any handler.
	h := http.Header{}
	h.Set("Authorization", "Bearer "+secretRoot)
	h.Set("X-Padding", strings.Repeat("p", 64<<10))
	status, _, _ := a.doHeader(t, http.MethodGet, "/v1/tasks/"+id, h, "")
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, status)

	// The request log names the token, never its secret.
	a.requireNoSecrets(t)
	logs := a.logs.String()
	require.Contains(t, logs, `"actor":"bob"`)
	require.Contains(t, logs, `"status":401,"actor":"-"`)
}

func TestServeMetricsAndHealth(t *testing.T) {
	a := setupAPI(t)
	ctx := context.Background()

	// One task waits 200ms and runs 3s; two stay queued.
	done := a.submit(t, "carol", "m1", urgent)
	a.submit(t, "carol", "m2", nil)
	a.submit(t, "dave", "m3", nil)
	a.clock.Advance(200 * time.Millisecond)
	c := a.claim(t, done)
	a.clock.Advance(3 * time.Second)
	require.NoError(t, a.q.Complete(ctx, c))

	status, header, b := a.do(t, http.MethodGet, "/metrics", "", "")
	require.Equal(t, http.StatusOK, status, "%s", b)
	require.True(t, strings.HasPrefix(header.Get("Content-Type"), "text/plain"), header.Get("Content-Type"))
	body := string(b)
	want := map[string]float64{
		"leasehold_metrics_up":                                 1,
		`leasehold_tasks{state="queued"}`:                      2,
		`leasehold_tasks{state="completed"}`:                   1,
		`leasehold_tasks{state="running"}`:                     0,
		`leasehold_submitted_total{kind="synthetic"}`:          3,
		`leasehold_submitted_total{kind="other"}`:              0,
		`leasehold_completions_total{kind="synthetic"}`:        1,
		`leasehold_completions_total{kind="other"}`:            0,
		`leasehold_failures_total{kind="synthetic"}`:           0,
		`leasehold_failures_total{kind="other"}`:               0,
		`leasehold_cancellations_total{kind="synthetic"}`:      0,
		`leasehold_cancellations_total{kind="other"}`:          0,
		`leasehold_retries_total{kind="synthetic"}`:            0,
		`leasehold_retries_total{kind="other"}`:                0,
		`leasehold_lease_expiries_total{kind="synthetic"}`:     0,
		`leasehold_lease_expiries_total{kind="other"}`:         0,
		`leasehold_stale_writes_total{kind="synthetic"}`:       0,
		`leasehold_stale_writes_total{kind="other"}`:           0,
		`leasehold_budget_exhaustions_total{kind="synthetic"}`: 0,
		`leasehold_budget_exhaustions_total{kind="other"}`:     0,
		`leasehold_reviews_total{kind="synthetic"}`:            0,
		`leasehold_reviews_total{kind="other"}`:                0,
		`leasehold_pruned_total{kind="synthetic"}`:             0,
		`leasehold_pruned_total{kind="other"}`:                 0,
		"leasehold_oldest_queued_age_seconds":                  3.2,
		`leasehold_queue_wait_seconds_bucket{le="0.1"}`:        0,
		`leasehold_queue_wait_seconds_bucket{le="0.25"}`:       1,
		`leasehold_queue_wait_seconds_bucket{le="+Inf"}`:       1,
		"leasehold_queue_wait_seconds_sum":                     0.2,
		"leasehold_queue_wait_seconds_count":                   1,
		`leasehold_run_seconds_bucket{le="2.5"}`:               0,
		`leasehold_run_seconds_bucket{le="5"}`:                 1,
		`leasehold_run_seconds_bucket{le="1800"}`:              1,
		`leasehold_run_seconds_bucket{le="+Inf"}`:              1,
		"leasehold_run_seconds_sum":                            3,
		"leasehold_run_seconds_count":                          1,
	}
	for series, value := range want {
		require.InDelta(t, value, metricValue(t, body, series), 1e-9, series)
	}
	require.Contains(t, body, "# TYPE leasehold_completions_total counter")
	require.Contains(t, body, "# TYPE leasehold_run_seconds histogram")
	require.Contains(t, body, "# TYPE leasehold_tasks gauge")

	// /healthz: 200, 503 busy while another connection holds the write
	// lock, 200 again at the first probe after it lets go. A probe runs at
	// most once a second of the queue's clock.
	health := func(want int, status string, class ...string) {
		t.Helper()
		out := a.call(t, http.MethodGet, "/healthz", "", "", want)
		body := map[string]any{"status": status}
		if len(class) > 0 {
			body["class"] = class[0]
		}
		require.Equal(t, body, out)
	}
	health(http.StatusOK, "ok")
	a.clock.Advance(time.Second)
	db, err := sql.Open("sqlite", a.path)
	require.NoError(t, err)
	defer db.Close()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN EXCLUSIVE")
	require.NoError(t, err)
	health(http.StatusServiceUnavailable, "unavailable", "busy")
	// Writes wait for the lock too, and fail as storage unavailable: 503.
	msg := a.refused(t, http.MethodPost, "/v1/tasks", secretSubmit, submitJSON(t, "carol", "m4", nil), http.StatusServiceUnavailable, "")
	require.Equal(t, "storage unavailable; retry later", msg, "the storage error is logged, not sent")
	_, err = conn.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	health(http.StatusServiceUnavailable, "unavailable", "busy") // until the next probe
	a.clock.Advance(time.Second)
	health(http.StatusOK, "ok")
	a.submit(t, "carol", "m4", nil)

	a.requireNoSecrets(t)
	require.Contains(t, a.logs.String(), "health check failed")
}

// On a full disk /healthz answers 503 disk_full as soon as a write has
// failed, and while its own probe fails; 200 again at the first good
// probe.
func TestServeHealthOnAFullDisk(t *testing.T) {
	var storage *faults.Storage
	a := setupAPI(t, func(o *queue.Options) {
		storage = faults.NewStorage(&sqlite.Driver{}, o.Clock)
		o.Driver = storage
	})
	health := func(want int, body map[string]any) {
		t.Helper()
		require.Equal(t, body, a.call(t, http.MethodGet, "/healthz", "", "", want))
	}
	ok := map[string]any{"status": "ok"}
	full := map[string]any{"status": "unavailable", "class": "disk_full"}
	health(http.StatusOK, ok)
	storage.SetDiskFull(true)
	health(http.StatusOK, ok) // the probe of this second was good
	a.refused(t, http.MethodPost, "/v1/tasks", secretSubmit, submitJSON(t, "carol", "f1", nil), http.StatusServiceUnavailable, "")
	health(http.StatusServiceUnavailable, full) // a write failed since the last good probe
	a.clock.Advance(time.Second)
	health(http.StatusServiceUnavailable, full) // and the probe fails too
	storage.SetDiskFull(false)
	health(http.StatusServiceUnavailable, full)
	a.clock.Advance(time.Second)
	health(http.StatusOK, ok)
	a.submit(t, "carol", "f1", nil)
	require.Contains(t, a.logs.String(), `"class":"disk_full"`)
}

// On a real full disk (a small tmpfs, filled) /healthz answers 503
// disk_full while a submit fails, and 200 again once the disk has room.
func TestServeHealthOnARealFullDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "small")
	require.NoError(t, os.Mkdir(dir, 0o755))
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root and CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() { require.NoError(t, syscall.Unmount(dir, 0)) }) // after the server's cleanup closes the queue
	a := setupAPI(t, func(o *queue.Options) { o.Path = filepath.Join(dir, "api.db") })
	a.submit(t, "carol", "r1", nil)
	full := map[string]any{"status": "unavailable", "class": "disk_full"}
	require.Equal(t, map[string]any{"status": "ok"}, a.call(t, http.MethodGet, "/healthz", "", "", http.StatusOK))

	filler, err := os.Create(filepath.Join(dir, "filler"))
	require.NoError(t, err)
	block := make([]byte, 4096)
	for range 1 << 12 {
		if _, err = filler.Write(block); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, syscall.ENOSPC, "the tmpfs filled")
	require.NoError(t, filler.Close())
	a.clock.Advance(time.Second)
	require.Equal(t, full, a.call(t, http.MethodGet, "/healthz", "", "", http.StatusServiceUnavailable))
	a.refused(t, http.MethodPost, "/v1/tasks", secretSubmit, submitJSON(t, "carol", "r2", nil), http.StatusServiceUnavailable, "")
	require.Equal(t, full, a.call(t, http.MethodGet, "/healthz", "", "", http.StatusServiceUnavailable))

	require.NoError(t, os.Remove(filler.Name()))
	a.clock.Advance(time.Second)
	require.Equal(t, map[string]any{"status": "ok"}, a.call(t, http.MethodGet, "/healthz", "", "", http.StatusOK))
	a.submit(t, "carol", "r2", nil)
}

// metricValue returns the value of one series in a Prometheus text
// exposition.
func metricValue(t *testing.T, body, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			require.NoError(t, err, line)
			return v
		}
	}
	require.Failf(t, "series missing", "%s not in:\n%s", series, body)
	return 0
}

func TestParseTokens(t *testing.T) {
	tokens, err := ParseTokens(testTokens, false)
	require.NoError(t, err)
	require.Len(t, tokens, 4)
	scopes := map[string][]string{}
	for _, tok := range tokens {
		for _, s := range []string{model.ScopeSubmit, model.ScopeApprove, model.ScopeOperate} {
			if tok.scopes[s] {
				scopes[tok.name] = append(scopes[tok.name], s)
			}
		}
		require.NotContains(t, fmt.Sprintf("%+v", tok), "secret-0123456789", "only the digest is kept")
	}
	require.Equal(t, map[string][]string{"alice": {"submit"}, "bob": {"approve"}, "olga": {"operate"},
		"root": {"submit", "approve", "operate"}}, scopes)

	const secret = "a-long-enough-secret"
	bad := map[string]struct{ text, want string }{
		"unknown scope":      {"alice admin " + secret, "unknown scope"},
		"unknown in a list":  {"alice submit,admin " + secret, "unknown scope"},
		"empty scope":        {"alice submit, " + secret, "line 1"},
		"short secret":       {"alice submit short-secret", "shorter than 16"},
		"duplicate name":     {"alice submit " + secret + "\nalice approve other-secret-12345", "used twice"},
		"duplicate secret":   {"alice submit " + secret + "\nbob approve " + secret, "used twice"},
		"two fields":         {"alice " + secret, "want NAME SCOPES SECRET"},
		"five fields":        {"alice submit " + secret + " ana extra", "want NAME SCOPES SECRET USERS"},
		"bad user":           {"alice submit " + secret + " an/a", "users: user"},
		"empty user":         {"alice submit " + secret + " ana,", "users: user"},
		"star among users":   {"alice submit " + secret + " ana,*", "stands alone"},
		"user twice":         {"alice submit " + secret + " ana,ana", "listed twice"},
		"bad name":           {"al/ice submit " + secret, "token name"},
		"nothing configured": {"# only a comment\n\n", "no tokens"},
		"line number":        {"# header\nalice submit " + secret + "\nbob approve tiny", "line 3"},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := ParseTokens(tc.text, false)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			for _, s := range []string{secret, "short-secret", "other-secret-12345", "tiny"} {
				require.NotContains(t, err.Error(), s, "an error never repeats a secret")
			}
		})
	}
}

func TestLoadTokens(t *testing.T) {
	t.Setenv("LEASEHOLD_TOKENS", "alice submit env-secret-0123456789;bob approve,operate env-secret-9876543210")
	tokens, err := LoadTokens("", false)
	require.NoError(t, err)
	require.Len(t, tokens, 2)
	require.Equal(t, "alice", tokens[0].name)
	require.True(t, tokens[1].scopes[model.ScopeApprove] && tokens[1].scopes[model.ScopeOperate])

	// A file wins over the environment.
	file := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(file, []byte(testTokens), 0o600))
	tokens, err = LoadTokens(file, false)
	require.NoError(t, err)
	require.Len(t, tokens, 4)

	_, err = LoadTokens(filepath.Join(t.TempDir(), "missing"), false)
	require.ErrorContains(t, err, "--tokens: ")
	require.ErrorIs(t, err, os.ErrNotExist)

	t.Setenv("LEASEHOLD_TOKENS", "alice submit short")
	_, err = LoadTokens("", false)
	require.ErrorContains(t, err, "shorter than 16")

	t.Setenv("LEASEHOLD_TOKENS", "")
	_, err = LoadTokens("", false)
	require.ErrorContains(t, err, "--tokens: required")
	require.ErrorContains(t, err, "LEASEHOLD_TOKENS")
}

// gate stops the next transaction to begin, once armed, until release is
// closed, holding its connection.
type gate struct {
	armed   atomic.Bool
	held    chan struct{} // closed when a transaction has stopped
	release chan struct{}
}

// gateDriver is SQLite's driver with a gate on its connections' begins.
type gateDriver struct {
	inner driver.Driver
	g     *gate
}

func (d gateDriver) Open(name string) (driver.Conn, error) {
	c, err := d.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return gateConn{Conn: c, g: d.g}, nil
}

// gateConn is a connection whose BeginTx waits at the gate when armed.
type gateConn struct {
	driver.Conn
	g *gate
}

func (c gateConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.g.armed.CompareAndSwap(true, false) {
		close(c.g.held)
		<-c.g.release
	}
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

// scrapeWaitMax bounds how long the test waits for a scrape that should
// have given up long before.
const scrapeWaitMax = 20 * time.Second

// A scrape whose read cannot get a connection gives up at the scrape
// timeout and reports leasehold_metrics_up 0, instead of waiting for as
// long as the connection is held.
func TestScrapeGivesUpAtItsTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stop := &gate{held: make(chan struct{}), release: make(chan struct{})}
	q, err := queue.Open(ctx, queue.Options{Path: filepath.Join(t.TempDir(), "q.db"), Clock: clockwork.NewRealClock(), IDs: model.NewSeededIDs(7),
		MaxConns: 1, Driver: gateDriver{inner: &sqlite.Driver{}, g: stop}})
	require.NoError(t, err)
	defer q.Close()
	// Hold the pool's only connection: a read stops as it begins, and the
	// scrape's read waits for a connection.
	stop.armed.Store(true)
	holder := make(chan error, 1)
	go func() {
		_, err := q.Metrics(ctx)
		holder <- err
	}()
	<-stop.held
	defer func() {
		close(stop.release)
		require.NoError(t, <-holder)
	}()

	logs := &testkit.SyncBuffer{}
	c := &queueCollector{q: q, log: slog.New(slog.NewJSONHandler(logs, nil)), timeout: 50 * time.Millisecond}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	type gathered struct {
		names []string
		up    float64
		err   error
	}
	scraped := make(chan gathered, 1)
	go func() {
		families, err := reg.Gather()
		g := gathered{err: err, up: -1}
		for _, f := range families {
			g.names = append(g.names, f.GetName())
			if f.GetName() == "leasehold_metrics_up" {
				g.up = f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		scraped <- g
	}()
	var g gathered
	select {
	case g = <-scraped:
	case <-time.After(scrapeWaitMax):
		t.Fatal("the scrape did not give up at its timeout")
	}
	require.NoError(t, g.err)
	require.Equal(t, []string{"leasehold_metrics_up"}, g.names, "nothing but leasehold_metrics_up")
	require.Equal(t, 0.0, g.up)
	require.Contains(t, logs.String(), "metrics unreadable")
}

// A refused body is described in words that name the field and the rule,
// never in the decoder's (Go types, a bare EOF), and a user's characters
// are shown as themselves.
func TestServeBodyErrorsSayWhatWasWrong(t *testing.T) {
	a := setupAPI(t)
	valid := func(edit func(map[string]any)) string { return submitJSON(t, "carol", "w1", edit) }
	for _, c := range []struct {
		body, field, want string
	}{
		{``, "body", "body: required: a JSON object"},
		{`[1, 2]`, "body", "body: must be a JSON object, got a JSON array"},
		{`"text"`, "body", "body: must be a JSON object, got a JSON string"},
		{`{"user":`, "body", "body: the JSON ends before the object does"},
		{`{"user" "carol"}`, "body", "body: not valid JSON at byte 9"},
		{`{"bögus": 1}`, "body", `body: unknown field "bögus"`},
		{valid(func(b map[string]any) { b["cost_budget"] = "ten" }), "cost_budget", "cost_budget: must be a whole number from 1 to 1000000000, got a JSON string"},
		{valid(func(b map[string]any) { b["steps_max"] = 1.5 }), "steps_max", "steps_max: must be a whole number from 1 to 10000, got the number 1.5"},
		{strings.Replace(valid(nil), `"cost_budget":10`, `"cost_budget":99999999999999999999`, 1), "cost_budget",
			"cost_budget: must be a whole number from 1 to 1000000000, got the number 99999999999999999999"},
		{valid(func(b map[string]any) { b["priority"] = []int{1} }), "priority", "priority: must be a whole number from -100 to 100, got a JSON array"},
		{valid(func(b map[string]any) { b["user"] = 5 }), "user", "user: must be a string, got a JSON number"},
		{valid(func(b map[string]any) { b["user"] = "jürgen" }), "user", "user: character 'ü' at offset 1 is not allowed"},
		{valid(func(b map[string]any) { b["run_at"] = "0001-01-01T00:00:00Z" }), "run_at",
			"run_at: must be from 2000-01-01T00:00:00Z to 9999-12-31T00:00:00Z inclusive, got 0001-01-01T00:00:00Z"},
		{valid(func(b map[string]any) { b["deadline"] = "9999-12-31T23:59:59Z" }), "deadline",
			"deadline: must be from 2000-01-01T00:00:00Z to 9999-12-31T00:00:00Z inclusive, got 9999-12-31T23:59:59Z"},
		{valid(func(b map[string]any) { b["run_at"] = "demain à midi" }), "run_at", `run_at: "demain à midi" is not an RFC 3339 time`},
	} {
		msg := a.refused(t, http.MethodPost, "/v1/tasks", secretSubmit, c.body, http.StatusBadRequest, c.field)
		require.Equal(t, c.want, msg, "body %s", c.body)
		for _, internal := range []string{"json:", "Go ", "main.", "EOF", "struct"} {
			require.NotContains(t, msg, internal)
		}
	}
	msg := a.refused(t, http.MethodPost, "/v1/tasks/"+testkit.UnknownTask+"/approve", secretApprove, `{"version": -1}`, http.StatusBadRequest, "version")
	require.Equal(t, "version: must be from 0 to 9223372036854775807, got -1", msg)
	require.Equal(t, [3]int{0, 0, 0}, a.counts(t), "nothing was written")
}
