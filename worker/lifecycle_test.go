package worker_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

// The happy path: costs, an effect and a duration step. The duration step
// outlasts the lease; heartbeats keep the claim alive until it is done.
func TestHappyPath(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":2},{"cost":5,"effect":"charge"},{"cost":1,"duration_ms":3000}]}`, 10, 5)
	svc := workertest.NewService(worker.Fenced, b.clock)
	w := b.newWorker("w1", svc)
	reports := b.run(w, stepsMax)

	task := b.task(id)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, model.NoReason, task.Reason)
	require.Equal(t, int64(8), task.CostUsed)
	require.Equal(t, 3, task.StepsUsed)
	require.Equal(t, int64(1), task.Version, "one claim did it all")
	require.Zero(t, task.AttemptsCharged)

	op := model.OperationID(id, 1)
	require.Equal(t, 1, svc.Applications(op))
	require.Equal(t, []worker.Call{{OpID: op, TaskID: id, Effect: "charge", Fence: 1}}, svc.Calls())
	require.Zero(t, svc.Statuses(), "nothing was uncertain, so nothing was asked")

	evs := b.events(id)
	var kinds []model.EventKind
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
		if e.Kind != model.EventSubmitted {
			require.Equal(t, int64(1), e.Fence, "event %s carries the claim's fence", e.Kind)
			require.Equal(t, 1, e.Attempt, "event %s carries the attempt", e.Kind)
		}
	}
	require.Equal(t, []model.EventKind{model.EventSubmitted, model.EventClaimed, model.EventStep,
		model.EventEffectIntent, model.EventEffectReceipt, model.EventStep, model.EventStep, model.EventCompleted}, kinds)
	require.Equal(t, op, evs[3].OpID)
	require.Equal(t, op, evs[4].OpID)
	require.Equal(t, "step 1 cost 5", evs[5].Detail)
	require.Equal(t, epoch, evs[5].At, "steps without a duration run at once")
	require.Equal(t, "step 2 cost 1", evs[6].Detail)
	require.Equal(t, epoch.Add(3*time.Second), evs[6].At, "the duration step commits once its 3s have passed")

	effects, err := b.q.Effects(b.ctx, id)
	require.NoError(t, err)
	require.Len(t, effects, 1)
	require.Equal(t, "charge#1", effects[0].Result)
	require.Equal(t, int64(1), effects[0].ReceiptFence)

	// Step 2's run started with step 1's commit (its handler takes 3s),
	// and the worker then slept only until each heartbeat: six of them
	// kept a 2s lease alive over 3s.
	for _, r := range reports[:len(reports)-1] { // the last is the idle poll after completing
		if r.Action == worker.ActionIdle {
			require.LessOrEqual(t, r.Wait, testHeartbeat, "a worker holding a claim sleeps at most until its next heartbeat: %s", r)
		}
	}
	heartbeats := count(reports, func(r worker.Report) bool { return r.Action == worker.ActionHeartbeat })
	require.Equal(t, 6, heartbeats)
	require.Equal(t, heartbeats, count(reports, func(r worker.Report) bool { return r.Action == worker.ActionHeartbeat && r.Accepted }))
	require.Empty(t, b.eventsOf(id, model.EventStaleWrite))
	require.Empty(t, b.eventsOf(id, model.EventLeaseExpired))
}

