package queue

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// TestUpgradeFromEverySchemaVersion builds a database at each earlier
// schema version, with users, a limit, tasks and a schedule written in
// that version's columns (user, before migration 0005 renamed it), and
// opens it with this build: every user survives the rename, the counters
// agree with a recount, and the per-user limit still holds.
func TestUpgradeFromEverySchemaVersion(t *testing.T) {
	migrations, err := Migrations()
	require.NoError(t, err)
	for version := 1; version < len(migrations); version++ {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "old.db")
			clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
			writeSchemaVersion(t, path, migrations[:version], model.Millis(clock.Now()))

			q, err := Open(ctx, Options{Path: path, Clock: clock, IDs: model.NewSeededIDs(1), Migrate: MigrateAll})
			require.NoError(t, err)
			defer q.Close()
			p, err := plan(ctx, q.db, q.sql)
			require.NoError(t, err)
			require.Len(t, p.applied, len(migrations))
			require.False(t, p.changes())
			require.NoError(t, q.CheckCounters(ctx))
			var columns string
			require.NoError(t, q.db.QueryRowContext(ctx,
				"SELECT group_concat(name) FROM pragma_table_info('tasks') WHERE name IN ('user_id', 'user')").Scan(&columns))
			require.Equal(t, "user_id", columns, "tasks has user_id and no user")

			for id, user := range map[string]string{"t_a1": "ana", "t_a2": "ana", "t_b1": "bob"} {
				task, err := q.Task(ctx, id)
				require.NoError(t, err)
				require.Equal(t, user, task.User, id)
				require.Equal(t, model.KindSynthetic, task.Kind, "a task written before kinds is synthetic")
			}
			_, users, err := q.Limits(ctx)
			require.NoError(t, err)
			require.Equal(t, []model.UserLimit{{User: "ana", RunningMax: 1, DepthMax: -1}}, users)
			schedules, err := q.Schedules(ctx)
			require.NoError(t, err)
			require.Len(t, schedules, 1)
			require.Equal(t, "bob", schedules[0].User)
			require.Equal(t, model.KindSynthetic, schedules[0].Kind, "a schedule written before kinds is synthetic")

			// ana runs t_a1 at her limit of one: only bob's task is claimable,
			// and t_a2 follows once t_a1 completes.
			claimed, err := q.Claim(ctx, model.ClaimRequest{Worker: "w2", Max: 2, Lease: time.Minute})
			require.NoError(t, err)
			require.Len(t, claimed, 1)
			require.Equal(t, "t_b1", claimed[0].Claim.TaskID)
			require.NoError(t, q.Complete(ctx, model.Claim{TaskID: "t_a1", Fence: 1, Owner: "w1", Attempt: 1}))
			claimed, err = q.Claim(ctx, model.ClaimRequest{Worker: "w2", Max: 2, Lease: time.Minute})
			require.NoError(t, err)
			require.Len(t, claimed, 1)
			require.Equal(t, "t_a2", claimed[0].Claim.TaskID)
			require.NoError(t, q.CheckCounters(ctx))
		})
	}
}

// writeSchemaVersion writes at path a database with the given migrations
// applied and recorded, holding: ana (running limit 1) with t_a1 running
// and t_a2 queued, bob with t_b1 queued and a schedule. The user column is
// user before migration 0005 and user_id from it on.
func writeSchemaVersion(t *testing.T, path string, migrations []Migration, now int64) {
	t.Helper()
	ctx := context.Background()
	texts, err := queries()
	require.NoError(t, err)
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	exec := func(query string, args ...any) {
		t.Helper()
		_, err := db.ExecContext(ctx, query, args...)
		require.NoError(t, err, query)
	}
	exec(texts["migrations_table"])
	for _, m := range migrations {
		exec(m.SQL)
		exec(texts["migration_record"], sql.Named("version", m.Version), sql.Named("name", m.Name),
			sql.Named("checksum", m.Checksum), sql.Named("now", now))
	}
	user := "user"
	if len(migrations) >= 5 {
		user = "user_id"
	}
	exec(`INSERT INTO users (` + user + `, running_max) VALUES ('ana', 1), ('bob', -1)`)
	for _, task := range []struct{ id, user string }{{"t_a1", "ana"}, {"t_a2", "ana"}, {"t_b1", "bob"}} {
		exec(`INSERT INTO tasks (id, `+user+`, idem_key, request_hash, payload, state, priority, run_at, attempts_max,
			queued_at, cost_budget, steps_max, created_at, updated_at)
			VALUES (?, ?, ?, 'h', '{}', 'queued', 0, ?, 3, ?, 10, 5, ?, ?)`, task.id, task.user, task.id, now, now, now, now)
		exec(`INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail)
			VALUES (?, 'submitted', 0, 0, '', '', 'queued', '', ?, ?, '')`, task.id, task.user, now)
	}
	exec(`UPDATE tasks SET state = 'running', version = 1, owner = 'w1', lease_until = ?, claimed_at = ? WHERE id = 't_a1'`,
		now+60_000, now)
	exec(`INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail)
		VALUES ('t_a1', 'claimed', 1, 1, '', 'queued', 'running', '', 'w1', ?, '')`, now)
	exec(`INSERT INTO schedules (id, `+user+`, payload, cost_budget, steps_max, priority, origin, period_ms, created_at)
		VALUES ('s_1', 'bob', '{}', 10, 5, 0, ?, 60000, ?)`, now, now)
}
