package sim

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
)

// Names the world acts under besides its workers: the careless client,
// the operator's claim probe, and the user of the operator's probe tasks.
const (
	carelessActor = "careless"
	proberActor   = "prober"
	probeUser     = "probe"
)

// probePayload is the probe tasks' work: one cheap step.
const probePayload = `{"steps":[{"cost":1}]}`

// carelessClient is a caller that claims tasks and writes to the queue
// under its real claims without any of the worker's pre-checks (budget,
// step limit, lease, deadline): the queue's own refusals are what stop
// it. It runs only plain tasks (no effect, gate, failure or timeout,
// which need the handler, and no step whose run outlasts the lease, which
// needs heartbeats) whose callers wait on no worker's claim; any other
// task it claims it releases at once.
//
// A task that is no scenario's (a probe's, a batch caller's, a schedule's
// run), whose end no expectation names, it does not complete: past its
// plan it writes steps on (of cost 1, or, on every other such task it
// holds, one more than the budget left) until the queue refuses one for
// the step limit or the budget. Where the run's workers claim with their completions
// (FaultMix.Refill) it completes with a claim of one to three tasks in
// the same write, keeps the first it can run and releases the others.
type carelessClient struct {
	held   bool
	claim  model.Claim
	plan   []worker.SyntheticStep
	next   int  // the step index it writes next
	cancel bool // a step reply said cancellation was requested
	// overrun: the task is no scenario's, and the client writes past its
	// plan; costLeft is its budget left as the client counts it;
	// overBudget: its first step past the plan costs more than costLeft.
	// overruns counts the tasks it has held to overrun, which alternate
	// between a refusal for the budget and one for the step limit.
	overrun    bool
	costLeft   int64
	overBudget bool
	overruns   int
	// past holds the latest claims it took (pastClaimsMax), held or given
	// up, for a late completion under one the task has since moved past
	// (world_groups.go, lateComplete).
	past []model.Claim
}

// pastClaimsMax is how many of its latest claims the careless client keeps.
const pastClaimsMax = 16

// took keeps claims the client just took among its latest.
func (c *carelessClient) took(claims []model.Claim) {
	c.past = append(c.past, claims...)
	if n := len(c.past) - pastClaimsMax; n > 0 {
		c.past = append(c.past[:0], c.past[n:]...)
	}
}

// applyCovered applies one schedule event and records in the coverage map
// the faults that fired during it, with where they hit.
func (w *World) applyCovered(e Event) string {
	storageBefore, serviceBefore, fusedBefore := w.storage.Counts(), w.svc.Counts(), w.fusedHits()
	var dupBefore faults.QueueCounts
	if e.Kind == EvStep {
		dupBefore = w.workers[e.Worker].queue.Counts()
	}
	w.where, w.duringRun = whereOf(e), ""
	out := w.applyEvent(e)
	storageAfter := w.storage.Counts()
	where := []string{w.where}
	if w.duringRun != "" {
		where = append(where, w.duringRun)
	}
	if n := storageAfter.Unavailable - storageBefore.Unavailable; n > 0 {
		w.cover.fault(FaultUnavailable, where...)
	}
	for _, f := range faults.StorageFaults() {
		if storageAfter.Fired(f) > storageBefore.Fired(f) {
			w.cover.fault(string(f), where...)
		}
	}
	w.coverFused(fusedBefore)
	if w.svc.Counts().LostResponse > serviceBefore.LostResponse {
		w.cover.fault(FaultLoseResponse, w.where)
	}
	if e.Kind == EvStep {
		q := w.workers[e.Worker].queue
		if q.Counts().Duplicated > dupBefore.Duplicated {
			d, _ := q.Last()
			w.cover.fault(FaultDuplicate, string(d.Write))
		}
	}
	return out
}

// whereOf names where a storage fault during e hits, as fault cells name
// it; a worker's step is named by its action once it has run (step sets
// w.where).
func whereOf(e Event) string {
	switch e.Kind {
	case EvReap:
		return OpReap
	case EvTick:
		return OpEnqueue
	case EvScript:
		return OpCaller
	case EvCareless:
		return OpCareless
	case EvLimit, EvLimitsRestore:
		return OpOperator
	case EvRedeliver:
		return FaultRedeliver
	case EvBatch:
		return OpBatch
	case EvFollow:
		return OpFollow
	case EvPrune:
		return OpOperator
	case EvGroup:
		return OpGroup
	}
	return string(e.Kind)
}

