package storagefault_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/faults/storagefault"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// migratePostgres migrates the schema url names.
func migratePostgres(ctx context.Context, url string) error {
	q, err := queue.Open(ctx, queue.Options{Path: url, Clock: clockwork.NewFakeClockAt(epoch), IDs: model.NewSeededIDs(0), MaxConns: 1})
	if err != nil {
		return err
	}
	return q.Close()
}

// setupPgStorage opens a queue on a fresh PostgreSQL schema through a
// PostgreSQL Storage, on one connection as the simulator does. Unfused: a
// lone Submit is then a BEGIN, statements and a COMMIT.
func setupPgStorage(t *testing.T) *storageBundle { return setupPgStorageAs(t, true) }

// setupPgStorageAs is setupPgStorage, the queue fused (a lone Submit one
// statement, submit_one, that is its own transaction) unless unfused.
func setupPgStorageAs(t *testing.T, unfused bool) *storageBundle {
	t.Helper()
	url := pgtest.Fresh(t, migratePostgres)
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(epoch)
	storage := storagefault.NewPostgres(stdlib.GetDefaultDriver(), clock)
	// No wake-up notifier: its statement runs on its own schedule, on the
	// pool's one connection, where the armed fault and the outage's end of
	// the open connection must meet the test's own operations.
	q, err := queue.Open(ctx, queue.Options{Path: url, Clock: clock, IDs: model.NewSeededIDs(1), Driver: storage, MaxConns: 1,
		Unfused: unfused, NoWakeNotify: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		storage.Disarm()
		storage.SetUnavailable(false)
		require.NoError(t, q.CheckCounters(ctx))
		require.NoError(t, q.Close())
	})
	return &storageBundle{t: t, ctx: ctx, clock: clock, storage: storage, q: q}
}

// With nothing armed, the PostgreSQL wrapper is transparent: a whole
// lifecycle (its claim binds a []string, which only pgx's own argument
// checker accepts) gives what the raw driver gives.
func TestPgStorageTransparentWhenUnarmed(t *testing.T) {
	b := setupPgStorage(t)
	task, evs := runLifecycle(t, b.q)
	require.Equal(t, model.Completed, task.State)

	raw, err := queue.Open(b.ctx, queue.Options{Path: pgtest.Fresh(t, migratePostgres), Clock: clockwork.NewFakeClockAt(epoch),
		IDs: model.NewSeededIDs(1), MaxConns: 1})
	require.NoError(t, err)
	defer raw.Close()
	rawTask, rawEvs := runLifecycle(t, raw)
	require.Equal(t, rawTask, task)
	require.Equal(t, len(rawEvs), len(evs))
	require.Zero(t, b.storage.Counts().Total())
}

// Each fault reads as the PostgreSQL failure it stands for: the storage
// class the queue gives it, and whether the write was applied.
func TestPgStorageFaultsReadAsPostgres(t *testing.T) {
	cases := []struct {
		fault   storagefault.Fault
		class   queue.StorageClass
		state   string
		applied bool
	}{
		{storagefault.FailBegin, queue.ClassConnection, "08006", false},
		{storagefault.FailStatement, queue.ClassConnection, "08006", false},
		{storagefault.FailCommit, queue.ClassConflict, "40001", false},
		{storagefault.AmbiguousCommit, queue.ClassConnection, "08006", true},
		{storagefault.Busy, queue.ClassBusy, "55P03", false},
	}
	for _, c := range cases {
		t.Run(string(c.fault), func(t *testing.T) {
			b := setupPgStorage(t)
			b.storage.Arm(c.fault)
			_, err := b.q.Submit(b.ctx, request("k1"))
			requireInjected(t, err, string(c.fault))
			var fe *storagefault.Error
			require.ErrorAs(t, err, &fe)
			require.Equal(t, c.state, fe.SQLState())
			require.Zero(t, fe.Code(), "a PostgreSQL fault carries no SQLite code")
			require.Equal(t, c.class, queue.ClassOf(err))
			require.Equal(t, 1, b.storage.Counts().Fired(c.fault))
			// The next operation finds a working connection (a new one when
			// the fault lost the old), and the write was applied or not.
			res, err := b.q.Submit(b.ctx, request("k1"))
			require.NoError(t, err)
			require.Equal(t, c.applied, res.Replay)
			require.Len(t, b.tasks(), 1)
		})
	}
}

