package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/kinds"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/worker"
)

// reportKinds is a kinds file with one kind whose payloads a JSON Schema
// checks.
const reportKinds = `{"kinds": {"report": {"schema": {
  "type": "object", "required": ["month"], "additionalProperties": false,
  "properties": {"month": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"}}}}}}`

// secretCara is a token acting for cara alone.
const secretCara = "cara-secret-0123456789abcdef"

// TestKindWithSchemaOverHTTP: with the queue's validators taken from a
// kinds file (as serve --kinds sets them), a payload its kind's schema
// refuses is a 400 naming the path inside the payload and the rule,
// never the value, and nothing is written; a good one is stored with its
// kind, and its record shows the payload to a token of its own user
// only.
func TestKindWithSchemaOverHTTP(t *testing.T) {
	f, err := kinds.Parse([]byte(reportKinds), t.TempDir())
	require.NoError(t, err)
	validators := map[string]model.PayloadValidator{model.KindSynthetic: worker.ValidateSynthetic}
	for _, name := range f.Names() {
		k, _ := f.Kind(name)
		validators[name] = func(p json.RawMessage) error { return k.Validate(p) }
	}
	a := setupAPIWith(t, func(o *Options) {
		cara, err := ParseTokens("cara submit "+secretCara+" cara", true)
		require.NoError(t, err)
		o.Tokens = append(o.Tokens, cara...)
	}, func(o *queue.Options) { o.Validators = validators })
	report := func(key, payload string) string {
		return submitJSON(t, "ana", key, func(b map[string]any) { b["kind"], b["payload"] = "report", json.RawMessage(payload) })
	}
	before := a.counts(t)
	msg := a.refused(t, http.MethodPost, "/v1/tasks", secretAnaPhone, report("r1", `{"month":"March-SECRET"}`),
		http.StatusBadRequest, "payload.month")
	require.Contains(t, msg, "pattern")
	require.NotContains(t, msg, "SECRET", "the refusal quotes no value")
	for _, bad := range []string{`{}`, `{"month":"2026-03","note":"SECRET"}`, `{"month":7}`} {
		_, _, body := a.do(t, http.MethodPost, "/v1/tasks", secretAnaPhone, report("r2", bad))
		var e struct{ Error, Code, Field string }
		require.NoError(t, json.Unmarshal(body, &e), "%s", body)
		require.Equal(t, "bad_input", e.Code, "%s: %s", bad, body)
		require.True(t, strings.HasPrefix(e.Field, "payload"), "%s: %s", bad, body)
		require.NotContains(t, string(body), "SECRET")
	}
	require.Equal(t, before, a.counts(t), "nothing was written")

	created := a.call(t, http.MethodPost, "/v1/tasks", secretAnaPhone, report("r3", `{"month":"2026-03"}`), http.StatusCreated)
	id := created["task_id"].(string)
	task := a.call(t, http.MethodGet, "/v1/tasks/"+id, secretAnaPhone, "", http.StatusOK)
	require.Equal(t, "report", task["kind"])
	require.Equal(t, map[string]any{"month": "2026-03"}, task["payload"], "its own user's token sees the payload")
	a.refused(t, http.MethodGet, "/v1/tasks/"+id, secretCara, "", http.StatusNotFound, "id")
	page := a.call(t, http.MethodGet, "/v1/tasks?kind=report", secretAnaPhone, "", http.StatusOK)
	require.Len(t, page["tasks"], 1)
	require.NotContains(t, page["tasks"].([]any)[0], "payload", "a listed task leaves its payload out")
	page = a.call(t, http.MethodGet, "/v1/tasks?kind=report", secretCara, "", http.StatusOK)
	require.Empty(t, page["tasks"])
	page = a.call(t, http.MethodGet, "/v1/tasks?kind=synthetic", secretAnaPhone, "", http.StatusOK)
	require.Empty(t, page["tasks"])
}