// applyEvent applies the events the world's newer actors make, and hands
// the rest to apply; worker faults are recorded with the phases they
// caught the worker in.
func (w *World) applyEvent(e Event) string {
	switch e.Kind {
	case EvAdvanceTo:
		return w.advanceTo(e)
	case EvShutdown:
		return w.shutdown(e.Worker)
	case EvCareless:
		return w.carelessAct()
	case EvLimit:
		return w.limit(e.Name)
	case EvLimitsRestore:
		return w.restoreLimits()
	case EvBatch:
		return w.batch(e.Name)
	case EvFollow:
		return w.follow()
	case EvPrune:
		return w.prune(e.Name)
	case EvGroup:
		return w.group(e)
	case EvCrash, EvStall:
		if e.Kind == EvStall && w.workers[e.Worker].stopped {
			return "no-op: shut down"
		}
		var phases []string
		if sw := w.workers[e.Worker]; sw.w != nil {
			phases = sw.w.Phases()
		}
		// The fault counts where it took: the process is now crashed or
		// stalled and was not before (a crash of a crashed worker is a no-op).
		target := map[EventKind]faults.ProcessState{EvCrash: faults.ProcessCrashed, EvStall: faults.ProcessStalled}[e.Kind]
		proc := w.workers[e.Worker].proc
		before := proc.State()
		out := w.apply(e)
		if before != target && proc.State() == target {
			w.cover.fault(map[EventKind]string{EvCrash: FaultCrash, EvStall: FaultStall}[e.Kind], phases...)
		}
		return out
	}
	return w.apply(e)
}

// advanceTo moves the clock to the earliest boundary of its kind still
// ahead (or e.Delay before it): the lease_until of a running task, the
// run_at of a queued one, the deadline of an active one, the lease_until
// of the careless client's claim.
func (w *World) advanceTo(e Event) string {
	var tasks []model.Task
	var err error
	w.storage.Bypass(func() { tasks, err = w.q.List(w.ctx, model.ListFilter{Limit: model.ListLimitMax}) })
	if err != nil {
		return "no-op: tasks unreadable: " + err.Error()
	}
	now := w.clock.Now()
	var best time.Time
	var of string
	for _, t := range tasks {
		var at time.Time
		switch {
		case e.Name == BoundaryLease && t.State == model.Running:
			at = t.LeaseUntil
		case e.Name == BoundaryCarelessLease && t.State == model.Running && w.careless.held &&
			t.ID == w.careless.claim.TaskID && t.Version == w.careless.claim.Fence:
			at = t.LeaseUntil
		case e.Name == BoundaryRunAt && t.State == model.Queued:
			at = t.RunAt
		case e.Name == BoundaryDeadline && t.State.Active():
			at = t.Deadline
		}
		if at.IsZero() {
			continue
		}
		if at = at.Add(-e.Delay); at.After(now) && (best.IsZero() || at.Before(best)) {
			best, of = at, t.ID
		}
	}
	if best.IsZero() {
		return "no-op: no " + e.Name + " ahead"
	}
	w.clock.Advance(best.Sub(now))
	return fmt.Sprintf("to %s of %s", e.Name, of)
}

// shutdown stops worker i gracefully, through the worker's own path: it
// claims nothing more, finishes any effect in flight, releases its claims
// as it is stepped, and exits once it holds none.
func (w *World) shutdown(i int) string {
	sw := w.workers[i]
	switch {
	case sw.w == nil && sw.stopped:
		return "no-op: shut down already"
	case sw.w == nil || !sw.proc.Runnable():
		return "no-op: " + sw.proc.String()
	case sw.draining:
		return "no-op: shutting down already"
	}
	w.cover.fault(FaultShutdown, sw.w.Phases()...)
	sw.w.Shutdown()
	sw.draining = true
	if sw.w.Drained() {
		return "shutting down: " + w.exited(i)
	}
	return fmt.Sprintf("shutting down: draining %d claims", len(sw.w.Claims()))
}

// exited ends a drained worker's process; a restart starts a new one.
func (w *World) exited(i int) string {
	sw := w.workers[i]
	sw.w, sw.exec, sw.stopped, sw.draining = nil, nil, true, false
	return "drained and exited"
}

