package queue

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/sqlconn"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue/internal/seam"
)

// txn is one write operation's view of its transaction (BEGIN IMMEDIATE,
// from the DSN's _txlock, shared by the operations of a group commit) with
// the time the operation runs at.
type txn struct {
	q   *Queue
	ctx context.Context
	tx  *sql.Tx
	now time.Time
	// local holds the statements bound to this transaction, shared by
	// the operations of a group, so that each is bound (or prepared) once
	// per transaction, not once per use; unprepared names those of them
	// prepared for this transaction only.
	unprepared []string
	local      map[string]*sql.Stmt
	// ready is set once the operation made a task claimable now: the
	// group then wakes idle workers elsewhere (wake.go) and, once
	// committed, in this process (localwake.go).
	ready bool
	// buffer, when set, takes the events emit makes, for the group to
	// insert together (batch.go: flush).
	buffer *[][12]any
}

// committed wraps an error that must be returned after the transaction
// commits: a refusal whose record (a stale-write event, a task failed for
// its budget) is itself a write.
type committed struct{ err error }

func (c committed) Error() string { return c.err.Error() }
func (c committed) Unwrap() error { return c.err }

// commitThen asks write to commit the transaction and then return err.
func commitThen(err error) error { return committed{err} }

// write, which runs an operation in a write transaction, is in group.go.

// stmt returns the named statement for use in the transaction. One
// prepared on the database is bound to the transaction on its first use
// there (database/sql's Tx.StmtContext, which allocates and registers a
// statement each call, so a group of seven claims and completions would
// otherwise bind thirty); one not prepared yet is prepared for this
// transaction only, and on the database once the transaction is over (an
// in-memory database has one connection, which the transaction holds).
func (t *txn) stmt(name string) (*sql.Stmt, error) {
	if s := t.local[name]; s != nil {
		return s, nil
	}
	if s := t.q.cachedStmt(name); s != nil {
		bound := t.tx.StmtContext(t.ctx, s)
		t.keep(name, bound)
		return bound, nil
	}
	s, err := t.tx.PrepareContext(t.ctx, t.q.query(name).text)
	if err != nil {
		return nil, fmt.Errorf("queue: prepare %s: %w", name, err)
	}
	t.unprepared = append(t.unprepared, name)
	t.keep(name, s)
	return s, nil
}

// keep holds s, bound to the transaction, for the transaction's later
// uses of name; the transaction's end closes it.
func (t *txn) keep(name string, s *sql.Stmt) {
	if t.local == nil {
		t.local = map[string]*sql.Stmt{}
	}
	t.local[name] = s
}

// exec runs a named statement and returns the rows it affected.
func (t *txn) exec(qn queryName, args ...any) (int64, error) {
	name := t.q.variant(qn.String())
	stmt, err := t.stmt(name)
	if err != nil {
		return 0, err
	}
	if args, err = bindArgs(name, t.q.query(name), args); err != nil {
		return 0, err
	}
	res, err := stmt.ExecContext(t.ctx, args...)
	if err != nil {
		return 0, fmt.Errorf("queue: %s: %w", name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("queue: %s: %w", name, err)
	}
	return n, nil
}

// execOne runs a named statement that must affect exactly one row.
func (t *txn) execOne(name queryName, args ...any) error {
	n, err := t.exec(name, args...)
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("queue: %s: affected %d rows, expected 1", name.String(), n)
	}
	return nil
}

// row is a *sql.Row or the error that kept a statement from running.
type row struct {
	r   *sql.Row
	err error
}

// Scan scans the row or returns the error.
func (r row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	return r.r.Scan(dest...)
}

func (t *txn) queryRow(n queryName, args ...any) row {
	name := t.q.variant(n.String())
	stmt, err := t.stmt(name)
	if err != nil {
		return row{err: err}
	}
	if args, err = bindArgs(name, t.q.query(name), args); err != nil {
		return row{err: err}
	}
	return row{r: stmt.QueryRowContext(t.ctx, args...)}
}

