package queue

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/leasehold/leasehold/model"
)

// Reap fails active tasks whose deadline has passed (deadline_exceeded) and
// settles running tasks whose lease has expired: cancelled when
// cancellation was requested, otherwise an attempt is charged and the task
// is requeued with backoff or, on its last attempt, dead-lettered in
// needs_review. Each pass settles at most model.ReapBatchMax of each kind,
// in submission order; More reports that another pass has work.
//
// A pass with nothing to do costs one read and takes no write lock.
func (q *Queue) Reap(ctx context.Context) (model.ReapResult, error) {
	var due bool
	if err := q.readRow(ctx, qReapAny, sql.Named("now", model.Millis(q.now()))).Scan(&due); err != nil {
		return model.ReapResult{}, fmt.Errorf("queue: reap: %w", err)
	}
	if !due {
		return model.ReapResult{}, nil
	}
	var res model.ReapResult
	err := q.writeRetrying(ctx, "reap", func(t *txn) error {
		res = model.ReapResult{}
		now := sql.Named("now", model.Millis(t.now))
		limit := sql.Named("limit", model.ReapBatchMax+1)
		rows, err := t.query(qReapDeadlines, now, limit)
		if err != nil {
			return err
		}
		late, err := scanTasks(rows)
		if err != nil {
			return err
		}
		for i, task := range late {
			if i == model.ReapBatchMax {
				res.More = true
				break
			}
			if err := t.settle(task, model.Failed, model.DeadlineExceeded, model.EventDeadline, model.ReaperActor, ""); err != nil {
				return err
			}
			res.Deadlines++
		}
		rows, err = t.query(qReapLeases, now, limit)
		if err != nil {
			return err
		}
		expired, err := scanTasks(rows)
		if err != nil {
			return err
		}
		for i, task := range expired {
			if i == model.ReapBatchMax {
				res.More = true
				break
			}
			if _, err := t.chargeAttempt(task, model.EventLeaseExpired, model.ReaperActor); err != nil {
				return err
			}
			res.Expired++
		}
		return nil
	})
	return res, err
}
