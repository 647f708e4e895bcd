package queue

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/faults/storagefault"
	"github.com/leasehold/leasehold/model"
)

// loneSubmits submits, one at a time, requests that end every way a submit
// can: stored, replayed, a changed request under a used key, a deadline
// already passed, a user at its depth cap, the queue at its depth cap, a
// task due later, and one made for its user by an actor in a scope. It
// returns each result and error.
func loneSubmits(g *groupRig) ([]model.SubmitResult, []error) {
	g.setLimits(func(l *model.Limits) { l.UserDepthMax, l.DepthMax = 2, 5 })
	req := func(user, key, payload string) model.SubmitRequest {
		return model.SubmitRequest{User: user, Key: key, Payload: payload, CostBudget: 10, StepsMax: 5}
	}
	late := req("ana", "late", `{}`)
	late.Deadline = g.clock.Now().Add(time.Second)
	later := req("eve", "later", `{}`)
	later.RunAt = g.clock.Now().Add(time.Hour)
	steps := []struct {
		req     model.SubmitRequest
		advance time.Duration
	}{
		{req: req("ana", "k1", `{"a":1}`)},
		{req: req("ana", "k1", `{"a":1}`)},
		{req: req("ana", "k1", `{"a":2}`)},
		{req: req("ana", "k2", `{}`)},
		{req: later},
		{req: req("ana", "k3", `{}`)},
		{req: req("bob", "k1", `{}`)},
		{req: late, advance: 2 * time.Second},
		{req: req("cy", "k1", `{}`)},
		{req: req("dee", "k1", `{}`)},
		{req: req("ana", "k2", `{}`)},
	}
	var results []model.SubmitResult
	var errs []error
	ctx := model.WithScope(model.WithActor(g.ctx, "ops:ida"), "batch-7")
	for i, s := range steps {
		g.advance(s.advance)
		c := g.ctx
		if i == len(steps)-1 {
			c = ctx
		}
		res, err := g.q.Submit(c, s.req)
		results, errs = append(results, res), append(errs, err)
	}
	return results, errs
}

// A lone submit run as one statement (submit_one) gives the same results,
// the same refusals word for word, the same task IDs, the same trail and
// the same figures as the usual way, for every way a submit ends.
func TestLoneSubmitMatchesTheUsualWay(t *testing.T) {
	fusedStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		fused := open(t)
		fusedResults, fusedErrs := loneSubmits(fused.groupRig)
		usual := open(t)
		usual.q.fuse = false
		usualResults, usualErrs := loneSubmits(usual.groupRig)
		require.EqualValues(t, len(fusedErrs), fused.q.stats.submitsFused.Load(), "every submit was one statement")
		require.Zero(t, usual.q.stats.submitsFused.Load())

		require.Equal(t, usualResults, fusedResults)
		require.Equal(t, len(usualErrs), len(fusedErrs))
		for i := range usualErrs {
			if usualErrs[i] == nil {
				require.NoError(t, fusedErrs[i], "submit %d", i)
				continue
			}
			require.EqualError(t, fusedErrs[i], usualErrs[i].Error(), "submit %d", i)
		}
		// The case ends every way it means to.
		require.True(t, fusedResults[1].Replay)
		require.ErrorIs(t, fusedErrs[2], model.ErrIdempotencyConflict)
		require.ErrorIs(t, fusedErrs[5], model.ErrQueueFull, "ana is at her cap")
		require.ErrorIs(t, fusedErrs[7], model.ErrInvalidInput, "the deadline has passed")
		require.ErrorIs(t, fusedErrs[9], model.ErrQueueFull, "the queue is at its cap")
		require.True(t, fusedResults[10].Replay)
		for _, i := range []int{0, 3, 4, 6, 8} {
			require.NoError(t, fusedErrs[i], "submit %d", i)
			require.False(t, fusedResults[i].Replay, "submit %d", i)
		}

		fusedTrail, fusedMetrics := fused.trail()
		usualTrail, usualMetrics := usual.trail()
		require.Equal(t, usualTrail, fusedTrail)
		require.Equal(t, usualMetrics, fusedMetrics)
		require.NoError(t, fused.q.CheckCounters(fused.ctx))
	})
}

