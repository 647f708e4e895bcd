package storagefault_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

	"github.com/leasehold/leasehold/faults/storagefault"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// epoch is where every test's fake clock starts.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const testLease = 30 * time.Second

// storageBundle is a real in-memory queue opened through a Storage.
type storageBundle struct {
	t       *testing.T
	ctx     context.Context
	clock   *clockwork.FakeClock
	storage *storagefault.Storage
	q       *queue.Queue
}

// setupStorage opens an in-memory queue on a fake clock at epoch through a
// Storage wrapping the SQLite driver. When the test ends it clears every
// fault, checks the queue's counters and closes it.
func setupStorage(t *testing.T) *storageBundle {
	t.Helper()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(epoch)
	storage := storagefault.NewStorage(&sqlite.Driver{}, clock)
	q, err := queue.Open(ctx, queue.Options{Path: queue.Memory, Clock: clock, IDs: model.NewSeededIDs(1),
		Driver: storage, BusyTimeout: queue.NoBusyTimeout})
	require.NoError(t, err)
	t.Cleanup(func() {
		storage.Disarm()
		storage.SetUnavailable(false)
		require.NoError(t, q.CheckCounters(ctx))
		require.NoError(t, q.Close())
	})
	return &storageBundle{t: t, ctx: ctx, clock: clock, storage: storage, q: q}
}

func request(key string) model.SubmitRequest {
	return model.SubmitRequest{User: "ana", Key: key, Payload: `{"steps":[{"cost":3},{"cost":2}]}`, CostBudget: 10, StepsMax: 3}
}

func (b *storageBundle) submit(key string) model.SubmitResult {
	b.t.Helper()
	res, err := b.q.Submit(b.ctx, request(key))
	require.NoError(b.t, err)
	return res
}

func (b *storageBundle) claim() model.Claim {
	b.t.Helper()
	cs, err := b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: testLease})
	require.NoError(b.t, err)
	require.Len(b.t, cs, 1)
	return cs[0].Claim
}

func (b *storageBundle) tasks() []model.Task {
	b.t.Helper()
	ts, err := b.q.List(b.ctx, model.ListFilter{})
	require.NoError(b.t, err)
	return ts
}

func (b *storageBundle) task(id string) model.Task {
	b.t.Helper()
	task, err := b.q.Task(b.ctx, id)
	require.NoError(b.t, err)
	return task
}

func countEvents(t *testing.T, q *queue.Queue, taskID string, kind model.EventKind) int {
	t.Helper()
	evs, err := q.Events(context.Background(), taskID)
	require.NoError(t, err)
	n := 0
	for _, e := range evs {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// requireInjected checks that err is an injected error naming fault.
func requireInjected(t *testing.T, err error, fault string) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, storagefault.ErrInjected)
	var fe *storagefault.Error
	require.ErrorAs(t, err, &fe)
	require.Equal(t, fault, fe.Fault)
	require.Contains(t, err.Error(), "faults: injected "+fault)
}

// runLifecycle submits, claims, steps and completes one task, and returns
// the task and its events.
func runLifecycle(t *testing.T, q *queue.Queue) (model.Task, []model.Event) {
	t.Helper()
	ctx := context.Background()
	res, err := q.Submit(ctx, request("k1"))
	require.NoError(t, err)
	replay, err := q.Submit(ctx, request("k1"))
	require.NoError(t, err)
	require.Equal(t, model.SubmitResult{TaskID: res.TaskID, Replay: true}, replay)
	cs, err := q.Claim(ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: testLease})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	c := cs[0].Claim
	_, err = q.Heartbeat(ctx, c, testLease)
	require.NoError(t, err)
	_, err = q.CompleteStep(ctx, model.StepWrite{Claim: c, Index: 0, Cost: 3, Checkpoint: `{"n":1}`})
	require.NoError(t, err)
	intent, err := q.RecordIntent(ctx, c, 1)
	require.NoError(t, err)
	require.NoError(t, q.RecordReceipt(ctx, c, intent.OpID, "ok"))
	_, err = q.CompleteStep(ctx, model.StepWrite{Claim: c, Index: 1, Cost: 2})
	require.NoError(t, err)
	require.NoError(t, q.Complete(ctx, c))
	require.ErrorIs(t, q.Complete(ctx, c), queue.ErrStaleClaim)
	task, err := q.Task(ctx, res.TaskID)
	require.NoError(t, err)
	evs, err := q.Events(ctx, res.TaskID)
	require.NoError(t, err)
	return task, evs
}

