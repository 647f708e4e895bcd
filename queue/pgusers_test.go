package queue

import (
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// usersRowsRead runs fn inside a transaction and returns how many rows of
// users it read (scanned or fetched by index); the transaction is rolled
// back. The figure is the change in the backend's counts not yet reported
// (pg_stat_xact_user_tables) across fn: on PostgreSQL 15 those include
// earlier transactions of the connection until it reports them.
func (f *pgFixture) usersRowsRead(fn func(tx *sql.Tx)) int64 {
	f.t.Helper()
	tx, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(f.t, err)
	defer func() { _ = tx.Rollback() }()
	read := func() int64 {
		var n int64
		require.NoError(f.t, tx.QueryRowContext(f.ctx, `SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0)
		    FROM pg_stat_xact_user_tables WHERE relid = 'users'::regclass`).Scan(&n))
		return n
	}
	before := read()
	fn(tx)
	return read() - before
}

// TestPostgresClaimReadsItsCandidatesUsers (pre-fold version 17): with 3,000
// users under a running limit, a claim reads the counts of its
// candidates' users, not of every user: claim_batch and
// complete_and_claim each take their 8 tasks reading a few dozen users
// rows at most. Version 16 read user_caps for every user on every claim
// (3,000 rows and more here). When a candidate's user is short of room,
// the claim still finds its tasks user by user, and takes the next user's
// task in its place.
func TestPostgresClaimReadsItsCandidatesUsers(t *testing.T) {
	f := freshPostgres(t)
	const users = 3000
	_, err := f.db.ExecContext(f.ctx, fmt.Sprintf(`
UPDATE settings SET value = 2 WHERE key = 'user_running_max';
INSERT INTO users (user_id) SELECT 'u' || lpad(i::text, 5, '0') FROM generate_series(1, %d) i;
INSERT INTO tasks (id, user_id, idem_key, request_hash, payload, state, priority, run_at, deadline, attempts_max,
                   queued_at, cost_budget, steps_max, created_at, updated_at)
SELECT 't' || lpad(i::text, 5, '0'), 'u' || lpad(i::text, 5, '0'), 'k' || i, 'h', '{}', 'queued', 0, 0, 0, 3,
       0, 1, 1, 0, 0
FROM generate_series(1, %d) i;
-- The first user has two more tasks, first in claim order.
INSERT INTO tasks (id, user_id, idem_key, request_hash, payload, state, priority, run_at, deadline, attempts_max,
                   queued_at, cost_budget, steps_max, created_at, updated_at)
VALUES ('a1', 'u00001', 'ka1', 'h', '{}', 'queued', 5, 0, 0, 3, 0, 1, 1, 0, 0),
       ('a2', 'u00001', 'ka2', 'h', '{}', 'queued', 5, 0, 0, 3, 0, 1, 1, 0, 0);
ANALYZE users; ANALYZE tasks; ANALYZE user_deltas`, users, users))
	require.NoError(t, err)

	claimed := func(rows *sql.Rows, err error) []string {
		t.Helper()
		require.NoError(t, err)
		tasks, err := scanTasks(rows)
		require.NoError(t, err)
		var ids []string
		for _, task := range tasks {
			ids = append(ids, task.ID)
		}
		return ids
	}
	claimArgs := func(max int) []any {
		return []any{sql.Named("now", int64(1000)), sql.Named("due", int64(1000)), sql.Named("alive", int64(1000)),
			sql.Named("max", max), sql.Named("owner", "w"), sql.Named("lease_until", int64(6000)),
			sql.Named("user_limits", true), sql.Named("kinds", "")}
	}
	first8 := []string{"a1", "a2", "t00001", "t00002", "t00003", "t00004", "t00005", "t00006"}

	// Every candidate's user has room for its candidates (u00001: 3 tasks
	// first in order would be 3 against its limit of 2, so the batch
	// starts after a claim of one: below, its limit is raised to 3).
	_, err = f.db.ExecContext(f.ctx, "UPDATE users SET running_max = 3 WHERE user_id = 'u00001'")
	require.NoError(t, err)
	var ids []string
	read := f.usersRowsRead(func(tx *sql.Tx) {
		text, bound := f.args("claim_batch", claimArgs(8)...)
		ids = claimed(tx.QueryContext(f.ctx, text, bound...))
	})
	require.Equal(t, first8, ids)
	t.Logf("claim_batch read %d users rows", read)
	require.Less(t, read, int64(50), "claim_batch read %d users rows for a batch of 8", read)

	read = f.usersRowsRead(func(tx *sql.Tx) {
		text, bound := f.args("complete_and_claim", append(claimArgs(8), sql.Named("claims", "[]"),
			sql.Named("events", "[]"), sql.Named("at_lease_until", false), sql.Named("scope", ""))...)
		ids = claimed(tx.QueryContext(f.ctx, text, bound...))
	})
	require.Equal(t, first8, ids)
	t.Logf("complete_and_claim read %d users rows", read)
	require.Less(t, read, int64(50), "complete_and_claim read %d users rows for a batch of 8", read)

	// u00001 back at the default limit of 2, with 3 tasks among the first
	// 8: its third is left, and t00007 takes its place, found user by user.
	_, err = f.db.ExecContext(f.ctx, "UPDATE users SET running_max = -1 WHERE user_id = 'u00001'")
	require.NoError(t, err)
	want := []string{"a1", "a2", "t00002", "t00003", "t00004", "t00005", "t00006", "t00007"}
	for _, name := range []string{"claim_batch", "complete_and_claim"} {
		f.usersRowsRead(func(tx *sql.Tx) {
			args := claimArgs(8)
			if name == "complete_and_claim" {
				args = append(args, sql.Named("claims", "[]"), sql.Named("events", "[]"),
					sql.Named("at_lease_until", false), sql.Named("scope", ""))
			}
			text, bound := f.args(name, args...)
			ids = claimed(tx.QueryContext(f.ctx, text, bound...))
		})
		require.Equal(t, want, ids, fmt.Sprintf("%s, a user short of room", name))
	}
}

// TestPostgresSubmitReadsNoOtherUsers (pre-fold version 18): with 3,000 users,
// a submit is admitted against the queue's active tasks read from the
// state counts, not from every user's row: submit_one, and the usual
// way's user_depth and SubmitMany's active_total, each read a few users
// rows at most (version 17 summed all 3,000). The figure is the same, and
// submits fold the state counts' rows once they pile up, changing no sum.
func TestPostgresSubmitReadsNoOtherUsers(t *testing.T) {
	f := freshPostgres(t)
	const users = 3000
	_, err := f.db.ExecContext(f.ctx, fmt.Sprintf(`
INSERT INTO users (user_id) SELECT 'u' || lpad(i::text, 5, '0') FROM generate_series(1, %d) i;
INSERT INTO tasks (id, user_id, idem_key, request_hash, payload, state, priority, run_at, deadline, attempts_max,
                   queued_at, cost_budget, steps_max, created_at, updated_at)
SELECT 't' || lpad(i::text, 5, '0'), 'u' || lpad(i::text, 5, '0'), 'k' || i, 'h', '{}', 'queued', 0, 0, 0, 3,
       0, 1, 1, 0, 0
FROM generate_series(1, %d) i;
ANALYZE users; ANALYZE tasks; ANALYZE user_deltas; ANALYZE tally_deltas`, users, users))
	require.NoError(t, err)
	activeTotal := func() int64 {
		t.Helper()
		var n int64
		require.NoError(t, f.queryRow("active_total").Scan(&n))
		return n
	}
	require.EqualValues(t, users, activeTotal())
	// A first submit folds the 3,000 users' pending counts (their rows in
	// user_deltas, one each: pre-fold version 16); the reads below are then a
	// submit's own.
	_, err = f.q.Submit(f.ctx, model.SubmitRequest{User: "u00001", Key: "first", Payload: `{}`, CostBudget: 1, StepsMax: 1})
	require.NoError(t, err)
	require.Less(t, f.rowCount("user_deltas"), 256)

	var outcome string
	read := f.usersRowsRead(func(tx *sql.Tx) {
		text, bound := f.args("submit_one", sql.Named("id", "new1"), sql.Named("user", "u00042"),
			sql.Named("key", "fresh"), sql.Named("hash", "h"), sql.Named("kind", "synthetic"), sql.Named("payload", "{}"), sql.Named("priority", 0),
			sql.Named("run_at", int64(0)), sql.Named("deadline", int64(0)), sql.Named("now", int64(1000)),
			sql.Named("cost_budget", int64(1)), sql.Named("steps_max", int64(1)), sql.Named("schedule_id", ""),
			sql.Named("schedule_run", int64(0)), sql.Named("actor", "a"), sql.Named("scope", ""),
			sql.Named("timely", true), sql.Named("replay_any_hash", false), sql.Named("depth_slack", int64(0)))
		var id sql.NullString
		var n, lim int64
		require.NoError(t, tx.QueryRowContext(f.ctx, text, bound...).Scan(&outcome, &id, &n, &lim))
	})
	require.Equal(t, "inserted", outcome)
	t.Logf("submit_one read %d users rows", read)
	require.Less(t, read, int64(20), "submit_one read %d users rows", read)

	read = f.usersRowsRead(func(tx *sql.Tx) {
		text, bound := f.args("user_depth", sql.Named("user", "u00042"), sql.Named("total", true))
		var active, limit, total int64
		require.NoError(t, tx.QueryRowContext(f.ctx, text, bound...).Scan(&active, &limit, &total))
		require.EqualValues(t, users+1, total, "the submit above was rolled back")
		text, bound = f.args("active_total")
		require.NoError(t, tx.QueryRowContext(f.ctx, text, bound...).Scan(&total))
		require.EqualValues(t, users+1, total, "the submit above was rolled back")
	})
	t.Logf("user_depth and active_total read %d users rows", read)
	require.Less(t, read, int64(20), "user_depth and active_total read %d users rows", read)

	// 300 lone submits add a state:queued row each; they fold them.
	for i := range 300 {
		_, err := f.q.Submit(f.ctx, model.SubmitRequest{User: fmt.Sprintf("u%05d", i+1), Key: "more",
			Payload: `{}`, CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
	}
	var stateRows int
	require.NoError(t, f.db.QueryRowContext(f.ctx, `SELECT COUNT(*) FROM tally_deltas
	    WHERE name IN ('state:queued', 'state:running', 'state:waiting_for_approval')`).Scan(&stateRows))
	require.Less(t, stateRows, 256, "300 submits, folded")
	require.EqualValues(t, users+301, activeTotal())
	var states, byUser, over int
	require.NoError(t, f.queryRow("counters_check").Scan(&states, &byUser, &over))
	require.Equal(t, [3]int{0, 0, 0}, [3]int{states, byUser, over})
}

// TestPostgresClaimAnyReadsNoTaskNotDue: an idle poll (claim_any) looks
// for a due task priority by priority, each look a descent of the claim
// index with the priority and run_at bound, and reads no task not yet
// due: read as one scan (before), 100,000 tasks due the next day made a
// poll read them all.
func TestPostgresClaimAnyReadsNoTaskNotDue(t *testing.T) {
	f := freshPostgres(t)
	_, err := f.db.ExecContext(f.ctx, `
INSERT INTO users (user_id) VALUES ('u1');
INSERT INTO tasks (id, user_id, idem_key, request_hash, payload, state, priority, run_at, deadline, attempts_max,
                   queued_at, cost_budget, steps_max, created_at, updated_at)
SELECT 't' || i, 'u1', 'k' || i, 'h', '{}', 'queued', i % 3, 999999999999, 0, 3, 0, 1, 1, 0, 0
FROM generate_series(1, 20000) i;
ANALYZE tasks`)
	require.NoError(t, err)
	whole := f.plan("claim_any", sql.Named("now", int64(1000)))
	require.Regexp(t, `Index Cond: \(\(priority = prio\.p\) AND \(run_at <= `, whole, "each priority's look is a descent:\n%s", whole)
	require.NotRegexp(t, `Bitmap Heap Scan on tasks|Seq Scan on tasks`, whole, whole)
	require.Empty(t, f.claimBatch("w", 4, 1000), "nothing is due")
	var found int
	require.ErrorIs(t, f.queryRow("claim_any", sql.Named("now", int64(1000))).Scan(&found), sql.ErrNoRows)
}