// The longest heartbeat interval allowed (half the lease) still keeps a
// claim alive over a step three and a half leases long.
func TestHeartbeatAtHalfTheLeaseKeepsTheClaim(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1,"duration_ms":7000}]}`, 10, 5)
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock), func(c *worker.Config) { c.Heartbeat = testLease / 2 })
	b.run(w, stepsMax)
	task := b.task(id)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, int64(1), task.Version)
	require.Empty(t, b.eventsOf(id, model.EventStaleWrite))
}

// The budget is checked before each step: the step that would overspend is
// not run (its effect is never called) and not charged.
func TestBudgetCheckedBeforeEachStep(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":3},{"cost":3},{"cost":5,"effect":"charge"}]}`, 10, 5)
	svc := workertest.NewService(worker.Dedup, b.clock)
	w := b.newWorker("w1", svc)
	reports := b.run(w, stepsMax)

	task := b.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.BudgetExhausted, task.Reason)
	require.Equal(t, int64(6), task.CostUsed, "the overspending step is not charged")
	require.Equal(t, 2, task.StepsUsed)
	require.Equal(t, "step 2 costs 5; 6 of 10 used", task.LastError, "the worker, not the queue, caught it")
	require.Empty(t, svc.Calls(), "the step that would overspend makes no call")
	require.Equal(t, []model.EventKind{model.EventSubmitted, model.EventClaimed, model.EventStep, model.EventStep, model.EventFailed}, b.kinds(id))
	require.Equal(t, 1, count(reports, is(worker.ActionFail, "budget_exhausted: to failed")), "the outcome names the reason")
}

// A step that spends the budget exactly is allowed.
func TestBudgetSpentExactly(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":3},{"cost":3},{"cost":5}]}`, 11, 3)
	b.run(b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock)), stepsMax)
	task := b.task(id)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, int64(11), task.CostUsed)
	require.Equal(t, 3, task.StepsUsed)
}

func TestStepLimitCheckedBeforeEachStep(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1},{"cost":1},{"cost":1,"effect":"charge"}]}`, 10, 2)
	svc := workertest.NewService(worker.Dedup, b.clock)
	var logs strings.Builder
	reports := b.run(b.newWorker("w1", svc, func(c *worker.Config) { c.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) }), stepsMax)
	require.Equal(t, 1, count(reports, is(worker.ActionFail, "steps_exhausted: to failed")))
	require.Contains(t, logs.String(), `"msg":"task failed",`)
	require.Contains(t, logs.String(), `"outcome":"steps_exhausted: to failed"`, "the worker log names the reason, not a permanent failure")

	task := b.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.StepsExhausted, task.Reason)
	require.Equal(t, 2, task.StepsUsed)
	require.Equal(t, int64(2), task.CostUsed)
	require.Equal(t, "step 2 would pass the step limit 2", task.LastError)
	require.Empty(t, svc.Calls())
	require.Len(t, b.eventsOf(id, model.EventStep), 2)
}

// A gate pauses the task and releases its lease; after approval a new
// worker resumes after the gate, and the steps (and the effect) before it
// are not run again.
func TestApprovalPausesAndANewWorkerResumes(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":2,"effect":"charge"},{"approval":"manager"},{"cost":3}]}`, 10, 3)
	svc := workertest.NewService(worker.Plain, b.clock)
	a := b.newWorker("w1", svc)
	reports := b.run(a, stepsMax)
	require.Equal(t, 1, count(reports, is(worker.ActionPause, "to waiting_for_approval at gate manager")))
	require.Empty(t, a.Claims(), "the pause ends the claim")

	task := b.task(id)
	require.Equal(t, model.WaitingForApproval, task.State)
	require.Equal(t, "manager", task.ApprovalGate)
	require.Equal(t, task.Version, task.ApprovalVersion)
	require.Equal(t, int64(1), task.ApprovalVersion)
	require.True(t, task.LeaseUntil.IsZero(), "the lease is released")
	require.Empty(t, task.Owner)
	require.Equal(t, 2, task.StepsUsed, "the gate counts as a step")
	require.Equal(t, int64(2), task.CostUsed)
	require.Zero(t, task.AttemptsCharged, "a pause is not charged")

	// Waiting is not claimable: the old worker finds nothing to do.
	reports = b.run(a, stepsMax)
	require.Zero(t, count(reports, func(r worker.Report) bool { return len(r.Claims) > 0 }))

	require.ErrorIs(t, b.q.Approve(b.ctx, id, task.ApprovalVersion+1, "boss"), model.ErrVersionMismatch)
	require.NoError(t, b.q.Approve(b.ctx, id, task.ApprovalVersion, "boss"))

	// A restarted worker (a new one, with no memory of the first) resumes.
	bw := b.newWorker("w2", svc)
	b.run(bw, stepsMax)
	task = b.task(id)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, "boss", task.ApprovedBy)
	require.Equal(t, int64(5), task.CostUsed, "step 0 is not charged twice")
	require.Equal(t, 3, task.StepsUsed)
	require.Equal(t, int64(2), task.Version)
	require.Equal(t, 1, svc.Applications(model.OperationID(id, 0)))
	require.Len(t, svc.Calls(), 1, "the effect before the gate is not called again")

	steps := b.eventsOf(id, model.EventStep)
	require.Len(t, steps, 2)
	require.Equal(t, "step 0 cost 2", steps[0].Detail)
	require.Equal(t, int64(1), steps[0].Fence)
	require.Equal(t, "step 2 cost 3", steps[1].Detail)
	require.Equal(t, int64(2), steps[1].Fence)
	require.Len(t, b.eventsOf(id, model.EventApproved), 1)
}

