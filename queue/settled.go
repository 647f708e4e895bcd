package queue

import (
	"context"
	"database/sql"
	"fmt"
)

// readSettled runs a named read of the audit trail from a cursor and
// scans its rows, so that the cursor never passes an event whose
// transaction may still commit. In SQLite one transaction writes at a
// time and sequence numbers are given in commit order, so the read is a
// plain one. In a store where transactions commit in any order (its SQL
// has events_after_lock; PostgreSQL's), the read runs in a transaction
// whose first statement waits until no transaction that drew an event
// number is still open, and the read is bounded by the last number drawn:
// every event at or below it is then committed or gone.
func (q *Queue) readSettled(ctx context.Context, name queryName, scan func(*sql.Rows) error, args ...any) error {
	return q.readSettledSteps(ctx, name.String(), func(read readFunc) error {
		rows, err := read(name, args...)
		if err != nil {
			return err
		}
		return scan(rows)
	})
}

// readFunc runs a named read and returns its rows.
type readFunc func(name queryName, args ...any) (*sql.Rows, error)

// readSettledSteps is readSettled for reads of several statements (op
// names the whole in errors): steps runs them through read, each seeing
// every event at or below the last number drawn when the first ran as
// committed or gone (PostgreSQL: all in the transaction that waited for
// the writers), or, in SQLite, as plain reads in order.
func (q *Queue) readSettledSteps(ctx context.Context, op string, steps func(read readFunc) error) error {
	if !q.store.Capabilities().CommitsOutOfOrder {
		return steps(func(name queryName, args ...any) (*sql.Rows, error) { return q.readRows(ctx, name, args...) })
	}
	if err := q.checkOpen(op); err != nil {
		return err
	}
	tx, err := q.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("queue: %s: begin: %w", op, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, q.query(qEventsAfterLock.String()).text); err != nil {
		return fmt.Errorf("queue: %s: wait for writers: %w", op, err)
	}
	err = steps(func(qn queryName, args ...any) (*sql.Rows, error) {
		name := qn.String()
		qq := q.query(name)
		bound, err := bindArgs(name, qq, args)
		if err != nil {
			return nil, err
		}
		rows, err := tx.QueryContext(ctx, qq.text, bound...)
		if err != nil {
			return nil, fmt.Errorf("queue: %s: %w", name, err)
		}
		return rows, nil
	})
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("queue: %s: commit: %w", op, err)
	}
	return nil
}
