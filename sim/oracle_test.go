package sim

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
)

// oracleWorld returns a portfolio world for seed 1 with the oracle on.
func oracleWorld(t *testing.T) *World {
	t.Helper()
	w, err := newWorld(scenarios.Portfolio(), 1, DefaultMix(worker.Plain), worldOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, w.close()) })
	require.Nil(t, w.checker.check())
	return w
}

func oracleRequest(key string) model.SubmitRequest {
	return model.SubmitRequest{User: "ora", Key: key, Payload: `{"steps":[{"cost":1}]}`, CostBudget: 5, StepsMax: 5}
}

// A reference that disagrees with the queue is reported at the next
// operation: here the reference alone cancelled the task, so the claim
// returns a task from the queue and none from the reference.
func TestLockstepReportsADivergence(t *testing.T) {
	w := oracleWorld(t)
	res, err := w.q.Submit(w.ctx, oracleRequest("k1"))
	require.NoError(t, err)
	require.Nil(t, w.checker.check())
	_, err = w.q.ref.Cancel(w.ctx, res.TaskID, "someone")
	require.NoError(t, err)
	_, err = w.q.Claim(w.ctx, model.ClaimRequest{Worker: "w0", Max: 1, Lease: time.Second})
	require.NoError(t, err)
	v := w.checker.check()
	require.NotNil(t, v)
	require.Equal(t, InvOracleReturns, v.Invariant, v.Error())
	require.Contains(t, v.Detail, "1 tasks from the queue, 0 from the reference")
}

// A commit that applies but reports failure is matched with the applied
// successor, one that rolls back with the unapplied one; the reference
// follows the real queue either way, and nothing is reported.
func TestLockstepAcceptsBothSuccessorsOfAnUnknownCommit(t *testing.T) {
	w := oracleWorld(t)
	w.storage.Arm(faults.AmbiguousCommit)
	_, err := w.q.Submit(w.ctx, oracleRequest("applied"))
	require.ErrorIs(t, err, faults.ErrInjected)
	w.storage.Arm(faults.FailCommit)
	_, err = w.q.Submit(w.ctx, oracleRequest("rolled-back"))
	require.ErrorIs(t, err, faults.ErrInjected)
	require.Nil(t, w.checker.check())
	tasks, err := w.q.ref.List(w.ctx, model.ListFilter{User: "ora"})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Equal(t, "applied", tasks[0].Key)
	// The retry of each is a replay and a fresh submit, on both sides.
	for key, replay := range map[string]bool{"applied": true, "rolled-back": false} {
		res, err := w.q.Submit(w.ctx, oracleRequest(key))
		require.NoError(t, err)
		require.Equal(t, replay, res.Replay, key)
	}
	require.Nil(t, w.checker.check())
}

// A fault before COMMIT leaves the operation unapplied: the reference is
// not advanced, and a real queue that applied it anyway would disagree.
func TestLockstepFaultBeforeCommitIsNotApplied(t *testing.T) {
	w := oracleWorld(t)
	w.storage.Arm(faults.FailStatement)
	_, err := w.q.Submit(w.ctx, oracleRequest("k1"))
	require.ErrorIs(t, err, faults.ErrInjected)
	require.Nil(t, w.checker.check())
	_, err = w.q.ref.Task(w.ctx, model.NewDerivedIDsAt(subSeed(1, streamIDs), w.clock.Now).KeyedID(model.TaskIDPrefix, model.TaskKey("ora", "k1")))
	require.ErrorIs(t, err, model.ErrNotFound)
}

// Switching a check off keeps its violations from being reported.
func TestOnlyKeepsTheNamedChecks(t *testing.T) {
	w, err := newWorld(scenarios.Portfolio(), 1, DefaultMix(worker.Plain), worldOptions{only: []string{InvOracleEvents}})
	require.NoError(t, err)
	defer w.close()
	res, err := w.q.Submit(w.ctx, oracleRequest("k1"))
	require.NoError(t, err)
	_, err = w.q.ref.Cancel(w.ctx, res.TaskID, "someone")
	require.NoError(t, err)
	_, err = w.q.Claim(w.ctx, model.ClaimRequest{Worker: "w0", Max: 1, Lease: time.Second})
	require.NoError(t, err)
	v := w.checker.check()
	require.NotNil(t, v, "the claim's events differ too")
	require.Equal(t, InvOracleEvents, v.Invariant, v.Error())
}

