package queue

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// intakeWrites is what a connection has written to tasks and users, as
// pg_stat_xact_user_tables counts it: its figures not yet flushed, the
// current transaction's among them (a test reads them before and after).
type intakeWrites struct {
	tasksInserted, tasksUpdated, usersInserted int64
}

// intakeWritesIn reads tx's connection's counts of tasks' and users' rows
// written.
func (f *pgFixture) intakeWritesIn(tx *sql.Tx) intakeWrites {
	f.t.Helper()
	var w intakeWrites
	require.NoError(f.t, tx.QueryRowContext(f.ctx, `
SELECT COALESCE(SUM(n_tup_ins) FILTER (WHERE relname = 'tasks'), 0),
       COALESCE(SUM(n_tup_upd) FILTER (WHERE relname = 'tasks'), 0),
       COALESCE(SUM(n_tup_ins) FILTER (WHERE relname = 'users'), 0)
FROM pg_stat_xact_user_tables WHERE schemaname = current_schema()`).Scan(&w.tasksInserted, &w.tasksUpdated, &w.usersInserted))
	return w
}

// since is what was written between before and w.
func (w intakeWrites) since(before intakeWrites) intakeWrites {
	return intakeWrites{w.tasksInserted - before.tasksInserted, w.tasksUpdated - before.tasksUpdated,
		w.usersInserted - before.usersInserted}
}

// requireTrailsAreEvents checks, inside tx, that each of ids has a
// trail of exactly its events' seqs, one submitted event each, and that
// the events are numbered in the order of ids, as their tasks are.
func (f *pgFixture) requireTrailsAreEvents(tx *sql.Tx, ids ...string) {
	f.t.Helper()
	var lastTask, lastEvent int64
	for _, id := range ids {
		var taskSeq int64
		var trail, seqs string
		require.NoError(f.t, tx.QueryRowContext(f.ctx, `
SELECT t.seq, t.trail::text, (SELECT COALESCE(array_agg(e.seq ORDER BY e.seq), '{}')::text FROM events e
                              WHERE e.task_id = t.id AND e.kind = 'submitted')
FROM tasks t WHERE t.id = $1`, id).Scan(&taskSeq, &trail, &seqs), id)
		require.Equal(f.t, seqs, trail, "task %s: its trail holds its events", id)
		var eventSeq int64
		require.NoError(f.t, tx.QueryRowContext(f.ctx, "SELECT trail[1] FROM tasks WHERE id = $1", id).Scan(&eventSeq))
		require.Greater(f.t, taskSeq, lastTask, id)
		require.Greater(f.t, eventSeq, lastEvent, "task %s: events numbered in the tasks' order", id)
		lastTask, lastEvent = taskSeq, eventSeq
	}
}

// submitOneIn runs submit_one inside tx for a synthetic task of user
// under key, due now, and requires it inserted as id.
func (f *pgFixture) submitOneIn(tx *sql.Tx, id, user, key string, costBudget, stepsMax int) {
	f.t.Helper()
	text, bound := f.args("submit_one", sql.Named("id", id), sql.Named("user", user), sql.Named("key", key),
		sql.Named("hash", "h"+key), sql.Named("kind", "synthetic"), sql.Named("payload", "{}"), sql.Named("priority", 0),
		sql.Named("run_at", int64(1000)), sql.Named("deadline", int64(0)), sql.Named("now", int64(1000)),
		sql.Named("cost_budget", costBudget), sql.Named("steps_max", stepsMax), sql.Named("schedule_id", ""),
		sql.Named("schedule_run", int64(0)), sql.Named("actor", "user:"+user), sql.Named("scope", ""),
		sql.Named("timely", true))
	var outcome string
	var taskID sql.NullString
	var n, lim int64
	require.NoError(f.t, tx.QueryRowContext(f.ctx, text, bound...).Scan(&outcome, &taskID, &n, &lim))
	require.Equal(f.t, "inserted", outcome)
	require.Equal(f.t, id, taskID.String)
}

