package queuetest

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

func testClaimOrder(s *suite) {
	t := s.t
	low := s.submit(func(r *model.SubmitRequest) { r.Priority = -1 })
	first := s.submit()
	high := s.submit(func(r *model.SubmitRequest) { r.Priority = 5 })
	second := s.submit()
	earlier := s.submit(func(r *model.SubmitRequest) { r.RunAt = s.now().Add(-time.Minute) })
	s.advance(time.Second)
	// Priority first, then run_at, then submission order.
	want := []string{high, earlier, first, second, low}
	claimed := s.claimN("w1", len(want), lease)
	var got []string
	for _, c := range claimed {
		got = append(got, c.Claim.TaskID)
	}
	require.Equal(t, want, got)
	for _, c := range claimed {
		require.Equal(t, s.task(c.Claim.TaskID), c.Task, "the claim returns the task as claimed")
		require.Equal(t, model.Running, c.Task.State)
		require.EqualValues(t, 1, c.Claim.Fence)
		require.Equal(t, 1, c.Claim.Attempt)
		require.Equal(t, "w1", c.Claim.Owner)
		require.Equal(t, s.now().Add(lease), c.Claim.LeaseUntil)
		require.Equal(t, c.Claim.LeaseUntil, c.Task.LeaseUntil)
		require.EqualValues(t, 1, c.Task.Version)
		require.Equal(t, 1, c.Task.Attempt)
		require.Equal(t, s.now(), c.Task.ClaimedAt)
		require.Equal(t, s.now(), c.Task.HeartbeatAt)
		e := s.lastEvent(c.Claim.TaskID)
		require.Equal(t, model.EventClaimed, e.Kind)
		require.Equal(t, model.Queued, e.From)
		require.Equal(t, model.Running, e.To)
		require.EqualValues(t, 1, e.Fence)
		require.Equal(t, "w1", e.Actor)
	}
	s.noClaim()
}

// testClaimPastTasksNotDue: an idle poll finds a due task behind tasks
// of higher priorities that are not due yet or whose user is at its
// running limit, at every priority down to the lowest, and finds none
// while only those remain. (Both stores look for a due task priority by
// priority, so that a poll does not read the tasks not yet due.)
func testClaimPastTasksNotDue(s *suite) {
	t := s.t
	require.NoError(t, s.store.SetUserLimit(s.ctx, model.UserLimit{User: "cy", RunningMax: 1, DepthMax: model.Inherit}, "ops"))
	running := s.submit(func(r *model.SubmitRequest) { r.User = "cy"; r.Priority = 100 })
	require.Equal(t, running, s.claim("w1").Claim.TaskID)
	var later []string
	for range 3 {
		later = append(later, s.submit(func(r *model.SubmitRequest) {
			r.Priority = 5
			r.RunAt = s.now().Add(time.Hour)
		}))
	}
	blocked := s.submit(func(r *model.SubmitRequest) { r.User = "cy"; r.Priority = 2 })
	middle := s.submit()
	lowest := s.submit(func(r *model.SubmitRequest) { r.Priority = model.PriorityMin })
	require.Equal(t, middle, s.claim("w2").Claim.TaskID, "past the tasks not due and cy's, at its limit")
	require.Equal(t, lowest, s.claim("w2").Claim.TaskID, "down to the lowest priority")
	s.noClaim()
	s.advance(time.Hour)
	require.Equal(t, later, claimedIDs(s.claimN("w3", 3, lease)), "due now")
	s.noClaim()
	require.Equal(t, model.Queued, s.task(blocked).State)
}

func testClaimRunAtInclusive(s *suite) {
	t := s.t
	id := s.submit(func(r *model.SubmitRequest) { r.RunAt = s.now().Add(time.Second) })
	s.noClaim()
	s.advance(time.Second - time.Millisecond)
	s.noClaim()
	require.Zero(t, s.metrics().OldestQueuedAge, "a task not yet due is not waiting")
	s.advance(time.Millisecond)
	require.Equal(t, s.task(id).RunAt, s.now())
	require.Equal(t, id, s.claim("w1").Claim.TaskID, "a task is due when the clock reaches run_at")
}

func testClaimBatch(s *suite) {
	t := s.t
	limits := s.limits()
	for range limits.ClaimBatchMax + 1 {
		s.submit()
	}
	_, err := s.store.Claim(s.ctx, model.ClaimRequest{Worker: "w1", Max: limits.ClaimBatchMax + 1, Lease: lease})
	s.requireInvalid(err, "max")
	_, err = s.store.Claim(s.ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: model.LeaseMin - time.Millisecond})
	s.requireInvalid(err, "lease")
	_, err = s.store.Claim(s.ctx, model.ClaimRequest{Worker: "", Max: 1, Lease: lease})
	s.requireInvalid(err, "worker")
	require.Len(t, s.claimN("w1", limits.ClaimBatchMax, lease), limits.ClaimBatchMax)
	require.Len(t, s.claimN("w2", limits.ClaimBatchMax, lease), 1, "a batch takes what there is")
	require.Empty(t, s.claimN("w3", limits.ClaimBatchMax, lease))
}

