package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the pgx driver, to read a PostgreSQL schema directly
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/randomid"
)

// settleInThePast runs, on a fake clock two days back, a task of key to
// completion (or, with effect, to failed with an effect intent and no
// receipt), so that prune --older-than 1d finds it old.
func settleInThePast(t *testing.T, db, key string, effect bool) string {
	t.Helper()
	ctx := context.Background()
	q, err := queue.Open(ctx, queue.Options{Path: db, Clock: clockwork.NewFakeClockAt(time.Now().Add(-48 * time.Hour)), IDs: randomid.Source{}})
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Close()) }()
	res, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: key, Payload: onePayload, CostBudget: 10, StepsMax: 5, Priority: 100})
	require.NoError(t, err)
	claimed, err := q.Claim(ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	c := claimed[0].Claim
	require.Equal(t, res.TaskID, c.TaskID)
	if effect {
		_, err = q.RecordIntent(ctx, c, 0)
		require.NoError(t, err)
		_, err = q.Fail(ctx, c, model.Failure{Class: model.Permanent, Message: "gave up"})
		require.NoError(t, err)
		return c.TaskID
	}
	require.NoError(t, q.Complete(ctx, c))
	return c.TaskID
}

// pruneOutput is prune --json decoded.
func pruneOutput(t *testing.T, r result) pruneRecord {
	t.Helper()
	requireOK(t, r)
	var rec pruneRecord
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rec), r.stdout)
	return rec
}

