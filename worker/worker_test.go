package worker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

// Shutdown between steps gives the claim back as soon as the run under
// way ends (step 1's, started with step 0's commit): its step is
// committed, no other starts, the task is queued again, no attempt is
// charged, and the next worker resumes from the checkpoint.
func TestShutdownBetweenStepsReleases(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1},{"cost":2},{"cost":3}]}`, 10, 5)
	a := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock))
	b.stepUntil(a, is(worker.ActionStep, "step 0 cost 1"))

	a.Shutdown()
	require.False(t, a.Drained(), "still holds its claim")
	reports := b.run(a, stepsMax)
	require.True(t, a.Drained())
	require.Equal(t, 1, count(reports, is(worker.ActionRelease, "to queued")))
	require.Equal(t, 1, count(reports, func(r worker.Report) bool { return r.Action == worker.ActionStep }), "only the run under way's step")
	require.Equal(t, 1, count(reports, is(worker.ActionStep, "step 1 cost 2")))

	task := b.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Zero(t, task.AttemptsCharged, "a graceful release is not charged")
	require.Equal(t, 2, task.StepsUsed)
	require.Equal(t, int64(3), task.CostUsed)
	require.Equal(t, b.clock.Now(), task.RunAt, "due again at once")
	require.Len(t, b.eventsOf(id, model.EventReleased), 1)

	// A drained worker claims nothing, however long it is stepped.
	b.clock.Advance(time.Minute)
	for range 10 {
		r := b.step(a)
		require.Equal(t, worker.ActionIdle, r.Action)
		require.Zero(t, r.Wait)
	}
	require.Equal(t, model.Queued, b.task(id).State)

	b.run(b.newWorker("w2", workertest.NewService(worker.Dedup, b.clock)), stepsMax)
	task = b.task(id)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, int64(6), task.CostUsed)
	require.Equal(t, 3, task.StepsUsed)
	require.Zero(t, task.AttemptsCharged)
	require.Len(t, b.eventsOf(id, model.EventStep), 3)
}

// Shutdown while a step's run is under way lets the run end, heartbeating
// meanwhile (the live runner's grace bounds the wait), commits its step
// and then releases the claim: no further step starts, and no attempt is
// charged.
func TestShutdownLetsTheRunUnderWayEnd(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1},{"cost":2,"duration_ms":5000},{"cost":3}]}`, 10, 5)
	a := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock))
	b.stepUntil(a, is(worker.ActionStep, "step 0 cost 1")) // step 1's run starts with it
	a.Shutdown()
	reports := b.run(a, stepsMax)
	require.True(t, a.Drained())
	require.Equal(t, epoch.Add(5*time.Second), b.clock.Now(), "the run took its 5s")
	require.Equal(t, 1, count(reports, is(worker.ActionStep, "step 1 cost 2")), "the run's step is committed")
	require.Zero(t, count(reports, is(worker.ActionStep, "step 2 cost 3")), "no step after it")
	require.Equal(t, 1, count(reports, is(worker.ActionRelease, "to queued")))
	require.Equal(t, 10, count(reports, func(r worker.Report) bool { return r.Action == worker.ActionHeartbeat && r.Accepted }),
		"heartbeats kept the 2s lease over the 5s run")
	task := b.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, 2, task.StepsUsed)
	require.Equal(t, int64(3), task.CostUsed)
	require.Zero(t, task.AttemptsCharged)
}

// Shutdown after the intent is recorded finishes the effect (call and
// receipt) and its step before releasing, so the next worker never finds
// the operation uncertain: even a Plain service is called exactly once.
func TestShutdownFinishesAnEffectInFlight(t *testing.T) {
	for _, after := range []worker.Action{worker.ActionIntent, worker.ActionCheckLease, worker.ActionCall} {
		t.Run("after "+string(after), func(t *testing.T) {
			b := setup(t)
			id := b.submit(effectPayload, 10, 5)
			op := model.OperationID(id, 1)
			svc := workertest.NewService(worker.Plain, b.clock)
			a := b.newWorker("w1", svc)
			b.stepUntil(a, is(after, ""))

			a.Shutdown()
			reports := b.run(a, stepsMax)
			require.True(t, a.Drained())
			require.Equal(t, 1, svc.Applications(op))
			require.Equal(t, 1, count(reports, is(worker.ActionStep, "step 1 cost 5")), "the effect's step is completed")
			require.Equal(t, 1, count(reports, is(worker.ActionRelease, "to queued")))
			require.Zero(t, count(reports, is(worker.ActionStep, "step 2 cost 1")), "no step after the effect's")

			task := b.task(id)
			require.Equal(t, model.Queued, task.State)
			require.Equal(t, 2, task.StepsUsed)
			require.Equal(t, int64(7), task.CostUsed)
			require.Zero(t, task.AttemptsCharged)
			effects, err := b.q.Effects(b.ctx, id)
			require.NoError(t, err)
			require.Len(t, effects, 1)
			require.True(t, effects[0].Receipted())

			b.run(b.newWorker("w2", svc), stepsMax)
			task = b.task(id)
			require.Equal(t, model.Completed, task.State)
			require.Equal(t, int64(8), task.CostUsed)
			require.Equal(t, 1, svc.Applications(op))
			require.Len(t, svc.Calls(), 1)
		})
	}
}