// cancel asks the queue to cancel t as its caller, recording a refusal.
func (w *World) cancel(t *taskState) error {
	_, err := w.q.Cancel(w.ctx, t.id, t.spec.Request.User)
	w.cover.refusal(err)
	return err
}

// cancelAct performs the cancellation acts of a script.
func (w *World) cancelAct(t *taskState, act scenarios.Act, cur model.Task) (string, bool) {
	switch act {
	case scenarios.CancelRunning:
		if cur.State != model.Running {
			return "no-op: task is " + string(cur.State), false
		}
		if err := w.cancel(t); err != nil {
			return "error (caller retries): " + err.Error(), false
		}
		return "cancellation requested while running", true
	case scenarios.CancelQueued:
		// Meant to land while run_at holds the task queued; a task
		// claimed already is cancelled all the same.
		if err := w.cancel(t); err != nil {
			return "error (caller retries): " + err.Error(), false
		}
		return "cancelled while " + string(cur.State), true
	case scenarios.CancelWaiting:
		if cur.State != model.WaitingForApproval {
			return "no-op: task is " + string(cur.State), false
		}
		if err := w.cancel(t); err != nil {
			return "error (caller retries): " + err.Error(), false
		}
		return "cancelled while waiting", true
	case scenarios.CancelThenCrash:
		if cur.State != model.Running {
			return "no-op: task is " + string(cur.State), false
		}
		for i, sw := range w.workers {
			if workerName(i) != cur.Owner {
				continue
			}
			if _, held := sw.claim(t.id, cur.Version); !held || sw.proc.Crashed() {
				break
			}
			if err := w.cancel(t); err != nil {
				return "error (caller retries): " + err.Error(), false
			}
			w.cover.fault(FaultCrash, sw.w.Phases()...)
			return fmt.Sprintf("cancellation requested, then %s %s", cur.Owner, w.crash(i)), true
		}
		return "no-op: no worker holds the claim", false
	}
	return "no-op: unknown act", false
}

// carelessAct takes the careless client's next action: a claim when it
// holds none, else the next write under its claim, made without any
// pre-check.
func (w *World) carelessAct() string {
	c := &w.careless
	if !c.held {
		return w.carelessClaim()
	}
	var write model.Write
	var err error
	var res model.StepResult
	var claimed []model.Claimed
	var cost int64
	var line string
	switch {
	case c.cancel:
		write, err = model.WriteCancelAck, w.q.AcknowledgeCancel(w.ctx, c.claim)
		line = fmt.Sprintf("%s task=%s fence=%d", write, c.claim.TaskID, c.claim.Fence)
	case c.next >= len(c.plan) && !c.overrun && w.mix.Refill && w.q.ClaimsOnCompletion():
		write = model.WriteComplete
		next := model.ClaimRequest{Worker: carelessActor, Max: 1 + int(c.claim.Fence%3), Lease: w.sc.Lease}
		claimed, err = w.q.CompleteAndClaim(w.ctx, c.claim, next)
		line = fmt.Sprintf("complete and claim %d task=%s fence=%d", next.Max, c.claim.TaskID, c.claim.Fence)
	case c.next >= len(c.plan) && !c.overrun:
		write, err = model.WriteComplete, w.q.Complete(w.ctx, c.claim)
		line = fmt.Sprintf("complete task=%s fence=%d", c.claim.TaskID, c.claim.Fence)
	default:
		write, cost = model.WriteStep, 1
		switch {
		case c.next < len(c.plan):
			cost = c.plan[c.next].Cost
		case c.overBudget:
			cost = c.costLeft + 1
		}
		res, err = w.q.CompleteStep(w.ctx, model.StepWrite{Claim: c.claim, Index: c.next, Cost: cost})
		line = fmt.Sprintf("step %d cost %d task=%s fence=%d", c.next, cost, c.claim.TaskID, c.claim.Fence)
	}
	w.cover.refusal(err)
	settled := errors.Is(err, model.ErrBudgetExhausted) || errors.Is(err, model.ErrStepsExhausted) ||
		errors.Is(err, model.ErrDeadlineExceeded)
	r := worker.Report{Worker: carelessActor, Action: worker.Action(write), TaskID: c.claim.TaskID, Attempt: c.claim.Attempt,
		Fence: c.claim.Fence, Write: write, Accepted: err == nil || settled}
	for _, cl := range claimed {
		r.Claims = append(r.Claims, cl.Claim)
	}
	w.checker.report(r)
	c.took(r.Claims)
	switch {
	case err == nil && write == "step":
		c.next++
		c.costLeft -= cost
		c.cancel = res.CancelRequested
		return line + " -> accepted"
	case err == nil && len(claimed) > 0:
		c.held = false
		return line + " -> accepted; claim over; " + w.carelessTake(claimed)
	case err == nil:
		c.held = false
		return line + " -> accepted; claim over"
	case RefusalClass(err) != "":
		c.held = false
		return line + " -> refused: " + err.Error() + "; claim over"
	}
	return line + " -> error (retries): " + err.Error()
}

