package queue

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// pinnedPostgresMigrations holds the SHA-256 of every PostgreSQL migration
// file: committed migrations never change.
var pinnedPostgresMigrations = map[string]string{
	"0001_init.sql": "2d91203602c3ac18a3b1f5539564051eeae3473910869a7830f086ba8ec052cf",
}

func TestPostgresMigrationsArePinned(t *testing.T) {
	migrations, err := PostgresMigrations()
	require.NoError(t, err)
	require.NotEmpty(t, migrations)
	for i, m := range migrations {
		require.Equal(t, i+1, m.Version)
		pinned, ok := pinnedPostgresMigrations[m.Name]
		require.True(t, ok, "migration %s is not pinned; add its checksum to pinnedPostgresMigrations", m.Name)
		body, err := postgresFiles.ReadFile("sql/postgres/migrations/" + m.Name)
		require.NoError(t, err)
		sum := sha256.Sum256(body)
		require.Equal(t, pinned, hex.EncodeToString(sum[:]), "committed migration %s changed", m.Name)
		require.Equal(t, pinned, m.Checksum)
	}
	require.Len(t, migrations, len(pinnedPostgresMigrations), "a pinned migration is gone")
}

// postgresOnlyQueries and sqliteOnlyQueries are the differences between the
// two stores' query lists, each for a reason the PostgreSQL files state:
// the claim locks its users' counter rows (no blocked flags to re-block),
// migrations and event followers take advisory locks first.
var (
	postgresOnlyQueries = []string{"claim_users_lock", "events_after_lock", "migrations_lock"}
	sqliteOnlyQueries   = []string{"reblock_all", "reblock_user"}
)

func TestPostgresQueriesMatchSQLite(t *testing.T) {
	sqlite, err := queries()
	require.NoError(t, err)
	pg, err := postgresQueries()
	require.NoError(t, err)
	var onlySQLite, onlyPG []string
	for name := range sqlite {
		if _, ok := pg[name]; !ok && name != "task_columns" && !isBrokenVariant(name) {
			onlySQLite = append(onlySQLite, name)
		}
	}
	for name := range pg {
		if _, ok := sqlite[name]; !ok {
			onlyPG = append(onlyPG, name)
		}
	}
	slices.Sort(onlySQLite)
	slices.Sort(onlyPG)
	require.Equal(t, sqliteOnlyQueries, onlySQLite)
	require.Equal(t, postgresOnlyQueries, onlyPG)
}