// Limit changes are in force at once on both sides: raising, lowering and
// removing a user's running limit and the default one, and the depth caps,
// with claims and submits just under and over them.
func TestLockstepFollowsLimitChanges(t *testing.T) {
	w := oracleWorld(t)
	claim := func(max int) int {
		t.Helper()
		got, err := w.q.Claim(w.ctx, model.ClaimRequest{Worker: "w9", Max: max, Lease: time.Second})
		require.NoError(t, err)
		require.Nil(t, w.checker.check())
		return len(got)
	}
	for i := range 6 {
		_, err := w.q.Submit(w.ctx, oracleRequest(fmt.Sprintf("k%d", i)))
		require.NoError(t, err)
	}
	require.NoError(t, w.q.SetUserLimit(w.ctx, model.UserLimit{User: "ora", RunningMax: 1, DepthMax: model.Inherit}, operatorActor))
	require.Equal(t, 1, claim(1))
	require.Equal(t, 0, claim(1))
	require.NoError(t, w.q.SetUserLimit(w.ctx, model.UserLimit{User: "ora", RunningMax: 3, DepthMax: model.Inherit}, operatorActor))
	require.Equal(t, 2, claim(4))
	require.NoError(t, w.q.SetUserLimit(w.ctx, model.UserLimit{User: "ora", RunningMax: model.Inherit, DepthMax: model.Inherit}, operatorActor))
	limits, _, err := w.q.Limits(w.ctx)
	require.NoError(t, err)
	limits.UserRunningMax, limits.ClaimBatchMax = 4, 2
	require.NoError(t, w.q.SetLimits(w.ctx, limits, operatorActor))
	_, err = w.q.Claim(w.ctx, model.ClaimRequest{Worker: "w9", Max: 3, Lease: time.Second})
	require.ErrorIs(t, err, model.ErrInvalidInput)
	require.Equal(t, 1, claim(2))
	limits.UserRunningMax, limits.UserDepthMax = 0, 6
	require.NoError(t, w.q.SetLimits(w.ctx, limits, operatorActor))
	_, err = w.q.Submit(w.ctx, oracleRequest("over"))
	require.ErrorIs(t, err, model.ErrQueueFull)
	require.Nil(t, w.checker.check())
	require.Equal(t, 2, claim(2))
	// A cap lowered below a user's active count refuses that user's
	// submits; another user's accepted submit is no violation.
	limits.UserDepthMax = 2
	require.NoError(t, w.q.SetLimits(w.ctx, limits, operatorActor))
	other := oracleRequest("other")
	other.User = "otto"
	_, err = w.q.Submit(w.ctx, other)
	require.NoError(t, err)
	require.Nil(t, w.checker.check())
	w.q.final()
	require.Nil(t, w.checker.check())
}