// With nothing armed the wrapped driver behaves exactly like the raw one:
// the same operations give the same tasks and the same events.
func TestStorageTransparentWhenUnarmed(t *testing.T) {
	b := setupStorage(t)
	wrappedTask, wrappedEvents := runLifecycle(t, b.q)
	require.Equal(t, model.Completed, wrappedTask.State)
	require.Equal(t, int64(5), wrappedTask.CostUsed)
	require.Equal(t, 2, wrappedTask.StepsUsed)
	require.Equal(t, 1, countEvents(t, b.q, wrappedTask.ID, model.EventStaleWrite))
	require.Equal(t, storagefault.Counts{}, b.storage.Counts())
	require.Zero(t, b.storage.Counts().Total())

	ctx := context.Background()
	raw, err := queue.Open(ctx, queue.Options{Path: queue.Memory, Clock: clockwork.NewFakeClockAt(epoch),
		IDs: model.NewSeededIDs(1), BusyTimeout: queue.NoBusyTimeout})
	require.NoError(t, err)
	defer raw.Close()
	rawTask, rawEvents := runLifecycle(t, raw)
	require.Equal(t, rawTask, wrappedTask)
	require.Equal(t, rawEvents, wrappedEvents)
}

func TestStorageUnavailableWindow(t *testing.T) {
	b := setupStorage(t)
	b.storage.SetUnavailableUntil(epoch.Add(5 * time.Second))
	require.True(t, b.storage.Unavailable())
	require.Equal(t, "storage: unavailable until 2026-01-01T00:00:05Z; armed []; fired "+
		"unavailable=0 disk_full=0 fail_begin=0 fail_statement=0 fail_commit=0 ambiguous_commit=0 busy=0", b.storage.String())

	_, err := b.q.Submit(b.ctx, request("k1"))
	requireInjected(t, err, "unavailable")
	require.Contains(t, err.Error(), "storage unavailable")
	_, err = b.q.List(b.ctx, model.ListFilter{})
	requireInjected(t, err, "unavailable")
	_, err = b.q.EngineVersion(b.ctx)
	requireInjected(t, err, "unavailable")

	b.clock.Advance(5*time.Second - time.Millisecond)
	_, err = b.q.Submit(b.ctx, request("k1"))
	requireInjected(t, err, "unavailable")
	require.Equal(t, 4, b.storage.Counts().Unavailable)

	b.clock.Advance(time.Millisecond) // the window ends at its end time
	require.False(t, b.storage.Unavailable())
	require.Empty(t, b.tasks(), "nothing submitted in the window was stored")
	res := b.submit("k1")
	require.False(t, res.Replay, "the refused submit left no trace to replay")
	c := b.claim()
	require.NoError(t, b.q.Complete(b.ctx, c))
	require.Equal(t, model.Completed, b.task(res.TaskID).State)
	_, err = b.q.EngineVersion(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 4, b.storage.Counts().Unavailable)
}

func TestStorageOpenEndedOutage(t *testing.T) {
	b := setupStorage(t)
	res := b.submit("k1")
	c := b.claim()
	b.storage.SetUnavailable(true)
	b.clock.Advance(time.Hour) // an open-ended outage does not pass with time
	b.storage.SetUnavailableUntil(time.Time{})
	require.True(t, b.storage.Unavailable())
	require.Contains(t, b.storage.String(), "unavailable (open-ended)")
	_, err := b.q.Heartbeat(b.ctx, c, testLease)
	requireInjected(t, err, "unavailable")
	b.storage.SetUnavailable(false)
	require.False(t, b.storage.Unavailable())
	require.Equal(t, model.Running, b.task(res.TaskID).State)
}

