package queuetest

import (
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

func testStepCompareAndSet(s *suite) {
	t := s.t
	id, c := s.running(func(r *model.SubmitRequest) { r.CostBudget, r.StepsMax = 10, 5 })
	res, err := s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 4, Checkpoint: `{"at":1}`})
	require.NoError(t, err)
	require.False(t, res.Replayed)
	task := s.task(id)
	require.Equal(t, 1, task.StepsUsed)
	require.EqualValues(t, 4, task.CostUsed)
	require.Equal(t, `{"at":1}`, task.Checkpoint)

	// A retry of the step just completed (its commit's reply was lost) is
	// recognised and not charged again.
	events := s.events(id)
	res, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 4, Checkpoint: `{"at":1}`})
	require.NoError(t, err)
	require.True(t, res.Replayed)
	require.Equal(t, task, s.task(id))
	require.Equal(t, events, s.events(id), "a replay records nothing")
	require.Empty(t, model.CheckEvents(s.events(id)))

	// Skipping ahead is a conflict and changes nothing.
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 2, Cost: 1})
	require.ErrorIs(t, err, model.ErrStepConflict)
	require.Equal(t, task, s.task(id))
	require.Equal(t, events, s.events(id), "a conflict records nothing")
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 1, Cost: -1})
	s.requireInvalid(err, "cost")
	require.Equal(t, task, s.task(id))

	// Spending the budget exactly is allowed.
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 1, Cost: 6})
	require.NoError(t, err)
	task = s.task(id)
	require.Equal(t, 2, task.StepsUsed)
	require.EqualValues(t, 10, task.CostUsed)

	steps := 0
	for _, e := range s.events(id) {
		if e.Kind == model.EventStep {
			steps++
			require.Equal(t, c.Fence, e.Fence)
		}
	}
	require.Equal(t, 2, steps, "each step is recorded once")
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: -1})
	s.requireInvalid(err, "index")
}

func testStepBudgetExhausted(s *suite) {
	t := s.t
	id, c := s.running(func(r *model.SubmitRequest) { r.CostBudget = 5 })
	_, err := s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 3})
	require.NoError(t, err)
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 1, Cost: 3})
	require.ErrorIs(t, err, model.ErrBudgetExhausted)
	task := s.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.BudgetExhausted, task.Reason)
	require.EqualValues(t, 3, task.CostUsed, "the refused step is not charged")
	require.Equal(t, 1, task.StepsUsed)
	require.Empty(t, task.Owner)
	e := s.lastEvent(id)
	require.Equal(t, model.EventFailed, e.Kind)
	require.Equal(t, model.BudgetExhausted, e.Reason)
	require.Equal(t, model.DetailStep(1, 3), e.Detail)
	m := s.metrics()
	require.EqualValues(t, 1, m.BudgetExhausted)
	require.EqualValues(t, 1, m.Failures)
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 1, Cost: 1})
	require.ErrorIs(t, err, model.ErrStaleClaim, "the claim ended with the task")
}

func testStepLimitExhausted(s *suite) {
	t := s.t
	id, c := s.running(func(r *model.SubmitRequest) { r.StepsMax = 1 })
	_, err := s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
	require.NoError(t, err)
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 1, Cost: 1})
	require.ErrorIs(t, err, model.ErrStepsExhausted)
	task := s.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.StepsExhausted, task.Reason)
	require.Equal(t, 1, task.StepsUsed)
	require.EqualValues(t, 1, task.CostUsed, "the refused step is not charged")

	// A gate counts as a step: one past the limit fails the task too.
	gated, gc := s.running(func(r *model.SubmitRequest) { r.StepsMax = 1 })
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: gc, Index: 0, Cost: 1})
	require.NoError(t, err)
	_, err = s.store.Pause(s.ctx, gc, 1, "manager")
	require.ErrorIs(t, err, model.ErrStepsExhausted)
	task = s.task(gated)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.StepsExhausted, task.Reason)
}
