package queue

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// TestMigration0002CarriesCounters builds a database at schema version 1
// with tasks, events and histograms written as version 1 kept them, then
// opens it with this build: migration 0002 must carry every count into
// tallies, flag the limited user's queued tasks, and leave a queue that
// enforces the limit as before.
func TestMigration0002CarriesCounters(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v1.db")
	migrations, err := Migrations()
	require.NoError(t, err)
	queries, err := queries()
	require.NoError(t, err)
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	now := model.Millis(clock.Now())

	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	exec := func(query string, args ...any) {
		t.Helper()
		_, err := db.ExecContext(ctx, query, args...)
		require.NoError(t, err, query)
	}
	exec(queries["migrations_table"])
	exec(migrations[0].SQL)
	exec(queries["migration_record"], sql.Named("version", 1), sql.Named("name", migrations[0].Name),
		sql.Named("checksum", migrations[0].Checksum), sql.Named("now", now))
	// ana may run one task; bob is unlimited.
	exec(`INSERT INTO users (user, running_max) VALUES ('ana', 1), ('bob', -1)`)
	for _, task := range []struct{ id, user string }{{"t_a1", "ana"}, {"t_a2", "ana"}, {"t_b1", "bob"}} {
		exec(`INSERT INTO tasks (id, user, idem_key, request_hash, payload, state, priority, run_at, attempts_max,
			queued_at, cost_budget, steps_max, created_at, updated_at)
			VALUES (?, ?, ?, 'h', '{}', 'queued', 0, ?, 3, ?, 10, 5, ?, ?)`, task.id, task.user, task.id, now, now, now, now)
		exec(`INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail)
			VALUES (?, 'submitted', 0, 0, '', '', 'queued', '', ?, ?, '')`, task.id, task.user, now)
	}
	for _, id := range []string{"t_a1", "t_b1"} {
		exec(`UPDATE tasks SET state = 'running', version = 1, owner = 'w1', lease_until = ?, claimed_at = ? WHERE id = ?`,
			now+60_000, now, id)
		exec(`INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail)
			VALUES (?, 'claimed', 1, 1, '', 'queued', 'running', '', 'w1', ?, '')`, id, now)
	}
	exec(`UPDATE tasks SET state = 'completed', owner = '', lease_until = 0 WHERE id = 't_b1'`)
	exec(`INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail)
		VALUES ('t_b1', 'completed', 1, 1, '', 'running', 'completed', '', 'w1', ?, '')`, now)
	exec(`INSERT INTO histograms (name, bucket, n, sum_ms) VALUES ('queue_wait', 0, 2, 7), ('run_time', 6, 1, 2000)`)
	var blocked int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT blocked FROM tasks WHERE id = 't_a2'`).Scan(&blocked))
	require.Equal(t, 1, blocked, "version 1 blocked ana's second task")
	require.NoError(t, db.Close())

	q, err := Open(ctx, Options{Path: path, Clock: clock, IDs: model.NewSeededIDs(1), Migrate: MigrateAll})
	require.NoError(t, err)
	defer q.Close()
	require.NoError(t, q.CheckCounters(ctx))
	m, err := q.Metrics(ctx)
	require.NoError(t, err)
	require.Equal(t, map[model.State]int64{model.Queued: 1, model.Running: 1, model.WaitingForApproval: 0,
		model.NeedsReview: 0, model.Completed: 1, model.Failed: 0, model.Cancelled: 0}, m.Depth)
	require.EqualValues(t, 3, m.Submitted)
	require.EqualValues(t, 1, m.Completions)
	require.True(t, m.Reconciles())
	require.EqualValues(t, 2, m.QueueWait.Counts[0])
	require.EqualValues(t, 7, m.QueueWait.SumMs)
	require.EqualValues(t, 1, m.RunTime.Counts[6])
	require.EqualValues(t, 2000, m.RunTime.SumMs)
	var limited int
	require.NoError(t, q.db.QueryRowContext(ctx, `SELECT limited FROM tasks WHERE id = 't_a2'`).Scan(&limited))
	require.Equal(t, 1, limited)

	// The limit still holds, and lifts when ana's running task ends.
	claimed, err := q.Claim(ctx, model.ClaimRequest{Worker: "w2", Max: 1, Lease: time.Minute})
	require.NoError(t, err)
	require.Empty(t, claimed)
	require.NoError(t, q.Complete(ctx, model.Claim{TaskID: "t_a1", Fence: 1, Owner: "w1", Attempt: 1}))
	claimed, err = q.Claim(ctx, model.ClaimRequest{Worker: "w2", Max: 1, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, "t_a2", claimed[0].Claim.TaskID)
	require.NoError(t, q.CheckCounters(ctx))
}
