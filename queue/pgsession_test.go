package queue

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/faults/storagefault"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// pgSessionNames are the server's settings the store's sessions are read
// back for: the five it sets, and the two it must never set (the wake
// listener idles for as long as nothing is ready, and a follower's lock
// wait outlasts a stuck session by design).
var pgSessionNames = []string{"idle_in_transaction_session_timeout", "tcp_keepalives_idle", "tcp_keepalives_interval",
	"tcp_keepalives_count", "tcp_user_timeout", "statement_timeout", "idle_session_timeout"}

// pgDefaultSession is what the server reports for a session of the store
// opened with the defaults, over TCP.
var pgDefaultSession = []string{"idle_in_transaction_session_timeout=5s", "tcp_keepalives_idle=5", "tcp_keepalives_interval=5",
	"tcp_keepalives_count=3", "tcp_user_timeout=20000", "statement_timeout=0", "idle_session_timeout=0"}

// readSession reads the settings of pgSessionNames back from the server,
// on the session query runs on.
func readSession(t *testing.T, query func(string) (string, error)) []string {
	t.Helper()
	var out []string
	for _, name := range pgSessionNames {
		v, err := query(name)
		require.NoError(t, err, name)
		out = append(out, name+"="+v)
	}
	return out
}

// pooledSession reads the settings back on a connection of q's pool, and
// the client side of its socket when the driver connection is pgx's own.
func pooledSession(t *testing.T, q *Queue) ([]string, []int) {
	t.Helper()
	ctx := context.Background()
	conn, err := q.db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	settings := readSession(t, func(name string) (v string, err error) {
		return v, conn.QueryRowContext(ctx, "SELECT current_setting($1)", name).Scan(&v)
	})
	var socket []int
	require.NoError(t, conn.Raw(func(dc any) error {
		if c, ok := dc.(*stdlib.Conn); ok {
			socket = pgtest.SocketOptions(t, c.Conn().PgConn().Conn())
		}
		return nil
	}))
	return settings, socket
}

// TestPostgresSessionSettingsReadBack: every connection the store opens
// carries the idle-in-transaction timeout, the keepalives and the user
// timeout, read back from the server and from the client's socket: the
// pool's, the pool's through Options.Driver (a fault injector, the path
// the simulator takes, which used to drop them all; the wake listener's
// is the store's own test); none sets statement_timeout or
// idle_session_timeout. The
// URL's own settings win, Options turns the timeout off, and LeaseMin is
// the timeout plus the user timeout.
func TestPostgresSessionSettingsReadBack(t *testing.T) {
	f := freshPostgres(t)
	require.True(t, strings.Contains(f.url, "127.0.0.1") || strings.Contains(f.url, "localhost"),
		"the test server is reached over TCP (a Unix socket has no keepalive): %s", RedactURL(f.url))
	clock := clockwork.NewFakeClockAt(time.UnixMilli(1000))
	wantSocket := []int{1, 5, 5, 3, 20000}
	q, err := Open(f.ctx, Options{Path: f.url, Clock: clock, IDs: model.NewSeededIDs(1)}) // the defaults
	require.NoError(t, err)
	defer q.Close()

	settings, socket := pooledSession(t, q)
	require.Equal(t, pgDefaultSession, settings, "the pool")
	require.Equal(t, wantSocket, socket, "the pool's client socket")
	require.Equal(t, 25*time.Second, q.LeaseMin())
	for _, s := range []string{"idle_in_transaction_session_timeout=5000ms", "tcp_keepalives=5s/5s/3", "tcp_user_timeout=20000ms"} {
		require.Contains(t, q.Pragmas(), s)
	}
	got, err := q.SessionSettings(f.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"idle_in_transaction_session_timeout=5s", "tcp_keepalives_idle=5", "tcp_keepalives_interval=5",
		"tcp_keepalives_count=3", "tcp_user_timeout=20000", "lock_timeout=0", "statement_timeout=0", "idle_session_timeout=0"}, got)
	t.Logf("read back from the server (the pool): %s; client socket SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT, TCP_USER_TIMEOUT = %v",
		strings.Join(settings, ", "), socket)

	storage := storagefault.NewPostgres(stdlib.GetDefaultDriver(), clock)
	faulty, err := Open(f.ctx, Options{Path: f.url, Clock: clock, IDs: model.NewSeededIDs(2), Driver: storage, MaxConns: 1})
	require.NoError(t, err)
	settings, _ = pooledSession(t, faulty)
	require.Equal(t, pgDefaultSession, settings, "the pool through Options.Driver")
	require.NoError(t, faulty.Close())

	own, err := Open(f.ctx, Options{Path: f.url + "&idle_in_transaction_session_timeout=1500&tcp_user_timeout=2s&tcp_keepalives_count=1",
		Clock: clock, IDs: model.NewSeededIDs(3), IdleInTransactionTimeout: 9 * time.Second})
	require.NoError(t, err)
	settings, socket = pooledSession(t, own)
	require.Equal(t, []string{"idle_in_transaction_session_timeout=1500ms", "tcp_keepalives_idle=5", "tcp_keepalives_interval=5",
		"tcp_keepalives_count=1", "tcp_user_timeout=2000", "statement_timeout=0", "idle_session_timeout=0"}, settings, "the URL's own settings")
	require.Equal(t, []int{1, 5, 5, 1, 2000}, socket)
	require.Equal(t, 3500*time.Millisecond, own.LeaseMin())
	require.NoError(t, own.Close())

	off, err := Open(f.ctx, Options{Path: f.url, Clock: clock, IDs: model.NewSeededIDs(4), IdleInTransactionTimeout: NoIdleInTransactionTimeout})
	require.NoError(t, err)
	settings, _ = pooledSession(t, off)
	require.Equal(t, "idle_in_transaction_session_timeout=0", settings[0])
	require.Equal(t, PostgresTCPUserTimeout, off.LeaseMin())
	require.NoError(t, off.Close())

	_, err = Open(f.ctx, Options{Path: f.url + "&tcp_user_timeout=soon", Clock: clock, IDs: model.NewSeededIDs(5)})
	require.ErrorIs(t, err, ErrInvalidInput)
	require.ErrorContains(t, err, "tcp_user_timeout")

	sqlite := setup(t)
	require.Zero(t, sqlite.q.LeaseMin())
}

