package queue

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// withDeadline sets a deadline d after now.
func withDeadline(b *bundle, d time.Duration) func(*model.SubmitRequest) {
	return func(r *model.SubmitRequest) { r.Deadline = b.now().Add(d) }
}

// transitionCase drives one row of model.Transitions() through the queue:
// prepare leaves a task in the row's From state, act performs the action.
type transitionCase struct {
	prepare func(b *bundle) (string, model.Claim)
	act     func(b *bundle, id string, c model.Claim)
}

func queuedTask(b *bundle) (string, model.Claim)  { return b.submit(), model.Claim{} }
func runningTask(b *bundle) (string, model.Claim) { return b.running() }
func waitingTask(b *bundle) (string, model.Claim) { return b.waiting() }
func parkedTask(b *bundle) (string, model.Claim)  { return b.parked() }

func failWith(f model.Failure) func(b *bundle, id string, c model.Claim) {
	return func(b *bundle, _ string, c model.Claim) {
		_, err := b.q.Fail(b.ctx, c, f)
		require.NoError(b.t, err)
	}
}

func resolveAs(to model.State) func(b *bundle, id string, c model.Claim) {
	return func(b *bundle, id string, _ model.Claim) {
		require.NoError(b.t, b.q.Resolve(b.ctx, id, to, "ops"))
	}
}

func passDeadline(b *bundle, _ string, _ model.Claim) {
	b.advance(10*time.Second + time.Millisecond)
	require.Equal(b.t, 1, b.reap().Deadlines)
}

var transitionCases = map[model.Transition]transitionCase{
	{From: model.Queued, Action: model.ActClaim, To: model.Running}: {queuedTask,
		func(b *bundle, id string, _ model.Claim) { require.Equal(b.t, id, b.claim("w2").Claim.TaskID) }},
	{From: model.Queued, Action: model.ActCancel, To: model.Cancelled}: {queuedTask,
		func(b *bundle, id string, _ model.Claim) {
			_, err := b.q.Cancel(b.ctx, id, "caller")
			require.NoError(b.t, err)
		}},
	{From: model.Running, Action: model.ActComplete, To: model.Completed}: {runningTask,
		func(b *bundle, _ string, c model.Claim) { require.NoError(b.t, b.q.Complete(b.ctx, c)) }},
	{From: model.Running, Action: model.ActFail, To: model.Failed}: {runningTask,
		failWith(model.Failure{Class: model.Permanent})},
	{From: model.Running, Action: model.ActRetry, To: model.Queued, Charged: true}: {runningTask,
		failWith(model.Failure{Class: model.Transient})},
	{From: model.Running, Action: model.ActDeadLetter, To: model.NeedsReview, Charged: true}: {
		func(b *bundle) (string, model.Claim) {
			b.setLimits(func(l *model.Limits) { l.AttemptsMax = 1 })
			return b.running()
		},
		failWith(model.Failure{Class: model.Transient})},
	{From: model.Running, Action: model.ActUncertain, To: model.NeedsReview}: {runningTask,
		failWith(model.Failure{Class: model.Uncertain, OpID: "op"})},
	{From: model.Running, Action: model.ActPause, To: model.WaitingForApproval}: {runningTask,
		func(b *bundle, _ string, c model.Claim) {
			_, err := b.q.Pause(b.ctx, c, 0, "manager")
			require.NoError(b.t, err)
		}},
	{From: model.Running, Action: model.ActRelease, To: model.Queued}: {runningTask,
		func(b *bundle, _ string, c model.Claim) {
			_, err := b.q.Release(b.ctx, c)
			require.NoError(b.t, err)
		}},
	{From: model.Running, Action: model.ActObserveCancel, To: model.Cancelled}: {runningTask,
		func(b *bundle, id string, c model.Claim) {
			_, err := b.q.Cancel(b.ctx, id, "caller")
			require.NoError(b.t, err)
			require.NoError(b.t, b.q.AcknowledgeCancel(b.ctx, c))
		}},
	{From: model.WaitingForApproval, Action: model.ActApprove, To: model.Queued}: {waitingTask,
		func(b *bundle, id string, _ model.Claim) {
			require.NoError(b.t, b.q.Approve(b.ctx, id, b.task(id).ApprovalVersion, "boss"))
		}},
	{From: model.WaitingForApproval, Action: model.ActReject, To: model.Cancelled}: {waitingTask,
		func(b *bundle, id string, _ model.Claim) {
			require.NoError(b.t, b.q.Reject(b.ctx, id, b.task(id).ApprovalVersion, "boss"))
		}},
	{From: model.WaitingForApproval, Action: model.ActCancel, To: model.Cancelled}: {waitingTask,
		func(b *bundle, id string, _ model.Claim) {
			_, err := b.q.Cancel(b.ctx, id, "caller")
			require.NoError(b.t, err)
		}},
	{From: model.Queued, Action: model.ActDeadline, To: model.Failed}: {
		func(b *bundle) (string, model.Claim) { return b.submit(withDeadline(b, 10*time.Second)), model.Claim{} },
		passDeadline},
	{From: model.Running, Action: model.ActDeadline, To: model.Failed}: {
		func(b *bundle) (string, model.Claim) { return b.running(withDeadline(b, 10*time.Second)) },
		passDeadline},
	{From: model.WaitingForApproval, Action: model.ActDeadline, To: model.Failed}: {
		func(b *bundle) (string, model.Claim) { return b.waiting(withDeadline(b, 10*time.Second)) },
		passDeadline},
	{From: model.NeedsReview, Action: model.ActRequeue, To: model.Queued}: {parkedTask,
		func(b *bundle, id string, _ model.Claim) {
			require.NoError(b.t, b.q.Requeue(b.ctx, id, model.Grant{Cost: 5, Steps: 2}, "ops"))
		}},
	{From: model.NeedsReview, Action: model.ActResolve, To: model.Completed}: {parkedTask, resolveAs(model.Completed)},
	{From: model.NeedsReview, Action: model.ActResolve, To: model.Failed}:    {parkedTask, resolveAs(model.Failed)},
	{From: model.NeedsReview, Action: model.ActResolve, To: model.Cancelled}: {parkedTask, resolveAs(model.Cancelled)},
}

// TestEveryTransition drives every row of the state machine through the
// queue and checks the task moved from From to To, the audit event says
// so, the attempt was charged exactly when the row says, and the task
// keeps its invariants.
func TestEveryTransition(t *testing.T) {
	covered := map[model.Transition]bool{}
	for _, tr := range model.Transitions() {
		covered[tr] = true
		name := fmt.Sprintf("%s/%s/%s", tr.From, tr.Action, tr.To)
		tc, ok := transitionCases[tr]
		require.True(t, ok, "no test drives transition %s", name)
		t.Run(name, func(t *testing.T) {
			b := setup(t)
			id, c := tc.prepare(b)
			before := b.task(id)
			require.Equal(t, tr.From, before.State)
			tc.act(b, id, c)
			after := b.task(id)
			require.Equal(t, tr.To, after.State)
			require.Empty(t, model.CheckTask(after))
			require.Empty(t, model.CheckChange(before, after))
			charged := 0
			if tr.Charged {
				charged = 1
			}
			if tr.Action != model.ActRequeue {
				require.Equal(t, before.AttemptsCharged+charged, after.AttemptsCharged)
			}
			last := b.lastEvent(id)
			require.Equal(t, tr.From, last.From)
			require.Equal(t, tr.To, last.To)
			require.Equal(t, after.Reason, last.Reason)
			require.True(t, b.metrics().Reconciles())
		})
	}
	for tr := range transitionCases {
		require.True(t, covered[tr], "transition case %v is not in model.Transitions()", tr)
	}
}

