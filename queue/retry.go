package queue

import (
	"context"
	"errors"
)

// conflictRetriesMax bounds how often a write is run again after the
// database aborted its transaction as a conflict (a deadlock or a
// serialization failure) or a raced unique key, each of which leaves
// nothing written. SQLite, with one writer at a time, reports neither;
// PostgreSQL does when transactions on other connections or machines lock
// the same rows in another order (the reaper settling tasks of several
// users while a claim holds their counter rows) or insert the same key.
const conflictRetriesMax = 5

// writeRetrying is write for an operation whose fn may run more than once:
// fn must set every result it hands back from scratch on each run. A run
// that was not applied because of a conflict is run again, up to
// conflictRetriesMax runs in all; any other outcome is returned as it is.
// An outcome unknown (a failed COMMIT) is never retried: the write may
// have been applied.
func (q *Queue) writeRetrying(ctx context.Context, op string, fn func(t *txn) error) error {
	return q.writeRetryingOp(ctx, op, fn, nil, nil)
}

// writeRetryingOp is writeRetrying for an operation that may be a
// completion or a submit (see writeOp).
func (q *Queue) writeRetryingOp(ctx context.Context, op string, fn func(t *txn) error, c *completion, s *submission) error {
	for run := 1; ; run++ {
		err := q.writeOp(ctx, op, fn, c, s)
		if run == conflictRetriesMax || !retryable(err) {
			return err
		}
	}
}

// retryable reports whether err is a write not applied because of a
// conflict or a raced unique key.
func retryable(err error) bool {
	if !errors.Is(err, ErrNotApplied) {
		return false
	}
	c := ClassOf(err)
	return c == ClassConflict || c == ClassConstraint
}
