package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/model"
)

// Claim claims up to req.Max queued tasks that are due, within their
// deadline, and whose user is below its running limit, in claim order
// (priority, then run_at, then submission). Each claim is a conditional
// write that moves the task to running, sets its owner and lease, and
// increments its version, the fence token every later write must name. The
// per-user limit is enforced inside the same transaction.
func (q *Queue) Claim(ctx context.Context, req model.ClaimRequest) ([]model.Claimed, error) {
	var out []model.Claimed
	err := q.write(ctx, "claim", func(t *txn) error {
		limits, err := t.limits()
		if err != nil {
			return err
		}
		if err := req.Validate(limits.ClaimBatchMax); err != nil {
			return err
		}
		out = out[:0]
		for len(out) < req.Max {
			c, ok, err := t.claimNext(req)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			out = append(out, c)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (t *txn) claimNext(req model.ClaimRequest) (model.Claimed, bool, error) {
	now := model.Millis(t.now)
	var seq int64
	err := t.queryRow("claim_next", sql.Named("now", now)).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return model.Claimed{}, false, nil
	}
	if err != nil {
		return model.Claimed{}, false, fmt.Errorf("queue: claim: select: %w", err)
	}
	task, err := scanTask(t.queryRow("claim_task", sql.Named("seq", seq), sql.Named("owner", req.Worker),
		sql.Named("lease_until", model.Millis(t.now.Add(req.Lease))), sql.Named("now", now)))
	if err != nil {
		return model.Claimed{}, false, fmt.Errorf("queue: claim: update: %w", err)
	}
	eligible := task.QueuedAt
	if task.RunAt.After(eligible) {
		eligible = task.RunAt
	}
	if err := t.observe(histQueueWait, t.now.Sub(eligible)); err != nil {
		return model.Claimed{}, false, err
	}
	claim := model.Claim{TaskID: task.ID, Fence: task.Version, Owner: task.Owner, Attempt: task.Attempt, LeaseUntil: task.LeaseUntil}
	if err := t.emit(model.Event{TaskID: task.ID, Kind: model.EventClaimed, Attempt: task.Attempt,
		Fence: task.Version, From: model.Queued, To: model.Running, Actor: req.Worker}); err != nil {
		return model.Claimed{}, false, err
	}
	return model.Claimed{Claim: claim, Task: task}, true, nil
}
