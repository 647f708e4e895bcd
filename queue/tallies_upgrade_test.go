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

// TestUpgradeGivesTheCountsKinds opens, with this build, a database a
// build at schema version 9 wrote (kinds, but counts without them):
// synthetic t_a1 (running), t_a2 and t_b1, and report tasks t_r1
// (completed, then pruned with its events) and t_r2 (queued). Migration
// 0010 recounts the events the trail holds by their tasks' kinds and
// files the rest (the pruned task's) under the unknown kind: every total
// is unchanged, and the counts by kind sum to them. The counts then move
// by kind.
func TestUpgradeGivesTheCountsKinds(t *testing.T) {
	ctx := context.Background()
	migrations, err := Migrations()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "v9.db")
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	now := model.Millis(clock.Now())
	writeSchemaVersion(t, path, migrations[:9], now)

	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	exec := func(query string, args ...any) {
		t.Helper()
		_, err := db.ExecContext(ctx, query, args...)
		require.NoError(t, err, query)
	}
	event := func(id, kind, from, to string) {
		t.Helper()
		exec(`INSERT INTO events (task_id, task_seq, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail)
			VALUES (?, (SELECT seq FROM tasks WHERE id = ?), ?, 1, 1, '', ?, ?, '', 'w1', ?, '')`, id, id, kind, from, to, now)
	}
	for _, id := range []string{"t_r1", "t_r2"} {
		exec(`INSERT INTO tasks (id, user_id, idem_key, request_hash, kind, payload, state, priority, run_at, attempts_max,
			queued_at, cost_budget, steps_max, created_at, updated_at)
			VALUES (?, 'bob', ?, 'h', 'report', '{}', 'queued', 0, ?, 3, ?, 10, 5, ?, ?)`, id, id, now, now, now, now)
		event(id, "submitted", "", "queued")
	}
	exec(`UPDATE tasks SET state = 'running', version = 1, owner = 'w1', lease_until = ?, claimed_at = ? WHERE id = 't_r1'`,
		now+60_000, now)
	event("t_r1", "claimed", "queued", "running")
	exec(`UPDATE tasks SET state = 'completed', owner = '', lease_until = 0, updated_at = ? WHERE id = 't_r1'`, now)
	event("t_r1", "completed", "running", "completed")
	exec(`INSERT INTO prune_gate (cutoff) VALUES (?)`, now)
	exec(`DELETE FROM events WHERE task_id = 't_r1'`)
	exec(`DELETE FROM tasks WHERE id = 't_r1'`)
	exec(`DELETE FROM prune_gate`)
	require.NoError(t, db.Close())

	q, err := Open(ctx, Options{Path: path, Clock: clock, IDs: model.NewSeededIDs(1), Migrate: MigrateAll})
	require.NoError(t, err)
	defer q.Close()
	require.NoError(t, q.CheckCounters(ctx))
	m, err := q.Metrics(ctx)
	require.NoError(t, err)
	require.True(t, m.Reconciles(), "%+v", m)
	require.Equal(t, model.Counts{Submitted: 5, Completions: 1, Pruned: 1}, m.Totals(), "the totals are unchanged")
	require.Equal(t, map[string]model.Counts{
		model.KindSynthetic: {Submitted: 3},
		"report":            {Submitted: 1},
		model.KindUnknown:   {Submitted: 1, Completions: 1, Pruned: 1},
	}, m.ByKind)

	// From now on each event counts under its task's kind.
	require.NoError(t, q.Complete(ctx, model.Claim{TaskID: "t_a1", Fence: 1, Owner: "w1", Attempt: 1}))
	_, err = q.Submit(ctx, model.SubmitRequest{User: "bob", Key: "r3", Kind: "report", Payload: `{}`, CostBudget: 1, StepsMax: 1})
	require.NoError(t, err)
	m, err = q.Metrics(ctx)
	require.NoError(t, err)
	require.True(t, m.Reconciles(), "%+v", m)
	require.Equal(t, map[string]model.Counts{
		model.KindSynthetic: {Submitted: 3, Completions: 1},
		"report":            {Submitted: 2},
		model.KindUnknown:   {Submitted: 1, Completions: 1, Pruned: 1},
	}, m.ByKind)
}