// TestMetricsByKind: /metrics counts the queued tasks of each kind the
// server names, and every other kind's under other, so the label's values
// are bounded by the server's kinds however many kinds are submitted.
func TestMetricsByKind(t *testing.T) {
	a := setupAPIWith(t, func(o *Options) { o.Kinds = []string{"report", model.KindSynthetic, "other"} },
		func(o *queue.Options) { o.Validators = nil })
	for i, kind := range []string{"report", "report", "", "stray-1", "stray-2", "other"} {
		a.submit(t, "carol", "k"+strings.Repeat("x", i), func(b map[string]any) { b["kind"] = kind })
	}
	a.claim(t, a.submit(t, "carol", "running", func(b map[string]any) { b["kind"], b["priority"] = "report", 100 }))
	status, _, b := a.do(t, http.MethodGet, "/metrics", "", "")
	require.Equal(t, http.StatusOK, status, "%s", b)
	body := string(b)
	for series, value := range map[string]float64{
		`leasehold_queued_tasks_by_kind{kind="report"}`:    2,
		`leasehold_queued_tasks_by_kind{kind="synthetic"}`: 1,
		`leasehold_queued_tasks_by_kind{kind="other"}`:     3,
	} {
		require.InDelta(t, value, metricValue(t, body, series), 1e-9, series)
	}
	require.NotContains(t, body, "stray")
	require.Equal(t, []string{model.KindSynthetic}, metricKinds(Options{}), "by default: the synthetic kind")
	require.Equal(t, []string{"a", model.KindSynthetic}, metricKinds(Options{Validators: map[string]model.PayloadValidator{"a": nil}}))
}

// TestUnknownKindOverHTTP: with the queue's UnknownKind set (as serve
// --kinds sets it), a submit, a batch item or a schedule of a kind
// without a validator is a 400 naming kind and the kind, and nothing is
// written; the file's kinds and the synthetic kind are still taken.
func TestUnknownKindOverHTTP(t *testing.T) {
	validators := map[string]model.PayloadValidator{model.KindSynthetic: worker.ValidateSynthetic, "report": nil}
	a := setupAPIWith(t, nil, func(o *queue.Options) {
		o.Validators = validators
		o.UnknownKind = func(kind string) error {
			return &model.ValidationError{Field: "kind", Problem: kind + " is not in the kinds file"}
		}
	})
	kind := func(k, payload string) func(b map[string]any) {
		return func(b map[string]any) { b["kind"], b["payload"] = k, json.RawMessage(payload) }
	}
	before := a.counts(t)
	msg := a.refused(t, http.MethodPost, "/v1/tasks", secretRoot, submitJSON(t, "alice", "u1", kind("report2", `{}`)),
		http.StatusBadRequest, "kind")
	require.Equal(t, "kind: report2 is not in the kinds file", msg)
	batch := `{"tasks":[` + submitJSON(t, "alice", "u2", kind("report", `{}`)) + "," +
		submitJSON(t, "alice", "u3", kind("report2", `{}`)) + "]}"
	msg = a.refused(t, http.MethodPost, "/v1/tasks/batch", secretRoot, batch, http.StatusBadRequest, "tasks[1].kind")
	require.Contains(t, msg, "report2 is not in the kinds file")
	msg = a.refused(t, http.MethodPost, "/v1/schedules", secretOperate,
		`{"user":"alice","kind":"report2","payload":{},"cost_budget":5,"steps_max":1,"origin":"2030-01-01T09:00:00Z","period_ms":3600000}`,
		http.StatusBadRequest, "kind")
	require.Contains(t, msg, "report2 is not in the kinds file")
	require.Equal(t, before, a.counts(t), "nothing was written")

	a.submit(t, "alice", "u4", kind("report", `{}`))
	a.submit(t, "alice", "u5", nil)
	require.Equal(t, before[0]+2, a.counts(t)[0])
}