// Cancellation seen in a step reply: the step in flight completes, and the
// worker acknowledges before its next step.
func TestCancellationSeenInStepReply(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1},{"cost":1},{"cost":1},{"cost":1}]}`, 10, 5)
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock))
	b.stepUntil(w, is(worker.ActionStep, "step 0 cost 1"))

	after, err := b.q.Cancel(b.ctx, id, "carol")
	require.NoError(t, err)
	require.Equal(t, model.Running, after.State)
	require.True(t, after.CancelRequested)

	// The worker does not know yet: it runs step 1, whose reply tells it.
	r := b.step(w)
	require.Equal(t, worker.ActionStep, r.Action)
	require.Equal(t, "step 1 cost 1", r.Outcome)
	r = b.step(w)
	require.Equal(t, worker.ActionCancel, r.Action)
	require.Equal(t, "cancelled", r.Outcome)
	require.Empty(t, w.Claims())

	task := b.task(id)
	require.Equal(t, model.Cancelled, task.State)
	require.Equal(t, model.CancelledByCaller, task.Reason)
	require.Equal(t, "carol", task.CancelledBy)
	require.Equal(t, 2, task.StepsUsed, "no step after the reply that carried the cancellation")
	require.Equal(t, int64(2), task.CostUsed)
	require.Equal(t, []model.EventKind{model.EventSubmitted, model.EventClaimed, model.EventStep,
		model.EventCancelRequested, model.EventStep, model.EventCancelled}, b.kinds(id))
}

// Cancellation seen in a heartbeat while a long step with an effect is
// under way: the worker stops before the effect call and acknowledges at
// once; the step is neither finished nor charged.
func TestCancellationSeenInHeartbeatStopsBeforeTheEffect(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1},{"cost":1,"duration_ms":2000,"effect":"charge"},{"cost":1}]}`, 10, 5)
	svc := workertest.NewService(worker.Dedup, b.clock)
	w := b.newWorker("w1", svc)
	b.stepUntil(w, is(worker.ActionStep, "step 0 cost 1")) // step 1's run starts with it

	_, err := b.q.Cancel(b.ctx, id, "carol")
	require.NoError(t, err)
	r := b.stepUntil(w, func(r worker.Report) bool { return r.Action == worker.ActionHeartbeat })
	require.Equal(t, "cancellation requested", r.Outcome)
	require.Equal(t, epoch.Add(testHeartbeat), b.clock.Now(), "the first heartbeat saw it")

	r = b.step(w)
	require.Equal(t, worker.ActionCancel, r.Action, "acknowledged before any further work: %s", r)
	require.Empty(t, w.Claims())

	task := b.task(id)
	require.Equal(t, model.Cancelled, task.State)
	require.Equal(t, model.CancelledByCaller, task.Reason)
	require.Equal(t, "carol", task.CancelledBy)
	require.Equal(t, 1, task.StepsUsed)
	require.Equal(t, int64(1), task.CostUsed)
	require.Empty(t, svc.Calls(), "no customer-visible call after the cancellation was seen")
	require.Empty(t, b.eventsOf(id, model.EventEffectIntent))
}

