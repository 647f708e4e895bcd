package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/wire"
)

// TestMountBesideTheProgramsRoutes: a program mounts the API on its own
// mux beside a route of its own and serves the mux with Serve. The API
// answers its paths (with its JSON 404 for one it has not), the
// program's route answers the program's, and a dot segment under /v1/,
// which the mux would redirect to another resource, is refused instead.
func TestMountBesideTheProgramsRoutes(t *testing.T) {
	ctx := context.Background()
	q, err := queue.Open(ctx, queue.Options{Path: filepath.Join(t.TempDir(), "m.db"), Clock: clockwork.NewFakeClockAt(apiEpoch),
		IDs: model.NewSeededIDs(3)})
	require.NoError(t, err)
	defer q.Close()
	tokens, err := ParseTokens(testTokens, false)
	require.NoError(t, err)
	api, err := New(Options{Queue: q, Tokens: tokens, AuthDelay: -1})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "the program's own") })
	api.Mount(mux)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- api.Serve(serveCtx, ln, mux) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	base := "http://" + ln.Addr().String()
	get := func(method, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secretRoot)
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}

	status, body := get(http.MethodGet, "/hello")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "the program's own", body)
	status, body = get(http.MethodGet, "/v1/tasks")
	require.Equal(t, http.StatusOK, status, body)
	require.JSONEq(t, `{"tasks":[],"next":""}`, body)
	for _, path := range []string{"/healthz", "/openapi.json", "/metrics"} {
		status, body = get(http.MethodGet, path)
		require.Equal(t, http.StatusOK, status, "%s: %s", path, body)
	}
	var refusal wire.Error
	status, body = get(http.MethodGet, "/v1/nothing")
	require.Equal(t, http.StatusNotFound, status)
	require.NoError(t, json.Unmarshal([]byte(body), &refusal), body)
	require.Equal(t, "not_found", refusal.Code)
	status, body = get(http.MethodPut, "/v1/limits/users/..")
	require.Equal(t, http.StatusBadRequest, status, "not a redirect to /v1/limits: %s", body)
	require.NoError(t, json.Unmarshal([]byte(body), &refusal), body)
	require.Equal(t, "path", refusal.Field)
	status, _ = get(http.MethodGet, "/elsewhere/../hello")
	require.True(t, status >= 300 && status < 400, "the program's own paths are the mux's to clean (a redirect): %d", status)
}

// TestRefuseDotSegmentsGuardsAProgramsOwnServer: a program serving its
// mux with its own server (here httptest's) wraps it in
// RefuseDotSegments, and a PUT to /v1/limits/users/.. is refused rather
// than redirected, method and body kept, to the queue-wide limits.
func TestRefuseDotSegmentsGuardsAProgramsOwnServer(t *testing.T) {
	q, err := queue.Open(context.Background(), queue.Options{Path: filepath.Join(t.TempDir(), "g.db"),
		Clock: clockwork.NewFakeClockAt(apiEpoch), IDs: model.NewSeededIDs(4)})
	require.NoError(t, err)
	defer q.Close()
	tokens, err := ParseTokens(testTokens, false)
	require.NoError(t, err)
	api, err := New(Options{Queue: q, Tokens: tokens, AuthDelay: -1})
	require.NoError(t, err)
	mux := http.NewServeMux()
	api.Mount(mux)
	put := func(h http.Handler) int {
		t.Helper()
		srv := httptest.NewServer(h)
		defer srv.Close()
		req, err := http.NewRequest(http.MethodPut, srv.URL+"/v1/limits/users/..", strings.NewReader(`{"depth_max":1}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secretRoot)
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		return res.StatusCode
	}
	require.Equal(t, http.StatusTemporaryRedirect, put(mux), "the bare mux redirects to /v1/limits")
	require.Equal(t, http.StatusBadRequest, put(api.RefuseDotSegments(mux)))
	limits, _, err := q.Limits(context.Background())
	require.NoError(t, err)
	require.NotEqual(t, 1, limits.DepthMax, "nothing followed a redirect")
}

// TestValidatorsRefuseBeforeTheQueue: the program's validator of a kind
// runs on a submit, on each item of a batch and on a schedule of that
// kind, sees the payload in canonical form, and its refusal is a 400
// naming the path inside the payload; nothing is written. Payloads it
// accepts go through, and a kind without a validator takes any object.
func TestValidatorsRefuseBeforeTheQueue(t *testing.T) {
	var seen []string
	check := func(payload json.RawMessage) error {
		seen = append(seen, string(payload))
		if strings.Contains(string(payload), `"forbidden"`) {
			return &model.ValidationError{Field: "note", Problem: "must not be the forbidden word"}
		}
		return nil
	}
	a := setupAPIWith(t, func(o *Options) { o.Validators = map[string]model.PayloadValidator{"note": check} },
		func(o *queue.Options) { o.Validators = nil })
	note := func(payload string) func(b map[string]any) {
		return func(b map[string]any) { b["kind"], b["payload"] = "note", json.RawMessage(payload) }
	}
	before := a.counts(t)
	msg := a.refused(t, http.MethodPost, "/v1/tasks", secretSubmit, submitJSON(t, "alice", "v1", note(`{ "note" : "forbidden" }`)),
		http.StatusBadRequest, "payload.note")
	require.Contains(t, msg, "must not be the forbidden word")
	require.NotContains(t, msg, `"forbidden"`, "the refusal quotes no value")
	require.Equal(t, []string{`{"note":"forbidden"}`}, seen, "the check sees the payload canonical")

	batch := fmt.Sprintf(`{"tasks":[%s,%s]}`, submitJSON(t, "alice", "v2", note(`{}`)), submitJSON(t, "alice", "v3", note(`{"note":"forbidden"}`)))
	a.refused(t, http.MethodPost, "/v1/tasks/batch", secretSubmit, batch, http.StatusBadRequest, "tasks[1].payload.note")
	a.refused(t, http.MethodPost, "/v1/schedules", secretOperate,
		`{"user":"alice","kind":"note","payload":{"note":"forbidden"},"cost_budget":5,"steps_max":1,"origin":"2030-01-01T09:00:00Z","period_ms":3600000}`,
		http.StatusBadRequest, "payload.note")
	require.Equal(t, before, a.counts(t), "nothing was written")

	a.submit(t, "alice", "v4", note(`{"note":"fine"}`))
	a.submit(t, "alice", "v5", func(b map[string]any) { b["kind"], b["payload"] = "other", json.RawMessage(`{"note":"forbidden"}`) })
	require.Equal(t, before[0]+2, a.counts(t)[0])
}