// TestKindAndResultConformToTheDocument: a task of a kind of its own,
// with a free-form payload (nested objects, lists, null), read through
// the conformance client at every stage (submitted, long-polled until it
// completed, listed by kind, its events) answers as openapi.json says,
// whose records admit no undocumented field: kind on the task, the list
// and the events (task_kind), the payload as sent, and result only once
// the task has completed. The event stream's records, which the
// conformance client leaves to the test, match the document's Event.
func TestKindAndResultConformToTheDocument(t *testing.T) {
	ctx := context.Background()
	a := setupAPIWith(t, nil, func(o *queue.Options) { o.Validators = nil })
	const payload = `{"month":"2026-03","sections":[{"title":"sales","rows":[1,2.5]},{"title":"costs","rows":[]}],"draft":false,"note":null}`
	id := a.submit(t, "alice", "kr1", func(b map[string]any) {
		b["kind"], b["payload"], b["priority"] = "report", json.RawMessage(payload), model.PriorityMax
	})
	task := a.task(t, id)
	require.Equal(t, "report", task["kind"])
	require.NotContains(t, task, "result", "no result before the task completes")
	payloadJSON, err := json.Marshal(task["payload"])
	require.NoError(t, err)
	require.JSONEq(t, payload, string(payloadJSON), "the payload as it was sent")

	c := a.claim(t, id)
	_, err = a.q.CompleteStep(ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1, Checkpoint: "report for 2026-03 written"})
	require.NoError(t, err)
	running := a.task(t, id)
	require.NotContains(t, running, "result", "a checkpoint is no result while the task runs")
	require.NoError(t, a.q.Complete(ctx, c))
	after := int64(running["last_event_seq"].(float64))
	done := a.call(t, http.MethodGet, fmt.Sprintf("/v1/tasks/%s?wait=30s&after_seq=%d", id, after), secretRoot, "", http.StatusOK)
	require.Equal(t, string(model.Completed), done["state"])
	require.Equal(t, "report", done["kind"])
	require.Equal(t, "report for 2026-03 written", done["result"])

	page := a.call(t, http.MethodGet, "/v1/tasks?kind=report", secretRoot, "", http.StatusOK)
	listed := page["tasks"].([]any)
	require.Len(t, listed, 1)
	require.Equal(t, "report", listed[0].(map[string]any)["kind"])
	require.Equal(t, "report for 2026-03 written", listed[0].(map[string]any)["result"])

	events := a.list(t, "/v1/tasks/"+id+"/events", secretRoot)
	require.NotEmpty(t, events)
	for _, e := range events {
		require.Equal(t, "report", e["task_kind"], "event %v", e["kind"])
	}

	eventSchema := documentSchema(t, "Event")
	s := a.openStream(t, secretRoot, nil, "?after=0")
	for range events {
		e := s.next(t, false)
		require.Equal(t, "event", e.kind)
		var record any
		require.NoError(t, json.Unmarshal([]byte(e.data), &record))
		require.NoError(t, eventSchema.VisitJSON(record), "a streamed event as the document says: %s", e.data)
		require.Equal(t, "report", record.(map[string]any)["task_kind"])
	}
}

// TestKindDefaultsOverHTTP: with the queue's defaults taken from a kinds
// file (as serve --kinds sets them), a submit or a batch item that names
// no cost_budget or steps_max takes its kind's, the same body again is an
// exact replay (200, the original task), and a kind without defaults
// still needs them (400 naming cost_budget, nothing written).
func TestKindDefaultsOverHTTP(t *testing.T) {
	f, err := kinds.Parse([]byte(`{"kinds": {"report": {"defaults": {"budget": 7, "steps_max": 3}}, "memo": {}}}`), t.TempDir())
	require.NoError(t, err)
	a := setupAPIWith(t, nil, func(o *queue.Options) {
		o.Validators = map[string]model.PayloadValidator{model.KindSynthetic: worker.ValidateSynthetic, "report": nil, "memo": nil}
		o.Defaults = f.RequestDefaults()
	})
	bare := func(key, kind string) string {
		return submitJSON(t, "ana", key, func(b map[string]any) {
			b["kind"], b["payload"] = kind, json.RawMessage(`{"month":"2026-03"}`)
			delete(b, "cost_budget")
			delete(b, "steps_max")
		})
	}
	before := a.counts(t)
	a.refused(t, http.MethodPost, "/v1/tasks", secretAnaPhone, bare("m1", "memo"), http.StatusBadRequest, "cost_budget")
	require.Equal(t, before, a.counts(t), "nothing was written")

	created := a.call(t, http.MethodPost, "/v1/tasks", secretAnaPhone, bare("d1", "report"), http.StatusCreated)
	id := created["task_id"].(string)
	replay := a.call(t, http.MethodPost, "/v1/tasks", secretAnaPhone, bare("d1", "report"), http.StatusOK)
	require.Equal(t, map[string]any{"task_id": id, "replay": true}, replay)
	task := a.call(t, http.MethodGet, "/v1/tasks/"+id, secretAnaPhone, "", http.StatusOK)
	require.EqualValues(t, 7, task["cost_budget"])
	require.EqualValues(t, 3, task["steps_max"])

	batch := a.call(t, http.MethodPost, "/v1/tasks/batch", secretAnaPhone,
		`{"tasks":[`+bare("d1", "report")+`,`+bare("d2", "report")+`]}`, http.StatusOK)
	results := batch["results"].([]any)
	require.Equal(t, map[string]any{"task_id": id, "replay": true}, results[0])
	second := results[1].(map[string]any)["task_id"].(string)
	task = a.call(t, http.MethodGet, "/v1/tasks/"+second, secretAnaPhone, "", http.StatusOK)
	require.EqualValues(t, 7, task["cost_budget"])
}
