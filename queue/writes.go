package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/broken"
	"github.com/leasehold/leasehold/model"
)

// loadTask reads one task inside the transaction.
func (t *txn) loadTask(id string) (model.Task, error) {
	task, err := scanTask(t.queryRow(qTaskByID, sql.Named("id", id)))
	if err != nil {
		return model.Task{}, taskNotFound(err, id)
	}
	return task, nil
}

// fenced loads the task a worker write names and checks the claim: the
// fence must be the task's version, the task running, the lease unexpired
// at the queue's clock. A stale write is recorded as an event and refused
// with ErrStaleClaim after that record commits. When checkDeadline is set,
// a write after the task's deadline fails the task instead.
func (t *txn) fenced(c model.Claim, write model.Write, checkDeadline bool) (model.Task, error) {
	task, err := t.loadTask(c.TaskID)
	if err != nil {
		return model.Task{}, err
	}
	version := task.Version
	leaseUntil := broken.Pick(broken.WriteAfterLeaseExpiry, task.LeaseUntil, t.now.Add(time.Millisecond))
	if leaseUntil.Equal(t.now) {
		leaseUntil = broken.Pick(broken.WriteAtLeaseUntil, leaseUntil, t.now.Add(time.Millisecond))
	}
	if write == model.WriteComplete && task.State == model.Running {
		version = broken.Pick(broken.CompleteWithoutFence, version, c.Fence)
		leaseUntil = broken.Pick(broken.CompleteWithoutFence, leaseUntil, t.now.Add(time.Millisecond))
	}
	if why := model.StaleReason(task.State, version, leaseUntil, c.Fence, t.now); why != "" {
		if err := t.emit(model.Event{TaskID: task.ID, Kind: model.EventStaleWrite, Attempt: c.Attempt,
			Fence: c.Fence, From: task.State, To: task.State, Actor: c.Owner,
			Detail: model.DetailStale(write, why)}); err != nil {
			return model.Task{}, err
		}
		return model.Task{}, commitThen(fmt.Errorf("%s task %s fence %d: %s: %w", write, task.ID, c.Fence, why, model.ErrStaleClaim))
	}
	if checkDeadline && task.PastDeadline(t.now) {
		if err := t.settle(task, model.Failed, model.DeadlineExceeded, model.EventDeadline, c.Owner, ""); err != nil {
			return model.Task{}, err
		}
		return model.Task{}, commitThen(fmt.Errorf("%s task %s: %w", write, task.ID, model.ErrDeadlineExceeded))
	}
	return task, nil
}

// settle moves task (as loaded, with any of the settle columns already
// changed by the caller) to state to, ending its claim if it was running,
// and records the event. A completed task keeps no last error.
func (t *txn) settle(task model.Task, to model.State, reason model.Reason, kind model.EventKind, actor, detail string) error {
	if to == model.Completed {
		task.LastError = ""
	}
	if err := t.execOne(qSettle,
		sql.Named("id", task.ID), sql.Named("from_state", string(task.State)), sql.Named("version", task.Version),
		sql.Named("to_state", string(to)), sql.Named("reason", string(reason)),
		sql.Named("run_at", model.Millis(task.RunAt)), sql.Named("now", model.Millis(t.now)),
		sql.Named("attempts_charged", task.AttemptsCharged), sql.Named("attempts_failed", task.AttemptsFailed),
		sql.Named("last_error", task.LastError),
		sql.Named("cancelled_by", task.CancelledBy), sql.Named("approved_by", task.ApprovedBy),
		sql.Named("cost_budget", task.CostBudget), sql.Named("steps_max", task.StepsMax)); err != nil {
		return err
	}
	if to == model.Queued {
		t.madeReady(task.RunAt)
	}
	if reason == model.BudgetExhausted {
		reason = broken.Pick(broken.EventWrongReason, reason, model.PermanentError)
	}
	return t.emit(model.Event{TaskID: task.ID, Kind: kind, Attempt: task.Attempt, Fence: task.Version,
		From: task.State, To: to, Reason: reason, Actor: actor, Detail: detail})
}