// isBrokenVariant reports whether name is a broken variant's query (from
// broken.sql, in a leasehold_broken build).
func isBrokenVariant(name string) bool {
	for _, suffix := range []string{"_any_user", "_after_expiry", "_past_deadline", "_after_run_at"} {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

func TestRewriteNamed(t *testing.T) {
	for _, tc := range []struct {
		in, out string
		params  []string
	}{
		{"SELECT :a, :b, :a", "SELECT $1, $2, $1", []string{"a", "b"}},
		{"SELECT x::BIGINT FROM t WHERE y = :y_2", "SELECT x::BIGINT FROM t WHERE y = $1", []string{"y_2"}},
		{"SELECT 'state:queued', ':not' || :p", "SELECT 'state:queued', ':not' || $1", []string{"p"}},
		{"SELECT 'it''s :x' -- :y\n, :z", "SELECT 'it''s :x' -- :y\n, $1", []string{"z"}},
		{`SELECT "a:b" FROM t`, `SELECT "a:b" FROM t`, nil},
		{"CREATE FUNCTION f() AS $$ SELECT :x $$", "CREATE FUNCTION f() AS $$ SELECT :x $$", nil},
		{"SELECT $body$ :x $body$, :y", "SELECT $body$ :x $body$, $1", []string{"y"}},
		{"SELECT a FROM t WHERE b = ANY(:users)", "SELECT a FROM t WHERE b = ANY($1)", []string{"users"}},
	} {
		out, params, err := rewriteNamed(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.out, out, tc.in)
		require.Equal(t, tc.params, params, tc.in)
	}
	for _, bad := range []string{"SELECT $1", "SELECT 'open", `SELECT "open`, "SELECT $$ open"} {
		_, _, err := rewriteNamed(bad)
		require.Error(t, err, bad)
	}
}

func TestOrderedArguments(t *testing.T) {
	params := map[string][]string{"q": {"b", "a"}}
	named := func(n string, v any) driverValue { return driverValue{Name: n, Value: v} }
	got, err := ordered(params, "q", namedValues2(named("a", 1), named("b", 2)))
	require.NoError(t, err)
	require.Equal(t, []any{2, 1}, valuesOf(got))
	require.Equal(t, []int{1, 2}, ordinalsOf(got))

	_, err = ordered(params, "q", namedValues2(named("a", 1)))
	require.ErrorContains(t, err, "needs argument b")
	_, err = ordered(params, "q", namedValues2(named("a", 1), named("b", 2), named("c", 3)))
	require.ErrorContains(t, err, "no parameter c")
	_, err = ordered(params, "other", namedValues2(named("a", 1)))
	require.ErrorIs(t, err, errNamedUnknown)
	positional, err := ordered(params, "other", namedValues2(named("", 7)))
	require.NoError(t, err)
	require.Equal(t, []any{7}, valuesOf(positional))
}

// migratePostgresURL is the pgtest.Setup of this package's PostgreSQL
// tests: the store's migrations, recorded at the Unix epoch.
func migratePostgresURL(ctx context.Context, url string) error {
	db, err := openPostgresDB(url)
	if err != nil {
		return err
	}
	defer db.Close()
	return migratePostgres(ctx, db, MigrateNew, time.UnixMilli(0))
}

// freshPostgres returns a pool on a new, migrated PostgreSQL schema.
func freshPostgres(t *testing.T) *sql.DB {
	t.Helper()
	url := pgtest.Fresh(t, migratePostgresURL)
	db, err := openPostgresDB(url)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// TestPostgresQueriesPrepare: the server parses and types every query of
// the store against the migrated schema.
func TestPostgresQueriesPrepare(t *testing.T) {
	db := freshPostgres(t)
	ctx := context.Background()
	texts, err := postgresQueries()
	require.NoError(t, err)
	applied, pending, err := planPostgres(ctx, db, texts)
	require.NoError(t, err)
	require.Empty(t, pending)
	require.Len(t, applied, len(pinnedPostgresMigrations))
	for name, q := range texts {
		stmt, err := db.PrepareContext(ctx, q.Text)
		require.NoError(t, err, "prepare %s", name)
		require.NoError(t, stmt.Close())
	}
}

// TestPostgresSchemaStatesMatchModel: the states and reasons CHECK lists are
// the model's, and the server enforces them.
func TestPostgresSchemaStatesMatchModel(t *testing.T) {
	migrations, err := PostgresMigrations()
	require.NoError(t, err)
	text := migrations[0].SQL
	var states []string
	for _, s := range model.States() {
		states = append(states, string(s))
	}
	require.Equal(t, states, checkList(t, text, "state"))
	reasons := []string{""}
	for _, r := range model.Reasons() {
		reasons = append(reasons, string(r))
	}
	require.Equal(t, reasons, checkList(t, text, "reason"))

	db := freshPostgres(t)
	ctx := context.Background()
	pgInsertTask(t, db, "t1", "alice", 0)
	_, err = db.ExecContext(ctx, "UPDATE tasks SET state = 'paused' WHERE id = 't1'")
	require.ErrorContains(t, err, "tasks_state_check")
	_, err = db.ExecContext(ctx, "UPDATE tasks SET reason = 'tired' WHERE id = 't1'")
	require.ErrorContains(t, err, "tasks_reason_check")
}

// pgInsertTask submits a bare task through the store's statements.
func pgInsertTask(t *testing.T, db *sql.DB, id, user string, now int64) {
	t.Helper()
	texts, err := postgresQueries()
	require.NoError(t, err)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.ExecContext(ctx, texts["user_ensure"].Text, sql.Named("user", user))
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, texts["task_insert"].Text, sql.Named("id", id), sql.Named("user", user),
		sql.Named("key", "k-"+id), sql.Named("hash", "h"), sql.Named("payload", "{}"), sql.Named("priority", 0),
		sql.Named("run_at", now), sql.Named("deadline", 0), sql.Named("attempts_max", 3), sql.Named("now", now),
		sql.Named("cost_budget", 10), sql.Named("steps_max", 10), sql.Named("schedule_id", ""), sql.Named("schedule_run", 0))
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
}

// TestPostgresTriggersKeepTheCounters: the triggers count tasks by state,
// running and active tasks by user, and the two distributions, as
// SQLite's do, and counters_check finds them in agreement.
func TestPostgresTriggersKeepTheCounters(t *testing.T) {
	db := freshPostgres(t)
	ctx := context.Background()
	texts, err := postgresQueries()
	require.NoError(t, err)
	exec := func(name string, args ...any) int64 {
		t.Helper()
		res, err := db.ExecContext(ctx, texts[name].Text, args...)
		require.NoError(t, err, name)
		n, err := res.RowsAffected()
		require.NoError(t, err)
		return n
	}
	pgInsertTask(t, db, "t1", "alice", 1000)
	pgInsertTask(t, db, "t2", "alice", 1000)
	pgInsertTask(t, db, "t3", "bob", 1000)
	var seq int64
	require.NoError(t, db.QueryRowContext(ctx, "SELECT seq FROM tasks WHERE id = 't1'").Scan(&seq))
	require.EqualValues(t, 1, exec("claim_task", sql.Named("seq", seq), sql.Named("owner", "w1"),
		sql.Named("lease_until", int64(9000)), sql.Named("now", int64(1040))))
	require.EqualValues(t, 1, exec("settle", sql.Named("to_state", "completed"), sql.Named("reason", ""),
		sql.Named("run_at", int64(1000)), sql.Named("now", int64(1300)), sql.Named("attempts_charged", 0),
		sql.Named("attempts_failed", 0), sql.Named("last_error", ""), sql.Named("cancelled_by", ""),
		sql.Named("approved_by", ""), sql.Named("cost_budget", 10), sql.Named("steps_max", 10),
		sql.Named("id", "t1"), sql.Named("from_state", "running"), sql.Named("version", 1)))
	require.NoError(t, db.QueryRowContext(ctx, "SELECT seq FROM tasks WHERE id = 't2'").Scan(&seq))
	require.EqualValues(t, 1, exec("claim_task", sql.Named("seq", seq), sql.Named("owner", "w1"),
		sql.Named("lease_until", int64(9000)), sql.Named("now", int64(1300))))

	tallies := map[string][2]int64{}
	rows, err := db.QueryContext(ctx, texts["tallies_all"].Text)
	require.NoError(t, err)
	for rows.Next() {
		var name string
		var n, sum int64
		require.NoError(t, rows.Scan(&name, &n, &sum))
		tallies[name] = [2]int64{n, sum}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, [2]int64{1, 0}, tallies["state:queued"])
	require.Equal(t, [2]int64{1, 0}, tallies["state:running"])
	require.Equal(t, [2]int64{1, 0}, tallies["state:completed"])
	require.Equal(t, [2]int64{0, 0}, tallies["state:failed"])
	require.Equal(t, [2]int64{1, 40}, tallies["queue_wait:1"], "t1 waited 40 ms")
	require.Equal(t, [2]int64{1, 300}, tallies["queue_wait:4"], "t2 waited 300 ms")
	require.Equal(t, [2]int64{1, 260}, tallies["run_time:4"], "t1 ran 260 ms")

	var states, users, over int
	require.NoError(t, db.QueryRowContext(ctx, texts["counters_check"].Text).Scan(&states, &users, &over))
	require.Equal(t, [3]int{0, 0, 0}, [3]int{states, users, over})
	var active int64
	require.NoError(t, db.QueryRowContext(ctx, texts["active_total"].Text).Scan(&active))
	require.EqualValues(t, 2, active)

	rows, err = db.QueryContext(ctx, texts["claim_users_lock"].Text, sql.Named("users", []string{"bob", "alice", "carol"}))
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var user string
		var running, limit int64
		require.NoError(t, rows.Scan(&user, &running, &limit))
		got = append(got, user+":"+strings.Repeat("r", int(running)))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"alice:r", "bob:"}, got, "in user order, with running counts")

	// A counter that drifts is found.
	_, err = db.ExecContext(ctx, "UPDATE users SET running = 5 WHERE user_id = 'bob'")
	require.NoError(t, err)
	require.NoError(t, db.QueryRowContext(ctx, texts["counters_check"].Text).Scan(&states, &users, &over))
	require.Equal(t, 1, users)
}

// TestPostgresBucketsMatchModel: leasehold_bucket repeats
// model.HistogramBounds, so it buckets every duration as model.BucketOf.
func TestPostgresBucketsMatchModel(t *testing.T) {
	db := freshPostgres(t)
	ms := []int64{0, 1}
	for _, b := range model.HistogramBounds {
		ms = append(ms, b-1, b, b+1)
	}
	for _, v := range ms {
		var got int
		require.NoError(t, db.QueryRowContext(context.Background(), "SELECT leasehold_bucket($1)", v).Scan(&got))
		require.Equal(t, model.BucketOf(v), got, "%d ms", v)
	}
}
