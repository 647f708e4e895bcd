package queue

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// openPrunable opens a queue of the named store on a fresh database and a
// fake clock at epoch; the counters are checked and the queue closed when
// the test ends.
func openPrunable(t *testing.T, store string) (*Queue, *clockwork.FakeClock) {
	t.Helper()
	ctx := context.Background()
	path := Memory
	if store == "postgres" {
		path = pgtest.Fresh(t, migratePostgresURL)
	}
	clock := clockwork.NewFakeClockAt(epoch)
	q, err := Open(ctx, Options{Path: path, Clock: clock, IDs: model.NewSeededIDs(1), Rand: rand.New(rand.NewPCG(1, 7))})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, q.CheckCounters(ctx))
		require.NoError(t, q.Close())
	})
	return q, clock
}

// stores runs test on SQLite and, when a server is configured, PostgreSQL.
func stores(t *testing.T, test func(t *testing.T, store string)) {
	t.Run("sqlite", func(t *testing.T) { test(t, "sqlite") })
	t.Run("postgres", func(t *testing.T) {
		pgtest.ServerURL(t)
		test(t, "postgres")
	})
}

// settledTask submits a task and runs it to the end: completed, or failed
// with an effect intent that has no receipt.
func settledTask(t *testing.T, q *Queue, key string, openEffect bool) string {
	t.Helper()
	ctx := context.Background()
	res, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: key, Payload: `{"steps":[]}`, CostBudget: 10, StepsMax: 5})
	require.NoError(t, err)
	claimed, err := q.Claim(ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	c := claimed[0].Claim
	require.Equal(t, res.TaskID, c.TaskID)
	if !openEffect {
		require.NoError(t, q.Complete(ctx, c))
		return c.TaskID
	}
	_, err = q.RecordIntent(ctx, c, 0)
	require.NoError(t, err)
	_, err = q.Fail(ctx, c, model.Failure{Class: model.Permanent, Message: "gave up"})
	require.NoError(t, err)
	return c.TaskID
}

// TestPruneSchemaGuards: the schema itself refuses every DELETE a prune
// may not make, whatever runs it: of a task, its events or its effects
// outside a prune's transaction; of a task that is not terminal, or
// settled after the cutoff, inside one; of an effect without its receipt.
func TestPruneSchemaGuards(t *testing.T) {
	stores(t, func(t *testing.T, store string) {
		ctx := context.Background()
		q, clock := openPrunable(t, store)
		done := settledTask(t, q, "k1", false)
		open := settledTask(t, q, "k2", true)
		res, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: "k3", Payload: `{"steps":[]}`, CostBudget: 10, StepsMax: 5})
		require.NoError(t, err)
		queued := res.TaskID
		settled := model.Millis(clock.Now())
		clock.Advance(24 * time.Hour)
		eventsBefore, err := q.Events(ctx, "")
		require.NoError(t, err)

		// attempt runs stmt (with ? or $1 for id) in a transaction, the prune
		// gate open at cutoff unless cutoff is 0, and rolls it back.
		attempt := func(cutoff int64, stmt, id string) error {
			t.Helper()
			tx, err := q.db.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer tx.Rollback()
			if cutoff != 0 {
				gate := q.query("prune_gate_open")
				args, err := bindArgs("prune_gate_open", gate, []any{sql.Named("cutoff", cutoff)})
				require.NoError(t, err)
				_, err = tx.ExecContext(ctx, gate.text, args...)
				require.NoError(t, err)
			}
			if store == "postgres" {
				stmt = replaceMark(stmt)
			}
			_, err = tx.ExecContext(ctx, stmt, id)
			return err
		}
		const (
			deleteTask    = "DELETE FROM tasks WHERE id = ?"
			deleteEvents  = "DELETE FROM events WHERE task_id = ?"
			deleteEffects = "DELETE FROM effects WHERE task_id = ?"
		)
		for _, tc := range []struct {
			name   string
			cutoff int64
			stmt   string
			id     string
			want   string
		}{
			{"terminal task, no prune", 0, deleteTask, done, "only a prune removes a task"},
			{"terminal task's events, no prune", 0, deleteEvents, done, "events are append-only"},
			{"queued task in a prune", settled + 1, deleteTask, queued, "only a prune removes a task"},
			{"queued task's events in a prune", settled + 1, deleteEvents, queued, "events are append-only"},
			{"task settled after the cutoff", settled - 1, deleteTask, done, "only a prune removes a task"},
			{"events of a task settled after the cutoff", settled - 1, deleteEvents, done, "events are append-only"},
			{"effect without its receipt in a prune", settled + 1, deleteEffects, open, "never without its receipt"},
		} {
			require.ErrorContains(t, attempt(tc.cutoff, tc.stmt, tc.id), tc.want, tc.name)
		}
		// The one way through: a terminal task's events, inside a prune.
		require.NoError(t, attempt(settled, deleteEvents, done))

		eventsAfter, err := q.Events(ctx, "")
		require.NoError(t, err)
		require.Equal(t, eventsBefore, eventsAfter, "every refused or rolled-back delete left the trail as it was")
		for _, id := range []string{done, open, queued} {
			_, err := q.Task(ctx, id)
			require.NoError(t, err)
		}
	})
}