// Heartbeat extends the claim's lease to now+lease and reports whether
// cancellation was requested.
func (q *Queue) Heartbeat(ctx context.Context, c model.Claim, lease time.Duration) (model.HeartbeatResult, error) {
	if err := model.CheckLease(lease); err != nil {
		return model.HeartbeatResult{}, err
	}
	var res model.HeartbeatResult
	err := q.write(ctx, "heartbeat", func(t *txn) error {
		task, err := t.fenced(c, model.WriteHeartbeat, true)
		if err != nil {
			return err
		}
		until := t.now.Add(lease)
		if err := t.execOne(qHeartbeat, sql.Named("id", task.ID), sql.Named("fence", c.Fence),
			sql.Named("lease_until", model.Millis(until)), sql.Named("now", model.Millis(t.now))); err != nil {
			return err
		}
		res = model.HeartbeatResult{LeaseUntil: until, CancelRequested: broken.Pick(broken.HeartbeatHidesCancel, task.CancelRequested, false)}
		return nil
	})
	return res, err
}

// CompleteStep charges one completed step. The write names the step's
// index: a retry of the step just completed is recognised (Replayed) and
// not charged again; any other index is a conflict. A step that would pass
// the step limit or the cost budget fails the task (steps_exhausted,
// budget_exhausted) and returns the matching error.
func (q *Queue) CompleteStep(ctx context.Context, w model.StepWrite) (model.StepResult, error) {
	if err := w.Validate(); err != nil {
		return model.StepResult{}, err
	}
	var res model.StepResult
	err := q.write(ctx, "step", func(t *txn) error {
		task, err := t.fenced(w.Claim, model.WriteStep, true)
		if err != nil {
			return err
		}
		res.CancelRequested = task.CancelRequested
		index := broken.Pick(broken.StepCASSkipped, w.Index, task.StepsUsed)
		switch {
		case index < task.StepsUsed:
			res.Replayed = true
			return nil
		case index > task.StepsUsed:
			return fmt.Errorf("step %d of task %s: next step is %d: %w", w.Index, task.ID, task.StepsUsed, model.ErrStepConflict)
		case task.StepsUsed+broken.Pick(broken.StepLimitOffByOne, 1, 0) > task.StepsMax:
			return t.exhaust(task, model.StepsExhausted, w, model.ErrStepsExhausted)
		case task.CostUsed+w.Cost > task.CostBudget:
			return t.exhaust(task, model.BudgetExhausted, w, model.ErrBudgetExhausted)
		}
		if err := t.execOne(qStepApply, sql.Named("id", task.ID), sql.Named("fence", w.Claim.Fence),
			sql.Named("index", index), sql.Named("cost", w.Cost), sql.Named("checkpoint", w.Checkpoint),
			sql.Named("now", model.Millis(t.now))); err != nil {
			return err
		}
		return t.emit(model.Event{TaskID: task.ID, Kind: model.EventStep, Attempt: task.Attempt,
			Fence: task.Version, From: model.Running, To: model.Running, Actor: w.Claim.Owner,
			Detail: model.DetailStep(w.Index, w.Cost)})
	})
	return res, err
}

// exhaust fails a task whose step would pass a limit.
func (t *txn) exhaust(task model.Task, reason model.Reason, w model.StepWrite, sentinel error) error {
	if err := t.settle(task, model.Failed, reason, model.EventFailed, w.Claim.Owner, model.DetailStep(w.Index, w.Cost)); err != nil {
		return err
	}
	return commitThen(fmt.Errorf("step %d of task %s: %w", w.Index, task.ID, sentinel))
}

