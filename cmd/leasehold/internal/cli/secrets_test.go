package cli

// Secrets stay where they belong. A payload carries a secret (it is the
// work: the external service receives it as the effect's name) and the
// server's token comes from LEASEHOLD_TOKENS. Every command runs against
// the database, a worker runs the tasks, the server answers requests made
// with the token, and an evidence report is rendered from the database;
// then neither secret may appear in any output, log, metric, report or
// audit event, and the payload's secret in no table but the tasks'
// payload column.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/evidence"
	"github.com/leasehold/leasehold/cmd/leasehold/internal/liverun"
	"github.com/leasehold/leasehold/httpapi"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/randomid"
	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/wire"
	"github.com/leasehold/leasehold/worker"
)

// The planted secrets.
const (
	payloadSecret = "payload-secret-4f9a"
	tokenSecret   = "token-secret-8c2e9d1f5a7b"
	// otherSecret is a second token in LEASEHOLD_TOKENS.
	otherSecret = "token-secret-other-31d7e0"
)

// Payloads that carry the secret: the effect's name is what the service
// is asked to do.
const (
	secretPayload = `{"steps":[{"cost":1},{"cost":2,"effect":"` + payloadSecret + `"},{"cost":1}]}`
	gatedPayload  = `{"steps":[{"approval":"manager"},{"cost":1,"effect":"` + payloadSecret + `"}]}`
)

// captured is everything the test collected that must hold no secret.
type captured struct {
	mu    sync.Mutex
	texts []labelled
}

// labelled is one capture; payloadShown marks a task's record as the API
// sends it to a token that may read the task, which shows the task's
// payload by design.
type labelled struct {
	label, text  string
	payloadShown bool
}

func (c *captured) add(label, text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.texts = append(c.texts, labelled{label: label, text: text})
}

// addRecord adds a task's record as a reader of the task is sent it: it
// may show the payload's secret, and no other.
func (c *captured) addRecord(label, text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.texts = append(c.texts, labelled{label: label, text: text, payloadShown: true})
}

// requireClean fails naming the first capture that holds a secret (the
// payload's is allowed in a reader's task record, and nowhere else).
func (c *captured) requireClean(t *testing.T, secrets map[string]string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.texts {
		for name, s := range secrets {
			if l.payloadShown && s == payloadSecret {
				continue
			}
			require.False(t, strings.Contains(l.text, s), "the %s secret appears in %s", name, l.label)
		}
	}
}

// recordingService is the external service: it deduplicates by operation
// ID and records every call it receives.
type recordingService struct {
	mu    sync.Mutex
	calls []worker.Call
	done  map[string]string
}

var _ worker.Service = (*recordingService)(nil)

func (s *recordingService) Kind() worker.ServiceKind { return worker.Dedup }

func (s *recordingService) Call(_ context.Context, c worker.Call) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
	if s.done == nil {
		s.done = map[string]string{}
	}
	if r, ok := s.done[c.OpID]; ok {
		return r, nil
	}
	s.done[c.OpID] = "receipt-" + strconv.Itoa(len(s.done)+1)
	return s.done[c.OpID], nil
}

func (s *recordingService) Status(context.Context, string, int64) (bool, string, error) {
	return false, "", worker.ErrNoStatus
}