// pruneScenario runs the prune command's story against db (a file or a
// postgres:// URL, migrated): a dry run that changes nothing, a prune that
// removes the old terminal task and keeps the rest, a replayed submit
// recognised after it, the audit trail's record, and the policy set and
// shown.
func pruneScenario(t *testing.T, db string) {
	old := settleInThePast(t, db, "k-old", false)
	open := settleInThePast(t, db, "k-open", true)
	r := lh(t, "submit", "--db", db, "--user", "ana", "--key", "k-new", "--payload", onePayload, "--cost-budget", "10", "--steps-max", "5")
	requireOK(t, r)
	fresh := strings.TrimSpace(r.stdout)

	dry := pruneOutput(t, lh(t, "prune", "--db", db, "--older-than", "1d", "--dry-run", "--json"))
	require.True(t, dry.DryRun)
	require.Equal(t, int64(1), dry.Tasks)
	require.Equal(t, int64(1), dry.ByState["completed"])
	require.Equal(t, int64(1), dry.Kept)
	require.Equal(t, []string{open}, dry.KeptIDs)
	requireOK(t, lh(t, "status", old, "--db", db))

	r = lh(t, "prune", "--db", db, "--older-than", "1d", "--dry-run")
	requireOK(t, r)
	require.Contains(t, r.stdout, "would prune 1 terminal tasks")
	require.Contains(t, r.stdout, "kept 1 terminal tasks past the age: each has an effect without its receipt, never pruned")
	require.Contains(t, r.stdout, ": "+open+"\n")

	done := pruneOutput(t, lh(t, "prune", "--db", db, "--older-than", "1d", "--actor", "ops", "--json"))
	require.False(t, done.DryRun)
	require.Equal(t, dry.Tasks, done.Tasks)
	require.Equal(t, dry.Events, done.Events)
	require.Equal(t, int64(1), done.Tombstones)
	require.Equal(t, 1, done.Transactions)

	requireFailed(t, lh(t, "status", old, "--db", db), old)
	requireOK(t, lh(t, "status", open, "--db", db))
	requireOK(t, lh(t, "status", fresh, "--db", db))

	r = lh(t, "submit", "--db", db, "--user", "ana", "--key", "k-old", "--payload", onePayload, "--cost-budget", "10",
		"--steps-max", "5", "--priority", "100", "--json")
	requireOK(t, r)
	var replay struct {
		TaskID string `json:"task_id"`
		Replay bool   `json:"replay"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &replay))
	require.Equal(t, old, replay.TaskID)
	require.True(t, replay.Replay)
	r = lh(t, "submit", "--db", db, "--user", "ana", "--key", "k-old", "--payload", onePayload, "--cost-budget", "11",
		"--steps-max", "5", "--priority", "100")
	requireFailed(t, r, "k-old", old)

	r = lh(t, "audit", "--db", db, "--actor", "ops", "--json")
	requireOK(t, r)
	require.Contains(t, r.stdout, `"pruned"`)
	require.Contains(t, r.stdout, "tasks=1 completed=1")

	r = lh(t, "metrics", "--db", db, "--json")
	requireOK(t, r)

	r = lh(t, "prune", "policy", "--db", db)
	requireOK(t, r)
	require.Equal(t, "housekeeping prunes nothing (off); tombstones kept 30d\n", r.stdout)
	r = lh(t, "prune", "policy", "--db", db, "--older-than", "90d", "--keep-keys", "14d", "--actor", "ops")
	requireOK(t, r)
	require.Equal(t, "set: housekeeping prunes terminal tasks settled more than 90d ago; tombstones kept 14d\n", r.stdout)
	r = lh(t, "prune", "policy", "--db", db, "--json")
	requireOK(t, r)
	require.JSONEq(t, `{"older_than":"90d","keep_keys":"14d"}`, r.stdout)
	r = lh(t, "prune", "policy", "--db", db, "--older-than", "off", "--actor", "ops", "--json")
	requireOK(t, r)
	require.JSONEq(t, `{"older_than":"off","keep_keys":"14d"}`, r.stdout)
}

func TestPruneCommand(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pruneScenario(t, f.db)
	f.withQueue(func(ctx context.Context, q *queue.Queue) {
		require.NoError(t, q.CheckCounters(ctx))
		m, err := q.Metrics(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), m.Pruned)
		require.True(t, m.Reconciles())
	})
}

func TestPruneCommandPostgres(t *testing.T) {
	db := withPassword(t, pgtest.Fresh(t, func(context.Context, string) error { return nil }))
	requireOK(t, lh(t, "migrate", "--db", db))
	pruneScenario(t, db)
	r := lh(t, "prune", "--db", db, "--older-than", "-1d")
	requireNoSecret(t, r)
	requireUsage(t, r, "--older-than")
}

// TestPostgresBadLocations: what item 2 of the PostgreSQL issue asks of a
// bad --db: a malformed URL, an unreachable server and a schema at a
// version this build does not support each give one line naming what was
// wrong, with no password in it, exit 2 for the URL (bad usage) and 1 for
// the others (a failed operation), and nothing written.
func TestPostgresBadLocations(t *testing.T) {
	r := lh(t, "list", "--db", "postgres://u:secret@[bad")
	requireUsage(t, r, "--db", "not a valid URL")
	require.NotContains(t, r.stdout+r.stderr, "secret")

	r = lh(t, "submit", "--db", "postgres://u:secret@[bad", "--user", "ana", "--key", "k1", "--payload", onePayload,
		"--cost-budget", "5", "--steps-max", "3")
	requireUsage(t, r, "--db")
	require.NotContains(t, r.stdout+r.stderr, "secret")

	r = lh(t, "status", "t_00", "--db", "postgres://u:secret@127.0.0.1:1/leasehold?connect_timeout=5")
	requireFailed(t, r, "127.0.0.1:1", "connect")
	require.NotContains(t, r.stdout+r.stderr, "secret")

	pgtest.ServerURL(t)
	db := withPassword(t, pgtest.Fresh(t, func(context.Context, string) error { return nil }))
	requireOK(t, lh(t, "migrate", "--db", db))
	r = lh(t, "submit", "--db", db, "--user", "ana", "--key", "k1", "--payload", onePayload, "--cost-budget", "5", "--steps-max", "3")
	requireOK(t, r)
	id := strings.TrimSpace(r.stdout)
	raw, err := sql.Open("pgx", db)
	require.NoError(t, err)
	defer raw.Close()
	ctx := context.Background()
	_, err = raw.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, checksum, applied_at) VALUES (999, 'future', 'x', 0)`)
	require.NoError(t, err)
	counts := func() (tasks, events int) {
		require.NoError(t, raw.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM tasks), (SELECT COUNT(*) FROM events)").Scan(&tasks, &events))
		return tasks, events
	}
	tasks, events := counts()
	for _, args := range [][]string{
		{"submit", "--user", "ana", "--key", "k2", "--payload", onePayload, "--cost-budget", "5", "--steps-max", "3"},
		{"status", id},
		{"list"},
		{"cancel", id, "--actor", "ops"},
		{"prune", "--older-than", "1d"},
		{"migrate"},
	} {
		r := lh(t, append(args, "--db", db)...)
		requireNoSecret(t, r)
		requireFailed(t, r, "999")
		gotTasks, gotEvents := counts()
		require.Equal(t, tasks, gotTasks, "%v wrote a task", args)
		require.Equal(t, events, gotEvents, "%v wrote an event", args)
	}
}

