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

	"github.com/leasehold/leasehold/internal/broken"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue/internal/postgres"
	sqlitestore "github.com/leasehold/leasehold/queue/internal/sqlite"
)

// pinnedPostgresMigrations holds the SHA-256 of every PostgreSQL migration
// file: committed migrations never change.
var pinnedPostgresMigrations = map[string]string{
	"0001_baseline.sql":        "33032e05b9cc9b5a928755d48592a3ee969aef7386f64d4365757db71ef5a365",
	"0002_kinds.sql":           "6f50df76dda8ffe01d6cdc319d2d6e8e5596a62aeecb323ca3795e729fe88528",
	"0003_admission_slots.sql": "f8628d5db191c206a65dcc793c9944872f91c3fd5d0996fde9a04a479517faf6",
	"0004_task_trail.sql":      "ced369efec6ca8929f8e8f2694aa317647d0fccb8c52e594cfab78bd17135650",
	"0005_kind_tallies.sql":    "0a47179e9209eb22c88911f5104d900bdae927170bc3cda749acde5cf81d2894",
}

// pinnedPostgresFunctions holds the SHA-256 of functions.sql's safe text at
// each version: a change to the file raises its version and adds a pin.
var pinnedPostgresFunctions = map[int]string{
	1:  "b560e7c7e5e76890e50d231f01f23799a70655a3656db4ea0d91023b57f2b0b8",
	2:  "0fecd2a61368abc304b07040fd68b963a459e9cc261e94515d2d8c4e40a943d3",
	3:  "3cf83a2ba0ddf89ce60ab37d7fc9b6932e77ee27d6143cdc75f6448700de6b01",
	4:  "84efba875d70859c803c0b4b7640de3a110dae3cf9127e7031d362cab5cf6b0f",
	5:  "1d0dc56baf323ca8ff64bc14099343b989e56573bd596bab154f3d49711124fb",
	6:  "50def1b822feeef072094c88091b16797852c353038a8f95fc6a9b66c1c5a346",
	7:  "cbc3a667e6c497ea597c6141199db1b0b28f75af1221103fa953d16151a808fe",
	8:  "1a9230ae7ed5be3cf4f7d51513012545894609ffe97038f416f52c198bdcfd16",
	9:  "af73c1aa29a750cd062be0d40c05cd10928b899ab573c12624b2d54cf54efa1d",
	10: "d02c86650cb40278d76bc89c78b600eb9ab10dfb9e4e4910df544548c703d681",
	11: "41b13b35bcd35dd57b2d449be43d7656f5bd929da698159931db0382326ce896",
}

// TestPostgresFunctionsArePinned: the functions file's safe text is the
// one pinned at its version, so a change that does not raise the version
// fails here, and a database can tell an older build's functions from a
// newer one's by version alone.
func TestPostgresFunctionsArePinned(t *testing.T) {
	set, err := sqlOf(postgres.Store{})
	require.NoError(t, err)
	require.NotNil(t, set.functions)
	_, sum, err := set.functions.expanded(func(broken.Variant) bool { return false })
	require.NoError(t, err)
	pinned, ok := pinnedPostgresFunctions[set.functions.Version]
	require.True(t, ok, "functions.sql version %d is not pinned; add its checksum %s to pinnedPostgresFunctions", set.functions.Version, sum)
	require.Equal(t, pinned, sum, "functions.sql changed without raising its version")
}

func TestPostgresMigrationsArePinned(t *testing.T) {
	migrations, err := PostgresMigrations()
	require.NoError(t, err)
	require.NotEmpty(t, migrations)
	for i, m := range migrations {
		require.Equal(t, i+1, m.Version)
		pinned, ok := pinnedPostgresMigrations[m.Name]
		require.True(t, ok, "migration %s is not pinned; add its checksum to pinnedPostgresMigrations", m.Name)
		body, err := fs.ReadFile(postgres.Store{}.SQLFiles(), "migrations/"+m.Name)
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
// within the process; SQLite's log is checkpointed after a full disk
// (wal_truncate), and PostgreSQL has no log of the store's to truncate;
// and PostgreSQL's functions file is recorded (functions_*) and its
// folded history replaced (migrations_forget: fold.go).
var (
	postgresOnlyQueries = []string{"claim_batch", "complete_and_claim", "events_after_lock", "functions_applied", "functions_record",
		"functions_table", "functions_table_exists", "migrations_forget", "migrations_lock", "ready_listen", "ready_notify",
		"ready_schema", "submit_batch", "submit_one", "tally_compact", "tally_rows"}
	sqliteOnlyQueries = []string{"claim_next", "claim_next_kinds", "claim_room", "claim_task", "claim_tasks", "reblock_all", "reblock_user", "wal_truncate"}
)

func TestPostgresQueriesMatchSQLite(t *testing.T) {
	sqliteSet, err := sqlOf(sqlitestore.Store{})
	require.NoError(t, err)
	pgSet, err := sqlOf(postgres.Store{})
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
	p, err := plan(f.ctx, f.db, f.q.sql)
	require.NoError(t, err)
	require.False(t, p.changes())
	require.Len(t, p.applied, len(pinnedPostgresMigrations))
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
	var states []string
	for _, s := range model.States() {
		states = append(states, string(s))
	}
	reasons := []string{""}
	for _, r := range model.Reasons() {
		reasons = append(reasons, string(r))
	}

	// What the migrated schema enforces: the states CHECK on tasks (an
	// array constant) and the reasons' domain.
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
	_, err := f.db.ExecContext(f.ctx, "UPDATE tasks SET state = 'paused' WHERE id = 't1'")
	require.ErrorContains(t, err, "tasks_state_check")
	_, err = f.db.ExecContext(f.ctx, "UPDATE tasks SET reason = 'tired' WHERE id = 't1'")
	require.ErrorContains(t, err, "tasks_reason_check")
}

// TestPostgresColumnRulesHold: the rules pre-fold version 19 moved from tasks'
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
		var st interface{ SQLState() string }
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
		sql.Named("key", "k-"+id), sql.Named("hash", "h"), sql.Named("kind", "synthetic"), sql.Named("payload", "{}"), sql.Named("priority", 0),
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
	rows := f.query("claim_batch", sql.Named("now", now), sql.Named("max", max), sql.Named("owner", owner),
		sql.Named("lease_until", now+5000), sql.Named("kinds", ""))
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
	// locks into their rows (a user with a running limit: bob, given one
	// here); the fold keeps every count. While another transaction holds
	// bob's row, a claim skips bob (t3 is left, and the claim does not
	// wait); once it is free, the claim takes t3 and folds bob's changes,
	// not alice's.
	f.setUserRunningMax("bob", 10)
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
	require.Equal(t, [2]int64{1, 1}, stored, "bob's submit is folded into its row, and its claim raised running there (pre-fold version 6)")
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
// bitmap scans off (pre-fold version 7), so their index reads mark the dead
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
		require.Contains(t, config, "plan_cache_mode=force_generic_plan", fn, "since pre-fold version 10 for complete_and_claim")
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
