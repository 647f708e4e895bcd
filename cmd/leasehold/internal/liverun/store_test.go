package liverun

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/scenarios"
)

// The run on PostgreSQL gets a schema made afresh: what an earlier run
// left in it is gone, even with a session of that run still open, and the
// database the server's URL names is not touched. A bad or unreachable
// server is an error naming it, without its password.
func TestPostgresDemoSchemaIsFreshEachTime(t *testing.T) {
	server := pgtest.ServerURL(t)
	ctx := context.Background()
	schema := fmt.Sprintf("demo_test_%d", os.Getpid())
	url, err := freshSchema(ctx, server, pgtest.Database, schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		require.NoError(t, err)
	})
	require.Contains(t, url, "/"+pgtest.Database+"?")
	require.Contains(t, url, "search_path="+schema)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE TABLE left_behind (x int)")
	require.NoError(t, err)

	again, err := freshSchema(ctx, server, pgtest.Database, schema)
	require.NoError(t, err)
	require.Equal(t, url, again)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1", schema).Scan(&n))
	require.Zero(t, n, "the earlier run's table is gone")

	// The run's URL lets its workers take the portfolio's lease.
	demo, err := withDemoSession(url)
	require.NoError(t, err)
	q, err := queue.Open(ctx, queue.Options{Path: demo, Clock: clockwork.NewRealClock(), IDs: model.NewSeededIDs(1)})
	require.NoError(t, err)
	require.Equal(t, 1500*time.Millisecond, q.LeaseMin())
	require.LessOrEqual(t, q.LeaseMin(), scenarios.Portfolio().Lease)
	require.NoError(t, q.Close())

	_, err = FreshPostgres(ctx, "/tmp/leasehold.db")
	require.ErrorContains(t, err, "not a postgres:// URL")
	_, err = FreshPostgres(ctx, "postgres://ops:s3cret@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=5")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
	require.Contains(t, err.Error(), "127.0.0.1:1")
}