func TestClaimStartsAttempt(t *testing.T) {
	b := setup(t)
	id := b.submit()
	b.advance(1500 * time.Millisecond)
	got := b.claim("w1")
	task := b.task(id)
	require.Equal(t, got.Task, task)
	require.Equal(t, model.Claim{TaskID: id, Fence: 1, Owner: "w1", Attempt: 1, LeaseUntil: b.now().Add(testLease)}, got.Claim)
	require.Equal(t, model.Running, task.State)
	require.Equal(t, int64(1), task.Version)
	require.Equal(t, 1, task.Attempt)
	require.Equal(t, b.now(), task.ClaimedAt)
	require.Equal(t, b.now(), task.HeartbeatAt)
	require.Equal(t, model.Event{Seq: last(b.events("")).Seq, TaskID: id, Kind: model.EventClaimed, Attempt: 1, Fence: 1,
		From: model.Queued, To: model.Running, Actor: "w1", At: b.now()}, b.lastEvent(id))
	b.noClaim()
}

func last[T any](xs []T) T { return xs[len(xs)-1] }

func TestHeartbeatExtendsLease(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	b.advance(testLease - time.Millisecond)
	hb, err := b.q.Heartbeat(b.ctx, c, time.Minute)
	require.NoError(t, err)
	require.Equal(t, model.HeartbeatResult{LeaseUntil: b.now().Add(time.Minute)}, hb)
	task := b.task(id)
	require.Equal(t, b.now().Add(time.Minute), task.LeaseUntil)
	require.Equal(t, b.now(), task.HeartbeatAt)
	// The old lease has passed; the extended one holds.
	b.advance(time.Second)
	require.Equal(t, model.ReapResult{}, b.reap())
	_, err = b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
	require.NoError(t, err)

	_, err = b.q.Heartbeat(b.ctx, c, model.LeaseMin-time.Millisecond)
	requireField(t, err, "lease")
	_, err = b.q.Heartbeat(b.ctx, c, model.LeaseMax+time.Millisecond)
	requireField(t, err, "lease")
	// lease_until is stored in milliseconds: a finer lease would be
	// reported to the worker later than the queue enforces it.
	before := b.task(id)
	_, err = b.q.Heartbeat(b.ctx, c, time.Second+500*time.Microsecond)
	requireField(t, err, "lease")
	_, err = b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w2", Max: 1, Lease: time.Second + 500*time.Microsecond})
	requireField(t, err, "lease")
	require.Equal(t, before, b.task(id))
}

func TestComplete(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	_, err := b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 4})
	require.NoError(t, err)
	require.NoError(t, b.q.Complete(b.ctx, c))
	task := b.task(id)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, model.NoReason, task.Reason)
	require.Equal(t, int64(4), task.CostUsed)
	require.Equal(t, 1, task.StepsUsed)
	require.Empty(t, task.Owner)
	ev := b.lastEvent(id)
	require.Equal(t, model.EventCompleted, ev.Kind)
	require.Equal(t, "w1", ev.Actor)
	require.Equal(t, int64(1), ev.Fence)
}

func TestFailPermanentWithEachReason(t *testing.T) {
	for _, tc := range []struct {
		given, want model.Reason
	}{
		{model.NoReason, model.PermanentError},
		{model.PermanentError, model.PermanentError},
		{model.BudgetExhausted, model.BudgetExhausted},
		{model.StepsExhausted, model.StepsExhausted},
		{model.DeadlineExceeded, model.DeadlineExceeded},
	} {
		t.Run(string(tc.want)+"/"+string(tc.given), func(t *testing.T) {
			b := setup(t)
			id, c := b.running()
			to, err := b.q.Fail(b.ctx, c, model.Failure{Class: model.Permanent, Reason: tc.given, Message: "boom"})
			require.NoError(t, err)
			require.Equal(t, model.Failed, to)
			task := b.task(id)
			require.Equal(t, model.Failed, task.State)
			require.Equal(t, tc.want, task.Reason)
			require.Equal(t, "boom", task.LastError)
			require.Equal(t, 0, task.AttemptsCharged)
			ev := b.lastEvent(id)
			require.Equal(t, model.EventFailed, ev.Kind)
			require.Equal(t, tc.want, ev.Reason)
		})
	}
	for _, bad := range []model.Reason{model.OperatorResolved, model.CancelledByCaller, model.AttemptsExhausted, "nonsense"} {
		t.Run("refused/"+string(bad), func(t *testing.T) {
			b := setup(t)
			id, c := b.running()
			before, dump := b.task(id), b.dump()
			_, err := b.q.Fail(b.ctx, c, model.Failure{Class: model.Permanent, Reason: bad})
			requireField(t, err, "reason")
			require.Equal(t, before, b.task(id))
			require.Equal(t, dump, b.dump())
		})
	}
	b := setup(t)
	_, c := b.running()
	_, err := b.q.Fail(b.ctx, c, model.Failure{Class: "flaky"})
	requireField(t, err, "class")
}

// requireField requires a validation error naming field.
func requireField(t *testing.T, err error, field string) {
	t.Helper()
	require.ErrorIs(t, err, ErrInvalidInput)
	var ve *model.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, field, ve.Field, "error: %v", err)
}

func TestFailMessageTruncated(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	_, err := b.q.Fail(b.ctx, c, model.Failure{Class: model.Permanent, Message: strings.Repeat("x", model.ErrorMessageMax+10)})
	require.NoError(t, err)
	require.Len(t, b.task(id).LastError, model.ErrorMessageMax)
}

func TestFailTransientRequeuesWithBackoff(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	b.advance(2 * time.Second)
	to, err := b.q.Fail(b.ctx, c, model.Failure{Class: model.Transient, Message: "timeout"})
	require.NoError(t, err)
	require.Equal(t, model.Queued, to)
	task := b.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, model.NoReason, task.Reason)
	require.Equal(t, 1, task.AttemptsCharged)
	require.Equal(t, "timeout", task.LastError)
	require.Empty(t, task.Owner)
	require.Equal(t, b.now(), task.QueuedAt)
	// DefaultBackoff: the first charged attempt waits between 500 ms and 1 s.
	delay := task.RunAt.Sub(b.now())
	require.GreaterOrEqual(t, delay, 500*time.Millisecond)
	require.LessOrEqual(t, delay, time.Second)
	ev := b.lastEvent(id)
	require.Equal(t, model.EventRetry, ev.Kind)
	require.Equal(t, model.DetailRetry(1, 3, delay), ev.Detail)
	require.Equal(t, int64(1), b.metrics().Retries)

	// Not claimable until run_at, then claimable under a new fence.
	b.advance(delay - time.Millisecond)
	b.noClaim()
	b.advance(time.Millisecond)
	again := b.claim("w2")
	require.Equal(t, int64(2), again.Claim.Fence)
	require.Equal(t, 2, again.Claim.Attempt)
}

// TestBackoffBoundsAndCap pins the jitter draw to its extremes: the delay
// is half the capped delay for a draw of 0 and all of it for the largest
// effective draw.
func TestBackoffBoundsAndCap(t *testing.T) {
	policy := model.Backoff{Base: time.Second, Max: 1500 * time.Millisecond}
	for _, tc := range []struct {
		charged int
		draw    uint64
		want    time.Duration
	}{
		{1, 0, 500 * time.Millisecond},
		{1, 500, time.Second},
		{2, 0, 750 * time.Millisecond},    // 2 s capped to 1.5 s
		{2, 750, 1500 * time.Millisecond}, // never above the cap
		{3, 750, 1500 * time.Millisecond},
	} {
		t.Run(fmt.Sprintf("charged%d/draw%d", tc.charged, tc.draw), func(t *testing.T) {
			b := setup(t, withRand(fixedRand(tc.draw)), withBackoff(policy))
			b.setLimits(func(l *model.Limits) { l.AttemptsMax = 10 })
			id := b.submit()
			var delay time.Duration
			for i := 1; i <= tc.charged; i++ {
				b.advance(b.task(id).RunAt.Sub(b.now()))
				c := b.claim("w1")
				_, err := b.q.Fail(b.ctx, c.Claim, model.Failure{Class: model.Transient})
				require.NoError(t, err)
				delay = b.task(id).RunAt.Sub(b.now())
			}
			require.Equal(t, tc.charged, b.task(id).AttemptsCharged)
			require.Equal(t, tc.want, delay)
		})
	}
}

