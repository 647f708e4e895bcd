package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
)

// Invariants the lockstep states outright, over the real rows it mirrors
// and the replies the workers saw.
const (
	// InvClaimEligible: a claim returns only due, unblocked tasks within
	// their deadline.
	InvClaimEligible = "claim-only-eligible"
	// InvClaimExhaustive: a claim that returns fewer tasks than it could
	// (min of asked and claim_batch_max) leaves nothing claimable.
	InvClaimExhaustive = "claim-leaves-nothing-claimable"
	// InvCancelObserved: once a claim has seen cancel_requested it starts
	// no new step, and the task next settles as cancelled unless a write
	// already in flight ends it first.
	InvCancelObserved = "cancel-observed-stops-work"
	// InvLimitsInForce: no accepted submit or claim exceeds the depth caps
	// and running limits in force at that moment.
	InvLimitsInForce = "limits-in-force"
	// InvNoCharge: a release or a pause charges no attempt.
	InvNoCharge = "release-pause-charge-nothing"
)

// limitsOf returns the running and depth limits in force for user.
func (l *lockstep) limitsOf(user string) (runningMax, depthMax int) {
	u, ok := l.users[user]
	if !ok {
		u = model.UserLimit{User: user, RunningMax: model.Inherit, DepthMax: model.Inherit}
	}
	return u.Effective(l.limits)
}

// running counts the mirror's running tasks of user.
func (l *lockstep) running(user string) int {
	n := 0
	for _, id := range l.order {
		if t := l.rows[id]; t.State == model.Running && t.User == user {
			n++
		}
	}
	return n
}

// claimable returns the first task of the mirror a claim req at now
// could take (of a kind it names), if any.
func (l *lockstep) claimable(now time.Time, req model.ClaimRequest) (model.Task, bool) {
	for _, id := range l.order {
		t := l.rows[id]
		if t.State != model.Queued || t.RunAt.After(now) || t.PastDeadline(now) || !req.Serves(t.Kind) {
			continue
		}
		if limit, _ := l.limitsOf(t.User); limit > 0 && l.running(t.User) >= limit {
			continue
		}
		return t, true
	}
	return model.Task{}, false
}

// checkClaim checks, against the mirror before the claim, that every task
// claimed was eligible and its user below the running limit in force; and
// returns the check, after the claim, that a short batch left nothing
// claimable.
func (l *lockstep) checkClaim(req model.ClaimRequest, res []model.Claimed, err error) func() {
	return l.checkClaimFreeing(req, res, err, "")
}

// checkClaimFreeing is checkClaim for a claim made in the write that
// completed a running task of user freed ("" for none): the claim sees
// that user's running count down by one.
func (l *lockstep) checkClaimFreeing(req model.ClaimRequest, res []model.Claimed, err error, freed string) func() {
	if err != nil {
		return nil
	}
	now := model.Truncate(l.clock.Now())
	extra := map[string]int{}
	if freed != "" {
		extra[freed] = -1
	}
	for _, c := range res {
		t, known := l.rows[c.Claim.TaskID]
		switch {
		case !known:
			l.report(InvClaimEligible, c.Claim.TaskID, "claimed a task never seen submitted")
		case t.State != model.Queued:
			l.report(InvClaimEligible, t.ID, fmt.Sprintf("claimed while %s", t.State))
		case t.RunAt.After(now):
			l.report(InvClaimEligible, t.ID, fmt.Sprintf("claimed at %d before its run_at %d", model.Millis(now), model.Millis(t.RunAt)))
		case t.PastDeadline(now):
			l.report(InvClaimEligible, t.ID, fmt.Sprintf("claimed at %d after its deadline %d", model.Millis(now), model.Millis(t.Deadline)))
		}
		if limit, _ := l.limitsOf(t.User); limit > 0 && l.running(t.User)+extra[t.User] >= limit {
			l.report(InvLimitsInForce, t.ID, fmt.Sprintf("claimed with user %s at its running limit %d", t.User, limit))
		}
		extra[t.User]++
	}
	l.checkKinds(req, res, now)
	if len(res) >= min(req.Max, l.limits.ClaimBatchMax) {
		return nil
	}
	return func() {
		if t, ok := l.claimable(now, req); ok {
			l.report(InvClaimExhaustive, t.ID, fmt.Sprintf("a claim for %d by %s returned %d, leaving this task claimable at %d: %s",
				req.Max, req.Worker, len(res), model.Millis(now), rowText(t)))
		}
	}
}

// checkDepth returns the check, after a submit or an enqueue, that every
// task it admitted (those the mirror learns of) kept the overall depth cap
// and its user's depth cap in force. Caps lowered below the active count
// refuse submits; they do not make earlier admissions violations, so only
// the admitting users are checked.
func (l *lockstep) checkDepth(what string) func() {
	known := len(l.order)
	return func() {
		total, mine := 0, map[string]int{}
		for _, id := range l.order {
			if t := l.rows[id]; t.State.Active() {
				total++
				mine[t.User]++
			}
		}
		for _, id := range l.order[known:] {
			user := l.rows[id].User
			if l.limits.DepthMax > 0 && total > l.limits.DepthMax {
				l.report(InvLimitsInForce, id, fmt.Sprintf("%s admitted it with %d active tasks, over the depth cap %d", what, total, l.limits.DepthMax))
				return
			}
			if _, depth := l.limitsOf(user); depth > 0 && mine[user] > depth {
				l.report(InvLimitsInForce, id, fmt.Sprintf("%s admitted it with user %s at %d active tasks, over its depth cap %d", what, user, mine[user], depth))
				return
			}
		}
	}
}