// The boundaries agree on both sides: a claim at exactly run_at and at
// exactly the deadline, a heartbeat and a reap at exactly lease_until,
// a careless client's writes past the budget and the step limit, a
// release, a dead letter, requeue grants at and over the maximum, and an
// operator's resolve.
func TestLockstepAgreesAtTheBoundaries(t *testing.T) {
	w := oracleWorld(t)
	ok := func(err error) {
		t.Helper()
		require.NoError(t, err)
		require.Nil(t, w.checker.check())
	}
	refused := func(err, class error) {
		t.Helper()
		require.ErrorIs(t, err, class)
		require.Nil(t, w.checker.check())
	}
	lease := time.Second
	claimOne := func() model.Claim {
		t.Helper()
		got, err := w.q.Claim(w.ctx, model.ClaimRequest{Worker: "w9", Max: 1, Lease: lease})
		ok(err)
		require.Len(t, got, 1)
		return got[0].Claim
	}
	start := w.clock.Now()
	req := oracleRequest("later")
	req.RunAt, req.Deadline = start.Add(time.Second), start.Add(2*time.Second)
	_, err := w.q.Submit(w.ctx, req)
	ok(err)
	w.clock.Advance(time.Second - time.Millisecond)
	got, err := w.q.Claim(w.ctx, model.ClaimRequest{Worker: "w9", Max: 1, Lease: lease})
	ok(err)
	require.Empty(t, got, "1 ms before run_at")
	w.clock.Advance(time.Millisecond)
	c := claimOne() // at exactly run_at
	w.clock.Advance(lease)
	_, err = w.q.Heartbeat(w.ctx, c, lease)
	refused(err, model.ErrStaleClaim) // at exactly lease_until
	res, err := w.q.Reap(w.ctx)
	ok(err)
	require.Equal(t, 1, res.Expired)
	// Requeued with backoff; claimable again at its deadline exactly.
	w.clock.Advance(start.Add(2 * time.Second).Sub(w.clock.Now()))
	got, err = w.q.Claim(w.ctx, model.ClaimRequest{Worker: "w9", Max: 1, Lease: lease})
	ok(err)
	if len(got) == 1 {
		w.clock.Advance(time.Millisecond)
		_, err = w.q.CompleteStep(w.ctx, model.StepWrite{Claim: got[0].Claim, Index: 0, Cost: 1})
		refused(err, model.ErrDeadlineExceeded)
	}
	w.clock.Advance(time.Millisecond)
	_, err = w.q.Reap(w.ctx)
	ok(err)

	// A careless client: steps past the budget and the step limit.
	small := oracleRequest("small")
	small.CostBudget, small.StepsMax = 3, 2
	_, err = w.q.Submit(w.ctx, small)
	ok(err)
	c = claimOne()
	_, err = w.q.CompleteStep(w.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 2})
	ok(err)
	_, err = w.q.CompleteStep(w.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 2})
	ok(err) // a replay
	_, err = w.q.CompleteStep(w.ctx, model.StepWrite{Claim: c, Index: 2, Cost: 1})
	refused(err, model.ErrStepConflict)
	_, err = w.q.CompleteStep(w.ctx, model.StepWrite{Claim: c, Index: 1, Cost: 2})
	refused(err, model.ErrBudgetExhausted)

	// A release keeps the attempts; transient failures dead-letter it.
	_, err = w.q.Submit(w.ctx, oracleRequest("retried"))
	ok(err)
	c = claimOne()
	_, err = w.q.Release(w.ctx, c)
	ok(err)
	id := c.TaskID
	for to := model.Queued; to == model.Queued; {
		w.clock.Advance(10 * time.Minute)
		c = claimOne()
		require.Equal(t, id, c.TaskID)
		to, err = w.q.Fail(w.ctx, c, model.Failure{Class: model.Transient, Message: "flaky"})
		ok(err)
	}
	task, err := w.q.Task(w.ctx, id)
	require.NoError(t, err)
	require.Equal(t, model.NeedsReview, task.State)
	require.Equal(t, model.AttemptsExhausted, task.Reason)
	refused(w.q.Requeue(w.ctx, id, model.Grant{Cost: model.DefaultLimits.GrantCostMax + 1}, operatorActor), model.ErrInvalidInput)
	ok(w.q.Requeue(w.ctx, id, model.Grant{Cost: model.DefaultLimits.GrantCostMax, Steps: 1}, operatorActor))
	refused(w.q.Resolve(w.ctx, id, model.Completed, operatorActor), model.ErrInvalidTransition)
	c = claimOne()
	_, err = w.q.Fail(w.ctx, c, model.Failure{Class: model.Uncertain, OpID: model.OperationID(id, 0), Message: "unknown"})
	ok(err)
	ok(w.q.Resolve(w.ctx, id, model.Cancelled, operatorActor))
	_, err = w.q.Cancel(w.ctx, id, "ora")
	ok(err)
	w.q.final()
	require.Nil(t, w.checker.check())
}

// After an unknown commit, a real state that matches neither successor is
// a violation naming both.
func TestLockstepRefusesAThirdSuccessor(t *testing.T) {
	w := oracleWorld(t)
	res, err := w.q.Submit(w.ctx, oracleRequest("k1"))
	require.NoError(t, err)
	_, err = w.q.ref.Cancel(w.ctx, res.TaskID, "someone") // the reference alone moves on
	require.NoError(t, err)
	w.storage.Arm(faults.AmbiguousCommit)
	_, err = w.q.Cancel(w.ctx, res.TaskID, "ora")
	require.ErrorIs(t, err, faults.ErrInjected)
	v := w.checker.check()
	require.NotNil(t, v)
	require.Equal(t, InvOracleEvents, v.Invariant, v.Error())
	require.Contains(t, v.Detail, "matches neither successor of an unknown commit")
}