func TestFailTransientOnLastAttemptDeadLetters(t *testing.T) {
	b := setup(t)
	b.setLimits(func(l *model.Limits) { l.AttemptsMax = 2 })
	id := b.submit()
	c := b.claim("w1")
	_, err := b.q.Fail(b.ctx, c.Claim, model.Failure{Class: model.Transient})
	require.NoError(t, err)
	b.advance(time.Minute)
	c = b.claim("w1")
	to, err := b.q.Fail(b.ctx, c.Claim, model.Failure{Class: model.Transient, Message: "again"})
	require.NoError(t, err)
	require.Equal(t, model.NeedsReview, to)
	task := b.task(id)
	require.Equal(t, model.NeedsReview, task.State)
	require.Equal(t, model.AttemptsExhausted, task.Reason)
	require.Equal(t, 2, task.AttemptsCharged)
	ev := b.lastEvent(id)
	require.Equal(t, model.EventDeadLettered, ev.Kind)
	require.Equal(t, model.AttemptsExhausted, ev.Reason)
	require.Equal(t, int64(1), b.metrics().Reviews)
	b.advance(time.Hour)
	b.noClaim()
}

func TestFailTransientWithCancelRequestedCancels(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	_, err := b.q.Cancel(b.ctx, id, "caller")
	require.NoError(t, err)
	to, err := b.q.Fail(b.ctx, c, model.Failure{Class: model.Transient})
	require.NoError(t, err)
	require.Equal(t, model.Cancelled, to)
	task := b.task(id)
	require.Equal(t, model.CancelledByCaller, task.Reason)
	require.Equal(t, 0, task.AttemptsCharged)
}

func TestFailUncertainParks(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	intent, err := b.q.RecordIntent(b.ctx, c, 0)
	require.NoError(t, err)
	to, err := b.q.Fail(b.ctx, c, model.Failure{Class: model.Uncertain, OpID: intent.OpID, Message: "lost response"})
	require.NoError(t, err)
	require.Equal(t, model.NeedsReview, to)
	task := b.task(id)
	require.Equal(t, model.UncertainEffect, task.Reason)
	require.Equal(t, 0, task.AttemptsCharged)
	require.Equal(t, "lost response", task.LastError)
	ev := b.lastEvent(id)
	require.Equal(t, model.EventUncertain, ev.Kind)
	require.Equal(t, intent.OpID, ev.Detail)
	b.advance(time.Hour)
	b.noClaim()
}

func TestPauseAtGate(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	_, err := b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 2, Checkpoint: "cp1"})
	require.NoError(t, err)
	b.advance(3 * time.Second)
	to, err := b.q.Pause(b.ctx, c, 1, "manager")
	require.NoError(t, err)
	require.Equal(t, model.WaitingForApproval, to)
	task := b.task(id)
	require.Equal(t, model.WaitingForApproval, task.State)
	require.Equal(t, task.Version, task.ApprovalVersion)
	require.Equal(t, int64(1), task.ApprovalVersion)
	require.Equal(t, "manager", task.ApprovalGate)
	require.Equal(t, 2, task.StepsUsed, "the gate counts as a step")
	require.Equal(t, "cp1", task.Checkpoint)
	require.Empty(t, task.Owner, "lease released")
	require.True(t, task.LeaseUntil.IsZero(), "lease released")
	require.Equal(t, 0, task.AttemptsCharged, "a pause is not charged")
	ev := b.lastEvent(id)
	require.Equal(t, model.EventPaused, ev.Kind)
	require.Equal(t, model.DetailPause("manager", 1), ev.Detail)
	m := b.metrics()
	require.Equal(t, int64(1), m.RunTime.Count)
	require.Equal(t, int64(3000), m.RunTime.SumMs)
	// Waiting is not queued: nothing to claim, nothing for the reaper.
	b.advance(time.Hour)
	b.noClaim()
	require.Equal(t, model.ReapResult{}, b.reap())
	require.Equal(t, model.WaitingForApproval, b.state(id))
}

func TestPauseRefusals(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	before := b.task(id)
	_, err := b.q.Pause(b.ctx, c, 1, "manager")
	require.ErrorIs(t, err, ErrStepConflict)
	_, err = b.q.Pause(b.ctx, c, 0, "bad gate")
	requireField(t, err, "gate")
	require.Equal(t, before, b.task(id))

	// A task whose cancellation was requested is cancelled at the gate.
	_, err = b.q.Cancel(b.ctx, id, "caller")
	require.NoError(t, err)
	to, err := b.q.Pause(b.ctx, c, 0, "manager")
	require.NoError(t, err)
	require.Equal(t, model.Cancelled, to)
	require.Equal(t, model.Cancelled, b.state(id))

	// A gate past the step limit fails the task.
	id, c = b.running(func(r *model.SubmitRequest) { r.StepsMax = 1 })
	_, err = b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
	require.NoError(t, err)
	_, err = b.q.Pause(b.ctx, c, 1, "manager")
	require.ErrorIs(t, err, ErrStepsExhausted)
	task := b.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.StepsExhausted, task.Reason)
}

func TestApproveResumesFromCheckpoint(t *testing.T) {
	b := setup(t)
	id, _ := b.waiting()
	waiting := b.task(id)
	b.advance(time.Minute)
	require.NoError(t, b.q.Approve(b.ctx, id, waiting.ApprovalVersion, "boss"))
	task := b.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, "boss", task.ApprovedBy)
	require.Equal(t, b.now(), task.RunAt)
	require.Equal(t, b.now(), task.QueuedAt)
	ev := b.lastEvent(id)
	require.Equal(t, model.EventApproved, ev.Kind)
	require.Equal(t, "boss", ev.Actor)

	c := b.claim("w2")
	require.Equal(t, int64(2), c.Claim.Fence)
	require.Equal(t, 2, c.Task.StepsUsed, "resumes after the gate")
	require.Equal(t, int64(2), c.Task.CostUsed)
	require.Equal(t, `{"at":1}`, c.Task.Checkpoint)
	require.Equal(t, 0, c.Task.AttemptsCharged)
	_, err := b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c.Claim, Index: 2, Cost: 1})
	require.NoError(t, err)
}

func TestReapIsBatched(t *testing.T) {
	b := setup(t)
	total := model.ReapBatchMax + 1
	for range total {
		b.submit()
	}
	for claimed := 0; claimed < total; {
		claimed += len(b.claimN("w1", 16))
	}
	b.advance(testLease)
	require.Equal(t, model.ReapResult{Expired: model.ReapBatchMax, More: true}, b.reap())
	require.Equal(t, model.ReapResult{Expired: 1}, b.reap())
	require.Equal(t, model.ReapResult{}, b.reap())
	m := b.metrics()
	require.Equal(t, int64(total), m.LeaseExpiries)
	require.Equal(t, int64(total), m.Depth[model.Queued])
}

// TestReapDeadlineBeforeLease: a running task whose lease expired after
// its deadline passed fails for the deadline; no attempt is charged.
func TestReapDeadlineBeforeLease(t *testing.T) {
	b := setup(t)
	id, _ := b.running(withDeadline(b, 10*time.Second))
	b.advance(time.Hour)
	require.Equal(t, model.ReapResult{Deadlines: 1}, b.reap())
	task := b.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.DeadlineExceeded, task.Reason)
	require.Equal(t, 0, task.AttemptsCharged)
	require.Equal(t, int64(0), b.metrics().LeaseExpiries)
}