// replaceMark turns the one ? of stmt into PostgreSQL's $1.
func replaceMark(stmt string) string {
	for i := range len(stmt) {
		if stmt[i] == '?' {
			return stmt[:i] + "$1" + stmt[i+1:]
		}
	}
	return stmt
}

// TestPruneUpgradedDatabase: a database at schema version 5, upgraded,
// prunes its old tasks and keeps their keys.
func TestPruneUpgradedDatabase(t *testing.T) {
	ctx := context.Background()
	migrations, err := Migrations()
	require.NoError(t, err)
	path := t.TempDir() + "/v5.db"
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	writeSchemaVersion(t, path, migrations[:5], model.Millis(clock.Now()))
	q, err := Open(ctx, Options{Path: path, Clock: clock, IDs: model.NewSeededIDs(1), Migrate: MigrateAll})
	require.NoError(t, err)
	defer q.Close()
	require.NoError(t, q.Complete(ctx, model.Claim{TaskID: "t_a1", Fence: 1, Owner: "w1", Attempt: 1}))
	clock.Advance(48 * time.Hour)
	res, err := q.Prune(ctx, PruneRequest{OlderThan: 24 * time.Hour, Actor: "ops"})
	require.NoError(t, err)
	require.Equal(t, map[model.State]int64{model.Completed: 1}, res.Tasks)
	_, err = q.Task(ctx, "t_a1")
	require.ErrorIs(t, err, model.ErrNotFound)
	var hash string
	require.NoError(t, q.db.QueryRowContext(ctx, "SELECT request_hash FROM idem_tombstones WHERE user_id = 'ana' AND idem_key = 't_a1'").Scan(&hash))
	require.Equal(t, "h", hash)
	require.NoError(t, q.CheckCounters(ctx))
	m, err := q.Metrics(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), m.Pruned)
}

