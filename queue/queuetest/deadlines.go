package queuetest

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// testDeadlineAtSubmit: a deadline passes only once the clock is beyond
// it, at submit as at claim: a task whose deadline is now is accepted and
// claimable; one whose deadline is a millisecond ago is refused.
func testDeadlineAtSubmit(s *suite) {
	t := s.t
	_, err := s.store.Submit(s.ctx, s.request(func(r *model.SubmitRequest) { r.Deadline = s.now().Add(-time.Millisecond) }))
	s.requireInvalid(err, "deadline")
	id := s.submit(func(r *model.SubmitRequest) { r.Deadline = s.now() })
	require.Equal(t, s.now(), s.task(id).Deadline)
	res, err := s.store.Reap(s.ctx)
	require.NoError(t, err)
	require.Equal(t, model.ReapResult{}, res, "not past its deadline yet")
	require.Equal(t, id, s.claim("w1").Claim.TaskID)
}

func testDeadlineQueued(s *suite) {
	t := s.t
	id := s.submit(func(r *model.SubmitRequest) { r.Deadline = s.now().Add(10 * time.Second) })
	late := s.submit(func(r *model.SubmitRequest) {
		r.RunAt, r.Deadline = s.now().Add(time.Minute), s.now().Add(time.Minute+time.Second)
	})
	s.advance(10*time.Second + time.Millisecond)
	s.noClaim()
	res, err := s.store.Reap(s.ctx)
	require.NoError(t, err)
	require.Equal(t, model.ReapResult{Deadlines: 1}, res)
	task := s.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.DeadlineExceeded, task.Reason)
	e := s.lastEvent(id)
	require.Equal(t, model.EventDeadline, e.Kind)
	require.Equal(t, model.ReaperActor, e.Actor)
	require.Equal(t, model.Queued, s.task(late).State)

	// A task is claimable up to and including its deadline.
	s.advance(time.Minute + time.Second - 10*time.Second - time.Millisecond)
	require.Equal(t, s.task(late).Deadline, s.now())
	require.Equal(t, late, s.claim("w1").Claim.TaskID)
}

func testDeadlineRunning(s *suite) {
	t := s.t
	id, c := s.running(func(r *model.SubmitRequest) { r.Deadline = s.now().Add(10 * time.Second) })
	s.advance(10 * time.Second)
	_, err := s.store.Heartbeat(s.ctx, c, lease)
	require.NoError(t, err, "writes are accepted up to the deadline")
	s.advance(time.Millisecond)
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
	require.ErrorIs(t, err, model.ErrDeadlineExceeded)
	task := s.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.DeadlineExceeded, task.Reason)
	require.Zero(t, task.StepsUsed)
	require.Equal(t, model.EventDeadline, s.lastEvent(id).Kind)

	// Every write of the claim past the deadline fails the task, writing
	// nothing of its own, and the claim has ended with it.
	for _, w := range []struct {
		name  string
		write func(c model.Claim) error
	}{
		{"heartbeat", func(c model.Claim) error { _, err := s.store.Heartbeat(s.ctx, c, lease); return err }},
		{"step", func(c model.Claim) error {
			_, err := s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
			return err
		}},
		{"effect_intent", func(c model.Claim) error { _, err := s.store.RecordIntent(s.ctx, c, 0); return err }},
		{"pause", func(c model.Claim) error { _, err := s.store.Pause(s.ctx, c, 0, "manager"); return err }},
	} {
		id, c := s.running(func(r *model.SubmitRequest) { r.Deadline = s.now().Add(10 * time.Second) })
		s.advance(10*time.Second + time.Millisecond)
		require.ErrorIs(t, w.write(c), model.ErrDeadlineExceeded, w.name)
		task := s.task(id)
		require.Equal(t, model.Failed, task.State, w.name)
		require.Equal(t, model.DeadlineExceeded, task.Reason)
		require.Zero(t, task.CostUsed)
		require.Zero(t, task.StepsUsed)
		require.Empty(t, s.effects(id))
		e := s.lastEvent(id)
		require.Equal(t, model.EventDeadline, e.Kind)
		require.Equal(t, "w1", e.Actor)
		require.ErrorIs(t, w.write(c), model.ErrStaleClaim, "%s: the claim has ended", w.name)
	}

	// A lease that runs out after the deadline has passed fails the task
	// for its deadline, charging no attempt and counting no expiry.
	late, _ := s.running(func(r *model.SubmitRequest) { r.Deadline = s.now().Add(10 * time.Second) })
	s.advance(time.Hour)
	res, err := s.store.Reap(s.ctx)
	require.NoError(t, err)
	require.Equal(t, model.ReapResult{Deadlines: 1}, res)
	task = s.task(late)
	require.Equal(t, model.DeadlineExceeded, task.Reason)
	require.Zero(t, task.AttemptsCharged)
	require.Zero(t, s.metrics().LeaseExpiries)
}

func testDeadlineWaiting(s *suite) {
	t := s.t
	id, _ := s.waiting(func(r *model.SubmitRequest) { r.Deadline = s.now().Add(time.Minute) })
	s.advance(time.Minute + time.Millisecond)
	res, err := s.store.Reap(s.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Deadlines)
	require.Equal(t, model.Failed, s.task(id).State)
	require.Equal(t, model.DeadlineExceeded, s.task(id).Reason)
}
