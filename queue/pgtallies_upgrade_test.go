package queue

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// pgTalliesEpoch is when writeUnkindedTallies's tasks were written.
var pgTalliesEpoch = time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)

// writeUnkindedTallies migrates the schema at url as a build at schema
// version 4 did, before migration 0005 (counts by kind): migrations 0001
// to 0004 and that build's functions (version 6, kept in testdata), each
// recorded. It then writes through that build's functions and triggers:
// ana's synthetic t_s1 and bob's report tasks t_r1 and t_r2 submitted;
// t_r1 claimed, completed and pruned with its events; and a stale write
// naming a task that does not exist.
func writeUnkindedTallies(ctx context.Context, url string) error {
	build := pgOldBuild{Migrations: 4, Functions: "pg-functions-v6.sql", FunctionsVersion: 6, At: pgTalliesEpoch}
	return writeOldPostgres(ctx, url, build, func(w pgOldWriter) []func() error {
		now := w.now
		var steps []func() error
		for _, task := range []struct{ id, user, kind string }{{"t_s1", "ana", "synthetic"}, {"t_r1", "bob", "report"}, {"t_r2", "bob", "report"}} {
			steps = append(steps, w.submit(task.id, `SELECT outcome FROM submit_one($1, $2, $3, 'h', $4, '{}', 0, $5, 0, $5, 10, 5, '', 0, $2, '', true)`,
				task.id, task.user, "k-"+task.id, task.kind, now))
		}
		const event = `INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
		VALUES ($1, $2, 1, 1, '', $3, $4, '', 'w1', $5, '', '')`
		return append(steps,
			w.exec(`UPDATE tasks SET state = 'running', version = 1, owner = 'w1', lease_until = $1, claimed_at = $2, updated_at = $2
			WHERE id = 't_r1'`, now+60_000, now),
			w.exec(event, "t_r1", "claimed", "queued", "running", now),
			w.exec(`UPDATE tasks SET state = 'completed', owner = '', lease_until = 0, updated_at = $1 WHERE id = 't_r1'`, now+10),
			w.exec(event, "t_r1", "completed", "running", "completed", now+10),
			w.exec(event, "t_gone", "stale_write", "", "", now+10),
			func() error {
				tx, err := w.db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer tx.Rollback()
				for _, stmt := range []string{
					fmt.Sprintf("SELECT set_config('leasehold.prune_cutoff', '%d', true)", now+10),
					"DELETE FROM events WHERE task_id = 't_r1'",
					"DELETE FROM tasks WHERE id = 't_r1'",
				} {
					if _, err := tx.ExecContext(ctx, stmt); err != nil {
						return fmt.Errorf("%s: %w", stmt, err)
					}
				}
				return tx.Commit()
			})
	})
}

// TestPostgresUpgradesTalliesToKinds opens, with this build, a schema a
// build at schema version 4 wrote: migration 0005 recounts the events the
// trail holds by their tasks' kinds and files the rest (the pruned task's,
// and the stale write of no task) under the unknown kind. Every total is
// unchanged, the counts by kind sum to them, they then move by kind
// through the functions that count their own writes (claim, complete) and
// through a prune, and the schema is a fresh one's object for object.
func TestPostgresUpgradesTalliesToKinds(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.Fresh(t, writeUnkindedTallies)
	clock := clockwork.NewFakeClockAt(pgTalliesEpoch.Add(time.Second))
	q, err := Open(ctx, Options{Path: dbURL, Clock: clock, IDs: model.NewSeededIDs(1), Migrate: MigrateAll})
	require.NoError(t, err)
	defer q.Close()
	applied, pending, err := Inspect(ctx, dbURL)
	require.NoError(t, err)
	require.Empty(t, pending)
	require.Equal(t, "0005_kind_tallies.sql", applied[4].Name)
	require.NoError(t, q.CheckCounters(ctx))

	metrics := func() model.Metrics {
		t.Helper()
		m, err := q.Metrics(ctx)
		require.NoError(t, err)
		require.True(t, m.Reconciles(), "%+v", m)
		return m
	}
	unknown := model.Counts{Submitted: 1, Completions: 1, Pruned: 1, StaleWrites: 1}
	m := metrics()
	require.Equal(t, model.Counts{Submitted: 3, Completions: 1, Pruned: 1, StaleWrites: 1}, m.Totals(), "the totals are unchanged")
	require.Equal(t, map[string]model.Counts{
		model.KindSynthetic: {Submitted: 1},
		"report":            {Submitted: 1},
		model.KindUnknown:   unknown,
	}, m.ByKind)

	claimed, err := q.Claim(ctx, model.ClaimRequest{Worker: "w2", Max: 2, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	for _, c := range claimed {
		require.NoError(t, q.Complete(ctx, c.Claim))
	}
	clock.Advance(48 * time.Hour)
	res, err := q.Prune(ctx, PruneRequest{OlderThan: 24 * time.Hour, Actor: "ops"})
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Tasks[model.Completed], "t_s1; t_r2 is the newest task, which a prune keeps")
	m = metrics()
	require.Equal(t, map[string]model.Counts{
		model.KindSynthetic: {Submitted: 1, Completions: 1, Pruned: 1},
		"report":            {Submitted: 1, Completions: 1},
		model.KindUnknown:   unknown,
	}, m.ByKind)
	require.NoError(t, q.CheckCounters(ctx))
	require.Equal(t, describeSchema(ctx, t, pgtest.Fresh(t, migratePostgresURL)), describeSchema(ctx, t, dbURL))
}
