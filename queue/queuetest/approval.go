package queuetest

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

func testApproval(s *suite) {
	t := s.t
	id, c := s.running()
	_, err := s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1, Checkpoint: `{"done":1}`})
	require.NoError(t, err)
	_, err = s.store.Pause(s.ctx, c, 2, "manager")
	require.ErrorIs(t, err, model.ErrStepConflict, "the gate must be the next step")
	_, err = s.store.Pause(s.ctx, c, 1, "bad gate!")
	s.requireInvalid(err, "gate")
	s.advance(time.Second)
	to, err := s.store.Pause(s.ctx, c, 1, "manager")
	require.NoError(t, err)
	require.Equal(t, model.WaitingForApproval, to)
	task := s.task(id)
	require.Equal(t, model.WaitingForApproval, task.State)
	require.Equal(t, "manager", task.ApprovalGate)
	require.Equal(t, c.Fence, task.ApprovalVersion)
	require.Equal(t, 2, task.StepsUsed, "the gate counts as a step")
	require.Empty(t, task.Owner, "the lease is released")
	require.True(t, task.LeaseUntil.IsZero())
	e := s.lastEvent(id)
	require.Equal(t, model.EventPaused, e.Kind)
	require.Equal(t, model.DetailPause("manager", c.Fence), e.Detail)
	s.noClaim()

	require.ErrorIs(t, s.store.Approve(s.ctx, id, c.Fence+1, "boss"), model.ErrVersionMismatch)
	require.Equal(t, task, s.task(id))
	m := s.metrics()
	require.EqualValues(t, 1, m.RunTime.Count, "the run up to the gate is timed")
	require.EqualValues(t, 1000, m.RunTime.SumMs)
	res, err := s.store.Reap(s.ctx)
	require.NoError(t, err)
	require.Equal(t, model.ReapResult{}, res, "a waiting task is no reaper's")
	s.advance(time.Minute)
	require.NoError(t, s.store.Approve(s.ctx, id, c.Fence, "boss"))
	task = s.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, "boss", task.ApprovedBy)
	require.Equal(t, s.now(), task.RunAt)
	require.Equal(t, s.now(), task.QueuedAt)
	approved := s.lastEvent(id)
	require.Equal(t, model.EventApproved, approved.Kind)
	require.Equal(t, "boss", approved.Actor)
	require.ErrorIs(t, s.store.Approve(s.ctx, id, c.Fence, "boss"), model.ErrInvalidTransition)

	resumed := s.claim("w2")
	require.Equal(t, c.Fence+1, resumed.Claim.Fence)
	require.Equal(t, 2, resumed.Task.StepsUsed, "the task resumes after its gate")
	require.Equal(t, `{"done":1}`, resumed.Task.Checkpoint)
	require.Zero(t, resumed.Task.AttemptsCharged, "a pause is not charged")
}

func testApprovalOutdatedVersion(s *suite) {
	t := s.t
	id, first := s.waiting()
	require.NoError(t, s.store.Approve(s.ctx, id, first.Fence, "boss"))
	second := s.claim("w2").Claim
	_, err := s.store.Pause(s.ctx, second, 1, "manager")
	require.NoError(t, err)
	before := s.task(id)
	require.Equal(t, second.Fence, before.ApprovalVersion)
	events := s.events(id)
	require.ErrorIs(t, s.store.Approve(s.ctx, id, first.Fence, "boss"), model.ErrVersionMismatch,
		"an approval of the earlier pause does not approve this one")
	require.ErrorIs(t, s.store.Approve(s.ctx, id, second.Fence+1, "boss"), model.ErrVersionMismatch,
		"nor does one of a pause yet to come")
	require.Equal(t, before, s.task(id))
	require.Equal(t, events, s.events(id), "a refused approval records nothing")
	require.NoError(t, s.store.Approve(s.ctx, id, second.Fence, "boss"))
	require.ErrorIs(t, s.store.Approve(s.ctx, id, second.Fence, "boss"), model.ErrInvalidTransition, "no longer waiting")
}

