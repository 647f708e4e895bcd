package queue

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"
)

// claimIn runs claim_batch for owner inside tx and returns the ids taken.
func (f *pgFixture) claimIn(tx *sql.Tx, owner string, max int, now int64) []string {
	f.t.Helper()
	text, bound := f.args("claim_batch", sql.Named("now", now), sql.Named("due", now), sql.Named("alive", now),
		sql.Named("max", max), sql.Named("owner", owner), sql.Named("lease_until", now+5000),
		sql.Named("user_limits", true), sql.Named("kinds", ""))
	rows, err := tx.QueryContext(f.ctx, text, bound...)
	require.NoError(f.t, err)
	tasks, err := scanTasks(rows)
	require.NoError(f.t, err)
	var ids []string
	for _, task := range tasks {
		ids = append(ids, task.ID)
	}
	return ids
}

// TestPostgresSubmitPassesAClaimedUser (pre-fold version 9): while a claim's
// transaction holds its user's counter row, a task inserted for that user
// (its foreign key checks the row) goes through at once, and another claim
// still skips the held user; once the claim commits, the next claim takes
// the new task and the counters agree with the tasks. Before, the claim's
// FOR UPDATE held the insert until the claim ended (here: past the
// insert's lock timeout).
func TestPostgresSubmitPassesAClaimedUser(t *testing.T) {
	f := freshPostgres(t)
	f.insertTask("a1", "alice", 1000)
	f.insertTask("a2", "alice", 1000)
	holder, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	require.Equal(t, []string{"a1"}, f.claimIn(holder, "w1", 1, 2000))

	submit, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	defer func() { _ = submit.Rollback() }()
	_, err = submit.ExecContext(f.ctx, "SET LOCAL lock_timeout = '10s'")
	require.NoError(t, err)
	text, bound := f.args("task_insert", sql.Named("id", "a3"), sql.Named("user", "alice"),
		sql.Named("key", "k-a3"), sql.Named("hash", "h"), sql.Named("kind", "synthetic"), sql.Named("payload", "{}"), sql.Named("priority", 5),
		sql.Named("run_at", int64(1000)), sql.Named("deadline", 0), sql.Named("attempts_max", 3),
		sql.Named("now", int64(1000)), sql.Named("cost_budget", 10), sql.Named("steps_max", 10),
		sql.Named("schedule_id", ""), sql.Named("schedule_run", 0))
	_, err = submit.ExecContext(f.ctx, text, bound...)
	require.NoError(t, err, "a task inserted for a user whose row a claim holds")
	require.NoError(t, submit.Commit())

	other, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	require.Empty(t, f.claimIn(other, "w2", 2, 2000), "a claim skips the user another claim holds")
	require.NoError(t, other.Rollback())
	require.NoError(t, holder.Commit())

	next, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"a3", "a2"}, f.claimIn(next, "w2", 2, 2000), "a3 first: its priority is higher")
	require.NoError(t, next.Commit())
	var states, users, over int
	require.NoError(t, f.queryRow("counters_check").Scan(&states, &users, &over))
	require.Equal(t, [3]int{0, 0, 0}, [3]int{states, users, over}, "the counters agree with the tasks")
}
