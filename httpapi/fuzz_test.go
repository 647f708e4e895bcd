package httpapi

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/wire"
	"github.com/leasehold/leasehold/worker"
)

// fuzzRoute is one route of the API: its method and its path, in which
// "{}" stands for the path value the fuzzer chooses.
type fuzzRoute struct{ method, path string }

var fuzzRoutes = []fuzzRoute{
	{http.MethodPost, "/v1/tasks"},
	{http.MethodGet, "/v1/tasks/{}"},
	{http.MethodGet, "/v1/tasks/{}/events"},
	{http.MethodPost, "/v1/tasks/{}/cancel"},
	{http.MethodPost, "/v1/tasks/{}/approve"},
	{http.MethodPost, "/v1/tasks/{}/reject"},
	{http.MethodPost, "/v1/tasks/{}/requeue"},
	{http.MethodPost, "/v1/tasks/{}/resolve"},
	{http.MethodPost, "/v1/effects/{}/settle"},
	{http.MethodGet, "/v1/inspect"},
	{http.MethodGet, "/v1/limits"},
	{http.MethodPut, "/v1/limits"},
	{http.MethodPut, "/v1/limits/users/{}"},
	{http.MethodGet, "/v1/schedules"},
	{http.MethodPost, "/v1/schedules"},
	{http.MethodDelete, "/v1/schedules/{}"},
	{http.MethodGet, "/metrics"},
	{http.MethodGet, "/v1/tasks"},
	{http.MethodPost, "/v1/tasks/batch"},
	{http.MethodGet, "/v1/events"},
}

// fuzzWorld is a server over a database file holding a task in each
// state an operator acts on. Path values "@0" to "@4" stand for its IDs.
type fuzzWorld struct {
	srv  *httptest.Server
	db   *sql.DB
	ids  map[string]string
	stop func()
}

func newFuzzWorld(f *testing.F) *fuzzWorld {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(apiEpoch)
	path := filepath.Join(f.TempDir(), "fuzz.db")
	q, err := queue.Open(ctx, queue.Options{Path: path, Clock: clock,
		IDs: model.NewSeededIDs(77), BusyTimeout: time.Second, Validators: map[string]model.PayloadValidator{model.KindSynthetic: worker.ValidateSynthetic}}) // as openQueue sets it
	require.NoError(f, err)
	tokens, err := ParseTokens(testTokens, false)
	require.NoError(f, err)
	submit := func(key string) string {
		res, err := q.Submit(ctx, model.SubmitRequest{User: "carol", Key: key, Payload: `{"steps":[{"cost":1},{"cost":1}]}`,
			CostBudget: 10, StepsMax: 5, Priority: model.PriorityMax})
		require.NoError(f, err)
		return res.TaskID
	}
	claim := func(id string) model.Claim {
		cs, err := q.Claim(ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: time.Minute})
		require.NoError(f, err)
		require.Len(f, cs, 1)
		require.Equal(f, id, cs[0].Claim.TaskID)
		return cs[0].Claim
	}
	gated := submit("gated")
	c := claim(gated)
	_, err = q.Pause(ctx, c, 0, "manager")
	require.NoError(f, err)
	review := submit("review")
	c = claim(review)
	intent, err := q.RecordIntent(ctx, c, 0)
	require.NoError(f, err)
	_, err = q.Fail(ctx, c, model.Failure{Class: model.Uncertain, OpID: intent.OpID})
	require.NoError(f, err)
	queued := submit("queued")
	sch, err := q.AddSchedule(ctx, model.ScheduleSpec{User: "carol", Payload: `{"steps":[{"cost":1}]}`, CostBudget: 1, StepsMax: 1,
		Origin: apiEpoch.Add(time.Hour), Period: time.Hour}, "olga")
	require.NoError(f, err)
	s, err := New(Options{Queue: q, Tokens: tokens, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Clock: clock, AuthDelay: -1})
	require.NoError(f, err)
	srv := httptest.NewServer(s.Handler())
	// A long-poll the fuzzer finds waits on the fake clock: whatever waits
	// on it is run out at once, so every request answers.
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		for clock.BlockUntilContext(ctx, 1) == nil {
			clock.Advance(WaitMax)
		}
	}()
	// The dump reads the file through a handle of its own.
	db, err := sql.Open("sqlite", path+"?mode=ro")
	require.NoError(f, err)
	return &fuzzWorld{srv: srv, db: db,
		ids:  map[string]string{"@0": queued, "@1": gated, "@2": review, "@3": intent.OpID, "@4": sch.ID},
		stop: func() { cancel(); srv.Close(); db.Close(); q.Close() }}
}

// dump is every row of the tables a request could write.
func (w *fuzzWorld) dump(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, table := range []string{"tasks", "events", "schedules", "settings", "users", "effects"} {
		rows, err := w.db.Query("SELECT * FROM " + table + " ORDER BY 1")
		require.NoError(t, err)
		cols, err := rows.Columns()
		require.NoError(t, err)
		for rows.Next() {
			values := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range values {
				ptrs[i] = &values[i]
			}
			require.NoError(t, rows.Scan(ptrs...))
			fmt.Fprintf(&b, "%s %v\n", table, values)
		}
		require.NoError(t, rows.Err())
		rows.Close()
	}
	return b.String()
}