// noCharge returns the check that an accepted release or pause of task
// charged no attempt.
func (l *lockstep) noCharge(write, taskID string, err error) func() {
	before, ok := l.rows[taskID]
	if err != nil || !ok {
		return nil
	}
	return func() {
		if after := l.rows[taskID]; after.AttemptsCharged != before.AttemptsCharged {
			l.report(InvNoCharge, taskID, fmt.Sprintf("%s moved attempts_charged from %d to %d", write, before.AttemptsCharged, after.AttemptsCharged))
		}
	}
}

// claimKey names one claim.
type claimKey struct {
	task  string
	fence int64
}

// cancelSeen is what a worker knew when a reply under its claim first
// showed cancel_requested: steps at or past stepLimit were not in flight.
type cancelSeen struct {
	stepLimit int
	via       string
}

// sawCancel records that the worker holding c saw cancellation requested.
func (l *lockstep) sawCancel(c model.Claim, stepLimit int, via string) {
	k := claimKey{c.TaskID, c.Fence}
	if _, seen := l.watch[k]; !seen {
		l.watch[k] = &cancelSeen{stepLimit: stepLimit, via: via}
	}
}

// startedAfterCancel reports a worker write that starts new work under a
// claim that has seen cancellation requested.
func (l *lockstep) startedAfterCancel(c model.Claim, write string, step int) {
	s, seen := l.watch[claimKey{c.TaskID, c.Fence}]
	if !seen || (write == "step" && step < s.stepLimit) {
		return
	}
	l.report(InvCancelObserved, c.TaskID, fmt.Sprintf("%s (step %d) under fence %d after the %s reply showed cancel_requested",
		write, step, c.Fence, s.via))
}

// observe follows the real events of an operation: a claim that saw
// cancellation must end cancelled, or failed, or parked for an uncertain
// effect already in flight; never requeued, completed, paused or
// dead-lettered.
func (l *lockstep) observe(events []model.Event) {
	if len(l.watch) == 0 {
		return
	}
	for _, e := range events {
		k := claimKey{e.TaskID, e.Fence}
		s, seen := l.watch[k]
		if !seen || e.From != model.Running || e.To == model.Running {
			continue
		}
		delete(l.watch, k)
		switch {
		case e.To == model.Cancelled, e.To == model.Failed, e.To == model.NeedsReview && e.Reason == model.UncertainEffect:
		default:
			l.report(InvCancelObserved, e.TaskID, fmt.Sprintf("claim %d saw cancel_requested (%s reply) but the task settled %s -> %s (%s, %s)",
				e.Fence, s.via, e.From, e.To, e.Kind, e.Reason))
		}
	}
}

// watcher is a worker's view of its queue: it notes the replies that show
// the worker cancellation requested and checks that no new work starts
// after one. It sits above the fault-injecting queue, so it sees exactly
// what the worker sees.
type watcher struct {
	l     *lockstep
	inner worker.Queue
}

var _ worker.Queue = watcher{}

func (w watcher) Claim(ctx context.Context, req model.ClaimRequest) ([]model.Claimed, error) {
	return w.inner.Claim(ctx, req)
}

func (w watcher) Heartbeat(ctx context.Context, c model.Claim, lease time.Duration) (model.HeartbeatResult, error) {
	res, err := w.inner.Heartbeat(ctx, c, lease)
	if err == nil && res.CancelRequested {
		w.l.sawCancel(c, w.l.rows[c.TaskID].StepsUsed+1, "heartbeat")
	}
	return res, err
}

func (w watcher) CompleteStep(ctx context.Context, s model.StepWrite) (model.StepResult, error) {
	w.l.startedAfterCancel(s.Claim, "step", s.Index)
	res, err := w.inner.CompleteStep(ctx, s)
	if err == nil && res.CancelRequested {
		w.l.sawCancel(s.Claim, s.Index+1, "step")
	}
	return res, err
}

func (w watcher) RecordIntent(ctx context.Context, c model.Claim, step int) (model.IntentResult, error) {
	w.l.startedAfterCancel(c, "effect_intent", step)
	return w.inner.RecordIntent(ctx, c, step)
}

func (w watcher) RecordReceipt(ctx context.Context, c model.Claim, opID, result string) error {
	return w.inner.RecordReceipt(ctx, c, opID, result)
}

func (w watcher) Pause(ctx context.Context, c model.Claim, step int, gate string) (model.State, error) {
	w.l.startedAfterCancel(c, "pause", step)
	return w.inner.Pause(ctx, c, step, gate)
}

func (w watcher) Complete(ctx context.Context, c model.Claim) error {
	w.l.startedAfterCancel(c, "complete", w.l.rows[c.TaskID].StepsUsed)
	return w.inner.Complete(ctx, c)
}

func (w watcher) CompleteAndClaim(ctx context.Context, c model.Claim, next model.ClaimRequest) ([]model.Claimed, error) {
	w.l.startedAfterCancel(c, "complete", w.l.rows[c.TaskID].StepsUsed)
	return w.inner.(worker.CompleteClaimer).CompleteAndClaim(ctx, c, next)
}

func (w watcher) ClaimsOnCompletion() bool {
	cc, ok := w.inner.(worker.CompleteClaimer)
	return ok && cc.ClaimsOnCompletion()
}

func (w watcher) Fail(ctx context.Context, c model.Claim, f model.Failure) (model.State, error) {
	return w.inner.Fail(ctx, c, f)
}

func (w watcher) Release(ctx context.Context, c model.Claim) (model.State, error) {
	return w.inner.Release(ctx, c)
}

func (w watcher) AcknowledgeCancel(ctx context.Context, c model.Claim) error {
	return w.inner.AcknowledgeCancel(ctx, c)
}