func TestDeadlinePassesViaReap(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(b *bundle) string
	}{
		{"queued", func(b *bundle) string { return b.submit(withDeadline(b, 10*time.Second)) }},
		{"running", func(b *bundle) string { id, _ := b.running(withDeadline(b, 10*time.Second)); return id }},
		{"waiting", func(b *bundle) string { id, _ := b.waiting(withDeadline(b, 10*time.Second)); return id }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			id := tc.prepare(b)
			state := b.state(id)
			b.advance(10 * time.Second)
			require.Equal(t, model.ReapResult{}, b.reap(), "the deadline itself has not passed")
			require.Equal(t, state, b.state(id))
			b.advance(time.Millisecond)
			require.Equal(t, model.ReapResult{Deadlines: 1}, b.reap())
			task := b.task(id)
			require.Equal(t, model.Failed, task.State)
			require.Equal(t, model.DeadlineExceeded, task.Reason)
			require.Empty(t, task.Owner)
			ev := b.lastEvent(id)
			require.Equal(t, model.EventDeadline, ev.Kind)
			require.Equal(t, state, ev.From)
			require.Equal(t, model.ReaperActor, ev.Actor)
		})
	}
}

func TestClaimSkipsTaskPastDeadline(t *testing.T) {
	b := setup(t)
	late := b.submit(withDeadline(b, 10*time.Second))
	b.advance(10*time.Second + time.Millisecond)
	b.noClaim()
	require.Equal(t, model.Queued, b.state(late), "claim does not settle it; the reaper does")

	b2 := setup(t)
	onTime := b2.submit(withDeadline(b2, 10*time.Second))
	b2.advance(10 * time.Second)
	require.Equal(t, onTime, b2.claim("w1").Claim.TaskID, "claimable at its deadline")
}

func TestFencedWriteAfterDeadlineFailsTask(t *testing.T) {
	writes := map[string]func(b *bundle, c model.Claim) error{
		"heartbeat": func(b *bundle, c model.Claim) error {
			_, err := b.q.Heartbeat(b.ctx, c, testLease)
			return err
		},
		"step": func(b *bundle, c model.Claim) error {
			_, err := b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
			return err
		},
		"effect_intent": func(b *bundle, c model.Claim) error {
			_, err := b.q.RecordIntent(b.ctx, c, 0)
			return err
		},
		"pause": func(b *bundle, c model.Claim) error {
			_, err := b.q.Pause(b.ctx, c, 0, "manager")
			return err
		},
	}
	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			b := setup(t)
			id, c := b.running(withDeadline(b, 10*time.Second))
			b.advance(10*time.Second + time.Millisecond)
			require.ErrorIs(t, write(b, c), ErrDeadlineExceeded)
			task := b.task(id)
			require.Equal(t, model.Failed, task.State)
			require.Equal(t, model.DeadlineExceeded, task.Reason)
			require.Equal(t, int64(0), task.CostUsed)
			require.Equal(t, 0, task.StepsUsed)
			require.Empty(t, b.effects(id))
			ev := b.lastEvent(id)
			require.Equal(t, model.EventDeadline, ev.Kind)
			require.Equal(t, "w1", ev.Actor)
			require.ErrorIs(t, write(b, c), ErrStaleClaim, "the claim has ended")
		})
	}
}

func TestRequeueWithBoundedGrant(t *testing.T) {
	b := setup(t)
	id, _ := b.parked()
	before := b.task(id)
	b.advance(time.Minute)
	require.NoError(t, b.q.Requeue(b.ctx, id, model.Grant{Cost: 7, Steps: 3}, "ops"))
	task := b.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, model.NoReason, task.Reason)
	require.Equal(t, before.CostBudget+7, task.CostBudget)
	require.Equal(t, before.StepsMax+3, task.StepsMax)
	require.Equal(t, 0, task.AttemptsCharged)
	require.Equal(t, b.now(), task.RunAt)
	ev := b.lastEvent(id)
	require.Equal(t, model.EventRequeued, ev.Kind)
	require.Equal(t, model.DetailGrant(model.Grant{Cost: 7, Steps: 3}), ev.Detail)
	require.Equal(t, id, b.claim("w2").Claim.TaskID)
}

func TestRequeueResetsChargedAttempts(t *testing.T) {
	b := setup(t)
	b.setLimits(func(l *model.Limits) { l.AttemptsMax = 1 })
	id, c := b.running()
	_, err := b.q.Fail(b.ctx, c, model.Failure{Class: model.Transient})
	require.NoError(t, err)
	require.Equal(t, 1, b.task(id).AttemptsCharged)
	require.NoError(t, b.q.Requeue(b.ctx, id, model.Grant{}, "ops"))
	require.Equal(t, 0, b.task(id).AttemptsCharged)
	again := b.claim("w1")
	to, err := b.q.Fail(b.ctx, again.Claim, model.Failure{Class: model.Transient})
	require.NoError(t, err)
	require.Equal(t, model.NeedsReview, to)
}

func TestRequeueRefusesUnboundedGrant(t *testing.T) {
	b := setup(t)
	limits, _, err := b.q.Limits(b.ctx)
	require.NoError(t, err)
	id, _ := b.parked()
	before, dump := b.task(id), b.dump()
	for _, tc := range []struct {
		grant model.Grant
		field string
	}{
		{model.Grant{Cost: limits.GrantCostMax + 1}, "grant_cost"},
		{model.Grant{Cost: -1}, "grant_cost"},
		{model.Grant{Steps: limits.GrantStepsMax + 1}, "grant_steps"},
		{model.Grant{Steps: -1}, "grant_steps"},
	} {
		requireField(t, b.q.Requeue(b.ctx, id, tc.grant, "ops"), tc.field)
	}
	require.Equal(t, before, b.task(id))
	require.Equal(t, dump, b.dump())
	// Exactly the maximum is allowed.
	require.NoError(t, b.q.Requeue(b.ctx, id, model.Grant{Cost: limits.GrantCostMax, Steps: limits.GrantStepsMax}, "ops"))

	queued := b.submit()
	require.ErrorIs(t, b.q.Requeue(b.ctx, queued, model.Grant{Cost: 1}, "ops"), ErrInvalidTransition)
}

func TestResolve(t *testing.T) {
	for _, to := range []model.State{model.Completed, model.Failed, model.Cancelled} {
		t.Run(string(to), func(t *testing.T) {
			b := setup(t)
			id, _ := b.parked()
			require.NoError(t, b.q.Resolve(b.ctx, id, to, "ops"))
			task := b.task(id)
			require.Equal(t, to, task.State)
			require.Equal(t, model.OperatorResolved, task.Reason)
			if to == model.Cancelled {
				require.Equal(t, "ops", task.CancelledBy)
			}
			ev := b.lastEvent(id)
			require.Equal(t, model.EventResolved, ev.Kind)
			require.Equal(t, "ops", ev.Actor)
			require.ErrorIs(t, b.q.Resolve(b.ctx, id, to, "ops"), ErrInvalidTransition)
		})
	}
	b := setup(t)
	id, _ := b.parked()
	before, dump := b.task(id), b.dump()
	for _, to := range []model.State{model.Queued, model.Running, model.WaitingForApproval, model.NeedsReview, "done"} {
		requireField(t, b.q.Resolve(b.ctx, id, to, "ops"), "as")
	}
	require.Equal(t, before, b.task(id))
	require.Equal(t, dump, b.dump())
	queued := b.submit()
	require.ErrorIs(t, b.q.Resolve(b.ctx, queued, model.Completed, "ops"), ErrInvalidTransition)
}

