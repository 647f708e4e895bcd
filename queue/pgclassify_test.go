package queue

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// TestPostgresClassifiesServerErrors: errors the server and pgx really
// return get their storage class, and a dropped connection between
// operations is replaced by database/sql without failing the next write.
func TestPostgresClassifiesServerErrors(t *testing.T) {
	f := freshPostgres(t)

	f.insertTask("t1", "ana", 1000)
	text, args := f.args("task_insert", sql.Named("id", "t1"), sql.Named("user", "ana"),
		sql.Named("key", "k-t1"), sql.Named("hash", "h"), sql.Named("kind", "synthetic"), sql.Named("payload", "{}"), sql.Named("priority", 0),
		sql.Named("run_at", 0), sql.Named("deadline", 0), sql.Named("attempts_max", 3), sql.Named("now", 0),
		sql.Named("cost_budget", 10), sql.Named("steps_max", 10), sql.Named("schedule_id", ""), sql.Named("schedule_run", 0))
	_, err := f.db.ExecContext(f.ctx, text, args...)
	require.Equal(t, ClassConstraint, ClassOf(err), "a raced unique key: %v", err)

	_, err = f.db.ExecContext(f.ctx, "SELECT 1/0")
	require.Equal(t, StorageClass(""), ClassOf(err), "a statement's own error is no storage failure: %v", err)

	server := pgtest.ServerURL(t)
	missing, err := pgtest.WithDatabase(server, "leasehold_no_such_database")
	require.NoError(t, err)
	_, err = Open(f.ctx, Options{Path: missing, Clock: clockwork.NewFakeClockAt(epoch), IDs: model.NewSeededIDs(1)})
	require.Equal(t, ClassCantOpen, ClassOf(err), "%v", err)

	_, err = Open(f.ctx, Options{Path: "postgres://postgres:pw@127.0.0.1:1/postgres?connect_timeout=5",
		Clock: clockwork.NewFakeClockAt(epoch), IDs: model.NewSeededIDs(1)})
	require.Equal(t, ClassConnection, ClassOf(err), "%v", err)
	require.NotContains(t, err.Error(), ":pw@")

	// Every connection of a queue's pool (named by application_name, so
	// that no other test's connection is touched) is cut by the server;
	// the next write runs on a new one and is applied once.
	name := fmt.Sprintf("leasehold_cut_%d", os.Getpid())
	q, err := Open(f.ctx, Options{Path: f.url + "&application_name=" + name, Clock: clockwork.NewFakeClockAt(epoch),
		IDs: model.NewSeededIDs(7)})
	require.NoError(t, err)
	defer q.Close()
	_, err = q.Submit(f.ctx, model.SubmitRequest{User: "ana", Key: "before-cut", Payload: `{}`, CostBudget: 1, StepsMax: 1})
	require.NoError(t, err)
	admin, err := sql.Open("pgx", server)
	require.NoError(t, err)
	defer admin.Close()
	var cut int
	require.NoError(t, admin.QueryRowContext(context.Background(),
		"SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", name).Scan(&cut))
	require.Positive(t, cut)
	req := model.SubmitRequest{User: "ana", Key: "after-cut", Payload: `{}`, CostBudget: 1, StepsMax: 1}
	res, err := q.Submit(f.ctx, req)
	if err != nil {
		// database/sql replaces a connection it finds broken before a
		// statement is sent; one found broken in use is a connection
		// failure, never a false success, and the retry is safe.
		require.Equal(t, ClassConnection, ClassOf(err), "%v", err)
		res, err = q.Submit(f.ctx, req)
	}
	require.NoError(t, err)
	tasks, err := q.List(f.ctx, model.ListFilter{User: "ana", Limit: 10})
	require.NoError(t, err)
	n := 0
	for _, task := range tasks {
		if task.Key == "after-cut" {
			n++
			require.Equal(t, res.TaskID, task.ID)
		}
	}
	require.Equal(t, 1, n, "the write after the cut is applied once")
}

// A connect failure says each attempt once: pgx's second try without TLS
// fails word for word as the first, and the line a user reads names it once.
func TestConnectFailureSaysEachAttemptOnce(t *testing.T) {
	t.Parallel()
	// Through the real connect path, with a password in the URL (the
	// store's own test holds onceEach to each shape of message).
	_, err := Open(context.Background(), Options{Path: "postgres://u:hunter2@127.0.0.1:1/x", Clock: clockwork.NewFakeClock(), IDs: model.NewSeededIDs(1)})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2")
	require.Equal(t, 1, strings.Count(err.Error(), "connection refused"), "%s", err)
}
