package queue

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// TestPostgresConcurrentMigrate: several processes starting at once on an
// empty PostgreSQL schema (workers of a new deployment) all open it: one
// applies the migrations, under the migration lock, and the others find
// them applied, none failing on a half-made catalog ("relation already
// exists"), and every migration is recorded once.
func TestPostgresConcurrentMigrate(t *testing.T) {
	pgtest.ServerURL(t)
	const migrators = 8
	for round := range 3 {
		url := pgtest.Fresh(t, func(context.Context, string) error { return nil }) // empty: nobody migrated it
		ctx := context.Background()
		start := make(chan struct{})
		errs := make([]error, migrators)
		var wg sync.WaitGroup
		for i := range migrators {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				q, err := Open(ctx, Options{Path: url, Clock: clockwork.NewFakeClockAt(time.UnixMilli(1000)),
					IDs: model.NewSeededIDs(uint64(i + 1)), Migrate: MigrateAll})
				if err == nil {
					err = q.Close()
				}
				errs[i] = err
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "round %d, migrator %d", round, i)
		}
		q, err := Open(ctx, Options{Path: url, Clock: clockwork.NewFakeClockAt(time.UnixMilli(1000)), IDs: model.NewSeededIDs(99)})
		require.NoError(t, err)
		p, err := plan(ctx, q.db, q.sql)
		require.NoError(t, err)
		require.False(t, p.changes(), "migrations and functions applied")
		applied := p.applied
		want, err := PostgresMigrations()
		require.NoError(t, err)
		require.Len(t, applied, len(want))
		var recorded int
		require.NoError(t, q.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations").Scan(&recorded))
		require.Equal(t, len(want), recorded)
		require.NoError(t, q.CheckCounters(ctx))
		require.NoError(t, q.Close())
	}
}