// RecordIntent records, before the call, the intent to make the effect of
// step under the claim. If the operation already has a receipt it reports
// IntentReceipted (never call it again); if an earlier claim recorded
// intent without a receipt it reports IntentUncertain (reconcile or send
// the task to review). A repeat under the same claim reports
// IntentRecorded again.
func (q *Queue) RecordIntent(ctx context.Context, c model.Claim, step int) (model.IntentResult, error) {
	if err := model.CheckStepIndex(step); err != nil {
		return model.IntentResult{}, err
	}
	var res model.IntentResult
	err := q.write(ctx, "effect intent", func(t *txn) error {
		task, err := t.fenced(c, model.WriteIntent, true)
		if err != nil {
			return err
		}
		op := model.OperationID(task.ID, step)
		e, err := scanEffect(t.queryRow(qEffectByOp, sql.Named("op_id", op)))
		switch {
		case err == nil && e.Receipted():
			res = model.IntentResult{OpID: op, Status: model.IntentReceipted, Result: e.Result}
			return nil
		case err == nil && e.IntentFence == c.Fence:
			res = model.IntentResult{OpID: op, Status: model.IntentRecorded}
			return nil
		case err == nil:
			res = model.IntentResult{OpID: op, Status: model.IntentUncertain}
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("queue: effect intent: %w", err)
		}
		if err := t.execOne(qEffectInsert, sql.Named("op_id", op), sql.Named("task_id", task.ID),
			sql.Named("step", step), sql.Named("fence", c.Fence), sql.Named("now", model.Millis(t.now))); err != nil {
			return err
		}
		if err := t.execOne(qTouch, sql.Named("id", task.ID), sql.Named("now", model.Millis(t.now))); err != nil {
			return err
		}
		res = model.IntentResult{OpID: op, Status: model.IntentRecorded}
		return t.emit(model.Event{TaskID: task.ID, Kind: model.EventEffectIntent, Attempt: task.Attempt,
			Fence: task.Version, OpID: op, From: model.Running, To: model.Running, Actor: c.Owner})
	})
	return res, err
}