func testReject(s *suite) {
	t := s.t
	id, c := s.waiting()
	require.NoError(t, s.store.Reject(s.ctx, id, c.Fence, "boss"))
	task := s.task(id)
	require.Equal(t, model.Cancelled, task.State)
	require.Equal(t, model.ApprovalRejected, task.Reason)
	require.Equal(t, "boss", task.CancelledBy)
	e := s.lastEvent(id)
	require.Equal(t, model.EventRejected, e.Kind)
	require.Equal(t, model.ApprovalRejected, e.Reason)
	require.Equal(t, model.DetailPause("manager", c.Fence), e.Detail)
	require.ErrorIs(t, s.store.Reject(s.ctx, id, c.Fence, "boss"), model.ErrInvalidTransition)
	require.ErrorIs(t, s.store.Approve(s.ctx, id, c.Fence, "boss"), model.ErrInvalidTransition)
	require.ErrorIs(t, s.store.Reject(s.ctx, "t_missing", 1, "boss"), model.ErrNotFound)
	other, oc := s.waiting()
	s.requireInvalid(s.store.Reject(s.ctx, other, oc.Fence, ""), "actor")
	require.Equal(t, model.WaitingForApproval, s.task(other).State, "a refused rejection changes nothing")
}

// testRejectOutdatedVersion: a rejection decided on one pause cannot cancel
// the task at a later pause, nor one yet to come; a refused rejection
// records nothing, and the version of the pause shown still rejects.
func testRejectOutdatedVersion(s *suite) {
	t := s.t
	id, first := s.waiting()
	require.NoError(t, s.store.Approve(s.ctx, id, first.Fence, "boss"))
	second := s.claim("w2").Claim
	_, err := s.store.Pause(s.ctx, second, 1, "manager")
	require.NoError(t, err)
	before := s.task(id)
	require.Equal(t, second.Fence, before.ApprovalVersion)
	events := s.events(id)
	require.ErrorIs(t, s.store.Reject(s.ctx, id, first.Fence, "boss"), model.ErrVersionMismatch,
		"a rejection of the earlier pause does not reject this one")
	require.ErrorIs(t, s.store.Reject(s.ctx, id, second.Fence+1, "boss"), model.ErrVersionMismatch,
		"nor does one of a pause yet to come")
	require.Equal(t, before, s.task(id))
	require.Equal(t, events, s.events(id), "a refused rejection records nothing")
	require.NoError(t, s.store.Reject(s.ctx, id, second.Fence, "boss"))
	task := s.task(id)
	require.Equal(t, model.Cancelled, task.State)
	require.Equal(t, model.ApprovalRejected, task.Reason)
	require.Equal(t, model.DetailPause("manager", second.Fence), s.lastEvent(id).Detail)
	require.ErrorIs(t, s.store.Reject(s.ctx, id, second.Fence, "boss"), model.ErrInvalidTransition, "no longer waiting")
}

// Cancellation.

func testCancelQueued(s *suite) {
	t := s.t
	id := s.submit()
	task, err := s.store.Cancel(s.ctx, id, "caller")
	require.NoError(t, err)
	require.Equal(t, model.Cancelled, task.State)
	require.Equal(t, model.CancelledByCaller, task.Reason)
	require.Equal(t, "caller", task.CancelledBy)
	require.Equal(t, task, s.task(id))
	require.Equal(t, model.EventCancelled, s.lastEvent(id).Kind)
	s.noClaim()
	// Cancelling again changes nothing.
	events := s.events(id)
	again, err := s.store.Cancel(s.ctx, id, "someone")
	require.NoError(t, err)
	require.Equal(t, task, again)
	require.Equal(t, events, s.events(id))
	_, err = s.store.Cancel(s.ctx, "t_missing", "caller")
	require.ErrorIs(t, err, model.ErrNotFound)
}