// pathValue is v as one path segment: a fixture's ID for "@N", never
// empty or a dot segment (which the router redirects).
func (w *fuzzWorld) pathValue(v string) string {
	if id, ok := w.ids[v]; ok {
		return id
	}
	v = url.PathEscape(v)
	if v == "" || v == "." || v == ".." {
		return "_"
	}
	return v
}

// FuzzHandlers drives every route with random path values, queries and
// bodies. Every answer is a success or a 4xx; a 4xx is a JSON error that
// names the field (but for a full queue) and leaves the database as it
// was.
func FuzzHandlers(f *testing.F) {
	w := newFuzzWorld(f)
	f.Cleanup(w.stop)
	for i := range fuzzRoutes {
		f.Add(uint8(i), "@0", "", `{}`)
	}
	f.Add(uint8(0), "", "", `{"user":"carol","key":"k","payload":{"steps":[]},"cost_budget":1,"steps_max":1}`)
	f.Add(uint8(14), "", "", `{"user":"carol","payload":{"steps":[]},"cost_budget":1,"steps_max":1,"origin":"2026-03-01T10:00:00Z","period_ms":288230376155311744}`)
	f.Add(uint8(4), "@1", "a=1", `{"version":-1}`)
	f.Add(uint8(6), "@2", "", `{"grant_cost":1e30,"grant_steps":0}`)
	f.Add(uint8(8), "@3", "", `{"applied":"yes"}`)
	f.Add(uint8(12), "carol", "", `{"running_max":9223372036854775808}`)
	f.Add(uint8(1), "@0", "wait=1s&after_seq=999", ``)
	f.Add(uint8(1), "@0", "wait=90s&after_seq=1", ``)
	f.Add(uint8(17), "", "state=queued&limit=1", ``)
	f.Add(uint8(17), "", "after=-1", ``)
	f.Add(uint8(18), "", "", `{"tasks":[{"user":"carol","key":"fz","payload":{"steps":[]},"cost_budget":1,"steps_max":1}]}`)
	f.Add(uint8(18), "", "", `{"tasks":[{"user":"carol","key":"fz","payload":{"steps":[]},"cost_budget":0,"steps_max":1}]}`)
	f.Add(uint8(19), "", "after=1", ``)
	f.Add(uint8(19), "", "after=x", ``)
	client := w.srv.Client()
	f.Fuzz(func(t *testing.T, route uint8, value, query, body string) {
		r := fuzzRoutes[int(route)%len(fuzzRoutes)]
		target := w.srv.URL + strings.ReplaceAll(r.path, "{}", w.pathValue(value))
		if query != "" {
			target += "?" + fuzzQuery(query)
		}
		req, err := http.NewRequest(r.method, target, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secretRoot)
		req.Header.Set("Content-Type", "application/json")
		before := w.dump(t)
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var answer []byte
		if resp.Header.Get("Content-Type") != "text/event-stream" {
			answer, err = io.ReadAll(resp.Body)
			require.NoError(t, err)
		}
		where := fmt.Sprintf("%s %s body %q: %d %s", r.method, target, body, resp.StatusCode, answer)
		require.Less(t, resp.StatusCode, 500, where)
		if resp.Header.Get("Content-Type") == "text/event-stream" {
			require.Equal(t, http.StatusOK, resp.StatusCode, where)
			return // a stream opened; hanging up ends it
		}
		if resp.StatusCode < 400 {
			require.GreaterOrEqual(t, resp.StatusCode, 200, where)
			if r.path == "/v1/schedules" && r.method == http.MethodPost {
				requireSamePeriod(t, body, answer, where)
			}
			return
		}
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), where)
		var e wire.Error
		require.NoError(t, json.Unmarshal(answer, &e), where)
		require.NotEmpty(t, e.Error, where)
		if resp.StatusCode != http.StatusTooManyRequests {
			require.NotEmpty(t, e.Field, "the refusal names the field: %s", where)
		}
		require.Equal(t, before, w.dump(t), "a refused request writes nothing: %s", where)
	})
}

// requireSamePeriod checks that an accepted schedule has the period it
// was asked for (an overflowing conversion once stored another).
func requireSamePeriod(t *testing.T, body string, answer []byte, where string) {
	t.Helper()
	var asked, stored struct {
		PeriodMs json.Number `json:"period_ms"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &asked), where)
	require.NoError(t, json.Unmarshal(answer, &stored), where)
	require.Equal(t, asked.PeriodMs, stored.PeriodMs, where)
}

// fuzzQuery keeps the fuzzer's query as parameters (its '=' and '&'),
// escaping everything else, so that the query parameters the routes read
// are reached.
func fuzzQuery(q string) string {
	var b strings.Builder
	for i, pair := range strings.Split(q, "&") {
		if i > 0 {
			b.WriteByte('&')
		}
		name, value, has := strings.Cut(pair, "=")
		b.WriteString(url.QueryEscape(name))
		if has {
			b.WriteByte('=')
			b.WriteString(url.QueryEscape(value))
		}
	}
	return b.String()
}