func TestSettleEffectApplied(t *testing.T) {
	b := setup(t)
	id, _ := b.parked()
	op := model.OperationID(id, 0)
	b.advance(time.Minute)
	require.NoError(t, b.q.SettleEffect(b.ctx, op, true, "ops"))
	effects := b.effects(id)
	require.Len(t, effects, 1)
	require.Equal(t, model.Effect{OpID: op, TaskID: id, Step: 0, IntentFence: 1, IntentAt: epoch,
		ReceiptAt: b.now(), ReceiptBy: "ops", Result: "settled by operator"}, effects[0])
	ev := b.lastEvent(id)
	require.Equal(t, model.EventEffectSettled, ev.Kind)
	require.Equal(t, model.DetailEffectSettled(op, true), ev.Detail)
	require.Equal(t, model.NeedsReview, b.state(id), "settling does not move the task")
	require.ErrorIs(t, b.q.SettleEffect(b.ctx, op, false, "ops"), ErrEffectReceipted)

	// Requeued, the step finds its receipt and never calls again.
	require.NoError(t, b.q.Requeue(b.ctx, id, model.Grant{}, "ops"))
	c := b.claim("w2")
	res, err := b.q.RecordIntent(b.ctx, c.Claim, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentResult{OpID: op, Status: model.IntentReceipted, Result: "settled by operator"}, res)
}

func TestSettleEffectNotApplied(t *testing.T) {
	b := setup(t)
	id, _ := b.parked()
	op := model.OperationID(id, 0)
	require.NoError(t, b.q.SettleEffect(b.ctx, op, false, "ops"))
	require.Empty(t, b.effects(id))
	require.Equal(t, model.DetailEffectSettled(op, false), b.lastEvent(id).Detail)
	require.ErrorIs(t, b.q.SettleEffect(b.ctx, op, false, "ops"), ErrNotFound)

	// Requeued, the step makes the effect afresh under its new claim.
	require.NoError(t, b.q.Requeue(b.ctx, id, model.Grant{}, "ops"))
	c := b.claim("w2")
	res, err := b.q.RecordIntent(b.ctx, c.Claim, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentResult{OpID: op, Status: model.IntentRecorded}, res)
	require.Equal(t, int64(2), b.effects(id)[0].IntentFence)
}

func TestSettleEffectRefusals(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	intent, err := b.q.RecordIntent(b.ctx, c, 0)
	require.NoError(t, err)
	dump := b.dump()
	require.ErrorIs(t, b.q.SettleEffect(b.ctx, intent.OpID, true, "ops"), ErrInvalidTransition, "task is running")
	require.ErrorIs(t, b.q.SettleEffect(b.ctx, model.OperationID(id, 5), true, "ops"), ErrNotFound)
	requireField(t, b.q.SettleEffect(b.ctx, intent.OpID, true, ""), "actor")
	require.Equal(t, dump, b.dump())
}

// fencedWrites are every worker write that names a claim.
var fencedWrites = []struct {
	name string
	call func(b *bundle, c model.Claim) error
}{
	{"heartbeat", func(b *bundle, c model.Claim) error {
		_, err := b.q.Heartbeat(b.ctx, c, testLease)
		return err
	}},
	{"step", func(b *bundle, c model.Claim) error {
		_, err := b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
		return err
	}},
	{"effect_intent", func(b *bundle, c model.Claim) error {
		_, err := b.q.RecordIntent(b.ctx, c, 0)
		return err
	}},
	{"effect_receipt", func(b *bundle, c model.Claim) error {
		return b.q.RecordReceipt(b.ctx, c, model.OperationID(c.TaskID, 0), "ok")
	}},
	{"pause", func(b *bundle, c model.Claim) error {
		_, err := b.q.Pause(b.ctx, c, 0, "manager")
		return err
	}},
	{"complete", func(b *bundle, c model.Claim) error { return b.q.Complete(b.ctx, c) }},
	{"fail", func(b *bundle, c model.Claim) error {
		_, err := b.q.Fail(b.ctx, c, model.Failure{Class: model.Transient})
		return err
	}},
	{"release", func(b *bundle, c model.Claim) error {
		_, err := b.q.Release(b.ctx, c)
		return err
	}},
	{"cancel_ack", func(b *bundle, c model.Claim) error { return b.q.AcknowledgeCancel(b.ctx, c) }},
}

// staleClaims each leave a task whose claim by w1 (which recorded an intent
// for step 0) may no longer write: a newer claim holds the task, the lease
// has expired, or the task is no longer running. Where the task is still
// active its cancellation is requested, so cancel_ack would otherwise have
// something to acknowledge.
var staleClaims = []struct {
	name    string
	prepare func(b *bundle) model.Claim
}{
	{"stale fence", func(b *bundle) model.Claim {
		id, c := startStale(b, false)
		b.advance(testLease)
		require.Equal(b.t, 1, b.reap().Expired)
		b.advance(time.Hour)
		newer := b.claim("w2")
		require.Equal(b.t, id, newer.Claim.TaskID)
		require.Equal(b.t, int64(2), newer.Claim.Fence)
		_, err := b.q.Cancel(b.ctx, id, "caller")
		require.NoError(b.t, err)
		return c
	}},
	{"lease expired", func(b *bundle) model.Claim {
		_, c := startStale(b, true)
		b.advance(testLease)
		return c
	}},
	{"released", func(b *bundle) model.Claim {
		id, c := startStale(b, false)
		_, err := b.q.Release(b.ctx, c)
		require.NoError(b.t, err)
		require.Equal(b.t, model.Queued, b.state(id))
		require.Equal(b.t, c.Fence, b.task(id).Version, "the fence is current; the state is not")
		return c
	}},
	{"paused", func(b *bundle) model.Claim {
		id, c := startStale(b, false)
		_, err := b.q.Pause(b.ctx, c, 0, "manager")
		require.NoError(b.t, err)
		require.Equal(b.t, model.WaitingForApproval, b.state(id))
		return c
	}},
	{"completed", func(b *bundle) model.Claim {
		_, c := startStale(b, true)
		require.NoError(b.t, b.q.Complete(b.ctx, c))
		return c
	}},
}

func startStale(b *bundle, cancel bool) (string, model.Claim) {
	id, c := b.running()
	_, err := b.q.RecordIntent(b.ctx, c, 0)
	require.NoError(b.t, err)
	if cancel {
		_, err = b.q.Cancel(b.ctx, id, "caller")
		require.NoError(b.t, err)
	}
	return id, c
}

// TestStaleWritesChangeNothing sends every fenced write under a claim that
// is no longer valid: each is refused with ErrStaleClaim, leaves the task
// and the effects ledger exactly as they were, and appends exactly one
// stale_write event naming the stale claim's attempt and fence.
func TestStaleWritesChangeNothing(t *testing.T) {
	for _, sc := range staleClaims {
		for _, w := range fencedWrites {
			t.Run(sc.name+"/"+w.name, func(t *testing.T) {
				b := setup(t)
				c := sc.prepare(b)
				before, effects, events := b.task(c.TaskID), b.effects(c.TaskID), b.events("")
				err := w.call(b, c)
				require.ErrorIs(t, err, ErrStaleClaim)
				require.Equal(t, before, b.task(c.TaskID))
				require.Equal(t, effects, b.effects(c.TaskID))
				after := b.events("")
				require.Len(t, after, len(events)+1)
				require.Equal(t, events, after[:len(events)])
				ev := after[len(events)]
				require.Equal(t, model.EventStaleWrite, ev.Kind)
				require.Equal(t, c.TaskID, ev.TaskID)
				require.Equal(t, c.Attempt, ev.Attempt)
				require.Equal(t, c.Fence, ev.Fence)
				require.Equal(t, c.Owner, ev.Actor)
				require.Equal(t, before.State, ev.From)
				require.Equal(t, before.State, ev.To)
				require.True(t, strings.HasPrefix(ev.Detail, w.name+": "), "detail %q", ev.Detail)
				require.Equal(t, int64(1), b.metrics().StaleWrites)
			})
		}
	}
}

