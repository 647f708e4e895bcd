package queuetest

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

func testRequeue(s *suite) {
	t := s.t
	limits := s.limits()
	id, _ := s.parked(func(r *model.SubmitRequest) { r.CostBudget, r.StepsMax = 10, 5 })
	before, events := s.task(id), s.events("")
	s.requireInvalid(s.store.Requeue(s.ctx, id, model.Grant{Cost: limits.GrantCostMax + 1}, "ops"), "grant_cost")
	s.requireInvalid(s.store.Requeue(s.ctx, id, model.Grant{Steps: limits.GrantStepsMax + 1}, "ops"), "grant_steps")
	s.requireInvalid(s.store.Requeue(s.ctx, id, model.Grant{Cost: -1}, "ops"), "grant_cost")
	s.requireInvalid(s.store.Requeue(s.ctx, id, model.Grant{Steps: -1}, "ops"), "grant_steps")
	require.Equal(t, before, s.task(id), "a refused grant changes nothing")
	require.Equal(t, events, s.events(""), "and records nothing")

	s.advance(time.Second)
	g := model.Grant{Cost: 7, Steps: 2}
	require.NoError(t, s.store.Requeue(s.ctx, id, g, "ops"))
	task := s.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, model.NoReason, task.Reason)
	require.EqualValues(t, 17, task.CostBudget)
	require.Equal(t, 7, task.StepsMax)
	require.Zero(t, task.AttemptsCharged, "a requeue grants a fresh set of attempts")
	require.Equal(t, s.now(), task.RunAt)
	e := s.lastEvent(id)
	require.Equal(t, model.EventRequeued, e.Kind)
	require.Equal(t, model.DetailGrant(g), e.Detail)
	require.Equal(t, "ops", e.Actor)
	require.ErrorIs(t, s.store.Requeue(s.ctx, id, g, "ops"), model.ErrInvalidTransition)
	require.Equal(t, id, s.claim("w1").Claim.TaskID)

	// Exactly the largest grant is allowed.
	most, _ := s.parked()
	require.NoError(t, s.store.Requeue(s.ctx, most, model.Grant{Cost: limits.GrantCostMax, Steps: limits.GrantStepsMax}, "ops"))
}

func testResolve(s *suite) {
	t := s.t
	for _, to := range []model.State{model.Completed, model.Failed, model.Cancelled} {
		id, _ := s.parked()
		before, events := s.task(id), s.events("")
		for _, bad := range []model.State{model.Queued, model.Running, model.WaitingForApproval, model.NeedsReview, "done"} {
			s.requireInvalid(s.store.Resolve(s.ctx, id, bad, "ops"), "as")
		}
		require.Equal(t, before, s.task(id), "a refused resolution changes nothing")
		require.Equal(t, events, s.events(""), "and records nothing")
		require.NoError(t, s.store.Resolve(s.ctx, id, to, "ops"))
		task := s.task(id)
		require.Equal(t, to, task.State)
		require.Equal(t, model.OperatorResolved, task.Reason)
		if to == model.Cancelled {
			require.Equal(t, "ops", task.CancelledBy)
		}
		e := s.lastEvent(id)
		require.Equal(t, model.EventResolved, e.Kind)
		require.Equal(t, model.NeedsReview, e.From)
		require.ErrorIs(t, s.store.Resolve(s.ctx, id, to, "ops"), model.ErrInvalidTransition)
	}
	queued := s.submit()
	require.ErrorIs(t, s.store.Resolve(s.ctx, queued, model.Completed, "ops"), model.ErrInvalidTransition)
	require.ErrorIs(t, s.store.Resolve(s.ctx, "t_missing", model.Completed, "ops"), model.ErrNotFound)
}