func TestStorageFailCommitStoresNothing(t *testing.T) {
	b := setupStorage(t)
	b.storage.Arm(storagefault.FailCommit)
	_, err := b.q.Submit(b.ctx, request("k1"))
	requireInjected(t, err, "fail_commit")
	require.Empty(t, b.tasks())
	require.Empty(t, b.storage.Armed())
	require.Equal(t, 1, b.storage.Counts().FailCommit)
	require.False(t, b.submit("k1").Replay)
	require.Len(t, b.tasks(), 1)
}

func TestStorageAmbiguousCommitSubmitIsStored(t *testing.T) {
	b := setupStorage(t)
	b.storage.Arm(storagefault.AmbiguousCommit)
	_, err := b.q.Submit(b.ctx, request("k1"))
	requireInjected(t, err, "ambiguous_commit")
	ts := b.tasks()
	require.Len(t, ts, 1, "the commit was applied although it reported failure")
	res := b.submit("k1")
	require.Equal(t, model.SubmitResult{TaskID: ts[0].ID, Replay: true}, res)
	require.Len(t, b.tasks(), 1)
	require.Equal(t, 1, b.storage.Counts().Fired(storagefault.AmbiguousCommit))
}

func TestStorageAmbiguousCommitStepChargedOnce(t *testing.T) {
	b := setupStorage(t)
	id := b.submit("k1").TaskID
	c := b.claim()
	w := model.StepWrite{Claim: c, Index: 0, Cost: 3}
	b.storage.Arm(storagefault.AmbiguousCommit)
	_, err := b.q.CompleteStep(b.ctx, w)
	requireInjected(t, err, "ambiguous_commit")
	res, err := b.q.CompleteStep(b.ctx, w)
	require.NoError(t, err)
	require.True(t, res.Replayed)
	task := b.task(id)
	require.Equal(t, int64(3), task.CostUsed)
	require.Equal(t, 1, task.StepsUsed)
	require.Equal(t, 1, countEvents(t, b.q, id, model.EventStep))
}

// FailBegin, FailStatement and Busy surface as errors from the queue, for
// a submit and for a fenced write, and change nothing.
func TestStorageFaultsSurfaceAsErrors(t *testing.T) {
	for _, f := range []storagefault.Fault{storagefault.FailBegin, storagefault.FailStatement, storagefault.Busy} {
		t.Run(f.String(), func(t *testing.T) {
			b := setupStorage(t)
			b.storage.Arm(f)
			_, err := b.q.Submit(b.ctx, request("k1"))
			requireInjected(t, err, f.String())
			if f == storagefault.Busy {
				require.Contains(t, err.Error(), "database is locked")
				require.Contains(t, err.Error(), "SQLITE_BUSY")
			}
			require.Empty(t, b.tasks())
			id := b.submit("k1").TaskID
			c := b.claim()

			b.storage.Arm(f)
			err = b.q.Complete(b.ctx, c)
			requireInjected(t, err, f.String())
			require.Equal(t, model.Running, b.task(id).State)
			require.Zero(t, countEvents(t, b.q, id, model.EventCompleted))
			require.NoError(t, b.q.Complete(b.ctx, c))
			require.Equal(t, model.Completed, b.task(id).State)

			counts := b.storage.Counts()
			require.Equal(t, 2, counts.Fired(f))
			require.Equal(t, 2, counts.Total())
		})
	}
}

