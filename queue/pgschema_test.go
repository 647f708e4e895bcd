package queue

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// pinnedPostgresMigrations holds the SHA-256 of every PostgreSQL migration
// file: committed migrations never change.
var pinnedPostgresMigrations = map[string]string{
	"0001_init.sql":                         "2d91203602c3ac18a3b1f5539564051eeae3473910869a7830f086ba8ec052cf",
	"0002_prune.sql":                        "66cdbd08678cf70e9980764d0e4c6f5785bc3b0aefdbfcfa7ada89085b0df784",
	"0003_user_deltas.sql":                  "61b73a8c10e723110e942cd00c2af532fc221ee327901b6c7ee0fbf8b3debab8",
	"0004_statement_counters.sql":           "44d08a39e0118fd0f22a63a29c9e97107ceeb5e5907208cb5a580b496e7ade17",
	"0005_claim_function.sql":               "433626bf1a15ce0fa0c417a0abd77bd2626007e0fa96bdb11b90518d3c054185",
	"0006_lean_hot_path.sql":                "bfcfb780e294140e9e50921ea7243af50b68ec30fb0b0b3b35734a32d1104f87",
	"0007_claim_without_bitmaps.sql":        "a5c44a1ecf6442816bc5abdbe9824402b16a2dbe6e31f9cd1193c807fe6ebeca",
	"0008_fused_group_counts_itself.sql":    "0cc9eca48c757a560249a6a02fc5a99eb21b0efc799765e7e41bc4921288117a",
	"0009_claim_lets_submits_pass.sql":      "267645c1144105b79dbbef8de8181018780a67304f6737b0ba713a4908059273",
	"0010_fused_claim_inline.sql":           "da145f19d54134313ea23d7e25dc7969c4018eae7a53743009dcd60f37f547c0",
	"0011_submit_in_one_statement.sql":      "fca3ec9f83430a8e80f078c9fb4887e29b3071d482131bd6f96581e698233560",
	"0012_claim_by_one_scan.sql":            "5020454198394458b49ef633459394cea0480c19984978ff79c94234e315bc78",
	"0013_task_keys.sql":                    "10613a044899c9cdce2e81c5417f5c27b60ff61e2eb7cee545713ace320d9dc1",
	"0014_fused_group_fewer_statements.sql": "e33f743714df063e50eb8ebad1f31af99fe3d463c5800218fe129f2af99eccd6",
	"0015_lone_submit_counts_itself.sql":    "2e56528d6ba26b27a1a88d181a8dbdecdd88dd3171af3ee53c9531b999fe39b6",
	"0016_submit_folds_user_deltas.sql":     "0f49ae3ded3d722794cb40014f4bec9a68c2ead8fd9ec9856070dd7e19147aa6",
	"0018_submit_counts_by_state.sql":       "826dea232147e5304479894bf29e0db3b831d879bc3ed8c8133df2e12feaea62",
	"0017_claim_reads_its_users.sql":        "f451a9118f4beab72978974d7def6227308a799f070b255014537e1155ed5539",
	"0019_column_rules_as_domains.sql":      "724905e31b17295d6bc8787609af284e07988f419b44ff25b9c3805a9256b3ff",
	"0020_active_count_by_index.sql":        "132a8ea2f426c96f0845f59c4d9715353a009006df7f575da0253df772512bde",
	"0021_completion_clears_last_error.sql": "ebd26403b4a920b14d780534ce8ed3694af7d0c7a0e91051a467a5b5b6b48d40",
}

func TestPostgresMigrationsArePinned(t *testing.T) {
	migrations, err := PostgresMigrations()
	require.NoError(t, err)
	require.NotEmpty(t, migrations)
	for i, m := range migrations {
		require.Equal(t, i+1, m.Version)
		pinned, ok := pinnedPostgresMigrations[m.Name]
		require.True(t, ok, "migration %s is not pinned; add its checksum to pinnedPostgresMigrations", m.Name)
		body, err := fs.ReadFile(pgBackend{}.sqlFiles(), "migrations/"+m.Name)
		require.NoError(t, err)
		sum := sha256.Sum256(body)
		require.Equal(t, pinned, hex.EncodeToString(sum[:]), "committed migration %s changed", m.Name)
		require.Equal(t, pinned, m.Checksum)
	}
	require.Len(t, migrations, len(pinnedPostgresMigrations), "a pinned migration is gone")
}