// carelessClaim claims one task for the careless client; one it cannot run
// without the handler it releases at once.
func (w *World) carelessClaim() string {
	claimed, err := w.q.Claim(w.ctx, model.ClaimRequest{Worker: carelessActor, Max: 1, Lease: w.sc.Lease})
	w.cover.refusal(err)
	// Every claim is reported, one that took nothing or failed too: in a
	// group event the checker places a report at its actor's writes since
	// the last report (groupFeed).
	r := worker.Report{Worker: carelessActor, Action: worker.ActionClaim, Write: "claim", Accepted: err == nil}
	for _, cl := range claimed {
		r.Claims = append(r.Claims, cl.Claim)
	}
	w.checker.report(r)
	w.careless.took(r.Claims)
	if err != nil {
		return "claim -> error: " + err.Error()
	}
	if len(claimed) == 0 {
		return "claim -> nothing due"
	}
	return w.carelessHold(claimed[0])
}

// carelessTake takes the tasks a completion of the careless client
// claimed: the first it can run it holds, the others it releases.
func (w *World) carelessTake(claimed []model.Claimed) string {
	var out []string
	for _, cl := range claimed {
		if w.careless.held {
			out = append(out, fmt.Sprintf("claimed %s/%d, one is enough: %s", cl.Claim.TaskID, cl.Claim.Fence, w.release(carelessActor, cl.Claim)))
			continue
		}
		out = append(out, w.carelessHold(cl))
	}
	return strings.Join(out, "; ")
}

// carelessHold keeps a task the careless client claimed, or releases it
// when the client cannot run it without the handler.
func (w *World) carelessHold(cl model.Claimed) string {
	c := &w.careless
	plan, err := worker.ParseSynthetic(cl.Task.Payload)
	plain := err == nil
	for _, s := range plan {
		plain = plain && s.Effect == "" && s.Approval == "" && s.Fail == "" && s.TimeoutMs == 0 &&
			time.Duration(s.DurationMs)*time.Millisecond <= w.sc.Lease
	}
	if !plain {
		return fmt.Sprintf("claimed %s/%d, not a plain task: %s", cl.Claim.TaskID, cl.Claim.Fence, w.release(carelessActor, cl.Claim))
	}
	if w.awaitsWorker(cl.Claim.TaskID) {
		return fmt.Sprintf("claimed %s/%d, its caller waits on a worker's claim: %s", cl.Claim.TaskID, cl.Claim.Fence, w.release(carelessActor, cl.Claim))
	}
	overrun, overruns := !w.scenarioTask(cl.Task), c.overruns
	if overrun {
		overruns++
	}
	*c = carelessClient{held: true, claim: cl.Claim, plan: plan, next: cl.Task.StepsUsed, cancel: cl.Task.CancelRequested,
		overrun: overrun, costLeft: cl.Task.CostBudget - cl.Task.CostUsed, overBudget: overruns%2 == 1, overruns: overruns, past: c.past}
	return fmt.Sprintf("claimed %s/%d at step %d", cl.Claim.TaskID, cl.Claim.Fence, c.next)
}

// scenarioTask reports whether t is one of the scenario's tasks, by its
// user and key (its caller may not know its ID yet: a submit whose
// outcome was unknown).
func (w *World) scenarioTask(t model.Task) bool {
	for _, s := range w.tasks {
		if s.spec.Request.User == t.User && s.spec.Request.Key == t.Key {
			return true
		}
	}
	return false
}