// TestPostgresIntakeWritesANewTaskOnce: a lone submit (submit_one) and a
// batch (submit_batch) insert each new task's row with its trail already
// holding its submitted event's seq, and never update it in the same
// transaction (events_trailed stands aside); a submit of a user that has
// a row inserts none. A reader of each task's events then finds exactly
// its submitted event.
func TestPostgresIntakeWritesANewTaskOnce(t *testing.T) {
	f := freshPostgres(t)
	submitOne := func(tx *sql.Tx, id, user, key string) {
		t.Helper()
		f.submitOneIn(tx, id, user, key, 10, 5)
	}

	tx, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }() // the open one of tx's two transactions, after a failed check
	before := f.intakeWritesIn(tx)
	submitOne(tx, "t_one1", "alice", "k1")
	require.Equal(t, intakeWrites{tasksInserted: 1, usersInserted: 1}, f.intakeWritesIn(tx).since(before), "a new user's first submit")
	before = f.intakeWritesIn(tx)
	submitOne(tx, "t_one2", "alice", "k2")
	require.Equal(t, intakeWrites{tasksInserted: 1}, f.intakeWritesIn(tx).since(before), "a known user's submit")
	f.requireTrailsAreEvents(tx, "t_one1", "t_one2")
	require.NoError(t, tx.Commit())

	rows := []trailedRow{
		{batchRow: batchRow{ID: "t_b1", User: "alice", Key: "b1", Hash: "h", Kind: "synthetic", Payload: "{}", RunAt: 1000, CostBudget: 10, StepsMax: 5}, Actor: "user:alice"},
		{batchRow: batchRow{ID: "t_b2", User: "bob", Key: "b2", Hash: "h", Kind: "synthetic", Payload: "{}", RunAt: 1000, CostBudget: 10, StepsMax: 5}, Actor: "user:bob"},
		{batchRow: batchRow{ID: "t_b3", User: "alice", Key: "b3", Hash: "h", Kind: "synthetic", Payload: "{}", RunAt: 1000, CostBudget: 10, StepsMax: 5}, Actor: "user:alice"},
	}
	arg, err := json.Marshal(rows)
	require.NoError(t, err)
	tx, err = f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	before = f.intakeWritesIn(tx)
	text, bound := f.args("users_ensure", sql.Named("users", `["alice","bob","alice"]`))
	_, err = tx.ExecContext(f.ctx, text, bound...)
	require.NoError(t, err)
	text, bound = f.args("submit_batch", sql.Named("rows", string(arg)), sql.Named("attempts_max", 3),
		sql.Named("now", int64(1000)), sql.Named("scope", ""))
	var inserted int64
	require.NoError(t, tx.QueryRowContext(f.ctx, text, bound...).Scan(&inserted))
	require.Equal(t, int64(3), inserted)
	require.Equal(t, intakeWrites{tasksInserted: 3, usersInserted: 1}, f.intakeWritesIn(tx).since(before), "a batch")
	f.requireTrailsAreEvents(tx, "t_b1", "t_b2", "t_b3")
	require.NoError(t, tx.Commit())

	for _, id := range []string{"t_one1", "t_one2", "t_b1", "t_b2", "t_b3"} {
		events, err := f.q.Events(f.ctx, id)
		require.NoError(t, err)
		require.Len(t, events, 1, id)
		require.Equal(t, model.EventSubmitted, events[0].Kind, id)
		require.Equal(t, id, events[0].TaskID)
	}
	tallies := f.tallies()
	require.Equal(t, int64(5), tallies["state:queued"][0])
	require.Equal(t, int64(5), tallies["event:submitted::queued:"][0])
	require.Equal(t, int64(5), tallies["kind:synthetic:submitted::queued:"][0])
}

// TestPostgresAdmissionStepsOverFoldedRows: admission's margin, which
// every fast-path submit reads, reads the active states' rows of
// tally_deltas and the user's rows of user_deltas by plain index scans,
// not bitmap scans. A plain index scan marks the entries of rows a fold
// deleted dead once no transaction can see them, so later reads step
// over them; a bitmap scan reads them all again each time, and intake
// slowed as the entries of folded rows piled up between vacuums (2,000
// deleted rows of each here, as folds leave them). A plain index scan is
// told from a bitmap scan by where the server counts the rows it fetched:
// against the index for the one, against the table for the other.
func TestPostgresAdmissionStepsOverFoldedRows(t *testing.T) {
	f := freshPostgres(t)
	submit := func(key string) {
		t.Helper()
		_, err := f.q.Submit(f.ctx, model.SubmitRequest{User: "ana", Key: key, Payload: `{}`, CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
	}
	submit("k0")
	for _, stmt := range []string{
		`INSERT INTO tally_deltas (name, n) SELECT 'state:queued', 0 FROM generate_series(1, 2000)`,
		`DELETE FROM tally_deltas WHERE name = 'state:queued' AND n = 0`,
		`INSERT INTO user_deltas (user_id, running, active) SELECT 'ana', 0, 0 FROM generate_series(1, 2000)`,
		`DELETE FROM user_deltas WHERE user_id = 'ana' AND running = 0 AND active = 0`,
	} {
		_, err := f.db.ExecContext(f.ctx, stmt)
		require.NoError(t, err, stmt)
	}
	for i := range 6 { // past the plan cache's custom plans, to its generic one
		submit(fmt.Sprintf("k%d", i+1))
	}

	// The submit runs in a transaction, so that what its connection's
	// scans fetched is not reported (and reset) between the two reads.
	tx, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	// The live rows fetched by plain index scans of each index.
	fetched := func() map[string]int64 {
		t.Helper()
		rows, err := tx.QueryContext(f.ctx, `SELECT i.name, pg_stat_get_xact_tuples_fetched(i.name::regclass)
		    FROM unnest(ARRAY['tally_deltas_active', 'user_deltas_user']) AS i(name)`)
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var name string
			var n int64
			require.NoError(t, rows.Scan(&name, &n))
			out[name] = n
		}
		require.NoError(t, rows.Err())
		return out
	}
	before := fetched()
	f.submitOneIn(tx, "t_last", "ana", "last", 1, 1)
	after := fetched()
	require.NoError(t, tx.Commit())
	// The active states' first rows (queued, running, waiting) and the
	// seven submits' rows of queued; ana's seven rows.
	require.GreaterOrEqual(t, after["tally_deltas_active"]-before["tally_deltas_active"], int64(3),
		"the margin read the active states' rows by a plain index scan")
	require.GreaterOrEqual(t, after["user_deltas_user"]-before["user_deltas_user"], int64(1),
		"the margin read ana's rows by a plain index scan")

	var states, users, over int
	require.NoError(t, f.queryRow("counters_check").Scan(&states, &users, &over))
	require.Equal(t, [3]int{0, 0, 0}, [3]int{states, users, over})
}