func TestStaleWriteDoesNotDisturbNewerClaim(t *testing.T) {
	b := setup(t)
	old := staleClaims[0].prepare(b)
	for _, w := range fencedWrites {
		require.ErrorIs(t, w.call(b, old), ErrStaleClaim, w.name)
	}
	cs, err := b.q.List(b.ctx, model.ListFilter{State: model.Running})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	newer := model.Claim{TaskID: old.TaskID, Fence: 2, Owner: "w2", Attempt: 2, LeaseUntil: cs[0].LeaseUntil}
	hb, err := b.q.Heartbeat(b.ctx, newer, testLease)
	require.NoError(t, err)
	require.True(t, hb.CancelRequested)
	res, err := b.q.RecordIntent(b.ctx, newer, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentUncertain, res.Status, "the old claim's intent has no receipt")
	require.NoError(t, b.q.AcknowledgeCancel(b.ctx, newer))
	require.Equal(t, int64(len(fencedWrites)), b.metrics().StaleWrites)
}

func TestUnknownTaskWriteIsNotFound(t *testing.T) {
	b := setup(t)
	c := model.Claim{TaskID: "t_missing", Fence: 1, Owner: "w1", Attempt: 1}
	for _, w := range fencedWrites {
		require.ErrorIs(t, w.call(b, c), ErrNotFound, w.name)
	}
	require.Empty(t, b.events(""))
}

func TestStepSpendingWholeBudgetIsAccepted(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	_, err := b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 10})
	require.NoError(t, err)
	_, err = b.q.CompleteStep(b.ctx, model.StepWrite{Claim: c, Index: 1, Cost: 0})
	require.NoError(t, err)
	task := b.task(id)
	require.Equal(t, model.Running, task.State)
	require.Equal(t, int64(10), task.CostUsed)
}

func TestEffectIntentThenReceipt(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	op := model.OperationID(id, 0)
	res, err := b.q.RecordIntent(b.ctx, c, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentResult{OpID: op, Status: model.IntentRecorded}, res)
	require.Equal(t, []model.Effect{{OpID: op, TaskID: id, Step: 0, IntentFence: 1, IntentAt: epoch}}, b.effects(id))
	ev := b.lastEvent(id)
	require.Equal(t, model.EventEffectIntent, ev.Kind)
	require.Equal(t, op, ev.OpID)

	// The same intent again under the same claim: call the service (again,
	// with the same operation ID).
	n := len(b.events(id))
	res, err = b.q.RecordIntent(b.ctx, c, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentRecorded, res.Status)
	require.Len(t, b.events(id), n)

	b.advance(time.Second)
	require.NoError(t, b.q.RecordReceipt(b.ctx, c, op, "charged 5"))
	require.Equal(t, []model.Effect{{OpID: op, TaskID: id, Step: 0, IntentFence: 1, IntentAt: epoch,
		ReceiptFence: 1, ReceiptAt: b.now(), Result: "charged 5"}}, b.effects(id))
	ev = b.lastEvent(id)
	require.Equal(t, model.EventEffectReceipt, ev.Kind)
	require.Equal(t, op, ev.OpID)

	res, err = b.q.RecordIntent(b.ctx, c, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentResult{OpID: op, Status: model.IntentReceipted, Result: "charged 5"}, res)
}

func TestEffectReceiptedBeforeIsNeverCalledAgain(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	res, err := b.q.RecordIntent(b.ctx, c, 0)
	require.NoError(t, err)
	require.NoError(t, b.q.RecordReceipt(b.ctx, c, res.OpID, "charged 5"))
	_, err = b.q.Release(b.ctx, c)
	require.NoError(t, err)
	again := b.claim("w2")
	require.Equal(t, id, again.Claim.TaskID)
	res, err = b.q.RecordIntent(b.ctx, again.Claim, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentResult{OpID: res.OpID, Status: model.IntentReceipted, Result: "charged 5"}, res)
	require.ErrorIs(t, b.q.RecordReceipt(b.ctx, again.Claim, res.OpID, "charged 5"), ErrEffectReceipted,
		"a receipt under another claim is a second one")
	require.Len(t, b.effects(id), 1)
	require.Equal(t, int64(1), b.effects(id)[0].ReceiptFence)
}

func TestEffectIntentWithoutReceiptIsUncertain(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	res, err := b.q.RecordIntent(b.ctx, c, 0)
	require.NoError(t, err)
	_, err = b.q.Release(b.ctx, c)
	require.NoError(t, err)
	again := b.claim("w2")
	dump := b.dump()
	res2, err := b.q.RecordIntent(b.ctx, again.Claim, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentResult{OpID: res.OpID, Status: model.IntentUncertain}, res2)
	require.Equal(t, dump, b.dump(), "an uncertain intent records nothing new")
	require.Equal(t, int64(1), b.effects(id)[0].IntentFence)

	// Reconciled with the service, the new claim records the receipt.
	require.NoError(t, b.q.RecordReceipt(b.ctx, again.Claim, res.OpID, "found applied"))
	e := b.effects(id)[0]
	require.Equal(t, int64(2), e.ReceiptFence)
	require.Equal(t, "found applied", e.Result)
}

func TestEffectSecondReceipt(t *testing.T) {
	b := setup(t)
	id, c := b.running()
	res, err := b.q.RecordIntent(b.ctx, c, 0)
	require.NoError(t, err)
	require.NoError(t, b.q.RecordReceipt(b.ctx, c, res.OpID, "ok"))
	dump := b.dump()
	require.NoError(t, b.q.RecordReceipt(b.ctx, c, res.OpID, "ok"), "the same receipt again is a retry")
	require.Equal(t, dump, b.dump())
	require.ErrorIs(t, b.q.RecordReceipt(b.ctx, c, res.OpID, "different"), ErrEffectReceipted)
	require.Equal(t, dump, b.dump())
	require.Empty(t, model.CheckEvents(b.events(id)))

	require.ErrorIs(t, b.q.RecordReceipt(b.ctx, c, model.OperationID(id, 1), "ok"), ErrNotFound, "no intent")
	other, _ := b.running(func(r *model.SubmitRequest) { r.User = "bob" })
	require.ErrorIs(t, b.q.RecordReceipt(b.ctx, c, model.OperationID(other, 0), "ok"), ErrNotFound)
	_, err = b.q.RecordIntent(b.ctx, c, model.StepsMaxLimit)
	requireField(t, err, "step")
	requireField(t, b.q.RecordReceipt(b.ctx, c, res.OpID, strings.Repeat("x", model.ResultMax+1)), "result")
}

func TestClaimOrder(t *testing.T) {
	b := setup(t)
	at := func(d time.Duration, priority int) func(*model.SubmitRequest) {
		return func(r *model.SubmitRequest) { r.RunAt, r.Priority = epoch.Add(d), priority }
	}
	low := b.submit(at(-time.Minute, -5))
	mid := b.submit(at(0, 0))
	var ties []string
	for range 6 {
		ties = append(ties, b.submit(at(-time.Second, 5)))
	}
	early := b.submit(at(-2*time.Second, 5))
	top := b.submit(at(0, 9))
	// The tie group's IDs do not sort in submission order, so an order by
	// ID would fail this test.
	require.False(t, sort.StringsAreSorted(ties), "precondition: pick another seed")

	want := append(append([]string{top, early}, ties...), mid, low)
	var got []string
	for _, c := range b.claimN("w1", 3) {
		got = append(got, c.Claim.TaskID)
	}
	for len(got) < len(want) {
		got = append(got, b.claim("w1").Claim.TaskID)
	}
	require.Equal(t, want, got)
	b.noClaim()
}

func TestClaimBatchBounded(t *testing.T) {
	b := setup(t)
	limits, _, err := b.q.Limits(b.ctx)
	require.NoError(t, err)
	for range limits.ClaimBatchMax + 2 {
		b.submit()
	}
	dump := b.dump()
	_, err = b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w1", Max: limits.ClaimBatchMax + 1, Lease: testLease})
	requireField(t, err, "max")
	_, err = b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w1", Max: 0, Lease: testLease})
	requireField(t, err, "max")
	_, err = b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: model.LeaseMax + time.Millisecond})
	requireField(t, err, "lease")
	_, err = b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w 1", Max: 1, Lease: testLease})
	requireField(t, err, "worker")
	require.Equal(t, dump, b.dump())
	require.Len(t, b.claimN("w1", limits.ClaimBatchMax), limits.ClaimBatchMax)

	b.setLimits(func(l *model.Limits) { l.ClaimBatchMax = 1 })
	_, err = b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w1", Max: 2, Lease: testLease})
	requireField(t, err, "max")
	require.Len(t, b.claimN("w1", 1), 1)
}

