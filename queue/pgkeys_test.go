package queue

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPostgresUserListingsReadATaskAKey: a user's listings walk
// task_keys_user and read each task by its seq (pre-fold version 13), however
// far into a long table the user's page starts. Joined as a whole, the
// planner walked tasks_pkey from its start to the page's first key (a
// merge join: 100,000 rows for a page of 50 at the end of 300,000 tasks).
func TestPostgresUserListingsReadATaskAKey(t *testing.T) {
	f := freshPostgres(t)
	_, err := f.db.ExecContext(f.ctx, `
INSERT INTO users (user_id) SELECT 'u' || i FROM generate_series(0, 3) i;
INSERT INTO tasks (id, user_id, idem_key, request_hash, payload, state, priority, run_at, deadline, attempts_max,
                   queued_at, cost_budget, steps_max, created_at, updated_at)
SELECT 't' || i, 'u' || (i % 4), 'k' || i, 'h', '{}', 'completed', 0, 0, 0, 3, 0, 1, 1, 0, 0
FROM generate_series(1, 100000) i;
INSERT INTO task_keys (user_id, idem_key, seq) SELECT user_id, idem_key, seq FROM tasks;
ANALYZE tasks;
ANALYZE task_keys`)
	require.NoError(t, err)
	var last int64
	require.NoError(t, f.db.QueryRowContext(f.ctx, "SELECT MAX(seq) - 2000 FROM tasks").Scan(&last))

	for _, c := range []struct {
		name string
		args []any
	}{
		{"list_by_user", []any{sql.Named("user", "u1"), sql.Named("limit", 50)}},
		{"list_by_user_state", []any{sql.Named("user", "u1"), sql.Named("state", "completed"), sql.Named("limit", 50)}},
		{"list_page_by_user", []any{sql.Named("user", "u1"), sql.Named("after", last), sql.Named("state", ""),
			sql.Named("created_from", int64(0)), sql.Named("created_until", int64(1)), sql.Named("schedule_id", ""), sql.Named("kind", ""),
			sql.Named("limit", 50)}},
	} {
		whole := f.plan(c.name, c.args...)
		require.Contains(t, whole, "Index Cond: (seq = k.seq)", "%s reads each task by its key's seq:\n%s", c.name, whole)
		require.NotContains(t, whole, "Merge Join", c.name)
		require.Contains(t, whole, "task_keys_user", c.name)

		got := f.count(c.name, c.args...)
		require.Equal(t, 50, got, c.name)
	}
}

// plan returns the plan the server chooses for the named query, bound to
// args (EXPLAIN), one line a step.
func (f *pgFixture) plan(name string, args ...any) string {
	f.t.Helper()
	text, bound := f.args(name, args...)
	rows, err := f.db.QueryContext(f.ctx, "EXPLAIN "+text, bound...)
	require.NoError(f.t, err, name)
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var line string
		require.NoError(f.t, rows.Scan(&line))
		lines = append(lines, line)
	}
	require.NoError(f.t, rows.Err())
	return strings.Join(lines, "\n")
}

// count runs the named listing and counts its rows.
func (f *pgFixture) count(name string, args ...any) int {
	f.t.Helper()
	rows := f.query(name, args...)
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	require.NoError(f.t, rows.Err())
	return n
}