// awaitsWorker reports whether the scripted caller of task id has an act
// left whose condition is a worker's claim (CancelThenCrash crashes the
// claimant, which must be a worker process; CancelRunning waits for the
// task running, which the client's bursts of writes pass by). The careless client leaves
// such a task to the workers: run by it, a task of long steps finishes in
// a few bursts of writes, before its caller ever finds a worker holding
// it, and the story the script tells never happens.
func (w *World) awaitsWorker(id string) bool {
	for _, t := range w.tasks {
		if t.id == id {
			return t.next < len(t.spec.Script) &&
				(t.spec.Script[t.next] == scenarios.CancelThenCrash || t.spec.Script[t.next] == scenarios.CancelRunning)
		}
	}
	return false
}

// release gives a claim the world's own actors hold back to the queue,
// through the queue's graceful release.
func (w *World) release(actor string, cl model.Claim) string {
	to, err := w.q.Release(w.ctx, cl)
	w.cover.refusal(err)
	w.checker.report(worker.Report{Worker: actor, Action: worker.ActionRelease, TaskID: cl.TaskID, Attempt: cl.Attempt,
		Fence: cl.Fence, Write: "release", Accepted: err == nil})
	if err != nil {
		return "release -> " + err.Error()
	}
	return "released to " + string(to)
}

// readLimits reads the stored limits on the fault-free path.
func (w *World) readLimits() (model.Limits, []model.UserLimit, error) {
	var l model.Limits
	var users []model.UserLimit
	var err error
	w.storage.Bypass(func() { l, users, err = w.q.Limits(w.ctx) })
	return l, users, err
}

// limitsChanged notes that the operator changed the stored limits (the
// lockstep tells the checker the limits in force after every change,
// whether or not the write was reported to succeed).
func (w *World) limitsChanged() { w.limitsMoved = true }

// setLimits stores l as the operator.
func (w *World) setLimits(l model.Limits) error {
	err := w.q.SetLimits(w.ctx, l, operatorActor)
	w.cover.refusal(err)
	w.limitsChanged()
	return err
}

// setUserLimit stores a user's override as the operator.
func (w *World) setUserLimit(u model.UserLimit) error {
	err := w.q.SetUserLimit(w.ctx, u, operatorActor)
	w.cover.refusal(err)
	w.limitsChanged()
	return err
}

// probeSubmit submits a probe task as the probe user and says how it went.
func (w *World) probeSubmit(payload string) string {
	w.probes++
	req := model.SubmitRequest{User: probeUser, Key: fmt.Sprintf("probe-%d", w.probes), Payload: payload, CostBudget: 5, StepsMax: 3}
	res, err := w.q.Submit(w.ctx, req)
	w.cover.refusal(err)
	if err != nil {
		return req.Key + " refused: " + err.Error()
	}
	return req.Key + " accepted as " + res.TaskID
}

// active counts the active tasks, of everyone ("") or of one user.
func (w *World) active(user string) int {
	n := 0
	for _, t := range w.allTasks() {
		if t.State.Active() && (user == "" || t.User == user) {
			n++
		}
	}
	return n
}

// limit changes one stored limit as the operator and then makes requests
// just under and just over it. The depth caps, the running limit and the
// claim batch stay in force until the limits are restored; the grant
// maxima and attempts_max are put back at once.
func (w *World) limit(name string) string {
	l, _, err := w.readLimits()
	if err != nil {
		return "no-op: limits unreadable: " + err.Error()
	}
	var out []string
	note := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	switch name {
	case LimitGrant:
		changed := l
		changed.GrantCostMax, changed.GrantStepsMax = 5+int64(w.probes%3), 2
		w.probes++
		note("grant maxima cost %d steps %d: %s", changed.GrantCostMax, changed.GrantStepsMax, errText(w.setLimits(changed)))
		note("%s", w.probeGrant(changed))
		note("restore: %s", errText(w.setLimits(w.base)))
	case LimitDepth:
		l.DepthMax = w.active("") + 1
		note("depth_max %d: %s", l.DepthMax, errText(w.setLimits(l)))
		note("%s", w.probeSubmit(probePayload))
		note("%s", w.probeSubmit(probePayload))
	case LimitUserDepth:
		u := model.UserLimit{User: probeUser, RunningMax: model.Inherit, DepthMax: w.active(probeUser) + 1}
		note("%s depth_max %d: %s", probeUser, u.DepthMax, errText(w.setUserLimit(u)))
		note("%s", w.probeSubmit(probePayload))
		note("%s", w.probeSubmit(probePayload))
	case LimitUserRunning:
		l.UserRunningMax = 1
		note("user_running_max 1: %s", errText(w.setLimits(l)))
	case LimitAttempts:
		changed := l
		changed.AttemptsMax = 1 + w.probes%2
		note("attempts_max %d: %s", changed.AttemptsMax, errText(w.setLimits(changed)))
		for _, times := range []int{changed.AttemptsMax - 1, changed.AttemptsMax} {
			note("%s", w.probeSubmit(fmt.Sprintf(`{"steps":[{"cost":1,"fail":"transient","times":%d}]}`, times)))
		}
		note("restore: %s", errText(w.setLimits(w.base)))
	case LimitClaimBatch:
		l.ClaimBatchMax = 1 + w.probes%2
		w.probes++
		note("claim_batch_max %d: %s", l.ClaimBatchMax, errText(w.setLimits(l)))
		note("%s", w.probeClaim(l.ClaimBatchMax+1))
		note("%s", w.probeClaim(l.ClaimBatchMax))
	default:
		return "no-op: unknown limit " + name
	}
	return strings.Join(out, "; ")
}