// TestRegressionLoweredLimitBlocksWithoutEvicting: lowering a user's limit
// below its running count evicts nothing, and no task of that user is
// claimed until its running count is below the new limit. The rapid test's
// first failure was a lowered limit.
func TestRegressionLoweredLimitBlocksWithoutEvicting(t *testing.T) {
	b := setup(t)
	var ids []string
	for range 4 {
		ids = append(ids, b.submit())
	}
	cs := b.claimN("w1", 3)
	require.Len(t, cs, 3)
	runningBefore := []model.Task{b.task(ids[0]), b.task(ids[1]), b.task(ids[2])}

	require.NoError(t, b.q.SetUserLimit(b.ctx, model.UserLimit{User: "ana", RunningMax: 1, DepthMax: model.Inherit}, "ops"))
	for i, before := range runningBefore {
		require.Equal(t, before, b.task(ids[i]), "running tasks are not evicted")
	}
	for _, c := range cs {
		_, err := b.q.Heartbeat(b.ctx, c.Claim, testLease)
		require.NoError(t, err, "running claims stay valid")
	}
	b.noClaim()
	require.NoError(t, b.q.Complete(b.ctx, cs[0].Claim))
	b.noClaim() // two running, limit one
	require.NoError(t, b.q.Complete(b.ctx, cs[1].Claim))
	b.noClaim() // one running, limit one
	require.NoError(t, b.q.CheckCounters(b.ctx))
	require.NoError(t, b.q.Complete(b.ctx, cs[2].Claim))
	require.Equal(t, ids[3], b.claim("w1").Claim.TaskID)

	// The same through the default limit.
	d := setup(t)
	for range 3 {
		d.submit()
	}
	require.Len(t, d.claimN("w1", 2), 2)
	d.setLimits(func(l *model.Limits) { l.UserRunningMax = 1 })
	require.Len(t, d.events(""), 3+2+1)
	running, err := d.q.List(d.ctx, model.ListFilter{State: model.Running})
	require.NoError(t, err)
	require.Len(t, running, 2)
	d.noClaim()
	_, users, err := d.q.Limits(d.ctx)
	require.NoError(t, err)
	limits, _, err := d.q.Limits(d.ctx)
	require.NoError(t, err)
	require.Len(t, model.CheckUserLimits(running, limits, users), 1, "over the lowered limit until tasks settle")

	// Raising it again unblocks at once.
	d.setLimits(func(l *model.Limits) { l.UserRunningMax = 0 })
	require.Len(t, d.claimN("w1", 1), 1)
}

func TestAdmissionDepthCaps(t *testing.T) {
	t.Run("overall", func(t *testing.T) {
		b := setup(t)
		b.setLimits(func(l *model.Limits) { l.DepthMax = 2 })
		_, c := b.running(func(r *model.SubmitRequest) { r.User = "bob" })
		b.submit()
		dump := b.dump()
		_, err := b.q.Submit(b.ctx, b.request())
		require.ErrorIs(t, err, ErrQueueFull)
		carl := b.request()
		carl.User = "carl"
		_, err = b.q.Submit(b.ctx, carl)
		require.ErrorIs(t, err, ErrQueueFull)
		require.Equal(t, dump, b.dump(), "nothing refused is half-written")
		// A settled task frees its place.
		require.NoError(t, b.q.Complete(b.ctx, c))
		b.submit()
	})
	t.Run("per user", func(t *testing.T) {
		b := setup(t)
		require.NoError(t, b.q.SetUserLimit(b.ctx, model.UserLimit{User: "ana", RunningMax: model.Inherit, DepthMax: 1}, "ops"))
		b.submit()
		dump := b.dump()
		_, err := b.q.Submit(b.ctx, b.request())
		require.ErrorIs(t, err, ErrQueueFull)
		require.Equal(t, dump, b.dump())
		b.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	})
	t.Run("default per user", func(t *testing.T) {
		b := setup(t)
		b.setLimits(func(l *model.Limits) { l.UserDepthMax = 2 })
		id, _ := b.parked() // needs_review is not active
		b.submit()
		b.submit()
		dump := b.dump()
		_, err := b.q.Submit(b.ctx, b.request())
		require.ErrorIs(t, err, ErrQueueFull)
		require.Equal(t, dump, b.dump())
		require.NoError(t, b.q.Requeue(b.ctx, id, model.Grant{}, "ops"))
		require.Equal(t, model.Queued, b.state(id), "requeue is not admission")
		b.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	})
}

func scheduleSpec(origin time.Time, period time.Duration) model.ScheduleSpec {
	return model.ScheduleSpec{User: "ana", Payload: `{"steps":[]}`, CostBudget: 5, StepsMax: 2, Origin: origin, Period: period}
}

func (b *bundle) enqueueDue() model.EnqueueResult {
	b.t.Helper()
	res, err := b.q.EnqueueDue(b.ctx)
	require.NoError(b.t, err)
	return res
}

func (b *bundle) scheduleRuns(id string) []int64 {
	b.t.Helper()
	tasks, err := b.q.List(b.ctx, model.ListFilter{Limit: model.ListLimitMax})
	require.NoError(b.t, err)
	var runs []int64
	for _, task := range tasks {
		if task.ScheduleID == id {
			runs = append(runs, task.ScheduleRun)
			require.Equal(b.t, model.RunKey(id, task.ScheduleRun), task.Key)
		}
	}
	require.Empty(b.t, model.CheckScheduleRuns(tasks))
	return runs
}

func TestScheduleRunsAreAnchored(t *testing.T) {
	b := setup(t)
	origin, period := epoch.Add(time.Minute), 10*time.Minute
	s, err := b.q.AddSchedule(b.ctx, scheduleSpec(origin, period), "ops")
	require.NoError(t, err)
	require.Equal(t, int64(-1), s.LastRun)
	b.advance(time.Minute - time.Millisecond)
	require.Equal(t, model.EnqueueResult{}, b.enqueueDue())
	b.advance(time.Millisecond)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, b.enqueueDue())
	require.Equal(t, model.EnqueueResult{}, b.enqueueDue(), "run 0 only once")
	require.Equal(t, []int64{0}, b.scheduleRuns(s.ID))

	// Run 0 finishes late; run 1 is still due at origin + period.
	c := b.claimFor("w1", 1, time.Hour)[0]
	require.Equal(t, origin, c.Task.RunAt)
	b.advance(7 * time.Minute)
	require.NoError(t, b.q.Complete(b.ctx, c.Claim))
	b.advance(3*time.Minute - time.Millisecond)
	require.Equal(t, model.EnqueueResult{}, b.enqueueDue())
	b.advance(time.Millisecond)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, b.enqueueDue())
	c = b.claim("w1")
	require.Equal(t, origin.Add(period), c.Task.RunAt)
	require.Equal(t, int64(1), c.Task.ScheduleRun)
	require.Equal(t, s.ID, c.Task.ScheduleID)
	require.Equal(t, "schedule:"+s.ID, b.events(c.Claim.TaskID)[0].Actor)
	require.Equal(t, []int64{0, 1}, b.scheduleRuns(s.ID))

	schedules, err := b.q.Schedules(b.ctx)
	require.NoError(t, err)
	require.Len(t, schedules, 1)
	require.Equal(t, int64(1), schedules[0].LastRun)
}

