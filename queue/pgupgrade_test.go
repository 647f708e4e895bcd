package queue

import (
	"bufio"
	"compress/gzip"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue/internal/postgres"
)

// fixtureSchema is the placeholder a PostgreSQL fixture of testdata names
// its schema by.
const fixtureSchema = "__SCHEMA__"

// loadPostgresFixture runs the gzipped pg_dump script at path into the schema the
// URL's search_path names. It drops what pgx cannot run or what would undo
// the URL's settings: psql meta-commands, the dump's SET statements, its
// emptying of search_path and its CREATE SCHEMA (pgtest made the schema).
// pgFolded is the history the PostgreSQL baseline replaced.
var pgFolded = postgres.Store{}.Folded()

func loadPostgresFixture(ctx context.Context, t *testing.T, dbURL, path string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	schema := u.Query().Get("search_path")
	require.NotEmpty(t, schema, "the test URL names its schema")
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	unzipped, err := gzip.NewReader(f)
	require.NoError(t, err)
	var script strings.Builder
	lines := bufio.NewScanner(unzipped)
	lines.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for lines.Scan() {
		line := lines.Text()
		switch {
		case strings.HasPrefix(line, `\`),
			strings.HasPrefix(line, "SET "),
			strings.HasPrefix(line, "SELECT pg_catalog.set_config('search_path'"),
			line == "CREATE SCHEMA "+fixtureSchema+";":
			continue
		}
		script.WriteString(line)
		script.WriteByte('\n')
	}
	require.NoError(t, lines.Err())
	text := strings.ReplaceAll(script.String(), fixtureSchema, pgx.Identifier{schema}.Sanitize())
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, text)
	require.NoError(t, err, "load %s", path)
}

// TestPostgresMovesPreFoldOntoBaseline moves a PostgreSQL schema at the
// pre-release version 20 (testdata/schema-pg-v20-prefold.sql.gz: a task in
// every state, written at version 1 and migrated to 20 by the build before
// the baseline) onto the baseline, and proves that it then is the
// baseline's schema object for object, that nothing was lost, that the
// paused and running tasks resume and that a prune works on the moved
// data.
func TestPostgresMovesPreFoldOntoBaseline(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.Fresh(t, func(context.Context, string) error { return nil })
	loadPostgresFixture(ctx, t, dbURL, filepath.Join("testdata", "schema-pg-v20-prefold.sql.gz"))

	applied, pending, err := Inspect(ctx, dbURL)
	require.NoError(t, err)
	require.Equal(t, pgFolded.Migrations[:20], applied)
	set, err := sqlOf(postgres.Store{})
	require.NoError(t, err)
	require.Len(t, pending, len(set.migrations)+1, "the baseline and later migrations, and the functions")
	require.Equal(t, set.migrations[0].Name, pending[0].Name)
	require.Equal(t, fmt.Sprintf("%s@v%d", functionsFile, set.functions.Version), pending[len(pending)-1].Name)

	// What the old schema holds, read with this build's task columns
	// before the move.
	raw, err := sql.Open("pgx", dbURL)
	require.NoError(t, err)
	// The old schema has no kinds: its tasks are synthetic (0002_kinds).
	columns := strings.Replace(set.queries["task_columns"].text, "attempts_failed, kind", "attempts_failed, 'synthetic' AS kind", 1)
	rows, err := raw.QueryContext(ctx, "SELECT "+columns+" FROM tasks ORDER BY seq")
	require.NoError(t, err)
	before, err := scanTasks(rows)
	require.NoError(t, err)
	var eventsBefore, effectsBefore int
	require.NoError(t, raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM events").Scan(&eventsBefore))
	require.NoError(t, raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM effects").Scan(&effectsBefore))
	require.NoError(t, raw.Close())
	states := tasksByState(t, before)
	require.Len(t, before, len(model.States()))
	require.Greater(t, eventsBefore, len(before))
	require.Equal(t, 2, effectsBefore)

	// This build refuses the old schema until it is migrated.
	clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 14, 0, 0, 0, time.UTC)) // the fixture's leases (an hour from about 12:00) have run out
	_, err = Open(ctx, Options{Path: dbURL, Clock: clock, IDs: model.NewSeededIDs(9)})
	require.ErrorIs(t, err, ErrSchemaOutdated)
	require.ErrorContains(t, err, "pre-release schema version 20")
	applied, _, err = Inspect(ctx, dbURL)
	require.NoError(t, err)
	require.Equal(t, pgFolded.Migrations[:20], applied, "a refused open changes nothing")
	q, err := Open(ctx, Options{Path: dbURL, Clock: clock, IDs: model.NewSeededIDs(9), Migrate: MigrateAll})
	require.NoError(t, err)
	defer q.Close()
	applied, pending, err = Inspect(ctx, dbURL)
	require.NoError(t, err)
	require.Len(t, applied, len(set.migrations))
	require.Equal(t, set.migrations[0].Checksum, applied[0].Checksum)
	require.Empty(t, pending)
	require.NoError(t, q.CheckCounters(ctx))
	fresh := pgtest.Fresh(t, migratePostgresURL)
	require.Equal(t, describeSchema(ctx, t, fresh), describeSchema(ctx, t, dbURL), "the moved schema is the baseline's")

	requireUpgraded(ctx, t, q, before, eventsBefore)
	effects, err := q.Effects(ctx, states[model.Completed].ID)
	require.NoError(t, err)
	require.Len(t, effects, 1)
	require.True(t, effects[0].Receipted())

	requireResumes(ctx, t, q, clock, states)

	// Retention works on the upgraded tasks: the fixture's terminal tasks
	// (settled about 12:00) go, the ones completed just now (15:00) and
	// the task under review stay, and each pruned task leaves a tombstone.
	pruned, err := q.Prune(ctx, PruneRequest{OlderThan: 90 * time.Minute, Actor: "ops"})
	require.NoError(t, err)
	require.Equal(t, int64(1), pruned.Tasks[model.Completed])
	require.Equal(t, int64(1), pruned.Tasks[model.Failed])
	require.Equal(t, int64(1), pruned.Tasks[model.Cancelled])
	require.Equal(t, int64(1), pruned.Effects, "the completed task's receipted effect")
	require.Equal(t, int64(3), pruned.Tombstones)
	for _, st := range []model.State{model.Completed, model.Failed, model.Cancelled} {
		_, err := q.Task(ctx, states[st].ID)
		require.ErrorIs(t, err, ErrNotFound, "the %s task is pruned", st)
	}
	left, err := q.List(ctx, model.ListFilter{Limit: model.ListLimitMax})
	require.NoError(t, err)
	require.Len(t, left, 4)
	review, err := q.Task(ctx, states[model.NeedsReview].ID)
	require.NoError(t, err)
	require.Equal(t, states[model.NeedsReview], review, "the task under review is never pruned")
	// A replay of a pruned task's submit still finds the original task.
	done := states[model.Completed]
	replay, err := q.Submit(ctx, model.SubmitRequest{User: done.User, Key: done.Key, Payload: done.Payload,
		CostBudget: done.CostBudget, StepsMax: done.StepsMax})
	require.NoError(t, err)
	require.True(t, replay.Replay)
	require.Equal(t, done.ID, replay.TaskID)
	// An upgraded task that stays is found under its key and in its
	// user's listing (its key in task_keys).
	replay, err = q.Submit(ctx, model.SubmitRequest{User: review.User, Key: review.Key, Payload: review.Payload,
		CostBudget: review.CostBudget, StepsMax: review.StepsMax})
	require.NoError(t, err)
	require.Equal(t, model.SubmitResult{TaskID: review.ID, Replay: true}, replay)
	mine, err := q.List(ctx, model.ListFilter{User: review.User, Limit: model.ListLimitMax})
	require.NoError(t, err)
	require.Contains(t, ids(mine), review.ID)
	require.NoError(t, q.CheckCounters(ctx))
}

// describeSchema lists what the schema the URL's search_path names holds,
// one line an object, in name order: each column with its type, default
// and nullability; each constraint, index, trigger and view by its
// definition; each function by its arguments, settings and body; each
// domain by its rules.
func describeSchema(ctx context.Context, t *testing.T, dbURL string) []string {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	const catalog = `
SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' ||
       a.attnotnull || ' ' || COALESCE(pg_get_expr(d.adbin, d.adrelid), '') || ' ' || a.attidentity::text
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE c.relnamespace = current_schema()::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
  AND c.relname NOT IN ('schema_migrations', 'schema_functions')
UNION ALL
SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
WHERE connamespace = current_schema()::regnamespace
UNION ALL
SELECT 'index ' || indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = current_schema()
UNION ALL
SELECT 'trigger ' || tgname || ' ' || pg_get_triggerdef(g.oid) FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
WHERE c.relnamespace = current_schema()::regnamespace AND NOT g.tgisinternal
UNION ALL
SELECT 'view ' || viewname || ' ' || definition FROM pg_views WHERE schemaname = current_schema()
UNION ALL
SELECT 'function ' || proname || '(' || pg_get_function_identity_arguments(oid) || ') ' ||
       COALESCE(array_to_string(proconfig, ','), '') || ' ' || md5(prosrc) FROM pg_proc
WHERE pronamespace = current_schema()::regnamespace
UNION ALL
SELECT 'sequence ' || sequencename FROM pg_sequences WHERE schemaname = current_schema()
ORDER BY 1`
	rows, err := conn.Query(ctx, catalog)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, lines)
	for i, line := range lines { // a schema's own name, where a definition names it
		lines[i] = strings.ReplaceAll(line, searchPath(t, dbURL)+".", "")
	}
	return lines
}

// searchPath is the schema the URL's search_path names.
func searchPath(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	return u.Query().Get("search_path")
}

// TestPostgresMovesPreFoldAt21OntoBaseline: a schema at the last
// pre-fold version, 21 (which replaced a function only), is moved onto
// the baseline as one at 20 is: the baseline's schema object for object,
// its counters right.
func TestPostgresMovesPreFoldAt21OntoBaseline(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.Fresh(t, func(context.Context, string) error { return nil })
	loadPostgresFixture(ctx, t, dbURL, filepath.Join("testdata", "schema-pg-v20-prefold.sql.gz"))
	raw, err := sql.Open("pgx", dbURL)
	require.NoError(t, err)
	defer raw.Close()
	last := pgFolded.Migrations[20]
	_, err = raw.ExecContext(ctx, "INSERT INTO schema_migrations VALUES ($1, $2, $3, 0)", last.Version, last.Name, last.Checksum)
	require.NoError(t, err)
	applied, _, err := Inspect(ctx, dbURL)
	require.NoError(t, err)
	require.Equal(t, pgFolded.Migrations, applied)
	q, err := Open(ctx, Options{Path: dbURL, Clock: clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 14, 0, 0, 0, time.UTC)),
		IDs: model.NewSeededIDs(9), Migrate: MigrateAll})
	require.NoError(t, err)
	defer q.Close()
	applied, pending, err := Inspect(ctx, dbURL)
	require.NoError(t, err)
	set, err := sqlOf(postgres.Store{})
	require.NoError(t, err)
	require.Len(t, applied, len(set.migrations))
	require.Empty(t, pending)
	require.NoError(t, q.CheckCounters(ctx))
	require.Equal(t, describeSchema(ctx, t, pgtest.Fresh(t, migratePostgresURL)), describeSchema(ctx, t, dbURL))
}

// TestPostgresRefusesAPartOfThePreFoldHistory: a schema that applied only
// some of the migrations the baseline replaced is refused, saying what to
// do, and left as it was.
func TestPostgresRefusesAPartOfThePreFoldHistory(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.Fresh(t, func(context.Context, string) error { return nil })
	raw, err := sql.Open("pgx", dbURL)
	require.NoError(t, err)
	defer raw.Close()
	_, err = raw.ExecContext(ctx, `CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL,
	    checksum TEXT NOT NULL, applied_at BIGINT NOT NULL)`)
	require.NoError(t, err)
	for _, m := range pgFolded.Migrations[:5] {
		_, err := raw.ExecContext(ctx, "INSERT INTO schema_migrations VALUES ($1, $2, $3, 0)", m.Version, m.Name, m.Checksum)
		require.NoError(t, err)
	}
	_, err = Open(ctx, Options{Path: dbURL, Clock: clockwork.NewFakeClock(), IDs: model.NewSeededIDs(1), Migrate: MigrateAll})
	require.ErrorIs(t, err, ErrSchemaMismatch)
	require.ErrorContains(t, err, "pre-release schema version 5")
	require.ErrorContains(t, err, fmt.Sprintf("to version %d with leasehold at commit %s", pgFolded.SchemaFrom, pgFolded.Build))
	var recorded int
	require.NoError(t, raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations").Scan(&recorded))
	require.Equal(t, 5, recorded)
}

// TestPostgresFunctionsByVersion: a database whose functions are newer
// than this build's is refused, as a newer schema is, by Open and Inspect
// alike; one whose functions are older, or of this version with other
// bodies, is refused until it is migrated, and migrating installs this
// build's bodies and records them.
func TestPostgresFunctionsByVersion(t *testing.T) {
	ctx := context.Background()
	set, err := sqlOf(postgres.Store{})
	require.NoError(t, err)
	mine := set.functions.Version
	_, mySum, err := set.functions.installed()
	require.NoError(t, err)
	open := func(dbURL string, mode MigrateMode) error {
		q, err := Open(ctx, Options{Path: dbURL, Clock: clockwork.NewFakeClock(), IDs: model.NewSeededIDs(1), Migrate: mode})
		if err == nil {
			err = q.Close()
		}
		return err
	}
	recorded := func(raw *sql.DB) (int, string) {
		var version int
		var sum string
		require.NoError(t, raw.QueryRowContext(ctx, "SELECT version, checksum FROM schema_functions").Scan(&version, &sum))
		return version, sum
	}
	for _, c := range []struct {
		name   string
		change string
		want   error
	}{
		{"newer", fmt.Sprintf("UPDATE schema_functions SET version = %d, checksum = 'later'", mine+1), ErrSchemaTooNew},
		{"older", fmt.Sprintf("UPDATE schema_functions SET version = %d, checksum = 'earlier'", mine-1), ErrSchemaOutdated},
		{"other bodies", "UPDATE schema_functions SET checksum = 'other'", ErrSchemaOutdated},
	} {
		t.Run(c.name, func(t *testing.T) {
			dbURL := pgtest.Fresh(t, migratePostgresURL)
			raw, err := sql.Open("pgx", dbURL)
			require.NoError(t, err)
			defer raw.Close()
			_, err = raw.ExecContext(ctx, c.change+"; CREATE OR REPLACE FUNCTION leasehold_fold_rows() RETURNS BIGINT LANGUAGE sql IMMUTABLE AS $$ SELECT CAST(1 AS BIGINT) $$")
			require.NoError(t, err)
			before, beforeSum := recorded(raw)
			require.ErrorIs(t, open(dbURL, MigrateNew), c.want)
			_, _, err = Inspect(ctx, dbURL)
			if c.want == ErrSchemaTooNew {
				require.ErrorIs(t, err, ErrSchemaTooNew)
				require.ErrorIs(t, open(dbURL, MigrateAll), ErrSchemaTooNew, "no build installs older functions over newer")
				version, sum := recorded(raw)
				require.Equal(t, before, version)
				require.Equal(t, beforeSum, sum)
				return
			}
			require.NoError(t, err)
			require.NoError(t, open(dbURL, MigrateAll))
			version, sum := recorded(raw)
			require.Equal(t, mine, version)
			require.Equal(t, mySum, sum)
			var rows int64
			require.NoError(t, raw.QueryRowContext(ctx, "SELECT leasehold_fold_rows()").Scan(&rows))
			require.Equal(t, int64(256), rows, "this build's body is installed")
		})
	}
}