// On a fused queue a lone Submit is one statement, submit_one, that is its
// own transaction, and each fault lands on it where it would land on a
// transaction: at its BEGIN (the connection lost before it is sent, or
// its lock timed out), in the middle of it (the connection lost, the
// statement rolled back on the server), or at its COMMIT (refused as a
// serialization failure, which the queue runs again as a conflict; or
// applied and the connection lost before the reply). The queue's
// outcome is what the protocol says of each, and the fault is counted
// for the statement.
func TestPgStorageFaultsLandOnFusedStatements(t *testing.T) {
	cases := []struct {
		fault   storagefault.Fault
		outcome error // nil: the queue ran it again and it was applied
		state   string
		applied bool
	}{
		{storagefault.FailBegin, queue.ErrOutcomeUnknown, "08006", false},
		{storagefault.Busy, queue.ErrNotApplied, "55P03", false},
		{storagefault.FailStatement, queue.ErrOutcomeUnknown, "08006", false},
		{storagefault.FailCommit, nil, "", true},
		{storagefault.AmbiguousCommit, queue.ErrOutcomeUnknown, "08006", true},
	}
	for _, c := range cases {
		t.Run(string(c.fault), func(t *testing.T) {
			b := setupPgStorageAs(t, false)
			commits := b.storage.Commits()
			b.storage.Arm(c.fault)
			_, err := b.q.Submit(b.ctx, request("k1"))
			if c.outcome == nil {
				require.NoError(t, err)
			} else {
				requireInjected(t, err, string(c.fault))
				require.ErrorIs(t, err, c.outcome)
				var fe *storagefault.Error
				require.ErrorAs(t, err, &fe)
				require.Equal(t, c.state, fe.SQLState())
				require.Contains(t, err.Error(), "submit_one")
			}
			require.Equal(t, 1, b.storage.Counts().Fired(c.fault))
			require.Equal(t, 1, b.storage.StatementCounts("submit_one").Fired(c.fault))
			require.Empty(t, b.storage.Armed())
			if c.applied {
				require.Greater(t, b.storage.Commits(), commits, "an applied statement counts as a commit")
			} else {
				require.Equal(t, commits, b.storage.Commits())
			}
			res, err := b.q.Submit(b.ctx, request("k1"))
			require.NoError(t, err)
			require.Equal(t, c.applied, res.Replay)
			require.Len(t, b.tasks(), 1)
			require.Zero(t, b.storage.StatementCounts("complete_and_claim").Total())
		})
	}
}

// An outage refuses new connections and ends open ones; once it is over
// the pool connects again and nothing of the refused writes was applied.
func TestPgStorageUnavailableWindow(t *testing.T) {
	b := setupPgStorage(t)
	b.submit("k0")
	b.storage.SetUnavailableUntil(b.clock.Now().Add(5 * time.Second))
	_, err := b.q.Submit(b.ctx, request("k1"))
	requireInjected(t, err, "unavailable")
	var fe *storagefault.Error
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "57P01", fe.SQLState(), "the open connection is terminated: %v", err)
	_, err = b.q.Submit(b.ctx, request("k2"))
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "open", fe.Op, "the next operation needs a new connection: %v", err)
	require.Equal(t, "57P03", fe.SQLState())
	require.Equal(t, queue.ClassConnection, queue.ClassOf(err))
	b.clock.Advance(5 * time.Second)
	b.submit("k3")
	require.Len(t, b.tasks(), 2)
	require.Equal(t, 2, b.storage.Counts().Unavailable)
}

// A fault that loses the connection in a transaction rolls it back on the
// server before the error is returned: no lock of it outlives the error,
// so another connection takes the lock at once.
func TestPgStorageLostConnectionHoldsNoLock(t *testing.T) {
	url := pgtest.Fresh(t, migratePostgres)
	clock := clockwork.NewFakeClockAt(epoch)
	storage := storagefault.NewPostgres(stdlib.GetDefaultDriver(), clock)
	c, err := storage.Open(url)
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	tx, err := c.(driver.ConnBeginTx).BeginTx(ctx, driver.TxOptions{})
	require.NoError(t, err)
	execer := c.(driver.ExecerContext)
	_, err = execer.ExecContext(ctx, "SELECT pg_advisory_xact_lock(7424699)", nil)
	require.NoError(t, err)
	other, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer other.Close(ctx)
	var got bool
	require.NoError(t, other.QueryRow(ctx, "SELECT pg_try_advisory_lock(7424699)").Scan(&got))
	require.False(t, got, "the transaction holds the lock")

	storage.Arm(storagefault.FailStatement)
	_, err = execer.ExecContext(ctx, "SELECT 1", nil)
	requireInjected(t, err, string(storagefault.FailStatement))
	require.NoError(t, other.QueryRow(ctx, "SELECT pg_try_advisory_lock(7424699)").Scan(&got))
	require.True(t, got, "the lost connection's transaction was rolled back before the error")
	require.False(t, c.(driver.Validator).IsValid(), "a lost connection is not put back in the pool")
	require.ErrorIs(t, c.(driver.SessionResetter).ResetSession(ctx), driver.ErrBadConn)
	require.NoError(t, tx.Rollback(), "rolling back on a lost connection has nothing left to do")
	_, err = execer.ExecContext(ctx, "SELECT 1", nil)
	require.ErrorIs(t, err, storagefault.ErrInjected, "a lost connection runs nothing more")
}

// A connection of a driver without pgx's argument checker is refused.
func TestPgStorageRefusesADriverWithoutNamedValueChecker(t *testing.T) {
	storage := storagefault.NewPostgres(plainDriver{}, clockwork.NewFakeClockAt(epoch))
	_, err := storage.Open("x")
	require.ErrorIs(t, err, storagefault.ErrDriverUnsupported)
}

// plainDriver opens connections with no optional interface.
type plainDriver struct{}

func (plainDriver) Open(string) (driver.Conn, error) { return plainConn{}, nil }

type plainConn struct{}

func (plainConn) Prepare(string) (driver.Stmt, error) { return nil, errors.New("no") }
func (plainConn) Close() error                        { return nil }
func (plainConn) Begin() (driver.Tx, error)           { return nil, errors.New("no") }