func TestScheduleMissedRunsCollapse(t *testing.T) {
	b := setup(t)
	period := time.Minute
	s, err := b.q.AddSchedule(b.ctx, scheduleSpec(epoch, period), "ops")
	require.NoError(t, err)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, b.enqueueDue())
	// Down for a little over five periods: runs 1 to 4 are skipped, run 5
	// is enqueued.
	b.advance(5*period + 30*time.Second)
	require.Equal(t, model.EnqueueResult{Enqueued: 1, Collapsed: 4}, b.enqueueDue())
	require.Equal(t, []int64{0, 5}, b.scheduleRuns(s.ID))
	tasks, err := b.q.List(b.ctx, model.ListFilter{State: model.Queued})
	require.NoError(t, err)
	require.Equal(t, epoch.Add(5*period), tasks[1].RunAt)
	require.Contains(t, b.events(tasks[1].ID)[0].Actor, s.ID)

	// A schedule whose first due run is late counts every run before it.
	s2, err := b.q.AddSchedule(b.ctx, scheduleSpec(epoch, 2*period), "ops")
	require.NoError(t, err)
	require.Equal(t, model.EnqueueResult{Enqueued: 1, Collapsed: 2}, b.enqueueDue())
	require.Equal(t, []int64{2}, b.scheduleRuns(s2.ID))
}

func TestScheduleRunEnqueuedOnceAcrossSchedulers(t *testing.T) {
	a := setupFile(t)
	s, err := a.q.AddSchedule(a.ctx, scheduleSpec(epoch, time.Minute), "ops")
	require.NoError(t, err)
	other := a.reopen(2)
	a.advance(3 * time.Minute)

	// Two schedulers pass at the same moment, concurrently.
	var wg sync.WaitGroup
	results := make([]model.EnqueueResult, 2)
	errs := make([]error, 2)
	start := make(chan struct{})
	for i, q := range []*Queue{a.q, other.q} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = q.EnqueueDue(a.ctx)
		}()
	}
	close(start)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, 1, results[0].Enqueued+results[1].Enqueued)
	require.Equal(t, []int64{3}, a.scheduleRuns(s.ID))

	// A restart: the same file opened afresh enqueues nothing new.
	other.close()
	a.close()
	restarted := a.reopen(3)
	require.Equal(t, model.EnqueueResult{}, restarted.enqueueDue())
	restarted.advance(time.Minute)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, restarted.enqueueDue())
	require.Equal(t, []int64{3, 4}, restarted.scheduleRuns(s.ID))
}

// TestScheduleRunKeysAreReserved: a caller may not submit under a run's
// key. If one could, that run would conflict on every pass and the
// scheduler would stop enqueueing any schedule's runs.
func TestScheduleRunKeysAreReserved(t *testing.T) {
	b := setup(t)
	s, err := b.q.AddSchedule(b.ctx, scheduleSpec(epoch, time.Minute), "ops")
	require.NoError(t, err)
	other := scheduleSpec(epoch, time.Minute)
	other.User = "bob"
	s2, err := b.q.AddSchedule(b.ctx, other, "ops")
	require.NoError(t, err)
	dump := b.dump()
	r := b.request()
	r.Key = model.RunKey(s.ID, 0)
	_, err = b.q.Submit(b.ctx, r)
	requireField(t, err, "key")
	require.Equal(t, dump, b.dump())
	require.Equal(t, model.EnqueueResult{Enqueued: 2}, b.enqueueDue())
	require.Equal(t, []int64{0}, b.scheduleRuns(s.ID))
	require.Equal(t, []int64{0}, b.scheduleRuns(s2.ID))
}

func TestScheduleValidation(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		field  string
		change func(*model.ScheduleSpec)
	}{
		{"period", func(s *model.ScheduleSpec) { s.Period = model.PeriodMin - time.Millisecond }},
		{"period", func(s *model.ScheduleSpec) { s.Period = model.PeriodMax + time.Millisecond }},
		{"period", func(s *model.ScheduleSpec) { s.Period = time.Second + time.Microsecond }},
		{"origin", func(s *model.ScheduleSpec) { s.Origin = time.Time{} }},
		{"payload", func(s *model.ScheduleSpec) { s.Payload = "[]" }},
		{"user", func(s *model.ScheduleSpec) { s.User = "a b" }},
		{"cost_budget", func(s *model.ScheduleSpec) { s.CostBudget = 0 }},
	} {
		spec := scheduleSpec(epoch, time.Minute)
		tc.change(&spec)
		_, err := b.q.AddSchedule(b.ctx, spec, "ops")
		requireField(t, err, tc.field)
	}
	schedules, err := b.q.Schedules(b.ctx)
	require.NoError(t, err)
	require.Empty(t, schedules)
	require.Empty(t, b.events(""))

	s, err := b.q.AddSchedule(b.ctx, scheduleSpec(epoch, time.Minute), "ops")
	require.NoError(t, err)
	require.NoError(t, b.q.RemoveSchedule(b.ctx, s.ID, "ops"))
	require.ErrorIs(t, b.q.RemoveSchedule(b.ctx, s.ID, "ops"), ErrNotFound)
	b.advance(time.Hour)
	require.Equal(t, model.EnqueueResult{}, b.enqueueDue())
}

func TestScheduleRefusedRunRetriedNextPass(t *testing.T) {
	b := setup(t)
	require.NoError(t, b.q.SetUserLimit(b.ctx, model.UserLimit{User: "ana", RunningMax: model.Inherit, DepthMax: 1}, "ops"))
	blocker := b.submit()
	s, err := b.q.AddSchedule(b.ctx, scheduleSpec(epoch, time.Minute), "ops")
	require.NoError(t, err)
	dump := b.dump()
	require.Equal(t, model.EnqueueResult{Refused: 1}, b.enqueueDue())
	require.Equal(t, dump, b.dump(), "a refused run writes nothing")
	require.Empty(t, b.scheduleRuns(s.ID))
	_, err = b.q.Cancel(b.ctx, blocker, "caller")
	require.NoError(t, err)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, b.enqueueDue())
	require.Equal(t, []int64{0}, b.scheduleRuns(s.ID))
}

func TestMetricsReconcileAndDurations(t *testing.T) {
	b := setup(t)
	a := b.submit()
	b.submit()
	b.submit(func(r *model.SubmitRequest) { r.RunAt = epoch.Add(time.Minute) })
	m := b.metrics()
	require.True(t, m.Reconciles())
	require.Equal(t, int64(3), m.Submitted)
	require.Equal(t, int64(3), m.Depth[model.Queued])

	b.advance(2 * time.Second)
	require.Equal(t, 2*time.Second, b.metrics().OldestQueuedAge)
	ca := b.claim("w1")
	require.Equal(t, a, ca.Claim.TaskID)
	b.advance(3 * time.Second)
	require.NoError(t, b.q.Complete(b.ctx, ca.Claim))

	// The delayed task waits from its run_at, not from its submission.
	b.advance(time.Minute - 5*time.Second + 250*time.Millisecond)
	cs := b.claimFor("w1", 2, time.Hour)
	require.Len(t, cs, 2)
	b.advance(40 * time.Second)
	_, err := b.q.Fail(b.ctx, cs[0].Claim, model.Failure{Class: model.Permanent})
	require.NoError(t, err)

	m = b.metrics()
	require.True(t, m.Reconciles())
	require.Equal(t, map[model.State]int64{model.Queued: 0, model.Running: 1, model.WaitingForApproval: 0,
		model.NeedsReview: 0, model.Completed: 1, model.Failed: 1, model.Cancelled: 0}, m.Depth)
	require.Equal(t, int64(1), m.Completions)
	require.Equal(t, int64(1), m.Failures)

	waits := []int64{2000, 60_250, 250} // a; the second task (queued at epoch); the delayed task
	require.Equal(t, histogramOf(waits...), m.QueueWait)
	runs := []int64{3000, 40_000}
	require.Equal(t, histogramOf(runs...), m.RunTime)
	require.NoError(t, b.q.CheckCounters(b.ctx))
}

func histogramOf(ms ...int64) model.Histogram {
	h := model.NewHistogram()
	for _, v := range ms {
		h.Observe(time.Duration(v) * time.Millisecond)
	}
	return h
}