func testCancelRunning(s *suite) {
	t := s.t
	id, c := s.running()
	hb, err := s.store.Heartbeat(s.ctx, c, lease)
	require.NoError(t, err)
	require.False(t, hb.CancelRequested)
	require.ErrorIs(t, s.store.AcknowledgeCancel(s.ctx, c), model.ErrInvalidTransition,
		"nothing to acknowledge before a cancel")
	task, err := s.store.Cancel(s.ctx, id, "caller")
	require.NoError(t, err)
	require.Equal(t, model.Running, task.State, "cancelling a running task only requests it")
	require.True(t, task.CancelRequested)
	require.Equal(t, "caller", task.CancelledBy)
	requested := s.lastEvent(id)
	require.Equal(t, model.EventCancelRequested, requested.Kind)
	require.Equal(t, c.Fence, requested.Fence)
	events := s.events(id)
	_, err = s.store.Cancel(s.ctx, id, "caller")
	require.NoError(t, err)
	require.Equal(t, events, s.events(id), "a second request records nothing")

	hb, err = s.store.Heartbeat(s.ctx, c, lease)
	require.NoError(t, err)
	require.True(t, hb.CancelRequested, "the heartbeat reports the request")
	require.NoError(t, s.store.AcknowledgeCancel(s.ctx, c))
	task = s.task(id)
	require.Equal(t, model.Cancelled, task.State)
	require.Equal(t, model.CancelledByCaller, task.Reason)
	require.Equal(t, "caller", task.CancelledBy)
	require.Empty(t, task.Owner, "the claim ends")
	require.True(t, task.LeaseUntil.IsZero())

	// A worker that releases a task whose cancellation was requested
	// cancels it.
	other, oc := s.running()
	_, err = s.store.Cancel(s.ctx, other, "caller")
	require.NoError(t, err)
	to, err := s.store.Release(s.ctx, oc)
	require.NoError(t, err)
	require.Equal(t, model.Cancelled, to)
	// So does one that reaches its gate.
	gated, gc := s.running()
	_, err = s.store.Cancel(s.ctx, gated, "caller")
	require.NoError(t, err)
	to, err = s.store.Pause(s.ctx, gc, 0, "manager")
	require.NoError(t, err)
	require.Equal(t, model.Cancelled, to)
	// And a transient failure: no retry, and no attempt charged.
	failing, fc := s.running()
	_, err = s.store.Cancel(s.ctx, failing, "caller")
	require.NoError(t, err)
	to, err = s.store.Fail(s.ctx, fc, model.Failure{Class: model.Transient})
	require.NoError(t, err)
	require.Equal(t, model.Cancelled, to)
	task = s.task(failing)
	require.Equal(t, model.CancelledByCaller, task.Reason)
	require.Zero(t, task.AttemptsCharged)
}

func testCancelWaiting(s *suite) {
	t := s.t
	id, c := s.waiting()
	task, err := s.store.Cancel(s.ctx, id, "caller")
	require.NoError(t, err)
	require.Equal(t, model.Cancelled, task.State)
	require.Equal(t, model.CancelledByCaller, task.Reason)
	require.Equal(t, "caller", task.CancelledBy)
	require.ErrorIs(t, s.store.Approve(s.ctx, id, c.Fence, "boss"), model.ErrInvalidTransition,
		"a cancelled task's gate cannot be approved")
}

func testCancelRefused(s *suite) {
	t := s.t
	done, c := s.running()
	require.NoError(t, s.store.Complete(s.ctx, c))
	parked, _ := s.parked()
	for _, id := range []string{done, parked} {
		before := s.task(id)
		_, err := s.store.Cancel(s.ctx, id, "caller")
		require.ErrorIs(t, err, model.ErrInvalidTransition, "cancel a %s task", before.State)
		require.Equal(t, before, s.task(id))
	}
	_, err := s.store.Cancel(s.ctx, done, "")
	s.requireInvalid(err, "actor")
}