// TestPrunePostgresConcurrent: prunes on two connection pools (two
// machines' housekeeping) at once remove every task exactly once, and
// neither waits for the other's batch nor fails on it.
func TestPrunePostgresConcurrent(t *testing.T) {
	pgtest.ServerURL(t)
	ctx := context.Background()
	url := pgtest.Fresh(t, migratePostgresURL)
	clock := clockwork.NewFakeClockAt(epoch)
	open := func(seed uint64) *Queue {
		q, err := Open(ctx, Options{Path: url, Clock: clock, IDs: model.NewSeededIDs(seed)})
		require.NoError(t, err)
		t.Cleanup(func() { q.Close() })
		return q
	}
	a, b := open(1), open(2)
	const tasks = 60
	var reqs []model.SubmitRequest
	for i := range tasks {
		reqs = append(reqs, model.SubmitRequest{User: "ana", Key: fmt.Sprintf("k%d", i),
			Payload: `{"steps":[]}`, CostBudget: 10, StepsMax: 5})
	}
	reqs = append(reqs, model.SubmitRequest{User: "ana", Key: "newest", Payload: `{"steps":[]}`, CostBudget: 10, StepsMax: 5,
		RunAt: epoch.Add(1000 * time.Hour)}) // never claimed below, and never pruned: the newest task
	_, err := a.SubmitMany(ctx, reqs)
	require.NoError(t, err)
	for range tasks / 10 {
		claimed, err := a.Claim(ctx, model.ClaimRequest{Worker: "w1", Max: 10, Lease: time.Minute})
		require.NoError(t, err)
		for _, c := range claimed {
			require.NoError(t, a.Complete(ctx, c.Claim))
		}
	}
	clock.Advance(48 * time.Hour)

	var wg sync.WaitGroup
	results := make([]PruneResult, 2)
	errs := make([]error, 2)
	for i, q := range []*Queue{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = q.Prune(ctx, PruneRequest{OlderThan: 24 * time.Hour, Batch: 7, Actor: "ops"})
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Equal(t, int64(tasks), results[0].TaskCount()+results[1].TaskCount())
	require.Equal(t, int64(tasks), results[0].Tombstones+results[1].Tombstones)
	var left, tombstones int
	require.NoError(t, a.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM tasks").Scan(&left))
	require.NoError(t, a.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM idem_tombstones").Scan(&tombstones))
	require.Equal(t, 1, left, "the newest task")
	require.Equal(t, tasks, tombstones)
	m, err := a.Metrics(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(tasks), m.Pruned)
	require.True(t, m.Reconciles())
	require.NoError(t, a.CheckCounters(ctx))
}

// TestPostgresTallyCompaction: housekeeping folds PostgreSQL's rows of
// counter changes once there are many, and every figure stays the same.
func TestPostgresTallyCompaction(t *testing.T) {
	pgtest.ServerURL(t)
	ctx := context.Background()
	q, _ := openPrunable(t, "postgres")
	settledTask(t, q, "k1", false)
	_, err := q.db.ExecContext(ctx, `INSERT INTO tally_deltas (name, n, sum_ms)
		SELECT CASE WHEN g % 2 = 0 THEN 'state:queued' ELSE 'run_time:3' END, CASE WHEN g % 2 = 0 THEN 1 - 2 * (g % 4 / 2) ELSE 0 END, 0
		FROM generate_series(1, $1) g`, tallyCompactRows+100)
	require.NoError(t, err)
	before, err := q.Metrics(ctx)
	require.NoError(t, err)
	rows := func() int {
		var n int
		require.NoError(t, q.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM tally_deltas").Scan(&n))
		return n
	}
	require.Greater(t, rows(), tallyCompactRows)
	_, err = q.PruneDue(ctx)
	require.NoError(t, err)
	require.Less(t, rows(), 200, "the oldest rows were folded into one per name")
	after, err := q.Metrics(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after)
	_, err = q.PruneDue(ctx)
	require.NoError(t, err)
	require.Less(t, rows(), 200)
}

// TestCheckCountersNamesTheStoresChecks: a counters mismatch is described
// in the store's own terms: SQLite's third check is its queued tasks'
// blocked and limited flags; PostgreSQL keeps no such flags, and its third
// check is users running more tasks than they have active.
func TestCheckCountersNamesTheStoresChecks(t *testing.T) {
	stores(t, func(t *testing.T, store string) {
		ctx := context.Background()
		q, _ := openPrunable(t, store)
		res, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: "k1", Payload: `{"steps":[]}`, CostBudget: 10, StepsMax: 5})
		require.NoError(t, err)
		corrupt, repair := "UPDATE tasks SET blocked = 1 WHERE id = ?", "UPDATE tasks SET blocked = 0 WHERE id = ?"
		want, other := "1 queued tasks' blocked or limited flags", "users counted running"
		if store == "postgres" {
			corrupt, repair = "UPDATE users SET running = 2 WHERE user_id = $1", "UPDATE users SET running = 0 WHERE user_id = $1"
			want, other = "1 users counted running more tasks than they have active", "blocked"
		}
		arg := res.TaskID
		if store == "postgres" {
			arg = "ana"
		}
		_, err = q.db.ExecContext(ctx, corrupt, arg)
		require.NoError(t, err)
		err = q.CheckCounters(ctx)
		require.ErrorContains(t, err, want)
		require.NotContains(t, err.Error(), other)
		_, err = q.db.ExecContext(ctx, repair, arg)
		require.NoError(t, err)
	})
}

// TestPruneTrailFollowers: the HTTP API's followers (EventsSince, every
// user's or some users') behind a pruned range read what remains after
// their cursor, in order, with no error and no repeat; the pruned event,
// which concerns no task, reaches an operator's follower and not a user's.
func TestPruneTrailFollowers(t *testing.T) {
	stores(t, func(t *testing.T, store string) {
		ctx := context.Background()
		q, clock := openPrunable(t, store)
		gone := settledTask(t, q, "k1", false)
		clock.Advance(48 * time.Hour)
		res, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: "k2", Payload: `{"steps":[]}`, CostBudget: 10, StepsMax: 5})
		require.NoError(t, err)
		stays := res.TaskID
		before, err := q.EventsSince(ctx, EventFilter{})
		require.NoError(t, err)
		require.Len(t, before, 4, "three events of the settled task, one of the queued one")
		cursor := before[0].Seq // a follower that has seen the first event only
		require.Equal(t, gone, before[0].TaskID)

		_, err = q.Prune(ctx, PruneRequest{OlderThan: 24 * time.Hour, Actor: "ops"})
		require.NoError(t, err)

		all, err := q.EventsSince(ctx, EventFilter{After: cursor})
		require.NoError(t, err)
		require.Len(t, all, 2)
		require.Equal(t, stays, all[0].TaskID)
		require.Equal(t, before[3].Seq, all[0].Seq, "a remaining event keeps its sequence number")
		require.Equal(t, model.EventPruned, all[1].Kind)
		require.Empty(t, all[1].User)

		mine, err := q.EventsSince(ctx, EventFilter{Users: []string{"ana"}, After: cursor})
		require.NoError(t, err)
		require.Len(t, mine, 1)
		require.Equal(t, stays, mine[0].TaskID)

		byTask, err := q.EventsSince(ctx, EventFilter{TaskID: gone})
		require.NoError(t, err)
		require.Empty(t, byTask, "a pruned task's follower finds nothing more")

		last, err := q.EventsSince(ctx, EventFilter{After: all[1].Seq})
		require.NoError(t, err)
		require.Empty(t, last)
	})
}

