package queue_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver of the tests' own connections
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// store is a database of one store for the tests that run on each: an
// empty one (no schema yet), a handle of the test's own on it, and the
// migrations this build carries for it.
type store struct {
	path       string
	raw        *sql.DB
	migrations []queue.Migration
}

// eachStore runs test on an empty SQLite file and an empty PostgreSQL
// schema.
func eachStore(t *testing.T, test func(t *testing.T, s store)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "q.db")
		require.NoError(t, os.WriteFile(path, nil, 0o644))
		raw, err := sql.Open("sqlite", path)
		require.NoError(t, err)
		t.Cleanup(func() { raw.Close() })
		ms, err := queue.Migrations()
		require.NoError(t, err)
		test(t, store{path: path, raw: raw, migrations: ms})
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.Fresh(t, func(context.Context, string) error { return nil })
		raw, err := sql.Open("pgx", url)
		require.NoError(t, err)
		t.Cleanup(func() { raw.Close() })
		ms, err := queue.PostgresMigrations()
		require.NoError(t, err)
		test(t, store{path: url, raw: raw, migrations: ms})
	})
}

func (s store) open(t *testing.T) *queue.Queue {
	t.Helper()
	q, err := queue.Open(context.Background(), queue.Options{Path: s.path, Clock: clockwork.NewFakeClockAt(conformanceEpoch),
		IDs: model.NewSeededIDs(1)})
	require.NoError(t, err)
	t.Cleanup(func() { q.Close() })
	return q
}

// Inspect reads a database's migration plan on either store without
// changing it: every migration pending on an empty database, none once a
// queue has opened it, and a changed migration refused.
func TestInspectEachStore(t *testing.T) {
	eachStore(t, func(t *testing.T, s store) {
		ctx := context.Background()
		for range 2 { // reading the plan applies nothing
			applied, pending, err := queue.Inspect(ctx, s.path)
			require.NoError(t, err)
			require.Empty(t, applied)
			require.GreaterOrEqual(t, len(pending), len(s.migrations))
			require.Equal(t, s.migrations, pending[:len(s.migrations)])
			for _, m := range pending[len(s.migrations):] { // a store's functions file, installed after
				require.Equal(t, "functions.sql@v", strings.TrimRight(m.Name, "0123456789"))
			}
		}
		s.open(t)
		applied, pending, err := queue.Inspect(ctx, s.path)
		require.NoError(t, err)
		require.Empty(t, pending)
		require.Len(t, applied, len(s.migrations))
		for i, m := range s.migrations {
			require.Equal(t, queue.AppliedMigration{Version: m.Version, Name: m.Name, Checksum: m.Checksum}, applied[i])
		}

		_, err = s.raw.ExecContext(ctx, "UPDATE schema_migrations SET checksum = '"+strings.Repeat("f", 64)+"' WHERE version = 1")
		require.NoError(t, err)
		_, _, err = queue.Inspect(ctx, s.path)
		require.ErrorIs(t, err, queue.ErrSchemaMismatch)
	})
}

// CheckCounters agrees with a queue's own writes on either store, and
// finds a counter that drifts from the tasks.
func TestCheckCountersEachStore(t *testing.T) {
	eachStore(t, func(t *testing.T, s store) {
		ctx := context.Background()
		q := s.open(t)
		_, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: "k1", Payload: `{}`, CostBudget: 5, StepsMax: 3})
		require.NoError(t, err)
		_, err = q.Claim(ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: model.LeaseMax})
		require.NoError(t, err)
		require.NoError(t, q.CheckCounters(ctx))

		_, err = s.raw.ExecContext(ctx, "UPDATE users SET active = active + 3")
		require.NoError(t, err)
		err = q.CheckCounters(ctx)
		require.ErrorContains(t, err, "counters disagree with the tasks: 0 state counts, 1 users")
	})
}

// Snapshots and restores are of SQLite files: another store's database is
// refused with ErrSQLiteOnly, naming pg_dump and never the URL's password.
func TestSnapshotsRefuseAnotherStore(t *testing.T) {
	ctx := context.Background()
	url := "postgres://leasehold:hunter2secret@127.0.0.1:5432/prod"
	out := filepath.Join(t.TempDir(), "snap.db")
	_, err := queue.CreateSnapshot(ctx, url, out, conformanceEpoch)
	require.ErrorIs(t, err, queue.ErrSQLiteOnly)
	_, err = queue.VerifySnapshot(ctx, url)
	require.ErrorIs(t, err, queue.ErrSQLiteOnly)
	_, err = queue.Restore(ctx, out, url)
	require.ErrorIs(t, err, queue.ErrSQLiteOnly)
	require.ErrorContains(t, err, "pg_dump")
	require.NotContains(t, err.Error(), "hunter2secret")
	_, statErr := os.Stat(out)
	require.ErrorIs(t, statErr, os.ErrNotExist, "nothing written")
}
