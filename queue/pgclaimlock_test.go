package queue

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

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
// transaction holds its user's counter row (alice has a running limit, so
// the claim holds her key exclusive and her row), a task inserted for that
// user (its foreign key checks the row) goes through at once, and another
// claim still skips the held user; once the claim commits, the next claim
// takes the new task and the counters agree with the tasks. Before, the
// claim's FOR UPDATE held the insert until the claim ended (here: past the
// insert's lock timeout).
func TestPostgresSubmitPassesAClaimedUser(t *testing.T) {
	f := freshPostgres(t)
	f.insertTask("a1", "alice", 1000)
	f.insertTask("a2", "alice", 1000)
	f.setUserRunningMax("alice", 10)
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

// setUserRunningMax sets user's running limit (no depth limit).
func (f *pgFixture) setUserRunningMax(user string, max int) {
	f.t.Helper()
	f.exec("user_limit_set", sql.Named("user", user), sql.Named("running_max", max), sql.Named("depth_max", -1))
}

// waitBlockedBy returns once a backend waits for a lock the backend pid
// holds, and fails the test when none does by the test's deadline.
func (f *pgFixture) waitBlockedBy(pid int) {
	f.t.Helper()
	deadline, ok := f.t.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	ctx, cancel := context.WithDeadline(f.ctx, deadline)
	defer cancel()
	for blocked := false; !blocked; {
		require.NoError(f.t, f.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
		    WHERE $1 = ANY(pg_blocking_pids(pid)))`, pid).Scan(&blocked), "no backend waited for backend %d", pid)
	}
}

// TestPostgresLimitSetUnderAnUnlimitedClaim: claims of a user without a
// running limit do not exclude each other (each holds the user's key
// shared and counts its tasks as a row of changes); a limit set on the
// user while such a claim is open is still exact: a claim that would skip
// a held key leaves the user, and the first claim that counts the user
// under the limit waits for the open claim to end and then counts its
// tasks. bob runs 3 (open) + 1 tasks when his limit of 5 is set, so the
// waiting claim takes 1 of the 4 left; counting without the open claim's
// 3 it would take all 4.
func TestPostgresLimitSetUnderAnUnlimitedClaim(t *testing.T) {
	f := freshPostgres(t)
	for i := range 8 {
		f.insertTask(fmt.Sprintf("b%d", i), "bob", 1000)
	}
	holder, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	require.Len(t, f.claimIn(holder, "w1", 3, 2000), 3)
	var holderPID int
	require.NoError(t, holder.QueryRowContext(f.ctx, "SELECT pg_backend_pid()").Scan(&holderPID))

	other, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	require.Len(t, f.claimIn(other, "w2", 1, 2000), 1, "two claims of an unlimited user overlap")
	require.NoError(t, other.Commit())

	f.setUserRunningMax("bob", 5)
	skipper, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	require.Empty(t, f.claimIn(skipper, "w3", 4, 2000), "a claim that skips a held key leaves the user")
	require.NoError(t, skipper.Rollback())

	took := make(chan int, 1)
	failed := make(chan error, 1)
	go func() {
		var n int
		err := f.db.QueryRowContext(f.ctx,
			"SELECT COUNT(*) FROM complete_and_claim('[]', '[]', 2000, 4, 'w4', 7000, '', NULL)").Scan(&n)
		if err != nil {
			failed <- err
			return
		}
		took <- n
	}()
	f.waitBlockedBy(holderPID)
	require.NoError(t, holder.Commit())
	select {
	case err := <-failed:
		require.NoError(t, err)
	case n := <-took:
		require.Equal(t, 1, n, "the claim under the new limit counts the open claim's tasks")
	}
	var running int
	require.NoError(t, f.db.QueryRowContext(f.ctx, "SELECT COUNT(*) FROM tasks WHERE user_id = 'bob' AND state = 'running'").Scan(&running))
	require.Equal(t, 5, running, "bob runs at his limit, not past it")
	var states, users, over int
	require.NoError(t, f.queryRow("counters_check").Scan(&states, &users, &over))
	require.Equal(t, [3]int{0, 0, 0}, [3]int{states, users, over}, "the counters agree with the tasks")
}

// TestPostgresClaimPassesAHeldUserUnwritten: a claim tries its candidates'
// users before it locks any task, so the tasks of a user another
// transaction holds are not locked by it (a row lock is a write): with
// bob's key held exclusive elsewhere, a claim of three takes cy's task and
// leaves both of bob's tasks free to lock while it is still open.
func TestPostgresClaimPassesAHeldUserUnwritten(t *testing.T) {
	f := freshPostgres(t)
	f.insertTask("b1", "bob", 1000)
	f.insertTask("b2", "bob", 1000)
	f.insertTask("c1", "cy", 1001)
	f.setUserRunningMax("bob", 10)
	holder, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	_, err = holder.ExecContext(f.ctx, "SELECT pg_advisory_xact_lock(leasehold_user_key('bob'))")
	require.NoError(t, err)

	claimer, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	defer func() { _ = claimer.Rollback() }()
	require.Equal(t, []string{"c1"}, f.claimIn(claimer, "w1", 3, 2000), "the held user is passed")

	probe, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	defer func() { _ = probe.Rollback() }()
	var free int
	require.NoError(t, probe.QueryRowContext(f.ctx,
		"SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE user_id = 'bob' FOR UPDATE SKIP LOCKED) AS l").Scan(&free))
	require.Equal(t, 2, free, "the claim locked none of the held user's tasks")
	require.NoError(t, probe.Rollback())
	require.NoError(t, claimer.Commit())
	require.NoError(t, holder.Commit())
	var states, users, over int
	require.NoError(t, f.queryRow("counters_check").Scan(&states, &users, &over))
	require.Equal(t, [3]int{0, 0, 0}, [3]int{states, users, over}, "the counters agree with the tasks")
}

// TestPostgresFusedClaimWaitsOnlyWhenEveryUserIsHeld: complete_and_claim
// tries its candidates' users first and waits only when it got none: with
// bob's key held elsewhere and ana's free, a claim of two takes ana's two
// tasks at once and leaves bob's; with ana's key held too, it waits for
// bob's (the one user of its candidates) and takes his task once the
// holder ends.
func TestPostgresFusedClaimWaitsOnlyWhenEveryUserIsHeld(t *testing.T) {
	f := freshPostgres(t)
	f.insertTask("b1", "bob", 1000)
	f.insertTask("a1", "ana", 1001)
	f.insertTask("a2", "ana", 1002)
	f.setUserRunningMax("bob", 10)
	f.setUserRunningMax("ana", 10)
	holder, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	_, err = holder.ExecContext(f.ctx, "SELECT pg_advisory_xact_lock(leasehold_user_key('bob'))")
	require.NoError(t, err)
	claim := func() ([]string, error) {
		rows, err := f.db.QueryContext(f.ctx, "SELECT id FROM complete_and_claim('[]', '[]', 2000, 2, 'w1', 7000, '', NULL)")
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return nil, err
			}
			ids = append(ids, id)
		}
		return ids, rows.Err()
	}
	ids, err := claim()
	require.NoError(t, err)
	require.Equal(t, []string{"a1", "a2"}, ids, "bob's key is held: ana's tasks, without waiting")

	_, err = holder.ExecContext(f.ctx, "SELECT pg_advisory_xact_lock(leasehold_user_key('ana'))")
	require.NoError(t, err)
	var holderPID int
	require.NoError(t, holder.QueryRowContext(f.ctx, "SELECT pg_backend_pid()").Scan(&holderPID))
	type result struct {
		ids []string
		err error
	}
	done := make(chan result, 1)
	go func() {
		ids, err := claim()
		done <- result{ids, err}
	}()
	f.waitBlockedBy(holderPID)
	require.NoError(t, holder.Commit())
	got := <-done
	require.NoError(t, got.err)
	require.Equal(t, []string{"b1"}, got.ids, "bob waited for, and his task taken")
	var states, users, over int
	require.NoError(t, f.queryRow("counters_check").Scan(&states, &users, &over))
	require.Equal(t, [3]int{0, 0, 0}, [3]int{states, users, over}, "the counters agree with the tasks")
}