func (t *txn) query(n queryName, args ...any) (*sql.Rows, error) {
	name := t.q.variant(n.String())
	stmt, err := t.stmt(name)
	if err != nil {
		return nil, err
	}
	if args, err = bindArgs(name, t.q.query(name), args); err != nil {
		return nil, err
	}
	rows, err := stmt.QueryContext(t.ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("queue: %s: %w", name, err)
	}
	return rows, nil
}

// emit appends an event to the audit trail at the transaction's time.
func (t *txn) emit(e model.Event) error {
	if t.buffer != nil {
		*t.buffer = append(*t.buffer, eventRow(t, e))
		return nil
	}
	_, err := t.exec(qEventInsert,
		sql.Named("task_id", e.TaskID), sql.Named("kind", string(e.Kind)),
		sql.Named("attempt", e.Attempt), sql.Named("fence", e.Fence), sql.Named("op_id", e.OpID),
		sql.Named("from_state", string(e.From)), sql.Named("to_state", string(e.To)),
		sql.Named("reason", string(e.Reason)), sql.Named("actor", e.Actor),
		sql.Named("at", model.Millis(t.now)), sql.Named("detail", e.Detail), sql.Named("scope", model.ScopeOf(t.ctx)))
	return err
}

// The queue-wait and run-time histograms are kept by triggers on tasks
// (tasks_claimed, tasks_claim_ended) in the same tallies page as the state
// and event counts, so a claim or a settle writes one counters page.

// read runs a named read outside any transaction: autocommit, no lock
// beyond the statement's own snapshot.
func (q *Queue) readRow(ctx context.Context, n queryName, args ...any) row {
	name := q.variant(n.String())
	stmt, err := q.prepared(ctx, name)
	if err != nil {
		return row{err: err}
	}
	if args, err = bindArgs(name, q.query(name), args); err != nil {
		return row{err: err}
	}
	return row{r: stmt.QueryRowContext(ctx, args...)}
}

func (q *Queue) readRows(ctx context.Context, name queryName, args ...any) (*sql.Rows, error) {
	return q.readRowsAs(ctx, "queue: ", name, args...)
}

// readRowsBare is readRows with a failed query's error named by the query
// alone ("NAME: ..."), for a caller that names the operation itself.
func (q *Queue) readRowsBare(ctx context.Context, name queryName, args ...any) (*sql.Rows, error) {
	return q.readRowsAs(ctx, "", name, args...)
}

// readRowsAs is readRows with prefix before the name a failed query's
// error starts with.
func (q *Queue) readRowsAs(ctx context.Context, prefix string, n queryName, args ...any) (*sql.Rows, error) {
	name := q.variant(n.String())
	stmt, err := q.prepared(ctx, name)
	if err != nil {
		return nil, err
	}
	if args, err = bindArgs(name, q.query(name), args); err != nil {
		return nil, err
	}
	rows, err := stmt.QueryContext(ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("%s%s: %w", prefix, name, err)
	}
	return rows, nil
}

// txn is the transaction a store's Claim and Notify run statements in.
var _ seam.Tx = (*txn)(nil)

// Now is the operation's time.
func (t *txn) Now() time.Time { return t.now }

// Query runs a named statement that returns rows.
func (t *txn) Query(name queryName, args ...any) (*sql.Rows, error) { return t.query(name, args...) }

// Exec runs a named statement and returns the rows it affected.
func (t *txn) Exec(name queryName, args ...any) (int64, error) { return t.exec(name, args...) }

// runner runs, for a store, the statements it runs as their own
// transactions.
type runner struct{ q *Queue }

var _ seam.Runner = runner{}

// Query runs a named statement outside any transaction, its error named
// by the statement alone. The statement is the store's alone: no
// caller's cancellation may end it. Its context is marked as its own
// transaction's (sqlconn.OwnTransaction), for the layers below
// database/sql: the storage fault injector's BEGIN and COMMIT faults land
// on it.
func (r runner) Query(name queryName, args ...any) (*sql.Rows, error) {
	return r.q.readRowsBare(sqlconn.OwnTransaction(context.Background(), name.String()), name, args...)
}

// Text is a named statement's text.
func (r runner) Text(name queryName) string { return r.q.query(name.String()).text }