// A replayed or refused lone submit gives back the task ID it drew, so the
// next task gets the ID it would have had: two queues with equal seeds,
// one of which first replays a request, give their next tasks equal IDs.
func TestLoneSubmitGivesBackAnUnusedID(t *testing.T) {
	fusedStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		a, b := open(t), open(t)
		first, err := a.q.Submit(a.ctx, model.SubmitRequest{User: "ana", Key: "k1", Payload: `{}`, CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
		_, err = b.q.Submit(b.ctx, model.SubmitRequest{User: "ana", Key: "k1", Payload: `{}`, CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
		again, err := a.q.Submit(a.ctx, model.SubmitRequest{User: "ana", Key: "k1", Payload: `{}`, CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
		require.Equal(t, first.TaskID, again.TaskID)
		require.True(t, again.Replay)
		next := model.SubmitRequest{User: "bob", Key: "k2", Payload: `{}`, CostBudget: 1, StepsMax: 1}
		na, err := a.q.Submit(a.ctx, next)
		require.NoError(t, err)
		nb, err := b.q.Submit(b.ctx, next)
		require.NoError(t, err)
		require.Equal(t, nb.TaskID, na.TaskID, "the replay's draw was given back")
	})
}

// A lone submit whose statement the connection loses may have committed:
// it is ErrOutcomeUnknown, never a false success nor a false "not
// applied". Here the injected fault ran nothing, and the caller's retry
// (the same request) stores the task once.
func TestLoneSubmitConnectionLostIsUnknown(t *testing.T) {
	fusedStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		g := open(t)
		req := model.SubmitRequest{User: "ana", Key: "k1", Payload: `{}`, CostBudget: 1, StepsMax: 1}
		g.storage.Arm(storagefault.FailStatement)
		_, err := g.q.Submit(g.ctx, req)
		require.Equal(t, 1, g.storage.Counts().FailStatement)
		require.ErrorIs(t, err, ErrOutcomeUnknown)
		require.NotErrorIs(t, err, ErrNotApplied)
		require.ErrorIs(t, err, storagefault.ErrInjected)
		require.Zero(t, g.taskCount())
		res, err := g.q.Submit(g.ctx, req)
		require.NoError(t, err)
		require.False(t, res.Replay)
		again, err := g.q.Submit(g.ctx, req)
		require.NoError(t, err)
		require.True(t, again.Replay)
		require.Equal(t, res.TaskID, again.TaskID)
		require.Equal(t, 1, g.taskCount())
		require.NoError(t, g.q.CheckCounters(g.ctx))
	})
}

// A lone submit whose statement committed and then failed to report it is
// ErrOutcomeUnknown; the task is stored, and the caller's retry is told it
// is a replay of it, so nothing is stored twice.
func TestLoneSubmitCommittedButUnreportedIsUnknown(t *testing.T) {
	fusedStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		g := open(t)
		lost := errors.New("trap: connection lost after the commit")
		g.trap.setAfter(g.q.query(g.q.variant("submit_one")).text, 0, func() error { return lost })
		req := model.SubmitRequest{User: "ana", Key: "k1", Payload: `{}`, CostBudget: 1, StepsMax: 1}
		_, err := g.q.Submit(g.ctx, req)
		require.Equal(t, 1, g.trap.fired)
		require.ErrorIs(t, err, ErrOutcomeUnknown)
		require.ErrorIs(t, err, lost)
		require.Equal(t, 1, g.taskCount(), "the statement committed")
		again, err := g.q.Submit(g.ctx, req)
		require.NoError(t, err)
		require.True(t, again.Replay, "the retry finds the task")
		require.NoError(t, g.q.CheckCounters(g.ctx))
	})
}
