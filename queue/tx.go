package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/model"
)

// txn is one write transaction (BEGIN IMMEDIATE, from the DSN's _txlock)
// with the time the operation runs at.
type txn struct {
	q   *Queue
	ctx context.Context
	tx  *sql.Tx
	now time.Time
}

// committed wraps an error that must be returned after the transaction
// commits: a refusal whose record (a stale-write event, a task failed for
// its budget) is itself a write.
type committed struct{ err error }

func (c committed) Error() string { return c.err.Error() }
func (c committed) Unwrap() error { return c.err }

// commitThen asks write to commit the transaction and then return err.
func commitThen(err error) error { return committed{err} }

// write runs fn in a write transaction. fn's error rolls the transaction
// back, unless it was made by commitThen. Storage errors are wrapped with
// the operation's name; a commit error is always returned, never a false
// success.
func (q *Queue) write(ctx context.Context, op string, fn func(t *txn) error) error {
	tx, err := q.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("queue: %s: begin: %w", op, err)
	}
	t := &txn{q: q, ctx: ctx, tx: tx, now: q.now()}
	ferr := fn(t)
	var keep committed
	if ferr != nil && !errors.As(ferr, &keep) {
		if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
			return fmt.Errorf("queue: %s: %w (rollback: %v)", op, ferr, rerr)
		}
		return ferr
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("queue: %s: commit: %w", op, err)
	}
	if ferr != nil {
		return keep.err
	}
	return nil
}

func (t *txn) stmt(name string) *sql.Stmt {
	s, ok := t.q.stmts[name]
	if !ok {
		panic("queue: no query named " + name)
	}
	return t.tx.StmtContext(t.ctx, s)
}

// exec runs a named statement and returns the rows it affected.
func (t *txn) exec(name string, args ...any) (int64, error) {
	res, err := t.stmt(name).ExecContext(t.ctx, args...)
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
func (t *txn) execOne(name string, args ...any) error {
	n, err := t.exec(name, args...)
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("queue: %s: affected %d rows, expected 1", name, n)
	}
	return nil
}

func (t *txn) queryRow(name string, args ...any) *sql.Row {
	return t.stmt(name).QueryRowContext(t.ctx, args...)
}

func (t *txn) query(name string, args ...any) (*sql.Rows, error) {
	rows, err := t.stmt(name).QueryContext(t.ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("queue: %s: %w", name, err)
	}
	return rows, nil
}

// emit appends an event to the audit trail at the transaction's time.
func (t *txn) emit(e model.Event) error {
	_, err := t.exec("event_insert",
		sql.Named("task_id", e.TaskID), sql.Named("kind", string(e.Kind)),
		sql.Named("attempt", e.Attempt), sql.Named("fence", e.Fence), sql.Named("op_id", e.OpID),
		sql.Named("from_state", string(e.From)), sql.Named("to_state", string(e.To)),
		sql.Named("reason", string(e.Reason)), sql.Named("actor", e.Actor),
		sql.Named("at", model.Millis(t.now)), sql.Named("detail", e.Detail))
	return err
}

// The queue-wait and run-time histograms are kept by triggers on tasks
// (tasks_claimed, tasks_claim_ended) in the same tallies page as the state
// and event counts, so a claim or a settle writes one counters page.

// read runs a named read outside any transaction: autocommit, no lock
// beyond the statement's own snapshot.
func (q *Queue) readRow(ctx context.Context, name string, args ...any) *sql.Row {
	return q.stmts[name].QueryRowContext(ctx, args...)
}

func (q *Queue) readRows(ctx context.Context, name string, args ...any) (*sql.Rows, error) {
	rows, err := q.stmts[name].QueryContext(ctx, args...)
	if err != nil {
		return nil, fmt.Errorf("queue: %s: %w", name, err)
	}
	return rows, nil
}