// TestRunbookRetention runs the runbook's retention blocks against a
// database whose tasks settled 40 days ago: the dry run changes nothing,
// the prune removes the completed task and keeps the dead letter and the
// queued task, and the policy is stored.
func TestRunbookRetention(t *testing.T) {
	blocks := runbookBlocks(t)
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "leasehold.db")
	clock := clockwork.NewFakeClockAt(time.Now().Add(-40 * 24 * time.Hour))
	q, err := queue.Open(ctx, queue.Options{Path: db, Clock: clock, IDs: randomid.Source{}})
	require.NoError(t, err)
	submit := func(key string) string {
		res, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: key, Payload: onePayload, CostBudget: 10, StepsMax: 5})
		require.NoError(t, err)
		return res.TaskID
	}
	claim := func(id string) model.Claim {
		cs, err := q.Claim(ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, cs, 1)
		require.Equal(t, id, cs[0].Claim.TaskID)
		return cs[0].Claim
	}
	done := submit("done")
	require.NoError(t, q.Complete(ctx, claim(done)))
	parked := submit("parked")
	_, err = q.Fail(ctx, claim(parked), model.Failure{Class: model.Uncertain, Message: "lost response"})
	require.NoError(t, err)
	queued := submit("queued")
	require.NoError(t, q.Close())
	vars := map[string]string{"DB": db, "ACTOR": "ops-oncall"}

	outs := runbook(t, blocks, "retention-see", vars, exitOK)
	require.Contains(t, outs[0], "would prune 1 terminal tasks")
	require.Contains(t, outs[1], "pruned 0")
	requireOK(t, lh(t, "status", done, "--db", db))

	outs = runbook(t, blocks, "retention-prune", vars, exitOK)
	require.Contains(t, outs[0], "pruned 1 terminal tasks")
	require.Contains(t, outs[1], "pruned")
	require.Contains(t, outs[1], "tasks=1 completed=1")
	requireFailed(t, lh(t, "status", done, "--db", db), done)
	requireOK(t, lh(t, "status", parked, "--db", db))
	requireOK(t, lh(t, "status", queued, "--db", db))
	r := lh(t, "metrics", "--db", db)
	requireOK(t, r)
	require.Contains(t, r.stdout, "pruned 1")

	outs = runbook(t, blocks, "retention-policy", vars, exitOK)
	require.Contains(t, outs[1], "settled more than 90d ago; tombstones kept 30d")
}

// TestPostgresConcurrentMigrateCommands: several leasehold migrate runs at
// once against one empty PostgreSQL schema (a deployment's processes
// starting together) all succeed, one of them applying the migrations;
// the schema ends at this build's version with each migration once.
func TestPostgresConcurrentMigrateCommands(t *testing.T) {
	db := pgtest.Fresh(t, func(context.Context, string) error { return nil })
	const runs = 6
	results := make([]result, runs)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = lh(t, "migrate", "--db", db, "--actor", "deploy")
		}()
	}
	wg.Wait()
	migrated := 0
	for i, r := range results {
		require.Equal(t, exitOK, r.code, "run %d: %s", i, r)
		if strings.Contains(r.stdout, "migrated") {
			migrated++
		}
	}
	require.GreaterOrEqual(t, migrated, 1, "one run applied the migrations")
	raw, err := sql.Open("pgx", db)
	require.NoError(t, err)
	defer raw.Close()
	var versions, distinct, newest int
	require.NoError(t, raw.QueryRow("SELECT COUNT(*), COUNT(DISTINCT version), MAX(version) FROM schema_migrations").Scan(&versions, &distinct, &newest))
	ms, err := queue.PostgresMigrations()
	require.NoError(t, err)
	require.Equal(t, len(ms), versions)
	require.Equal(t, versions, distinct)
	require.Equal(t, len(ms), newest)
}
