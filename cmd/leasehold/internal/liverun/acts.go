package liverun

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/scenarios"
)

// The scenario's acts, played live through the Go client: submits and
// cancels as the task's user, approvals as the approver.

func (r *run) actReplay(t scenarios.Task) error {
	ctx, cancel := r.callCtx()
	defer cancel()
	res, err := r.userOf(t.Name).Submit(ctx, r.reqs[t.Name])
	r.outcome(StoryReplay, t.Name, "exact duplicate submission", "the original task ID with replay=true",
		fmt.Sprintf("task_id=%s replay=%t (original %s) err=%v", res.TaskID, res.Replay, r.ids[t.Name], err),
		err == nil && res.Replay && res.TaskID == r.ids[t.Name])
	return nil
}

func (r *run) actChangePayload(t scenarios.Task) error {
	changed := r.reqs[t.Name]
	changed.Payload = `{"steps":[{"cost":9}]}`
	ctx, cancel := r.callCtx()
	defer cancel()
	before, err := r.operatorTaskCount()
	if err != nil {
		return err
	}
	res, err := r.userOf(t.Name).Submit(ctx, changed)
	observed := fmt.Sprintf("refused: %v", err)
	if err == nil {
		observed = fmt.Sprintf("accepted as %s (replay=%t)", res.TaskID, res.Replay)
	}
	after, cerr := r.operatorTaskCount()
	if cerr != nil {
		return cerr
	}
	observed += fmt.Sprintf("; tasks %d before, %d after", before, after)
	r.outcome(StoryConflict, t.Name, "changed payload under the same key", "refused as an idempotency conflict (409 conflict), nothing written",
		observed, refusedAs(err, "conflict") && errors.Is(err, client.ErrConflict) && before == after)
	return nil
}

// operatorTaskCount counts the tasks the operator's token lists, every
// user's.
func (r *run) operatorTaskCount() (int, error) {
	ctx, cancel := r.callCtx()
	defer cancel()
	n := 0
	o := client.ListOptions{Limit: model.ListLimitMax}
	for {
		page, err := r.c.operator.List(ctx, o)
		if err != nil {
			return 0, fmt.Errorf("list the tasks: %w", err)
		}
		n += len(page.Tasks)
		if page.Next == "" {
			return n, nil
		}
		o.After = page.Next
	}
}

// actCancelRunning cancels the task once it runs, as its own user.
func (r *run) actCancelRunning(t scenarios.Task) error {
	if _, err := r.waitState(t.Name, model.Running); err != nil {
		return err
	}
	ctx, cancel := r.callCtx()
	defer cancel()
	if _, err := r.userOf(t.Name).Cancel(ctx, r.ids[t.Name]); err != nil {
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

// approverOf is who approves the task at its gate: the approver its
// scenario expects, or else the gate's name.
func (r *run) approverOf(t scenarios.Task, w client.Task) (string, *client.Client, error) {
	name := t.Expect.ApprovedBy
	if name == "" {
		name = w.ApprovalGate
	}
	c := r.c.approvers[name]
	if c == nil {
		return "", nil, fmt.Errorf("approve %s: the run has no token for approver %s", t.Name, name)
	}
	return name, c, nil
}

// actApproveOutdated approves naming a version older than the recorded one.
func (r *run) actApproveOutdated(t scenarios.Task) error {
	w, err := r.waitState(t.Name, model.WaitingForApproval)
	if err != nil {
		return err
	}
	_, c, err := r.approverOf(t, w)
	if err != nil {
		return err
	}
	ctx, cancel := r.callCtx()
	defer cancel()
	_, err = c.Approve(ctx, r.ids[t.Name], w.ApprovalVersion-1)
	after, rerr := r.task(t.Name)
	if rerr != nil {
		return rerr
	}
	r.outcome(StoryApproveOutdated, t.Name, "approval naming an outdated version", "refused as a version mismatch (409); the task still waits",
		fmt.Sprintf("approve version %d: %v; task %s", w.ApprovalVersion-1, err, after.State),
		errors.Is(err, client.ErrVersionMismatch) && after.State == model.WaitingForApproval && after.LastEventSeq == w.LastEventSeq)
	return nil
}

// actApprove approves naming the recorded version, as the gate's approver.
func (r *run) actApprove(t scenarios.Task) error {
	w, err := r.waitState(t.Name, model.WaitingForApproval)
	if err != nil {
		return err
	}
	approver, c, err := r.approverOf(t, w)
	if err != nil {
		return err
	}
	ctx, cancel := r.callCtx()
	defer cancel()
	if _, err := c.Approve(ctx, r.ids[t.Name], w.ApprovalVersion); err != nil {
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

// storyTokenBound shows, through the running server, that a user's token
// acts for that user alone: the first scenario task's user submitting for
// the second's is 403 and writes nothing, and reading the second's task
// is 404, as for a task that does not exist.
func (r *run) storyTokenBound() error {
	mine, theirs := r.sc.Tasks[0], r.sc.Tasks[1]
	if mine.Request.User == theirs.Request.User || r.ids[theirs.Name] == "" {
		return fmt.Errorf("token story: tasks %s and %s must be submitted by two users", mine.Name, theirs.Name)
	}
	c := r.c.users[mine.Request.User]
	before, err := r.operatorTaskCount()
	if err != nil {
		return err
	}
	req := theirs.Request
	req.Key = "token-bound-1"
	ctx, cancel := r.callCtx()
	defer cancel()
	_, submitErr := c.Submit(ctx, req)
	_, readErr := c.Task(ctx, r.ids[theirs.Name])
	after, err := r.operatorTaskCount()
	if err != nil {
		return err
	}
	r.outcome(StoryTokenBound, "", "a user's token acts for that user alone",
		"submitting for another user is 403, nothing written; reading another user's task is 404",
		fmt.Sprintf("%s's token submitting as %s: %v; reading %s: %v; tasks %d before, %d after",
			mine.Request.User, theirs.Request.User, submitErr, theirs.Name, readErr, before, after),
		errors.Is(submitErr, client.ErrForbidden) && errors.Is(readErr, client.ErrNotFound) && before == after)
	return nil
}