// A transient failure is charged and retried after its backoff; the retry
// resumes from the checkpoint and succeeds.
func TestTransientFailureRetriedThenSucceeds(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1},{"cost":1,"fail":"transient","times":1},{"cost":1}]}`, 10, 5)
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock))
	reports := b.run(w, stepsMax)
	require.Equal(t, 1, count(reports, is(worker.ActionFail, "transient failure: to queued")))

	task := b.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, 1, task.AttemptsCharged)
	require.Equal(t, 1, task.StepsUsed)
	require.True(t, task.RunAt.After(b.clock.Now()), "the retry waits out its backoff")
	require.Contains(t, task.LastError, "step 1 fails on attempt 1")

	// Before the backoff has passed the task is not claimed.
	reports = b.run(w, stepsMax)
	require.Zero(t, count(reports, func(r worker.Report) bool { return len(r.Claims) > 0 }))
	require.Equal(t, model.Queued, b.task(id).State)

	b.untilDue(id)
	b.run(w, stepsMax)
	task = b.task(id)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, 1, task.AttemptsCharged)
	require.Equal(t, int64(2), task.Version)
	require.Equal(t, 3, task.StepsUsed)
	require.Equal(t, int64(3), task.CostUsed, "step 0 is not run again")
	retries := b.eventsOf(id, model.EventRetry)
	require.Len(t, retries, 1)
	require.True(t, strings.HasPrefix(retries[0].Detail, "attempt 1 of 3 charged; retry in "), retries[0].Detail)
}

func TestTransientFailuresDeadLetterWhenAttemptsRunOut(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1,"fail":"transient","times":9}]}`, 10, 5)
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock))
	for attempt := 1; attempt < 3; attempt++ {
		b.run(w, stepsMax)
		require.Equal(t, attempt, b.task(id).AttemptsCharged)
		b.untilDue(id)
	}
	reports := b.run(w, stepsMax)
	require.Equal(t, 1, count(reports, is(worker.ActionFail, "transient failure: to needs_review")))
	task := b.task(id)
	require.Equal(t, model.NeedsReview, task.State)
	require.Equal(t, model.AttemptsExhausted, task.Reason)
	require.Equal(t, 3, task.AttemptsCharged)
	require.Zero(t, task.CostUsed)
	dead := b.eventsOf(id, model.EventDeadLettered)
	require.Len(t, dead, 1)
	require.Equal(t, "attempt 3 of 3 charged; no attempts left, to review", dead[0].Detail, "no retry is announced")
}

// A step that fails transiently more often than attempts_max allows is
// dead-lettered; the operator requeues it (as inspect advises) and it goes
// on failing only for the failures it has left: times counts the task's
// failures over its life, which a requeue does not reset.
func TestRequeuedTaskSucceedsOnceItsFailuresAreSpent(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1},{"cost":1,"fail":"transient","times":4},{"cost":1}]}`, 10, 5)
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock))
	for range 3 {
		b.run(w, stepsMax)
		if b.task(id).State == model.Queued {
			b.untilDue(id)
		}
	}
	task := b.task(id)
	require.Equal(t, model.NeedsReview, task.State)
	require.Equal(t, 3, task.AttemptsCharged)
	require.Equal(t, 3, task.AttemptsFailed)

	require.NoError(t, b.q.Requeue(b.ctx, id, model.Grant{}, "ops"))
	b.stepUntil(w, is(worker.ActionFail, "transient failure: to queued")) // the fourth failure
	task = b.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, 1, task.AttemptsCharged, "the requeue gave a fresh set of attempts")
	require.Equal(t, 4, task.AttemptsFailed)
	require.Contains(t, task.LastError, "step 1 fails on attempt 4")

	b.untilDue(id)
	b.stepUntil(w, is(worker.ActionComplete, "completed"))
	task = b.task(id)
	require.Equal(t, model.Completed, task.State, "its four failures spent, the step succeeds")
	require.Equal(t, 3, task.StepsUsed)
	require.Equal(t, int64(3), task.CostUsed, "step 0 ran once")
}

func TestPermanentFailureFailsAtOnce(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1},{"cost":1,"fail":"permanent"},{"cost":1}]}`, 10, 5)
	b.run(b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock)), stepsMax)
	task := b.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.PermanentError, task.Reason)
	require.Zero(t, task.AttemptsCharged, "a permanent failure is not retried")
	require.Equal(t, int64(1), task.Version)
	require.Equal(t, 1, task.StepsUsed)
	require.Contains(t, task.LastError, "step 1 fails permanently")
}