// Armed faults fire in arming order, each on the next operation of its
// kind; an outage window takes precedence and leaves them armed.
func TestStorageArmOrder(t *testing.T) {
	b := setupStorage(t)
	for _, f := range []storagefault.Fault{storagefault.FailCommit, storagefault.Busy, storagefault.AmbiguousCommit, storagefault.FailStatement, storagefault.FailBegin} {
		b.storage.Arm(f)
	}
	require.Equal(t, "storage: available; armed [fail_commit busy ambiguous_commit fail_statement fail_begin]; fired "+
		"unavailable=0 disk_full=0 fail_begin=0 fail_statement=0 fail_commit=0 ambiguous_commit=0 busy=0", b.storage.String())

	b.storage.SetUnavailableUntil(epoch.Add(time.Second))
	_, err := b.q.Submit(b.ctx, request("k1"))
	requireInjected(t, err, "unavailable")
	require.Len(t, b.storage.Armed(), 5, "the window wins and spends no armed fault")
	b.clock.Advance(time.Second)

	// The same submit, five times: each spends the first armed fault of the
	// first operation kind it reaches (no read in between, which would
	// spend the statement fault).
	steps := []struct {
		fault string
		armed []storagefault.Fault
	}{
		{"busy", []storagefault.Fault{storagefault.FailCommit, storagefault.AmbiguousCommit, storagefault.FailStatement, storagefault.FailBegin}},
		{"fail_begin", []storagefault.Fault{storagefault.FailCommit, storagefault.AmbiguousCommit, storagefault.FailStatement}},
		{"fail_statement", []storagefault.Fault{storagefault.FailCommit, storagefault.AmbiguousCommit}},
		{"fail_commit", []storagefault.Fault{storagefault.AmbiguousCommit}},
		{"ambiguous_commit", nil},
	}
	for _, s := range steps {
		_, err := b.q.Submit(b.ctx, request("k1"))
		requireInjected(t, err, s.fault)
		require.Equal(t, s.armed, b.storage.Armed(), s.fault)
	}
	require.Len(t, b.tasks(), 1, "only the ambiguous commit was applied")
	require.Equal(t, "storage: available; armed []; fired "+
		"unavailable=1 disk_full=0 fail_begin=1 fail_statement=1 fail_commit=1 ambiguous_commit=1 busy=1", b.storage.String())
	require.True(t, b.submit("k1").Replay)

	b.storage.Arm(storagefault.Busy)
	b.storage.Arm(storagefault.FailCommit)
	b.storage.Disarm()
	require.Empty(t, b.storage.Armed())
	b.submit("k2")
}

func TestStorageArmUnknownPanics(t *testing.T) {
	storage := storagefault.NewStorage(&sqlite.Driver{}, clockwork.NewFakeClockAt(epoch))
	require.Panics(t, func() { storage.Arm("explode") })
	require.Empty(t, storage.Armed())
}

func TestParseStorageFault(t *testing.T) {
	for _, f := range storagefault.Faults() {
		got, err := storagefault.ParseFault(f.String())
		require.NoError(t, err)
		require.Equal(t, f, got)
	}
	_, err := storagefault.ParseFault("explode")
	require.ErrorContains(t, err, "unknown storage fault")
}

// connector opens connections to dsn through drv, as queue.Open does.
type connector struct {
	dsn string
	drv driver.Driver
}

func (c connector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c connector) Driver() driver.Driver                        { return c.drv }

// openDB opens a one-connection in-memory database through a Storage.
func openDB(t *testing.T) (*sql.DB, *storagefault.Storage, *clockwork.FakeClock) {
	t.Helper()
	clock := clockwork.NewFakeClockAt(epoch)
	storage := storagefault.NewStorage(&sqlite.Driver{}, clock)
	db := sql.OpenDB(connector{dsn: ":memory:?_txlock=immediate", drv: storage})
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	_, err := db.Exec(`CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL)`)
	require.NoError(t, err)
	return db, storage, clock
}