// probeGrant requeues a dead-lettered task with a grant just over the
// maxima (refused, nothing written) and then one at them (accepted). It
// picks a task whose expected end a grant cannot change: not a scenario
// task, or one expected to be resolved by the operator. With none in
// review it aims both at another task: the first is still refused for its
// size, the second for the task's state.
func (w *World) probeGrant(l model.Limits) string {
	var target string
	for _, t := range w.allTasks() {
		script := w.scriptOf(t.ID)
		grantable := t.State == model.NeedsReview && t.Reason == model.AttemptsExhausted &&
			(script == nil || script.spec.Expect.Reason == model.OperatorResolved)
		if target == "" && t.State != model.NeedsReview || grantable {
			target = t.ID
		}
	}
	if target == "" {
		return "no task to requeue"
	}
	var out []string
	for _, g := range []model.Grant{{Cost: l.GrantCostMax + 1, Steps: l.GrantStepsMax}, {Cost: l.GrantCostMax, Steps: l.GrantStepsMax}} {
		err := w.q.Requeue(w.ctx, target, g, operatorActor)
		w.cover.refusal(err)
		out = append(out, fmt.Sprintf("requeue %s grant cost %d steps %d: %s", target, g.Cost, g.Steps, errText(err)))
	}
	return strings.Join(out, "; ")
}

// probeClaim claims a batch of max as the prober and releases what it got.
func (w *World) probeClaim(max int) string {
	claimed, err := w.q.Claim(w.ctx, model.ClaimRequest{Worker: proberActor, Max: max, Lease: w.sc.Lease})
	w.cover.refusal(err)
	if err != nil {
		return fmt.Sprintf("claim %d: %v", max, err)
	}
	out := []string{fmt.Sprintf("claim %d: %d claimed", max, len(claimed))}
	if len(claimed) > 0 {
		r := worker.Report{Worker: proberActor, Action: worker.ActionClaim, Write: "claim", Accepted: true}
		for _, c := range claimed {
			r.Claims = append(r.Claims, c.Claim)
		}
		w.checker.report(r)
	}
	for _, c := range claimed {
		out = append(out, c.Claim.TaskID+" "+w.release(proberActor, c.Claim))
	}
	return strings.Join(out, ", ")
}

// restoreLimits puts the scenario's limits back: the defaults and every
// per-user override, the probe user's included.
func (w *World) restoreLimits() string {
	if !w.limitsMoved {
		return "no-op: limits unchanged"
	}
	errs := []error{w.q.SetLimits(w.ctx, w.base, operatorActor)}
	for _, u := range append(append([]model.UserLimit(nil), w.sc.UserLimits...),
		model.UserLimit{User: probeUser, RunningMax: model.Inherit, DepthMax: model.Inherit}) {
		errs = append(errs, w.q.SetUserLimit(w.ctx, u, operatorActor))
	}
	err := errors.Join(errs...)
	w.cover.refusal(err)
	w.limitsChanged()
	if err != nil {
		return "restore: " + err.Error()
	}
	w.limitsMoved = false
	return "restored"
}