// A stalled claimant loses its lease; the reaper requeues the task and a
// second worker claims it. The stalled worker believes its lease longer
// than the queue's (its clock runs behind), so it writes: the write is
// refused as stale (and recorded), it drops the claim, and the second
// worker finishes.
func TestStaleClaimIsDropped(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1},{"cost":1},{"cost":1}]}`, 10, 5)
	a := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock), func(c *worker.Config) {
		c.Queue = shortClaimQueue{Queue: b.q, short: time.Hour}
	})
	b.stepUntil(a, is(worker.ActionStep, "step 0 cost 1"))
	require.Len(t, a.Claims(), 1)

	b.expire(id) // a stalls past its lease
	require.Equal(t, 1, b.task(id).AttemptsCharged, "a lease expiry is charged")
	bw := b.newWorker("w2", workertest.NewService(worker.Dedup, b.clock))
	r := b.stepUntil(bw, func(r worker.Report) bool { return len(r.Claims) == 1 })
	require.Equal(t, int64(2), r.Claims[0].Fence)

	r = b.step(a)
	require.Equal(t, worker.ActionHeartbeat, r.Action)
	require.ErrorIs(t, r.Err, model.ErrStaleClaim)
	require.Equal(t, "stale claim dropped", r.Outcome)
	require.False(t, r.Accepted)
	require.Empty(t, a.Claims())

	stale := b.eventsOf(id, model.EventStaleWrite)
	require.Len(t, stale, 1)
	require.Equal(t, int64(1), stale[0].Fence)
	require.Equal(t, 1, stale[0].Attempt)
	require.Equal(t, "w1", stale[0].Actor)

	b.run(bw, stepsMax)
	task := b.task(id)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, int64(2), task.Version)
	require.Equal(t, 3, task.StepsUsed)
	require.Equal(t, int64(3), task.CostUsed, "the stale claimant's step counted once")
	completed := b.eventsOf(id, model.EventCompleted)
	require.Len(t, completed, 1)
	require.Equal(t, "w2", completed[0].Actor)
	require.Equal(t, int64(2), completed[0].Fence)
}

// A deadline that passes during a step: the next fenced write (here a
// heartbeat) fails the task in the queue, and the worker ends its claim.
func TestDeadlinePassingDuringAStep(t *testing.T) {
	b := setup(t)
	id := b.submitRequest(model.SubmitRequest{User: "ana", Payload: `{"steps":[{"cost":1,"duration_ms":3000},{"cost":1}]}`,
		CostBudget: 10, StepsMax: 5, Deadline: epoch.Add(time.Second)})
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock))
	reports := b.run(w, stepsMax)
	require.Equal(t, 1, count(reports, is(worker.ActionHeartbeat, "deadline_exceeded: task failed by the queue")))
	require.Empty(t, w.Claims())

	task := b.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.DeadlineExceeded, task.Reason)
	require.Zero(t, task.StepsUsed, "the step under way is not charged")
	require.Equal(t, epoch.Add(1500*time.Millisecond), task.UpdatedAt, "the first heartbeat after the deadline failed it")
}