// testClaimBatchIdle: the batch is checked against model.ClaimBatchLimit
// on every poll, but against the stored limit only when there is a task to
// claim, so that an idle poll need not read the limits.
func testClaimBatchIdle(s *suite) {
	t := s.t
	s.setLimits(func(l *model.Limits) { l.ClaimBatchMax = 2 })
	_, err := s.store.Claim(s.ctx, model.ClaimRequest{Worker: "w1", Max: model.ClaimBatchLimit + 1, Lease: lease})
	s.requireInvalid(err, "max")
	require.Empty(t, s.claimN("w1", 3, lease), "idle: answered without the stored limit")
	id := s.submit()
	_, err = s.store.Claim(s.ctx, model.ClaimRequest{Worker: "w1", Max: 3, Lease: lease})
	s.requireInvalid(err, "max")
	require.Equal(t, model.Queued, s.task(id).State, "a refused batch claims nothing")
	require.Len(t, s.claimN("w1", 2, lease), 1)
}

// Fencing.

func testFencingStaleFence(s *suite) {
	t := s.t
	id, old := s.running()
	to, err := s.store.Release(s.ctx, old)
	require.NoError(t, err)
	require.Equal(t, model.Queued, to)
	current := s.claim("w2").Claim
	require.Equal(t, old.Fence+1, current.Fence, "each claim increments the fence")
	_, err = s.store.Cancel(s.ctx, id, "caller") // lets cancel_ack reach its fence check
	require.NoError(t, err)
	for _, w := range s.workerWrites() {
		before := s.task(id)
		s.requireStale(id, old, w.name, w.write(old), before)
	}
	// The current claim is still valid.
	_, err = s.store.Heartbeat(s.ctx, current, lease)
	require.NoError(t, err)
	require.NoError(t, s.store.AcknowledgeCancel(s.ctx, current))
	require.EqualValues(t, len(s.workerWrites()), s.metrics().StaleWrites)
}

func testFencingExpiredLease(s *suite) {
	t := s.t
	id, c := s.running()
	s.advance(lease - time.Millisecond)
	_, err := s.store.Heartbeat(s.ctx, c, time.Second)
	require.NoError(t, err, "a lease is valid until its last millisecond")
	s.advance(time.Second)
	require.Equal(t, s.now(), s.task(id).LeaseUntil)
	for _, w := range s.workerWrites() {
		before := s.task(id)
		require.Equal(t, model.Running, before.State, "only the reaper settles an expired claim")
		s.requireStale(id, c, w.name, w.write(c), before)
	}
}

func testFencingNotRunning(s *suite) {
	t := s.t
	id, c := s.running()
	require.NoError(t, s.store.Complete(s.ctx, c))
	for _, w := range s.workerWrites() {
		before := s.task(id)
		require.Equal(t, model.Completed, before.State)
		s.requireStale(id, c, w.name, w.write(c), before)
	}
	waitingID, waitingClaim := s.waiting()
	before := s.task(waitingID)
	s.requireStale(waitingID, waitingClaim, "complete", s.store.Complete(s.ctx, waitingClaim), before)

	missing := model.Claim{TaskID: "t_missing", Fence: 1, Owner: "w1", Attempt: 1}
	require.ErrorIs(t, s.store.Complete(s.ctx, missing), model.ErrNotFound)
}

// Heartbeat.

func testHeartbeat(s *suite) {
	t := s.t
	id, c := s.running()
	s.advance(10 * time.Second)
	hb, err := s.store.Heartbeat(s.ctx, c, time.Minute)
	require.NoError(t, err)
	require.Equal(t, model.HeartbeatResult{LeaseUntil: s.now().Add(time.Minute)}, hb)
	task := s.task(id)
	require.Equal(t, hb.LeaseUntil, task.LeaseUntil)
	require.Equal(t, s.now(), task.HeartbeatAt)
	require.Equal(t, c.Fence, task.Version, "a heartbeat is not a new claim")

	s.advance(lease) // past the original lease, within the extended one
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
	require.NoError(t, err)

	_, err = s.store.Heartbeat(s.ctx, c, model.LeaseMax+time.Millisecond)
	s.requireInvalid(err, "lease")

	cancelled, err := s.store.Cancel(s.ctx, id, "caller")
	require.NoError(t, err)
	require.Equal(t, model.Running, cancelled.State)
	require.True(t, cancelled.CancelRequested)
	hb, err = s.store.Heartbeat(s.ctx, c, time.Minute)
	require.NoError(t, err)
	require.True(t, hb.CancelRequested, "a heartbeat reports requested cancellation")
	step, err := s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 1, Cost: 1})
	require.NoError(t, err)
	require.True(t, step.CancelRequested, "so does a step reply")
}