func (s *recordingService) recorded() []worker.Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func TestSecretsNeverLeak(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	t.Setenv("LEASEHOLD_DATA_DIR", dir)
	t.Setenv("LEASEHOLD_TOKENS", "olga submit,approve,operate "+tokenSecret+";sam submit "+otherSecret)
	f := &fixture{t: t, dir: dir, db: filepath.Join(dir, "leasehold.db")}
	out := &captured{}
	cli := func(want int, args ...string) result {
		t.Helper()
		r := lh(t, args...)
		out.add("leasehold "+strings.Join(args, " "), r.stdout+r.stderr)
		require.Equal(t, want, r.code, "%s", r)
		return r
	}
	db := func(args ...string) []string { return append(args, "--db", f.db) }

	// Tasks with the secret in their payload, driven to every state an
	// operator acts on. Each urgent one is driven before the next is
	// submitted, so each claim takes the task just submitted.
	cli(exitOK, db("migrate", "--actor", "ops")...)
	secret := strings.TrimSpace(cli(exitOK, db("submit", "--user", "ana", "--key", "k-secret", "--payload", secretPayload,
		"--cost-budget", "20", "--steps-max", "5")...).stdout)
	cli(exitOK, db("submit", "--json", "--user", "ana", "--key", "k-secret", "--payload", secretPayload,
		"--cost-budget", "20", "--steps-max", "5")...) // a replay
	payloadFile := filepath.Join(dir, "payload.json")
	require.NoError(t, os.WriteFile(payloadFile, []byte(secretPayload), 0o600))
	fromFile := strings.TrimSpace(cli(exitOK, db("submit", "--user", "bo", "--key", "k-file", "--payload", "@"+payloadFile,
		"--cost-budget", "20", "--steps-max", "5")...).stdout)
	cancelled := strings.TrimSpace(cli(exitOK, db("submit", "--user", "ana", "--key", "k-cancel", "--payload", secretPayload,
		"--cost-budget", "20", "--steps-max", "5")...).stdout)
	urgent := func(key, payload string) string {
		return strings.TrimSpace(cli(exitOK, db("submit", "--user", "ana", "--key", key, "--payload", payload,
			"--cost-budget", "20", "--steps-max", "5", "--priority", "100")...).stdout)
	}
	var approveVersion int64
	approved := urgent("k-approve", gatedPayload)
	f.withQueue(func(ctx context.Context, q *queue.Queue) {
		c := f.claim(ctx, q, approved)
		_, err := q.Pause(ctx, c, 0, "manager")
		require.NoError(t, err)
		approveVersion = c.Fence
	})
	var rejectVersion int64
	rejected := urgent("k-reject", gatedPayload)
	f.withQueue(func(ctx context.Context, q *queue.Queue) {
		c := f.claim(ctx, q, rejected)
		_, err := q.Pause(ctx, c, 0, "manager")
		require.NoError(t, err)
		rejectVersion = c.Fence
	})
	uncertain := func(id string) string {
		var op string
		f.withQueue(func(ctx context.Context, q *queue.Queue) {
			c := f.claim(ctx, q, id)
			_, err := q.CompleteStep(ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
			require.NoError(t, err)
			intent, err := q.RecordIntent(ctx, c, 1)
			require.NoError(t, err)
			op = intent.OpID
			_, err = q.Fail(ctx, c, model.Failure{Class: model.Uncertain, OpID: op, Message: "the provider did not answer"})
			require.NoError(t, err)
		})
		return op
	}
	requeued := urgent("k-requeue", secretPayload)
	requeuedOp := uncertain(requeued)
	resolved := urgent("k-resolve", secretPayload)
	uncertain(resolved)

	// Bad and conflicting input naming the secret is refused without
	// repeating it.
	cli(exitUsage, db("submit", "--user", "ana", "--key", "k-bad", "--payload", `{"steps":[{"cost":1}],"note":"`+payloadSecret+`"`,
		"--cost-budget", "20", "--steps-max", "5")...)
	cli(exitUsage, db("submit", "--user", "ana", "--key", "k-bad", "--payload", `["`+payloadSecret+`"]`,
		"--cost-budget", "20", "--steps-max", "5")...)
	cli(exitFail, db("submit", "--user", "ana", "--key", "k-secret", "--payload", `{"steps":[{"cost":1,"effect":"`+payloadSecret+`-2"}]}`,
		"--cost-budget", "20", "--steps-max", "5")...)

	// The operator actions.
	cli(exitOK, db("cancel", cancelled, "--actor", "carla")...)
	cli(exitOK, db("approve", approved, "--version", strconv.FormatInt(approveVersion, 10), "--actor", "boss")...)
	cli(exitOK, db("reject", rejected, "--version", strconv.FormatInt(rejectVersion, 10), "--actor", "boss")...)
	cli(exitOK, db("settle", requeuedOp, "--not-applied", "--actor", "ops")...)
	cli(exitOK, db("requeue", requeued, "--grant-cost", "5", "--grant-steps", "1", "--actor", "ops")...)
	cli(exitOK, db("resolve", resolved, "--as", "failed", "--actor", "ops")...)
	cli(exitOK, db("limits", "--depth-max", "500", "--actor", "ops")...)
	cli(exitOK, db("limits", "--user", "ana", "--running-max", "4", "--actor", "ops")...)
	schedule := strings.TrimSpace(cli(exitOK, db("schedule", "add", "--user", "ana", "--payload", onePayload, "--cost-budget", "5",
		"--steps-max", "2", "--origin", "2030-01-01T00:00:00Z", "--period", "1h", "--actor", "ops")...).stdout)

	// A worker runs every queued task under a fake clock, logging to a
	// buffer; the service records what it was asked to do.
	svc := &recordingService{}
	workerLog := &testkit.SyncBuffer{}
	start := time.Now().Add(time.Second) // every task submitted so far is due
	ran := []string{secret, fromFile, approved, requeued}
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		clock := clockwork.NewFakeClockAt(start)
		q, err := queue.Open(ctx, queue.Options{Path: f.db, Clock: clock, IDs: randomid.Source{}})
		require.NoError(t, err)
		defer func() { require.NoError(t, q.Close()) }()
		r, err := worker.NewRunner(worker.Config{ID: "w2", Queue: q, Handler: worker.Synthetic{}, Service: svc, Clock: clock,
			Logger: slog.New(slog.NewJSONHandler(workerLog, &slog.HandlerOptions{Level: slog.LevelDebug})), Concurrency: 2,
			Lease: 2 * time.Second, Heartbeat: 500 * time.Millisecond, PollMin: 100 * time.Millisecond, PollMax: time.Second},
			worker.RunOptions{Housekeeper: q})
		require.NoError(t, err)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(runCtx) }()
		settled := func() bool {
			for _, id := range ran {
				task, err := q.Task(ctx, id)
				require.NoError(t, err)
				if task.State != model.Completed {
					return false
				}
			}
			return true
		}
		const ticksMax = 300
		for i := 0; ; i++ {
			synctest.Wait()
			if settled() {
				break
			}
			require.Less(t, i, ticksMax, "the worker did not finish the tasks in %d ticks", ticksMax)
			clock.Advance(100 * time.Millisecond)
		}
		cancel()
		require.NoError(t, <-done)
	})
	out.add("the worker's log", workerLog.String())
	require.Contains(t, workerLog.String(), `"task_id":"`+secret+`"`, "the worker logged its work")
	calls := svc.recorded()
	require.NotEmpty(t, calls)
	called := map[string]bool{}
	for _, c := range calls {
		require.Equal(t, payloadSecret, c.Effect, "the payload is the work: the service receives it")
		called[c.TaskID] = true
	}
	require.Equal(t, map[string]bool{secret: true, fromFile: true, approved: true, requeued: true}, called)

	// Every command that reads the database, in each of its formats.
	for _, args := range [][]string{
		{"status", secret}, {"status", secret, "--json"}, {"status", cancelled}, {"status", resolved, "--json"},
		{"list"}, {"list", "--json"}, {"list", "--state", "completed", "--json"},
		{"events", secret}, {"events", secret, "--json"}, {"events", requeued, "--json"},
		{"inspect"}, {"inspect", "--json"}, {"metrics"}, {"metrics", "--json"},
		{"audit"}, {"audit", "--format", "jsonl"}, {"audit", "--task", secret, "--format", "jsonl"}, {"audit", "--actor", "ops"},
		{"limits"}, {"limits", "--json"}, {"schedule", "list"}, {"schedule", "list", "--json"},
		{"reap"}, {"reap", "--json"},
	} {
		cli(exitOK, db(args...)...)
	}
	cli(exitOK, db("schedule", "remove", schedule, "--actor", "ops")...)
	cli(exitFail, db("status", testkit.UnknownTask)...)
	cli(exitOK, "version")
	cli(exitOK, "version", "--json")
	cli(exitOK, "sim", "--seed", "1")

	// Release commands.
	snap := filepath.Join(dir, "snap.db")
	cli(exitOK, db("snapshot", "create", "--out", snap)...)
	cli(exitOK, db("snapshot", "create", "--json", "--out", filepath.Join(dir, "snap2.db"))...)
	cli(exitOK, "snapshot", "verify", snap)
	cli(exitOK, "snapshot", "verify", "--json", snap)
	restored := filepath.Join(dir, "restored.db")
	cli(exitOK, "restore", snap, "--to", restored, "--actor", "ops")
	cli(exitOK, "audit", "--db", restored, "--format", "jsonl")
	cli(exitOK, db("migrate", "--dry-run")...)
	cli(exitOK, db("migrate", "--actor", "ops")...)
	cli(exitUsage, db("serve", "--addr", "nonsense")...)
	t.Setenv("LEASEHOLD_TOKENS", "olga admin "+tokenSecret)
	cli(exitUsage, db("serve", "--addr", "127.0.0.1:0")...) // an unknown scope, before anything listens
	t.Setenv("LEASEHOLD_TOKENS", "olga submit,approve,operate "+tokenSecret+";sam submit "+otherSecret)

	// The server, its tokens loaded from LEASEHOLD_TOKENS, its log in a
	// buffer; requests made with the tokens, good and bad, then /metrics.
	serveWithSecrets(t, f.db, out, secret)

	// An evidence report built from the database's events and tasks, as
	// the evidence command builds its live section.
	renderReport(t, f.db, out)

	// The demo's worker logs and result, when a demo has run.
	demoDir := filepath.Join("..", "..", "..", "..", "out", "demo")
	if entries, err := os.ReadDir(demoDir); err == nil {
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".log") || e.Name() == "result.json" {
				b, err := os.ReadFile(filepath.Join(demoDir, e.Name()))
				require.NoError(t, err)
				for _, s := range []string{tokenSecret, otherSecret} {
					require.False(t, bytes.Contains(b, []byte(s)), "a token secret in the demo's %s", e.Name())
				}
			}
		}
	} else {
		t.Logf("no demo output at %s (run make demo): its logs are not checked", demoDir)
	}

	out.requireClean(t, map[string]string{"payload": payloadSecret, "token": tokenSecret, "other token": otherSecret})

	// The tables: the payload's secret only in tasks.payload; the tokens'
	// nowhere. Then the files: no token secret in any byte of any of them.
	for _, path := range []string{f.db, restored} {
		requireTablesClean(t, path)
	}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, s := range []string{tokenSecret, otherSecret} {
			require.False(t, bytes.Contains(b, []byte(s)), "a token secret in %s", path)
		}
		return nil
	}))
}

