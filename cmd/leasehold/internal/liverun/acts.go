package liverun

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/scenarios"
)

// The scenario's acts, played live through the queue's Go API.

func (r *run) actReplay(t scenarios.Task) error {
	res, err := r.q.Submit(r.ctx, r.reqs[t.Name])
	r.outcome(StoryReplay, t.Name, "exact duplicate submission", "the original task ID with replay=true",
		fmt.Sprintf("task_id=%s replay=%t (original %s) err=%v", res.TaskID, res.Replay, r.ids[t.Name], err),
		err == nil && res.Replay && res.TaskID == r.ids[t.Name])
	return nil
}

func (r *run) actChangePayload(t scenarios.Task) error {
	changed := r.reqs[t.Name]
	changed.Payload = `{"steps":[{"cost":9}]}`
	res, err := r.q.Submit(r.ctx, changed)
	observed := fmt.Sprintf("refused: %v", err)
	if err == nil {
		observed = fmt.Sprintf("accepted as %s (replay=%t)", res.TaskID, res.Replay)
	}
	r.outcome(StoryConflict, t.Name, "changed payload under the same key", "refused as an idempotency conflict, nothing written",
		observed, errors.Is(err, queue.ErrIdempotencyConflict))
	return nil
}

// actCancelRunning cancels the task once it runs, as its own user.
func (r *run) actCancelRunning(t scenarios.Task) error {
	if _, err := r.waitState(t.Name, model.Running); err != nil {
		return err
	}
	if _, err := r.q.Cancel(r.ctx, r.ids[t.Name], t.Request.User); err != nil {
		return fmt.Errorf("cancel %s: %w", t.Name, err)
	}
	r.moment(Moment{Kind: CancelRequested, Task: t.Name, TaskID: r.ids[t.Name], Actor: t.Request.User})
	done, err := r.waitState(t.Name, ended...)
	if err != nil {
		return err
	}
	r.outcome(StoryCancel, t.Name, "cancelled while running", "cancelled / cancelled_by_caller, by its caller, before its last step",
		fmt.Sprintf("%s / %s, cancelled_by %s, steps %d of %d run", done.State, done.Reason, done.CancelledBy, done.StepsUsed, steps(t)),
		done.State == model.Cancelled && done.Reason == model.CancelledByCaller && done.CancelledBy == t.Request.User && done.StepsUsed < steps(t))
	return nil
}

// actRestartWhilePaused stops w1 gracefully and starts it again while the
// task waits at its gate.
func (r *run) actRestartWhilePaused(t scenarios.Task) error {
	w, err := r.waitState(t.Name, model.WaitingForApproval)
	if err != nil {
		return err
	}
	r.moment(Moment{Kind: TaskWaiting, Task: t.Name, TaskID: r.ids[t.Name], Version: w.ApprovalVersion})
	if err := r.signal("w1", syscall.SIGTERM); err != nil {
		return err
	}
	return r.restart("w1")
}

// actApproveOutdated approves naming a version older than the recorded one.
func (r *run) actApproveOutdated(t scenarios.Task) error {
	w, err := r.waitState(t.Name, model.WaitingForApproval)
	if err != nil {
		return err
	}
	err = r.q.Approve(r.ctx, r.ids[t.Name], w.ApprovalVersion-1, "manager")
	after, rerr := r.task(t.Name)
	if rerr != nil {
		return rerr
	}
	r.outcome(StoryApproveOutdated, t.Name, "approval naming an outdated version", "refused as a version mismatch; the task still waits",
		fmt.Sprintf("approve version %d: %v; task %s", w.ApprovalVersion-1, err, after.State),
		errors.Is(err, queue.ErrVersionMismatch) && after.State == model.WaitingForApproval)
	return nil
}

// actApprove approves naming the recorded version, as the gate's approver.
func (r *run) actApprove(t scenarios.Task) error {
	w, err := r.waitState(t.Name, model.WaitingForApproval)
	if err != nil {
		return err
	}
	approver := t.Expect.ApprovedBy
	if approver == "" {
		approver = w.ApprovalGate
	}
	if err := r.q.Approve(r.ctx, r.ids[t.Name], w.ApprovalVersion, approver); err != nil {
		return fmt.Errorf("approve %s: %w", t.Name, err)
	}
	r.moment(Moment{Kind: TaskApproved, Task: t.Name, TaskID: r.ids[t.Name], Actor: approver, Version: w.ApprovalVersion})
	done, err := r.waitState(t.Name, ended...)
	if err != nil {
		return err
	}
	events, err := r.events(t.Name)
	if err != nil {
		return err
	}
	resumedAt := -1
	for _, ev := range events {
		if ev.Kind == model.EventClaimed && ev.Fence > w.ApprovalVersion && resumedAt < 0 {
			resumedAt = ev.Attempt
		}
	}
	r.outcome(StoryApproval, t.Name, "restart while paused, then approval with the recorded version",
		fmt.Sprintf("completed; approved_by %s; resumed after the gate (steps %d of %d: nothing run twice)", approver, steps(t), steps(t)),
		fmt.Sprintf("%s, approved_by %s, steps %d, cost %d, resumed under attempt %d", done.State, done.ApprovedBy, done.StepsUsed, done.CostUsed, resumedAt),
		done.State == model.Completed && done.ApprovedBy == approver && done.StepsUsed == steps(t) && resumedAt > 0)
	return nil
}