// TestPostgresIdleInTransactionTimeoutEndsAStuckSession: a session of the
// store left idle inside a transaction (its client gone quiet, as a
// partitioned worker's) is ended by the server once the timeout passes,
// and the row it locked is free again; before, it held the lock until the
// connection closed.
func TestPostgresIdleInTransactionTimeoutEndsAStuckSession(t *testing.T) {
	f := freshPostgres(t)
	q, err := Open(f.ctx, Options{Path: f.url, Clock: clockwork.NewFakeClockAt(time.UnixMilli(1000)), IDs: model.NewSeededIDs(2),
		IdleInTransactionTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	defer q.Close()
	res, err := q.Submit(f.ctx, model.SubmitRequest{User: "ana", Key: "k", Payload: `{}`, CostBudget: 1, StepsMax: 1})
	require.NoError(t, err)
	stuck, err := q.db.Conn(f.ctx)
	require.NoError(t, err)
	defer stuck.Close()
	tx, err := stuck.BeginTx(f.ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(f.ctx, "UPDATE tasks SET updated_at = updated_at WHERE id = $1", res.TaskID)
	require.NoError(t, err)

	// Another session waits for the row (no lock_timeout): it gets it when
	// the server ends the stuck one, measured by the server's clock.
	other, err := pgx.Connect(f.ctx, f.url)
	require.NoError(t, err)
	defer other.Close(f.ctx)
	_, err = other.Exec(f.ctx, "SET statement_timeout = "+strconv.FormatInt(pgTestGuard.Milliseconds(), 10))
	require.NoError(t, err)
	var waitedMs float64
	require.NoError(t, other.QueryRow(f.ctx, `WITH t0 AS (SELECT clock_timestamp() AS at),
locked AS (SELECT id FROM tasks, t0 WHERE id = $1 FOR UPDATE)
SELECT EXTRACT(EPOCH FROM clock_timestamp() - (SELECT at FROM t0)) * 1000 FROM locked`, res.TaskID).Scan(&waitedMs))
	require.Less(t, waitedMs, float64(pgTestGuard.Milliseconds()), "the row was freed by the timeout")
	t.Logf("the row was free after %.0f ms (idle_in_transaction_session_timeout=300ms)", waitedMs)
	err = tx.Commit()
	require.Error(t, err, "the stuck transaction was rolled back by the server")
	if !errors.Is(err, sql.ErrTxDone) {
		require.Equal(t, ClassConnection, ClassOf(err), "%v", err)
	}
}

// pgTestGuard bounds a wait for the server in these tests: a failure
// deadline, never a synchronisation.
const pgTestGuard = 30 * time.Second

// TestSessionSettingsSQLite: on SQLite, SessionSettings reads the
// connection's PRAGMAs back (synchronous FULL is 2, temp_store MEMORY 2).
func TestSessionSettingsSQLite(t *testing.T) {
	b := setupFile(t)
	got, err := b.q.SessionSettings(b.ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"busy_timeout=5000", "journal_mode=wal", "journal_size_limit=4194304", "synchronous=2",
		"foreign_keys=1", "temp_store=2"}, got)
}