// A worker with concurrency 2 claims two tasks and advances them in turn:
// both make progress before either finishes.
func TestRoundRobinInterleavesTasks(t *testing.T) {
	b := setup(t)
	first := b.submit(`{"steps":[{"cost":1},{"cost":1},{"cost":1}]}`, 10, 5)
	second := b.submit(`{"steps":[{"cost":1},{"cost":1},{"cost":1}]}`, 10, 5)
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock), func(c *worker.Config) { c.Concurrency = 2 })
	reports := b.run(w, stepsMax)

	require.Len(t, reports[0].Claims, 2, "one claim takes a batch of two")
	var order []string
	for _, r := range reports {
		if r.Action == worker.ActionStep || r.Action == worker.ActionComplete {
			order = append(order, r.TaskID+" "+string(r.Action))
		}
	}
	require.Equal(t, []string{
		first + " step", second + " step", first + " step", second + " step", first + " step", second + " step",
		first + " complete", second + " complete"}, order)
	for _, id := range []string{first, second} {
		task := b.task(id)
		require.Equal(t, model.Completed, task.State)
		require.Equal(t, int64(3), task.CostUsed)
	}
}

// A slot that waits out a step's duration does not hold up the others.
func TestALongStepDoesNotBlockTheOtherSlot(t *testing.T) {
	b := setup(t)
	slow := b.submit(`{"steps":[{"cost":1,"duration_ms":3000}]}`, 10, 5)
	fast := b.submit(`{"steps":[{"cost":1},{"cost":1}]}`, 10, 5)
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock), func(c *worker.Config) { c.Concurrency = 2 })
	b.run(w, stepsMax)
	completedAt := func(id string) time.Time {
		evs := b.eventsOf(id, model.EventCompleted)
		require.Len(t, evs, 1)
		return evs[0].At
	}
	require.Equal(t, epoch, completedAt(fast))
	require.Equal(t, epoch.Add(3*time.Second), completedAt(slow))
}

// CostCapacity: the worker claims nothing new while the unspent budget of
// the tasks it holds reaches the capacity, and claims again once spending
// brings it below.
func TestCostCapacityLimitsClaims(t *testing.T) {
	b := setup(t)
	payload := `{"steps":[{"cost":4,"duration_ms":1000},{"cost":4}]}`
	first := b.submit(payload, 10, 5)
	second := b.submit(payload, 10, 5)
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock), func(c *worker.Config) {
		c.Concurrency, c.ClaimBatch, c.CostCapacity = 2, 1, 10
	})
	reports := b.run(w, stepsMax)

	require.Equal(t, epoch, b.task(first).ClaimedAt)
	// The first task's budget (10) fills the capacity until its first step
	// spends 4 at 1s; only then is the second claimed.
	var claimed []string
	for _, r := range reports {
		for _, c := range r.Claims {
			claimed = append(claimed, c.TaskID)
		}
	}
	require.Equal(t, []string{first, second}, claimed)
	require.Equal(t, epoch.Add(time.Second), b.task(second).ClaimedAt)
	for _, id := range []string{first, second} {
		require.Equal(t, model.Completed, b.task(id).State)
	}

	// Without a capacity both are claimed at once.
	b2 := setup(t)
	first = b2.submit(payload, 10, 5)
	second = b2.submit(payload, 10, 5)
	b2.run(b2.newWorker("w1", workertest.NewService(worker.Dedup, b.clock), func(c *worker.Config) { c.Concurrency, c.ClaimBatch = 2, 1 }), stepsMax)
	require.Equal(t, epoch, b2.task(first).ClaimedAt)
	require.Equal(t, epoch, b2.task(second).ClaimedAt)
}

// A worker whose concurrency is above the queue's claim batch limit (16 by
// default) still claims: its batch is bounded by the queue's limit.
func TestConcurrencyAboveTheClaimBatchLimit(t *testing.T) {
	b := setup(t)
	n := model.DefaultLimits.ClaimBatchMax + 4
	ids := make([]string, n)
	for i := range ids {
		ids[i] = b.submit(`{"steps":[{"cost":1}]}`, 10, 5)
	}
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock), func(c *worker.Config) { c.Concurrency = n })
	b.run(w, stepsMax)
	for _, id := range ids {
		require.Equal(t, model.Completed, b.task(id).State)
	}
}

// A stepped worker with Refill completes its task and claims the next in
// the same write, as the live runner's slots do: one claim write for three
// tasks; without room (shutting down) it completes alone.
func TestRefillClaimsWithTheCompletion(t *testing.T) {
	b := setup(t)
	var ids []string
	for range 3 {
		ids = append(ids, b.submit(`{"steps":[{"cost":1}]}`, 10, 5))
	}
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock), func(c *worker.Config) { c.Refill = true })
	reports := b.run(w, stepsMax)
	var claims, completes, refilled int
	for _, r := range reports {
		switch r.Action {
		case worker.ActionClaim:
			claims += len(r.Claims)
		case worker.ActionComplete:
			completes++
			refilled += len(r.Claims)
		}
	}
	require.Equal(t, 1, claims, "the claimer claimed the first task only")
	require.Equal(t, 3, completes)
	require.Equal(t, 2, refilled, "each completion but the last claimed the next task")
	for _, id := range ids {
		require.Equal(t, model.Completed, b.task(id).State)
		require.Equal(t, 1, b.task(id).Attempt)
	}

	// Shutting down, a completion claims nothing.
	last := b.submit(`{"steps":[{"cost":1}]}`, 10, 5)
	next := b.submit(`{"steps":[{"cost":1}]}`, 10, 5)
	r := b.stepUntil(w, func(r worker.Report) bool { return r.Action == worker.ActionStep })
	require.Equal(t, last, r.TaskID)
	w.Shutdown()
	b.run(w, stepsMax)
	require.Equal(t, model.Queued, b.task(next).State, "a draining worker refills nothing")
}