// TestPruneDueIdleWritesNothing: housekeeping's pass with nothing to prune
// is a read: on SQLite it takes no write transaction (which would take the
// write lock and sync the log on every worker's every pass).
func TestPruneDueIdleWritesNothing(t *testing.T) {
	ctx := context.Background()
	q, clock := openPrunable(t, "sqlite")
	require.NoError(t, q.SetRetention(ctx, RetentionPolicy{OlderThan: time.Hour, KeepKeys: time.Hour}, "ops"))
	settledTask(t, q, "k1", false)
	_, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: "k2", Payload: `{"steps":[]}`, CostBudget: 10, StepsMax: 5,
		RunAt: clock.Now().Add(1000 * time.Hour)})
	require.NoError(t, err)
	_, ops := q.GroupStats()
	res, err := q.PruneDue(ctx)
	require.NoError(t, err)
	require.Zero(t, res.TaskCount(), "nothing is an hour old yet")
	_, after := q.GroupStats()
	require.Equal(t, ops, after, "an idle pass made a write")

	clock.Advance(2 * time.Hour)
	res, err = q.PruneDue(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), res.TaskCount())
	_, ops = q.GroupStats()
	require.Equal(t, after+1, ops, "the pass that prunes is one write")

	res, err = q.PruneDue(ctx)
	require.NoError(t, err)
	require.Zero(t, res.TaskCount())
	_, after = q.GroupStats()
	require.Equal(t, ops, after, "an idle pass made a write")

	clock.Advance(2 * time.Hour) // the tombstone's window passes: a write again, to expire it
	res, err = q.PruneDue(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Expired)
}