// RecordReceipt records the outcome of an operation the claim called or
// reconciled. The same receipt repeated under the same claim is accepted;
// any other second receipt is refused with ErrEffectReceipted.
func (q *Queue) RecordReceipt(ctx context.Context, c model.Claim, opID, result string) error {
	if len(result) > model.ResultMax {
		return &model.ValidationError{Field: "result", Problem: fmt.Sprintf("larger than %d bytes", model.ResultMax)}
	}
	return q.write(ctx, "effect receipt", func(t *txn) error {
		task, err := t.fenced(c, model.WriteReceipt, false)
		if err != nil {
			return err
		}
		e, err := scanEffect(t.queryRow(qEffectByOp, sql.Named("op_id", opID)))
		if errors.Is(err, sql.ErrNoRows) || (err == nil && e.TaskID != task.ID) {
			return fmt.Errorf("operation %s of task %s has no intent: %w", opID, task.ID, model.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("queue: effect receipt: %w", err)
		}
		if e.Receipted() {
			if e.ReceiptFence == c.Fence && e.Result == result {
				return nil
			}
			return fmt.Errorf("operation %s: %w", opID, model.ErrEffectReceipted)
		}
		if err := t.execOne(qEffectReceipt, sql.Named("op_id", opID), sql.Named("fence", c.Fence),
			sql.Named("now", model.Millis(t.now)), sql.Named("by", ""), sql.Named("result", result)); err != nil {
			return err
		}
		if err := t.execOne(qTouch, sql.Named("id", task.ID), sql.Named("now", model.Millis(t.now))); err != nil {
			return err
		}
		return t.emit(model.Event{TaskID: task.ID, Kind: model.EventEffectReceipt, Attempt: task.Attempt,
			Fence: task.Version, OpID: opID, From: model.Running, To: model.Running, Actor: c.Owner})
	})
}

// Pause parks the task at the approval gate of step: the gate counts as a
// step, the lease is released, and the version an approval must name is
// recorded. A task whose cancellation was requested is cancelled instead;
// the returned state says which happened.
func (q *Queue) Pause(ctx context.Context, c model.Claim, step int, gate string) (model.State, error) {
	if err := model.CheckGate(gate); err != nil {
		return "", err
	}
	var to model.State
	err := q.write(ctx, "pause", func(t *txn) error {
		task, err := t.fenced(c, model.WritePause, true)
		if err != nil {
			return err
		}
		if step != task.StepsUsed {
			return fmt.Errorf("pause at step %d of task %s: next step is %d: %w", step, task.ID, task.StepsUsed, model.ErrStepConflict)
		}
		if task.CancelRequested {
			to = model.Cancelled
			return t.settle(task, model.Cancelled, model.CancelledByCaller, model.EventCancelled, c.Owner, "")
		}
		if task.StepsUsed+1 > task.StepsMax {
			if err := t.settle(task, model.Failed, model.StepsExhausted, model.EventFailed, c.Owner, model.DetailStep(step, 0)); err != nil {
				return err
			}
			return commitThen(fmt.Errorf("pause at step %d of task %s: %w", step, task.ID, model.ErrStepsExhausted))
		}
		if err := t.execOne(qPauseApply, sql.Named("id", task.ID), sql.Named("fence", c.Fence),
			sql.Named("index", step), sql.Named("gate", gate), sql.Named("now", model.Millis(t.now))); err != nil {
			return err
		}
		to = model.WaitingForApproval
		return t.emit(model.Event{TaskID: task.ID, Kind: model.EventPaused, Attempt: task.Attempt,
			Fence: task.Version, From: model.Running, To: model.WaitingForApproval, Actor: c.Owner,
			Detail: model.DetailPause(gate, task.Version)})
	})
	return to, err
}

// Complete finishes the claimed task.
//
// The common case is one fenced write: an UPDATE that succeeds only while
// the fence is current, the task running and the lease unexpired, which is
// the check fenced makes, and that changes what settle would change for a
// completion. Only when it matches no row is the task loaded, to record and
// return why the write is stale (or that the task does not exist).
//
// In a group commit with other completions it is completed set-wise with
// them (batch.go), under the same checks.
func (q *Queue) Complete(ctx context.Context, c model.Claim) error {
	return q.writeCompletion(ctx, "complete", &completion{claim: c})
}

// complete is Complete's write inside t (CompleteAndClaim's first part).
func (t *txn) complete(c model.Claim) error {
	n, err := t.exec(qCompleteFenced, sql.Named("id", c.TaskID), sql.Named("fence", c.Fence),
		sql.Named("now", model.Millis(t.now)))
	if err != nil {
		return err
	}
	if n == 1 {
		return t.emit(completedEvent(c))
	}
	return t.completeRefused(c)
}

// completeRefused is complete once complete_fenced (or complete_batch)
// matched no row for c.
func (t *txn) completeRefused(c model.Claim) error {
	// complete_fenced refused the claim: fenced says why and records it.
	// It makes the same checks as complete_fenced, so in a normal build
	// it always refuses here. Only a broken variant that forges its
	// checks (complete-without-fence, write-after-lease-expiry; see
	// broken_on.go) gets past it, and the settle below is reachable
	// only in that build.
	task, err := t.fenced(c, model.WriteComplete, false)
	if err != nil {
		return err
	}
	return t.settle(task, model.Completed, model.NoReason, model.EventCompleted, c.Owner, "")
}

// Fail ends the claim with a classified failure: permanent fails the task
// with its reason; uncertain parks it in needs_review (uncertain_effect);
// transient charges an attempt and requeues it with backoff, or
// dead-letters it in needs_review when attempts are exhausted (a task
// whose cancellation was requested is cancelled instead). It returns the
// state the task reached.
func (q *Queue) Fail(ctx context.Context, c model.Claim, f model.Failure) (model.State, error) {
	reason, err := f.Validate()
	if err != nil {
		return "", err
	}
	var to model.State
	err = q.write(ctx, "fail", func(t *txn) error {
		task, err := t.fenced(c, model.WriteFail, false)
		if err != nil {
			return err
		}
		task.LastError = model.TruncateMessage(f.Message)
		switch f.Class {
		case model.Permanent:
			to = model.Failed
			return t.settle(task, model.Failed, reason, model.EventFailed, c.Owner, "")
		case model.Uncertain:
			to = model.NeedsReview
			return t.settle(task, model.NeedsReview, model.UncertainEffect, model.EventUncertain, c.Owner, f.OpID)
		}
		to, err = t.chargeAttempt(task, model.EventRetry, c.Owner)
		return err
	})
	return to, err
}

// chargeAttempt ends a claim that failed transiently or whose lease
// expired: cancelled if cancellation was requested, requeued with backoff
// while attempts remain, dead-lettered in needs_review otherwise. Lease
// expiries keep lease_expired as the event kind of every outcome.
func (t *txn) chargeAttempt(task model.Task, kind model.EventKind, actor string) (model.State, error) {
	outcome := func(own model.EventKind) model.EventKind {
		if kind == model.EventLeaseExpired {
			return kind
		}
		return own
	}
	cancelled := task.CancelRequested
	if kind == model.EventLeaseExpired {
		cancelled = broken.Pick(broken.ReaperRequeuesCancelled, cancelled, false)
	}
	if cancelled {
		return model.Cancelled, t.settle(task, model.Cancelled, model.CancelledByCaller, outcome(model.EventCancelled), actor, "")
	}
	if broken.Pick(broken.ReaperNotCharging, true, kind != model.EventLeaseExpired) {
		task.AttemptsCharged++
		task.AttemptsFailed++
	}
	if task.AttemptsCharged >= task.AttemptsMax {
		return model.NeedsReview, t.settle(task, model.NeedsReview, model.AttemptsExhausted, outcome(model.EventDeadLettered),
			actor, model.DetailDeadLetter(task.AttemptsCharged, task.AttemptsMax))
	}
	delay := t.q.backoff.Delay(task.AttemptsCharged, t.q.draw(model.JitterKey(task.ID, task.Attempt)))
	task.RunAt = broken.Pick(broken.RetryWithoutBackoff, t.now.Add(delay), t.now)
	return model.Queued, t.settle(task, model.Queued, model.NoReason, kind, actor,
		model.DetailRetry(task.AttemptsCharged, task.AttemptsMax, delay))
}

// Release gives the claim back on shutdown without charging an attempt;
// the task keeps its checkpoint and is due at once. A task whose
// cancellation was requested is cancelled instead.
func (q *Queue) Release(ctx context.Context, c model.Claim) (model.State, error) {
	var to model.State
	err := q.write(ctx, "release", func(t *txn) error {
		task, err := t.fenced(c, model.WriteRelease, false)
		if err != nil {
			return err
		}
		if task.CancelRequested {
			to = model.Cancelled
			return t.settle(task, model.Cancelled, model.CancelledByCaller, model.EventCancelled, c.Owner, "")
		}
		task.RunAt = t.now
		task.AttemptsCharged += broken.Pick(broken.ReleaseChargesAttempt, 0, 1)
		to = model.Queued
		kind := broken.Pick(broken.ReleaseRecordedAsRetry, model.EventReleased, model.EventRetry)
		return t.settle(task, model.Queued, model.NoReason, kind, c.Owner, "")
	})
	return to, err
}

// AcknowledgeCancel ends the claim of a task whose requested cancellation
// the worker observed.
func (q *Queue) AcknowledgeCancel(ctx context.Context, c model.Claim) error {
	return q.write(ctx, "cancel ack", func(t *txn) error {
		task, err := t.fenced(c, model.WriteCancelAck, false)
		if err != nil {
			return err
		}
		if !task.CancelRequested {
			return fmt.Errorf("task %s has no cancellation requested: %w", task.ID, model.ErrInvalidTransition)
		}
		return t.settle(task, model.Cancelled, model.CancelledByCaller, model.EventCancelled, c.Owner, "")
	})
}