// serveWithSecrets runs the HTTP server over db with the tokens from
// LEASEHOLD_TOKENS, sends it requests good and bad, scrapes /metrics, and
// captures every response and the server's log.
func serveWithSecrets(t *testing.T, db string, out *captured, secret string) {
	t.Helper()
	ctx := context.Background()
	tokens, err := httpapi.LoadTokens("", false)
	require.NoError(t, err)
	require.Len(t, tokens, 2)
	q, err := queue.Open(ctx, queue.Options{Path: db, Clock: clockwork.NewRealClock(), IDs: randomid.Source{}})
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Close()) }()
	logs := &testkit.SyncBuffer{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	serveCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	srv, err := httpapi.New(httpapi.Options{Queue: q, Tokens: tokens, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	require.NoError(t, err)
	go func() { done <- srv.Serve(serveCtx, ln, nil) }()
	transport := &http.Transport{}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	base := "http://" + ln.Addr().String()
	send := func(method, path, authorization, body string, want int) string {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, base+path, rd)
		require.NoError(t, err)
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var headers strings.Builder
		require.NoError(t, resp.Header.Write(&headers))
		label := fmt.Sprintf("the response to %s %s", method, path)
		if resp.StatusCode < 300 && strings.HasPrefix(path, "/v1/tasks/") && !strings.HasSuffix(path, "/events") {
			// The task's record, to a token that may read the task: its
			// payload shown.
			out.addRecord(label, headers.String()+string(b))
		} else {
			out.add(label, headers.String()+string(b))
		}
		require.Equal(t, want, resp.StatusCode, "%s %s: %s", method, path, b)
		return string(b)
	}
	bearer, other := "Bearer "+tokenSecret, "Bearer "+otherSecret
	submit := func(key, payload string) string {
		return fmt.Sprintf(`{"user":"dana","key":%q,"payload":%s,"cost_budget":20,"steps_max":5}`, key, payload)
	}

	send(http.MethodGet, "/v1/tasks/"+secret, bearer, "", http.StatusOK)
	send(http.MethodGet, "/v1/tasks/"+secret+"/events", bearer, "", http.StatusOK)
	send(http.MethodGet, "/v1/tasks/"+secret, other, "", http.StatusOK)
	send(http.MethodGet, "/v1/inspect", bearer, "", http.StatusOK)
	send(http.MethodGet, "/v1/limits", bearer, "", http.StatusOK)
	send(http.MethodGet, "/v1/schedules", bearer, "", http.StatusOK)
	created := send(http.MethodPost, "/v1/tasks", other, submit("h1", secretPayload), http.StatusCreated)
	send(http.MethodPost, "/v1/tasks", other, submit("h1", secretPayload), http.StatusOK)
	send(http.MethodPost, "/v1/tasks", bearer, submit("h1", `{"steps":[{"cost":2,"effect":"`+payloadSecret+`-x"}]}`), http.StatusConflict)
	send(http.MethodPost, "/v1/tasks", bearer, strings.Replace(submit("h2", secretPayload), `"user"`, `"note":"`+payloadSecret+`","user"`, 1), http.StatusBadRequest)
	send(http.MethodPost, "/v1/tasks", bearer, strings.Replace(submit("h3", secretPayload), `"cost_budget":20`, `"cost_budget":"`+payloadSecret+`"`, 1), http.StatusBadRequest)
	send(http.MethodPost, "/v1/tasks", bearer, submit("h4", `"`+payloadSecret+`"`), http.StatusBadRequest)
	var reply struct {
		TaskID string `json:"task_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(created), &reply), created)
	id := reply.TaskID
	require.NoError(t, model.CheckTaskID(id), created)
	send(http.MethodPost, "/v1/tasks/"+id+"/cancel", bearer, "", http.StatusOK)
	send(http.MethodPost, "/v1/tasks/"+id+"/approve", other, `{"version":1}`, http.StatusForbidden)
	send(http.MethodPut, "/v1/limits/users/dana", bearer, `{"running_max":3}`, http.StatusOK)
	for _, h := range []string{"Bearer " + tokenSecret + "x", "Bearer " + tokenSecret[:len(tokenSecret)-1], "Basic " + tokenSecret,
		tokenSecret, "Bearer " + tokenSecret + " " + otherSecret} {
		send(http.MethodGet, "/v1/tasks/"+secret, h, "", http.StatusUnauthorized)
	}
	metrics := send(http.MethodGet, "/metrics", "", "", http.StatusOK)
	require.Contains(t, metrics, "leasehold_submitted_total")
	send(http.MethodGet, "/healthz", "", "", http.StatusOK)

	cancel()
	require.NoError(t, <-done)
	transport.CloseIdleConnections()
	require.Contains(t, logs.String(), `"actor":"olga"`, "the log names the token")
	require.Contains(t, logs.String(), `"status":401`)
	out.add("the server's log", logs.String())
}

// renderReport builds the evidence report's live section from the
// database's tasks and events, renders it three ways and captures them.
func renderReport(t *testing.T, db string, out *captured) {
	t.Helper()
	ctx := context.Background()
	q, err := queue.Open(ctx, queue.Options{Path: db, Clock: clockwork.NewRealClock(), IDs: randomid.Source{}})
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Close()) }()
	tasks, err := q.List(ctx, model.ListFilter{Limit: model.ListLimitMax})
	require.NoError(t, err)
	events, err := q.Events(ctx, "")
	require.NoError(t, err)
	require.NotEmpty(t, events)
	m, err := q.Metrics(ctx)
	require.NoError(t, err)

	d := liverun.Result{Kind: liverun.Kind, Started: events[0].At, Machine: map[string]string{"hostname": "test"},
		Settings: map[string]string{"lease": "2s"}, Pass: true, Metrics: m, Events: events}
	for _, e := range events {
		d.DurationMs = max(d.DurationMs, e.At.Sub(events[0].At).Milliseconds())
	}
	for _, task := range tasks {
		rec := liverun.TaskOf(task.Key, task)
		d.Tasks = append(d.Tasks, rec)
		d.Outcomes = append(d.Outcomes, liverun.Outcome{Story: liverun.StoryExpect, Task: rec.Name, Name: rec.ID, Expected: "settled",
			Observed: strings.Join([]string{rec.State, rec.Reason, rec.LastError, rec.CancelledBy, rec.ApprovedBy}, " "), Pass: true})
	}
	d.Samples = append(d.Samples, liverun.Sample{AtMs: 0, Metrics: m})
	r := reports.Report{Title: "secrets", Generated: wire.TimeOf(time.Now()).String(), Fixture: reports.Section{Kind: reports.Fixture},
		Live: reports.Section{Kind: reports.Live}}
	evidence.FillLive(&r, d)
	require.NotEmpty(t, r.Live.Timelines[0].Bars, "the report draws the claims")
	for name, render := range map[string]func(io.Writer, reports.Report) error{
		"JSON": reports.JSON, "Markdown": reports.Markdown, "HTML": reports.HTML,
	} {
		var b bytes.Buffer
		require.NoError(t, render(&b, r), name)
		require.Contains(t, b.String(), tasks[0].ID, "the %s report shows the tasks", name)
		out.add("the "+name+" report", b.String())
	}
}

// requireTablesClean reads every column of every row of every table: the
// token secrets appear nowhere, the payload's secret only in
// tasks.payload, and never in the audit trail.
func requireTablesClean(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=query_only(1)")
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.Query("SELECT name FROM sqlite_master WHERE type = 'table'")
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		tables = append(tables, name)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	require.Contains(t, tables, "events")
	payloads := 0
	for _, table := range tables {
		rows, err := db.Query("SELECT * FROM " + table)
		require.NoError(t, err)
		columns, err := rows.Columns()
		require.NoError(t, err)
		values := make([]any, len(columns))
		ptrs := make([]any, len(columns))
		for i := range values {
			ptrs[i] = &values[i]
		}
		for rows.Next() {
			require.NoError(t, rows.Scan(ptrs...))
			for i, v := range values {
				var s string
				switch v := v.(type) {
				case string:
					s = v
				case []byte:
					s = string(v)
				default:
					continue
				}
				where := fmt.Sprintf("%s: %s.%s", filepath.Base(path), table, columns[i])
				require.NotContains(t, s, tokenSecret, where)
				require.NotContains(t, s, otherSecret, where)
				if strings.Contains(s, payloadSecret) {
					require.Equal(t, "tasks.payload", table+"."+columns[i], "the payload's secret in %s", where)
					payloads++
				}
			}
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
	}
	require.Positive(t, payloads, "the secret is in the tasks' payloads (else this proves nothing)")
}