func countRows(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM t`).Scan(&n))
	return n
}

// Named parameters and RETURNING work through the wrapper, on the
// connection, on prepared statements and inside transactions.
func TestStorageNamedParametersAndReturning(t *testing.T) {
	db, _, _ := openDB(t)
	ctx := context.Background()
	var id int64
	require.NoError(t, db.QueryRowContext(ctx, `INSERT INTO t (name) VALUES (:name) RETURNING id`, sql.Named("name", "a")).Scan(&id))
	require.Equal(t, int64(1), id)

	stmt, err := db.PrepareContext(ctx, `INSERT INTO t (name) VALUES (:name) RETURNING id, name`)
	require.NoError(t, err)
	defer stmt.Close()
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	var name string
	require.NoError(t, tx.StmtContext(ctx, stmt).QueryRowContext(ctx, sql.Named("name", "b")).Scan(&id, &name))
	require.Equal(t, int64(2), id)
	require.Equal(t, "b", name)
	res, err := tx.ExecContext(ctx, `UPDATE t SET name = :name WHERE id = :id`, sql.Named("name", "c"), sql.Named("id", 2))
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.NoError(t, tx.Commit())

	var nullable sql.NullString
	require.NoError(t, db.QueryRowContext(ctx, `SELECT name FROM t WHERE id = ?`, 2).Scan(&nullable))
	require.Equal(t, sql.NullString{String: "c", Valid: true}, nullable)
	require.Equal(t, 2, countRows(t, db))
}

// A commit inside an outage window rolls the transaction back; so does an
// armed FailCommit; statements in a transaction are refused in the window.
func TestStorageRefusedCommitRollsBack(t *testing.T) {
	db, storage, clock := openDB(t)
	ctx := context.Background()

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `INSERT INTO t (name) VALUES ('a')`)
	require.NoError(t, err)
	storage.SetUnavailableUntil(clock.Now().Add(time.Second))
	_, err = tx.ExecContext(ctx, `INSERT INTO t (name) VALUES ('b')`)
	requireInjected(t, err, "unavailable")
	err = tx.Commit()
	requireInjected(t, err, "unavailable")
	var fe *storagefault.Error
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "commit", fe.Op)
	clock.Advance(time.Second)
	require.Zero(t, countRows(t, db))

	tx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `INSERT INTO t (name) VALUES ('c')`)
	require.NoError(t, err)
	storage.Arm(storagefault.FailCommit)
	requireInjected(t, tx.Commit(), "fail_commit")
	require.Zero(t, countRows(t, db))

	// The connection is clean: a new transaction begins and commits.
	tx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `INSERT INTO t (name) VALUES ('d')`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	require.Equal(t, 1, countRows(t, db))
	require.Equal(t, storagefault.Counts{Unavailable: 2, FailCommit: 1}, storage.Counts())
}

// FailStatement hits the next statement wherever it runs: a query outside
// a transaction, and an exec inside one (which the caller then rolls back).
func TestStorageFailStatement(t *testing.T) {
	db, storage, _ := openDB(t)
	ctx := context.Background()
	storage.Arm(storagefault.FailStatement)
	_, err := db.QueryContext(ctx, `SELECT name FROM t`)
	requireInjected(t, err, "fail_statement")
	require.Contains(t, err.Error(), "disk I/O error")

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	storage.Arm(storagefault.FailStatement)
	_, err = tx.ExecContext(ctx, `INSERT INTO t (name) VALUES ('a')`)
	requireInjected(t, err, "fail_statement")
	require.NoError(t, tx.Rollback())
	require.Zero(t, countRows(t, db))
	require.Equal(t, 2, storage.Counts().FailStatement)
}

// Storage is safe for concurrent use: writers on a file database arm and
// spend faults from several goroutines, and every submit either fails with
// an injected error or is stored. The queue is ungrouped, so each failed
// commit fails exactly one submit (grouped, one fails its whole group: see
// queue's group tests).
func TestStorageConcurrent(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(epoch)
	storage := storagefault.NewStorage(&sqlite.Driver{}, clock)
	q, err := queue.Open(ctx, queue.Options{Path: t.TempDir() + "/leasehold.db", Clock: clock,
		IDs: model.NewSeededIDs(1), Driver: storage, MaxConns: 4, Ungrouped: true})
	require.NoError(t, err)
	defer q.Close()

	const goroutines, submits = 4, 10
	var wg sync.WaitGroup
	errs := make([][]error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range submits {
				if i%3 == 0 {
					storage.Arm(storagefault.FailCommit)
				}
				_, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: fmt.Sprintf("g%d-%d", g, i),
					Payload: `{}`, CostBudget: 1, StepsMax: 1})
				errs[g] = append(errs[g], err)
				_ = storage.String()
			}
		}()
	}
	wg.Wait()
	failed := 0
	for _, es := range errs {
		for _, err := range es {
			if err != nil {
				require.ErrorIs(t, err, storagefault.ErrInjected)
				failed++
			}
		}
	}
	ts, err := q.List(ctx, model.ListFilter{Limit: model.ListLimitMax})
	require.NoError(t, err)
	require.Equal(t, goroutines*submits-failed, len(ts))
	require.Equal(t, goroutines*4, storage.Counts().FailCommit+len(storage.Armed()))
	require.Equal(t, failed, storage.Counts().FailCommit)
	require.NoError(t, q.CheckCounters(ctx))
}

func TestErrorUnwrapsOnlyInjected(t *testing.T) {
	b := setupStorage(t)
	b.storage.Arm(storagefault.FailBegin)
	_, err := b.q.Submit(b.ctx, request("k1"))
	requireInjected(t, err, "fail_begin")
	require.False(t, errors.Is(err, context.DeadlineExceeded))
	var fe *storagefault.Error
	require.ErrorAs(t, err, &fe)
	require.False(t, fe.Timeout())
	require.Equal(t, "begin: cannot begin transaction (faults: injected fail_begin)", fe.Error())
}

// Bypass suspends every fault while its function runs: reads succeed in
// an outage window and armed faults are neither fired nor spent.
func TestStorageBypass(t *testing.T) {
	b := setupStorage(t)
	id := b.submit("k1").TaskID
	b.storage.SetUnavailable(true)
	b.storage.Arm(storagefault.FailStatement)
	b.storage.Arm(storagefault.AmbiguousCommit)
	before := b.storage.String()
	var tasks []model.Task
	var err error
	b.storage.Bypass(func() {
		tasks, err = b.q.List(b.ctx, model.ListFilter{})
		require.NoError(t, err)
		require.NoError(t, b.q.CheckCounters(b.ctx))
		_ = b.submit("k2") // a write's begin, statements and commit pass too
	})
	require.Len(t, tasks, 1)
	require.Equal(t, id, tasks[0].ID)
	require.Equal(t, before, b.storage.String(), "nothing fired or was spent")

	_, err = b.q.List(b.ctx, model.ListFilter{})
	requireInjected(t, err, "unavailable")
	b.storage.SetUnavailable(false)
	_, err = b.q.List(b.ctx, model.ListFilter{})
	requireInjected(t, err, "fail_statement")
	require.Len(t, b.tasks(), 2)
}

// driverFunc is a driver.Driver whose Open is a function.
type driverFunc func(name string) (driver.Conn, error)

func (f driverFunc) Open(name string) (driver.Conn, error) { return f(name) }

// bareConn hides every optional interface of the connection it embeds
// (it has only driver.Conn's methods) and records that it was closed.
type bareConn struct {
	driver.Conn
	closed bool
}

func (c *bareConn) Close() error {
	c.closed = true
	return c.Conn.Close()
}

// fullConn is a connection with every interface Storage needs.
type fullConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.SessionResetter
	driver.Validator
	driver.Pinger
}

// bareStmtConn is a full connection whose statements have only
// driver.Stmt's methods; it keeps the last one it prepared.
type bareStmtConn struct {
	fullConn
	last *bareStmt
}

type bareStmt struct {
	driver.Stmt
	closed bool
}

func (s *bareStmt) Close() error {
	s.closed = true
	return s.Stmt.Close()
}

func (c *bareStmtConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	s, err := c.fullConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	c.last = &bareStmt{Stmt: s}
	return c.last, nil
}

// Storage wraps only drivers whose connections and statements have the
// context-aware interfaces it forwards to: it refuses (and closes) any
// other at Open or Prepare rather than emulate database/sql's fallbacks.
func TestStorageRefusesADriverWithoutContextInterfaces(t *testing.T) {
	clock := clockwork.NewFakeClockAt(epoch)
	raw := &sqlite.Driver{}

	var bare *bareConn
	storage := storagefault.NewStorage(driverFunc(func(name string) (driver.Conn, error) {
		c, err := raw.Open(name)
		bare = &bareConn{Conn: c}
		return bare, err
	}), clock)
	c, err := storage.Open(":memory:")
	require.Nil(t, c)
	require.ErrorIs(t, err, storagefault.ErrDriverUnsupported)
	require.ErrorContains(t, err, "connection *storagefault_test.bareConn needs ConnBeginTx")
	require.True(t, bare.closed, "the refused connection is closed")

	var conn *bareStmtConn
	storage = storagefault.NewStorage(driverFunc(func(name string) (driver.Conn, error) {
		c, err := raw.Open(name)
		if err != nil {
			return nil, err
		}
		conn = &bareStmtConn{fullConn: c.(fullConn)}
		return conn, nil
	}), clock)
	c, err = storage.Open(":memory:")
	require.NoError(t, err, "the connection has every interface")
	defer c.Close()
	s, err := c.Prepare("SELECT 1")
	require.Nil(t, s)
	require.ErrorIs(t, err, storagefault.ErrDriverUnsupported)
	require.ErrorContains(t, err, "statement *storagefault_test.bareStmt needs StmtExecContext and StmtQueryContext")
	require.True(t, conn.last.closed, "the refused statement is closed")
	require.Equal(t, storagefault.Counts{}, storage.Counts(), "a refusal is not an injected fault")

	// The SQLite driver itself is accepted, and its connection unwraps.
	storage = storagefault.NewStorage(raw, clock)
	c, err = storage.Open(":memory:")
	require.NoError(t, err)
	defer c.Close()
	s, err = c.Prepare("SELECT 1")
	require.NoError(t, err)
	require.NoError(t, s.Close())
	u, ok := c.(interface{ Unwrap() driver.Conn })
	require.True(t, ok)
	_, ok = u.Unwrap().(fullConn)
	require.True(t, ok)
}

// A full disk refuses every commit with SQLITE_FULL's code and rolls it
// back; reads go on; giving the disk room again lets writes through.
func TestStorageDiskFull(t *testing.T) {
	b := setupStorage(t)
	first := b.submit("k1")
	b.storage.SetDiskFull(true)
	require.Contains(t, b.storage.String(), "storage: disk full;")

	_, err := b.q.Submit(b.ctx, request("k2"))
	requireInjected(t, err, "disk_full")
	require.Contains(t, err.Error(), "database or disk is full")
	var fe *storagefault.Error
	require.ErrorAs(t, err, &fe)
	require.Equal(t, 13, fe.Code(), "reads as SQLITE_FULL")
	require.Len(t, b.tasks(), 1, "the refused submit was rolled back")
	task, err := b.q.Task(b.ctx, first.TaskID)
	require.NoError(t, err, "reads run on a full disk")
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, 1, b.storage.Counts().DiskFull)

	b.storage.SetDiskFull(false)
	b.submit("k2")
	require.Len(t, b.tasks(), 2)
}

// Every injected storage error carries the SQLite code it reads as.
func TestInjectedStorageErrorsCarryTheirCode(t *testing.T) {
	for f, code := range map[storagefault.Fault]int{storagefault.Busy: 5, storagefault.FailStatement: 10, storagefault.FailBegin: 10, storagefault.FailCommit: 10} {
		b := setupStorage(t)
		b.storage.Arm(f)
		_, err := b.q.Submit(b.ctx, request("k1"))
		var fe *storagefault.Error
		require.ErrorAs(t, err, &fe, "%s", f)
		require.Equal(t, code, fe.Code(), "%s", f)
	}
}
