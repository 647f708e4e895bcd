package queue

import (
	"bufio"
	"context"
	"database/sql"
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
)

// fixtureSchema is the placeholder testdata/schema-pg-v1.sql names its
// schema by.
const fixtureSchema = "__SCHEMA__"

// loadPostgresFixture runs the pg_dump script at path into the schema the
// URL's search_path names. It drops what pgx cannot run or what would undo
// the URL's settings: psql meta-commands, the dump's SET statements, its
// emptying of search_path and its CREATE SCHEMA (pgtest made the schema).
func loadPostgresFixture(ctx context.Context, t *testing.T, dbURL, path string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	schema := u.Query().Get("search_path")
	require.NotEmpty(t, schema, "the test URL names its schema")
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var script strings.Builder
	lines := bufio.NewScanner(f)
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

// TestPostgresUpgradeFromSchemaV1 upgrades a PostgreSQL schema written at
// version 1 by the release before migration 0002 (testdata/schema-pg-v1.sql:
// a task in every state) and proves that nothing was lost, that the paused
// and running tasks resume and that retention, 0002's feature, works on the
// upgraded tasks.
func TestPostgresUpgradeFromSchemaV1(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.Fresh(t, func(context.Context, string) error { return nil })
	loadPostgresFixture(ctx, t, dbURL, filepath.Join("testdata", "schema-pg-v1.sql"))

	applied, pending, err := Inspect(ctx, dbURL)
	require.NoError(t, err)
	require.Len(t, applied, 1)
	set, err := sqlOf(pgBackend{})
	require.NoError(t, err)
	all := len(set.migrations) // this build's, 0002 onwards pending
	require.Len(t, pending, all-1)
	require.Equal(t, 2, pending[0].Version)

	// What the old schema holds, read with this build's task columns
	// (0002 adds none) before the upgrade.
	raw, err := sql.Open("pgx", dbURL)
	require.NoError(t, err)
	rows, err := raw.QueryContext(ctx, "SELECT "+set.queries["task_columns"].text+" FROM tasks ORDER BY seq")
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
	applied, _, err = Inspect(ctx, dbURL)
	require.NoError(t, err)
	require.Len(t, applied, 1, "a refused open changes nothing")
	q, err := Open(ctx, Options{Path: dbURL, Clock: clock, IDs: model.NewSeededIDs(9), Migrate: MigrateAll})
	require.NoError(t, err)
	defer q.Close()
	applied, pending, err = Inspect(ctx, dbURL)
	require.NoError(t, err)
	require.Len(t, applied, all)
	require.Empty(t, pending)
	require.NoError(t, q.CheckCounters(ctx))

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
	// user's listing (its key copied to task_keys by migration 0013).
	replay, err = q.Submit(ctx, model.SubmitRequest{User: review.User, Key: review.Key, Payload: review.Payload,
		CostBudget: review.CostBudget, StepsMax: review.StepsMax})
	require.NoError(t, err)
	require.Equal(t, model.SubmitResult{TaskID: review.ID, Replay: true}, replay)
	mine, err := q.List(ctx, model.ListFilter{User: review.User, Limit: model.ListLimitMax})
	require.NoError(t, err)
	require.Contains(t, ids(mine), review.ID)
	require.NoError(t, q.CheckCounters(ctx))
}
