package queue

import (
	"context"
	"errors"

	"github.com/leasehold/leasehold/queue/internal/seam"
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
//
// A run whose admission could not wait for the exclusive path (its
// transaction had written: seam.StateAdmissionBusy) is run again alone,
// in a transaction of its own, where admission is its first lock and may
// wait; so a submit near a cap is not rolled back again and again for the
// group commits it lands in.
func (q *Queue) writeRetryingOp(ctx context.Context, op string, fn func(t *txn) error, c *completion, s *submission) error {
	alone := false
	for run := 1; ; run++ {
		var err error
		if alone {
			err = q.writeOpAlone(ctx, op, fn, c, s)
		} else {
			err = q.writeOp(ctx, op, fn, c, s)
		}
		if run == conflictRetriesMax || !retryable(err) {
			return err
		}
		alone = alone || admissionBusy(err)
	}
}

// admissionBusy reports whether err is a write rolled back because its
// admission could not wait for the exclusive path.
func admissionBusy(err error) bool {
	var s sqlStater
	return errors.As(err, &s) && s.SQLState() == seam.StateAdmissionBusy
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