// postgresOnlyQueries and sqliteOnlyQueries are the differences between the
// two stores' query lists, each for a reason the PostgreSQL files state:
// the claim locks its users' counter rows and folds their changes (no
// blocked flags to re-block), event followers take an
// advisory lock first, so does a migration (BEGIN takes no lock), idle
// workers are woken by LISTEN/NOTIFY (notify.sql), and the counters, rows
// of changes, are folded (tally_compact, tally_rows) where SQLite's are one
// row per name; a fused group and a lone submit are one statement each
// (complete_and_claim, submit_one), where SQLite's statements are calls
// within the process. SQLite's log is checkpointed after a full disk
// (wal_truncate); PostgreSQL has no log of the store's to truncate.
var (
	postgresOnlyQueries = []string{"claim_batch", "complete_and_claim", "events_after_lock", "migrations_lock", "ready_listen", "ready_notify",
		"ready_schema", "submit_one", "tally_compact", "tally_rows"}
	sqliteOnlyQueries = []string{"claim_next", "claim_room", "claim_task", "claim_tasks", "reblock_all", "reblock_user", "wal_truncate"}
)

func TestPostgresQueriesMatchSQLite(t *testing.T) {
	sqliteSet, err := sqlOf(sqliteBackend{})
	require.NoError(t, err)
	pgSet, err := sqlOf(pgBackend{})
	require.NoError(t, err)
	sqlite, pg := sqliteSet.queries, pgSet.queries
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

// isBrokenVariant reports whether name is a broken variant's query
// (NAME~VARIANT, loaded from a placeholder in a leasehold_broken build).
func isBrokenVariant(name string) bool { return strings.Contains(name, "~") }

// migratePostgresURL is the pgtest.Setup of this package's PostgreSQL
// tests: Open migrates the new schema.
func migratePostgresURL(ctx context.Context, url string) error {
	q, err := Open(ctx, Options{Path: url, Clock: clockwork.NewFakeClockAt(time.UnixMilli(0)), IDs: model.NewSeededIDs(1)})
	if err != nil {
		return err
	}
	return q.Close()
}

// pgFixture is a queue on a new, migrated PostgreSQL schema, with helpers
// that run the store's statements by name.
type pgFixture struct {
	t   *testing.T
	ctx context.Context
	url string
	q   *Queue
	db  *sql.DB
}

// freshPostgres returns a fixture on a new, migrated PostgreSQL schema.
// Its queue runs without the idle-in-transaction timeout: the tests hold
// transactions open on its pool (a user's row held while other writes
// run) for as long as their work takes, which on a busy machine may pass
// the timeout, and their outcome must not depend on the machine's speed.
func freshPostgres(t *testing.T) *pgFixture {
	t.Helper()
	url := pgtest.Fresh(t, migratePostgresURL)
	ctx := context.Background()
	q, err := Open(ctx, Options{Path: url, Clock: clockwork.NewFakeClockAt(time.UnixMilli(1000)), IDs: model.NewSeededIDs(1),
		IdleInTransactionTimeout: NoIdleInTransactionTimeout})
	require.NoError(t, err)
	t.Cleanup(func() { q.Close() })
	return &pgFixture{t: t, ctx: ctx, url: url, q: q, db: q.db}
}

// args binds named arguments for the named statement.
func (f *pgFixture) args(name string, args ...any) (string, []any) {
	f.t.Helper()
	qq := f.q.query(name)
	bound, err := bindArgs(name, qq, args)
	require.NoError(f.t, err)
	return qq.text, bound
}

func (f *pgFixture) exec(name string, args ...any) int64 {
	f.t.Helper()
	text, bound := f.args(name, args...)
	res, err := f.db.ExecContext(f.ctx, text, bound...)
	require.NoError(f.t, err, name)
	n, err := res.RowsAffected()
	require.NoError(f.t, err)
	return n
}

func (f *pgFixture) queryRow(name string, args ...any) *sql.Row {
	f.t.Helper()
	text, bound := f.args(name, args...)
	return f.db.QueryRowContext(f.ctx, text, bound...)
}

func (f *pgFixture) query(name string, args ...any) *sql.Rows {
	f.t.Helper()
	text, bound := f.args(name, args...)
	rows, err := f.db.QueryContext(f.ctx, text, bound...)
	require.NoError(f.t, err, name)
	return rows
}

// TestPostgresQueriesPrepare: the server parses and types every query of
// the store against the migrated schema.
func TestPostgresQueriesPrepare(t *testing.T) {
	f := freshPostgres(t)
	applied, pending, err := plan(f.ctx, f.db, f.q.sql)
	require.NoError(t, err)
	require.Empty(t, pending)
	require.Len(t, applied, len(pinnedPostgresMigrations))
	for name, q := range f.q.sql.queries {
		if name == "task_columns" {
			continue
		}
		stmt, err := f.db.PrepareContext(f.ctx, q.text)
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

	// What the migrated schema enforces: the states CHECK on tasks (an
	// array constant since migration 0019) and the reasons' domain.
	f := freshPostgres(t)
	var stateDef, reasonDef string
	require.NoError(t, f.db.QueryRowContext(f.ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint
	    WHERE conrelid = 'tasks'::regclass AND conname = 'tasks_state_check'`).Scan(&stateDef))
	require.NoError(t, f.db.QueryRowContext(f.ctx, `SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
	    JOIN pg_attribute a ON a.atttypid = c.contypid
	    WHERE a.attrelid = 'tasks'::regclass AND a.attname = 'reason' AND c.conname = 'tasks_reason_check'`).Scan(&reasonDef))
	m := regexp.MustCompile(`'\{([^}]*)\}'::text\[\]`).FindStringSubmatch(stateDef)
	require.NotNil(t, m, "states CHECK %q", stateDef)
	require.Equal(t, states, strings.Split(m[1], ","))
	var enforced []string
	for _, v := range regexp.MustCompile(`'([^']*)'::text`).FindAllStringSubmatch(reasonDef, -1) {
		enforced = append(enforced, v[1])
	}
	require.Equal(t, reasons, enforced, "reasons' domain %q", reasonDef)

	f.insertTask("t1", "alice", 0)
	_, err = f.db.ExecContext(f.ctx, "UPDATE tasks SET state = 'paused' WHERE id = 't1'")
	require.ErrorContains(t, err, "tasks_state_check")
	_, err = f.db.ExecContext(f.ctx, "UPDATE tasks SET reason = 'tired' WHERE id = 't1'")
	require.ErrorContains(t, err, "tasks_reason_check")
}

// TestPostgresColumnRulesHold: the rules migration 0019 moved from tasks'
// and users' CHECK constraints to domains still refuse what they refused,
// on insert and on update, with a check violation; and the rules across
// columns are still the table's.
func TestPostgresColumnRulesHold(t *testing.T) {
	f := freshPostgres(t)
	f.insertTask("t1", "alice", 0)
	for _, stmt := range []string{
		"UPDATE tasks SET cancel_requested = 2 WHERE id = 't1'",
		"UPDATE tasks SET attempts_max = 0 WHERE id = 't1'",
		"UPDATE tasks SET cost_budget = 0 WHERE id = 't1'",
		"UPDATE tasks SET steps_max = 0 WHERE id = 't1'",
		"UPDATE tasks SET attempts_failed = -1 WHERE id = 't1'",
		"UPDATE tasks SET cost_used = -1 WHERE id = 't1'",
		"UPDATE tasks SET cost_used = cost_budget + 1 WHERE id = 't1'",
		"UPDATE tasks SET steps_used = steps_max + 1 WHERE id = 't1'",
		"UPDATE tasks SET owner = 'w' WHERE id = 't1'",
		"UPDATE tasks SET lease_until = 5 WHERE id = 't1'",
		"UPDATE users SET running = -1 WHERE user_id = 'alice'",
		"UPDATE users SET active = -1 WHERE user_id = 'alice'",
		"UPDATE users SET running_max = -2 WHERE user_id = 'alice'",
		"UPDATE users SET depth_max = -2 WHERE user_id = 'alice'",
		"UPDATE users SET running = running - 1 WHERE user_id = 'alice'",
		"INSERT INTO users (user_id, running) VALUES ('bob', -1)",
	} {
		_, err := f.db.ExecContext(f.ctx, stmt)
		var st sqlStater
		require.ErrorAs(t, err, &st, stmt)
		require.Equal(t, "23514", st.SQLState(), "%s: %v", stmt, err)
	}
	// A bound parameter reaches a domain column as its base type does.
	_, err := f.db.ExecContext(f.ctx, "UPDATE tasks SET cancel_requested = $1, reason = $2 WHERE id = 't1'", int64(1), "budget_exhausted")
	require.NoError(t, err)
	var cancel int64
	var reason string
	require.NoError(t, f.db.QueryRowContext(f.ctx, "SELECT cancel_requested, reason FROM tasks WHERE id = 't1'").Scan(&cancel, &reason))
	require.Equal(t, int64(1), cancel)
	require.Equal(t, "budget_exhausted", reason)
	_, err = f.db.ExecContext(f.ctx, "UPDATE tasks SET cancel_requested = $1 WHERE id = 't1'", int64(3))
	require.ErrorContains(t, err, "leasehold_flag")
}

// insertTask stores a bare task through the store's statements.
func (f *pgFixture) insertTask(id, user string, now int64) {
	f.t.Helper()
	f.exec("user_ensure", sql.Named("user", user))
	f.exec("task_insert", sql.Named("id", id), sql.Named("user", user),
		sql.Named("key", "k-"+id), sql.Named("hash", "h"), sql.Named("payload", "{}"), sql.Named("priority", 0),
		sql.Named("run_at", now), sql.Named("deadline", 0), sql.Named("attempts_max", 3), sql.Named("now", now),
		sql.Named("cost_budget", 10), sql.Named("steps_max", 10), sql.Named("schedule_id", ""), sql.Named("schedule_run", 0))
}

// take moves the tasks at seqs to running for owner, as a claim's last
// statement does (the triggers see what they see of a claim), and returns
// how many it moved.
func (f *pgFixture) take(seqs []int64, owner string, leaseUntil, now int64) int64 {
	f.t.Helper()
	res, err := f.db.ExecContext(f.ctx, `UPDATE tasks SET state = 'running', version = version + 1, owner = $2,
	    lease_until = $3, claimed_at = $4, heartbeat_at = $4, updated_at = $4
	    WHERE seq = ANY($1) AND state = 'queued'`, seqs, owner, leaseUntil, now)
	require.NoError(f.t, err)
	n, err := res.RowsAffected()
	require.NoError(f.t, err)
	return n
}

// claimBatch claims up to max tasks at now through the store's claim
// statement and returns the ids taken, in claim order, with the version
// each had before.
func (f *pgFixture) claimBatch(owner string, max int, now int64) []string {
	f.t.Helper()
	rows := f.query("claim_batch", sql.Named("now", now), sql.Named("due", now), sql.Named("alive", now),
		sql.Named("max", max), sql.Named("owner", owner), sql.Named("lease_until", now+5000),
		sql.Named("user_limits", true))
	tasks, err := scanTasks(rows)
	require.NoError(f.t, err)
	var out []string
	for _, task := range tasks {
		require.Equal(f.t, model.Queued, task.State, "claim_batch returns the task as it was")
		out = append(out, fmt.Sprintf("%s@%d", task.ID, task.Version))
	}
	return out
}

// TestPostgresTriggersKeepTheCounters: the triggers count tasks by state,
// running and active tasks by user, and the two distributions, as
// SQLite's do, and counters_check finds them in agreement.
func TestPostgresTriggersKeepTheCounters(t *testing.T) {
	f := freshPostgres(t)
	f.insertTask("t1", "alice", 1000)
	f.insertTask("t2", "alice", 1000)
	f.insertTask("t3", "bob", 1000)
	var seq int64
	require.NoError(t, f.db.QueryRowContext(f.ctx, "SELECT seq FROM tasks WHERE id = 't1'").Scan(&seq))
	require.EqualValues(t, 1, f.take([]int64{seq}, "w1", 9000, 1040))
	require.EqualValues(t, 1, f.exec("settle", sql.Named("to_state", "completed"), sql.Named("reason", ""),
		sql.Named("run_at", int64(1000)), sql.Named("now", int64(1300)), sql.Named("attempts_charged", 0),
		sql.Named("attempts_failed", 0), sql.Named("last_error", ""), sql.Named("cancelled_by", ""),
		sql.Named("approved_by", ""), sql.Named("cost_budget", 10), sql.Named("steps_max", 10),
		sql.Named("id", "t1"), sql.Named("from_state", "running"), sql.Named("version", 1)))
	require.NoError(t, f.db.QueryRowContext(f.ctx, "SELECT seq FROM tasks WHERE id = 't2'").Scan(&seq))
	require.EqualValues(t, 1, f.take([]int64{seq}, "w1", 9000, 1300))

	tallies := map[string][2]int64{}
	rows := f.query("tallies_all")
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
	require.NoError(t, f.queryRow("counters_check").Scan(&states, &users, &over))
	require.Equal(t, [3]int{0, 0, 0}, [3]int{states, users, over})
	var active int64
	require.NoError(t, f.queryRow("active_total").Scan(&active))
	require.EqualValues(t, 2, active)

	// The counts are changes until a claim folds those of the users it
	// locks into their rows; the fold keeps every count. While another
	// transaction holds bob's row, a claim skips bob (t3 is left, and the
	// claim does not wait); once it is free, the claim takes t3 and folds
	// bob's changes, not alice's.
	var deltas int
	require.NoError(t, f.db.QueryRowContext(f.ctx, "SELECT COUNT(*) FROM user_deltas").Scan(&deltas))
	require.Equal(t, 6, deltas, "three submits, two claims and a settle")
	holder, err := f.db.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	_, err = holder.ExecContext(f.ctx, "SELECT user_id FROM users WHERE user_id = 'bob' FOR UPDATE")
	require.NoError(t, err)
	require.Empty(t, f.claimBatch("w2", 5, 1400), "bob's row is held")
	require.NoError(t, holder.Rollback())
	require.Equal(t, []string{"t3@0"}, f.claimBatch("w2", 5, 1400))
	var stored [2]int64
	require.NoError(t, f.db.QueryRowContext(f.ctx, "SELECT running, active FROM users WHERE user_id = 'bob'").Scan(&stored[0], &stored[1]))
	require.Equal(t, [2]int64{1, 1}, stored, "bob's submit is folded into its row, and its claim raised running there (migration 0006)")
	require.NoError(t, f.db.QueryRowContext(f.ctx, "SELECT running, active FROM users WHERE user_id = 'alice'").Scan(&stored[0], &stored[1]))
	require.Equal(t, [2]int64{0, 0}, stored, "alice's changes are left")
	require.NoError(t, f.db.QueryRowContext(f.ctx, "SELECT COUNT(*) FROM user_deltas").Scan(&deltas))
	require.Equal(t, 5, deltas, "alice's five; bob's claim left none")
	require.NoError(t, f.queryRow("counters_check").Scan(&states, &users, &over))
	require.Equal(t, [3]int{0, 0, 0}, [3]int{states, users, over})
	require.NoError(t, f.queryRow("active_total").Scan(&active))
	require.EqualValues(t, 2, active)

	// A counter that drifts is found.
	_, err = f.db.ExecContext(f.ctx, "UPDATE users SET running = 5 WHERE user_id = 'bob'")
	require.NoError(t, err)
	require.NoError(t, f.queryRow("counters_check").Scan(&states, &users, &over))
	require.Equal(t, [2]int{1, 1}, [2]int{users, over}, "bob's count is wrong, and above its active tasks")
}

// TestPostgresClaimsReadWithoutBitmaps: the claim's functions run with
// bitmap scans off (migration 0007), so their index reads mark the dead
// entries of user_deltas and of earlier task versions and later reads step
// over them; claim_batch keeps its generic plans.
func TestPostgresClaimsReadWithoutBitmaps(t *testing.T) {
	f := freshPostgres(t)
	for _, fn := range []string{"claim_batch", "complete_and_claim"} {
		var raw string
		require.NoError(t, f.db.QueryRowContext(f.ctx,
			"SELECT COALESCE(array_to_json(proconfig)::text, '[]') FROM pg_proc WHERE proname = $1 AND pronamespace = current_schema()::regnamespace",
			fn).Scan(&raw))
		var config []string
		require.NoError(t, json.Unmarshal([]byte(raw), &config))
		require.Contains(t, config, "enable_bitmapscan=off", fn)
		require.Contains(t, config, "plan_cache_mode=force_generic_plan", fn, "since migration 0010 for complete_and_claim")
	}
}

// TestPostgresBucketsMatchModel: leasehold_bucket repeats
// model.HistogramBounds, so it buckets every duration as model.BucketOf.
func TestPostgresBucketsMatchModel(t *testing.T) {
	f := freshPostgres(t)
	ms := []int64{0, 1}
	for _, b := range model.HistogramBounds {
		ms = append(ms, b-1, b, b+1)
	}
	for _, v := range ms {
		var got int
		require.NoError(t, f.db.QueryRowContext(f.ctx, "SELECT leasehold_bucket($1)", v).Scan(&got))
		require.Equal(t, model.BucketOf(v), got, "%d ms", v)
	}
}
