package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/internal/broken"
	"github.com/leasehold/leasehold/model"
)

// Cancel cancels a queued or waiting task at once and requests
// cancellation of a running one (its worker sees the request in its next
// heartbeat or step and stops). Cancelling a cancelled task changes
// nothing; other states refuse with ErrInvalidTransition. It returns the
// task as it is afterwards.
func (q *Queue) Cancel(ctx context.Context, id, actor string) (model.Task, error) {
	if err := model.CheckName("actor", actor); err != nil {
		return model.Task{}, err
	}
	var out model.Task
	err := q.write(ctx, "cancel", func(t *txn) error {
		task, err := t.loadTask(id)
		if err != nil {
			return err
		}
		switch task.State {
		case model.Queued, model.WaitingForApproval:
			task.CancelledBy = actor
			if err := t.settle(task, model.Cancelled, model.CancelledByCaller, model.EventCancelled, actor, ""); err != nil {
				return err
			}
		case model.Running:
			if !task.CancelRequested {
				if err := t.execOne(qCancelRequest, sql.Named("id", id), sql.Named("actor", actor),
					sql.Named("now", model.Millis(t.now))); err != nil {
					return err
				}
				if err := t.emit(model.Event{TaskID: id, Kind: model.EventCancelRequested, Attempt: task.Attempt,
					Fence: task.Version, From: model.Running, To: model.Running, Actor: actor}); err != nil {
					return err
				}
			}
		case model.Cancelled:
			out = task
			return nil
		default:
			return fmt.Errorf("cancel task %s: task is %s: %w", id, task.State, model.ErrInvalidTransition)
		}
		out, err = t.loadTask(id)
		return err
	})
	return out, err
}

// inState loads a task and refuses unless it is in state.
func (t *txn) inState(id string, state model.State, action string) (model.Task, error) {
	task, err := t.loadTask(id)
	if err != nil {
		return model.Task{}, err
	}
	if task.State != state {
		return model.Task{}, fmt.Errorf("%s task %s: task is %s: %w", action, id, task.State, model.ErrInvalidTransition)
	}
	return task, nil
}

// Approve requeues a task waiting at its gate. version must be the one
// recorded when it paused; any other is refused with ErrVersionMismatch.
// The next claim resumes the task from its checkpoint.
func (q *Queue) Approve(ctx context.Context, id string, version int64, actor string) error {
	if err := model.CheckName("actor", actor); err != nil {
		return err
	}
	return q.write(ctx, "approve", func(t *txn) error {
		task, err := t.inState(id, model.WaitingForApproval, "approve")
		if err != nil {
			return err
		}
		if version != broken.Pick(broken.ApprovalNotBound, task.ApprovalVersion, version) {
			return fmt.Errorf("approve task %s version %d: recorded version is %d: %w", id, version, task.ApprovalVersion, model.ErrVersionMismatch)
		}
		task.ApprovedBy, task.RunAt = actor, t.now
		return t.settle(task, model.Queued, model.NoReason, model.EventApproved, actor, model.DetailPause(task.ApprovalGate, version))
	})
}

// Reject cancels a task waiting at its gate (approval_rejected). Like
// Approve, version must be the one recorded when it paused; any other is
// refused with ErrVersionMismatch and writes nothing, so a rejection decided
// on one pause cannot cancel a later one.
func (q *Queue) Reject(ctx context.Context, id string, version int64, actor string) error {
	if err := model.CheckName("actor", actor); err != nil {
		return err
	}
	return q.write(ctx, "reject", func(t *txn) error {
		task, err := t.inState(id, model.WaitingForApproval, "reject")
		if err != nil {
			return err
		}
		if version != task.ApprovalVersion {
			return fmt.Errorf("reject task %s version %d: recorded version is %d: %w", id, version, task.ApprovalVersion, model.ErrVersionMismatch)
		}
		task.CancelledBy = actor
		return t.settle(task, model.Cancelled, model.ApprovalRejected, model.EventRejected, actor,
			model.DetailPause(task.ApprovalGate, task.ApprovalVersion))
	})
}

// Requeue returns a task from needs_review to the queue with a budget grant
// bounded by the configured maxima and a fresh set of attempts; it resumes
// from its checkpoint. It never grants an unlimited budget.
func (q *Queue) Requeue(ctx context.Context, id string, g model.Grant, actor string) error {
	if err := model.CheckName("actor", actor); err != nil {
		return err
	}
	return q.write(ctx, "requeue", func(t *txn) error {
		limits, err := t.limits()
		if err != nil {
			return err
		}
		limits.GrantCostMax = broken.Pick(broken.RequeueGrantUnbounded, limits.GrantCostMax, model.CostBudgetMax)
		if err := model.CheckGrant(g, limits); err != nil {
			return err
		}
		task, err := t.inState(id, model.NeedsReview, "requeue")
		if err != nil {
			return err
		}
		task.CostBudget += g.Cost
		task.StepsMax += g.Steps
		task.AttemptsCharged, task.RunAt = 0, t.now
		return t.settle(task, model.Queued, model.NoReason, model.EventRequeued, actor, model.DetailGrant(g))
	})
}

// Resolve settles a task from needs_review as completed, failed or
// cancelled (operator_resolved).
func (q *Queue) Resolve(ctx context.Context, id string, to model.State, actor string) error {
	if err := model.CheckName("actor", actor); err != nil {
		return err
	}
	if !to.Terminal() {
		return &model.ValidationError{Field: "as", Problem: fmt.Sprintf("must be completed, failed or cancelled, got %q", to)}
	}
	return q.write(ctx, "resolve", func(t *txn) error {
		task, err := t.inState(id, model.NeedsReview, "resolve")
		if err != nil {
			return err
		}
		if to == model.Cancelled {
			task.CancelledBy = actor
		}
		return t.settle(task, to, model.OperatorResolved, model.EventResolved, actor, "")
	})
}

// SettleEffect records an operator's finding about an uncertain effect of a
// task in needs_review: applied records a receipt (the operation is never
// called again); not applied removes the intent (the step makes the effect
// afresh when the task is requeued).
func (q *Queue) SettleEffect(ctx context.Context, opID string, applied bool, actor string) error {
	if err := model.CheckName("actor", actor); err != nil {
		return err
	}
	return q.write(ctx, "settle effect", func(t *txn) error {
		e, err := scanEffect(t.queryRow(qEffectByOp, sql.Named("op_id", opID)))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("operation %s: %w", opID, model.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("queue: settle effect: %w", err)
		}
		task, err := t.inState(e.TaskID, model.NeedsReview, "settle effect of")
		if err != nil {
			return err
		}
		if e.Receipted() {
			return fmt.Errorf("operation %s: %w", opID, model.ErrEffectReceipted)
		}
		if applied {
			err = t.execOne(qEffectReceipt, sql.Named("op_id", opID), sql.Named("fence", 0),
				sql.Named("now", model.Millis(t.now)), sql.Named("by", actor), sql.Named("result", "settled by operator"))
		} else {
			err = t.execOne(qEffectDelete, sql.Named("op_id", opID))
		}
		if err != nil {
			return err
		}
		if err := t.execOne(qTouch, sql.Named("id", task.ID), sql.Named("now", model.Millis(t.now))); err != nil {
			return err
		}
		return t.emit(model.Event{TaskID: task.ID, Kind: model.EventEffectSettled, Attempt: task.Attempt,
			Fence: task.Version, OpID: opID, From: task.State, To: task.State, Actor: actor,
			Detail: model.DetailEffectSettled(opID, applied)})
	})
}
