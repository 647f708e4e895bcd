package queue

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// TestLateResultAfterReclaimIsRejected is the workshop's seed exercise. Two
// workers share a database file. Worker A claims the task and is killed
// (its claim abandoned); the lease passes; the reaper requeues the task,
// charging the attempt; worker B claims it under fence 2 and does the
// work. Then A wakes and delivers its late step and completion under fence
// 1: both are refused and recorded, and the task shows B's work only.
func TestLateResultAfterReclaimIsRejected(t *testing.T) {
	caller := setupFile(t)
	workerA := caller.reopen(2)
	workerB := caller.reopen(3)
	id := caller.submit(func(r *model.SubmitRequest) { r.CostBudget, r.StepsMax = 20, 5 })

	a := workerA.claim("worker-a")
	require.Equal(t, id, a.Claim.TaskID)
	require.Equal(t, int64(1), a.Claim.Fence)
	// Worker A is killed here: nothing more it does reaches the queue
	// until it wakes, much later.

	caller.advance(testLease)
	require.Equal(t, model.ReapResult{Expired: 1}, caller.reap())
	requeued := caller.task(id)
	require.Equal(t, model.Queued, requeued.State)
	require.Equal(t, 1, requeued.AttemptsCharged)
	caller.advance(requeued.RunAt.Sub(caller.now()))

	b := workerB.claim("worker-b")
	require.Equal(t, id, b.Claim.TaskID)
	require.Equal(t, int64(2), b.Claim.Fence)
	require.Equal(t, 2, b.Claim.Attempt)
	for i, cost := range []int64{2, 3} {
		_, err := workerB.q.CompleteStep(workerB.ctx, model.StepWrite{Claim: b.Claim, Index: i, Cost: cost, Checkpoint: fmt.Sprintf("b%d", i)})
		require.NoError(t, err)
	}

	// A wakes and delivers its late result while B still runs...
	_, err := workerA.q.CompleteStep(workerA.ctx, model.StepWrite{Claim: a.Claim, Index: 0, Cost: 7, Checkpoint: "a0"})
	require.ErrorIs(t, err, ErrStaleClaim)
	require.ErrorIs(t, workerA.q.Complete(workerA.ctx, a.Claim), ErrStaleClaim)
	running := caller.task(id)
	require.Equal(t, model.Running, running.State)
	require.Equal(t, "worker-b", running.Owner)

	// ...and once more after B has finished.
	require.NoError(t, workerB.q.Complete(workerB.ctx, b.Claim))
	require.ErrorIs(t, workerA.q.Complete(workerA.ctx, a.Claim), ErrStaleClaim)

	task := caller.task(id)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, int64(5), task.CostUsed, "B's steps only")
	require.Equal(t, 2, task.StepsUsed)
	require.Equal(t, "b1", task.Checkpoint)
	require.Equal(t, int64(2), task.Version)
	require.Equal(t, 1, task.AttemptsCharged)

	var stale, steps []model.Event
	history := model.NewHistory()
	for _, e := range caller.events(id) {
		switch {
		case e.Kind == model.EventStaleWrite:
			stale = append(stale, e)
			continue
		case e.Kind == model.EventStep:
			steps = append(steps, e)
		case e.Kind == model.EventCompleted:
			require.Equal(t, "worker-b", e.Actor)
			require.Equal(t, int64(2), e.Fence)
		}
		if e.Fence > 0 && e.Actor != model.ReaperActor {
			v := history.Accept(model.AcceptedWrite{TaskID: id, Fence: e.Fence, Kind: string(e.Kind), At: e.At})
			require.Nil(t, v, "accepted writes of two claims interleave")
		}
	}
	require.Len(t, steps, 2)
	for i, e := range steps {
		require.Equal(t, "worker-b", e.Actor)
		require.Equal(t, int64(2), e.Fence)
		require.Equal(t, model.DetailStep(i, []int64{2, 3}[i]), e.Detail)
	}
	require.Len(t, stale, 3)
	for i, e := range stale {
		require.Equal(t, "worker-a", e.Actor)
		require.Equal(t, int64(1), e.Fence)
		require.Equal(t, 1, e.Attempt)
		require.True(t, strings.HasPrefix(e.Detail, []string{"step: ", "complete: ", "complete: "}[i]), e.Detail)
	}

	m := caller.metrics()
	require.Equal(t, int64(3), m.StaleWrites)
	require.Equal(t, int64(1), m.LeaseExpiries)
	require.Equal(t, int64(1), m.Completions)
	require.True(t, m.Reconciles())
}
