package worker_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

// A runner's housekeeping prunes by the policy stored in the queue: a task
// it completed stays while it is younger than the policy's age and is gone
// (its key kept as a tombstone) a housekeeping pass after it is older;
// with the policy off nothing is pruned. (A task due in a year is always
// the newest, which no prune removes.)
func TestRunnerHousekeepingPrunes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		const age = 2 * time.Second
		require.NoError(t, b.q.SetRetention(b.ctx, queue.RetentionPolicy{OlderThan: age, KeepKeys: time.Hour}, "ops"))
		id := b.submit(`{"steps":[{"cost":1}]}`, 10, 5)
		b.submitRequest(newest(b)) // no prune removes the newest task
		lr := l.start("w1", newLiveService(worker.Dedup, nil))
		var settled time.Time
		l.drive(100, nil, func() bool {
			task, err := b.q.Task(b.ctx, id)
			require.NoError(t, err)
			settled = task.UpdatedAt
			return task.State == model.Completed
		})
		l.drive(100, func() {
			if _, err := b.q.Task(b.ctx, id); err != nil {
				require.ErrorIs(t, err, model.ErrNotFound)
				require.False(t, b.clock.Now().Before(settled.Add(age)), "pruned no earlier than the policy's age")
			}
		}, func() bool {
			_, err := b.q.Task(b.ctx, id)
			return err != nil
		})
		require.Less(t, b.clock.Now().Sub(settled.Add(age)), testHeartbeat+tick, "pruned within a housekeeping interval")
		m, err := b.q.Metrics(b.ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), m.Pruned)
		var pruned []model.Event
		for _, e := range b.events("") {
			if e.Kind == model.EventPruned {
				pruned = append(pruned, e)
			}
		}
		require.Len(t, pruned, 1)
		require.Equal(t, queue.HousekeepingActor, pruned[0].Actor)

		// Policy off: a task completed now is never pruned, however old.
		require.NoError(t, b.q.SetRetention(b.ctx, queue.RetentionPolicy{KeepKeys: time.Hour}, "ops"))
		kept := b.submit(`{"steps":[{"cost":1}]}`, 10, 5)
		b.submitRequest(newest(b))
		l.drive(100, nil, func() bool { return b.task(kept).State == model.Completed })
		for range 50 {
			l.b.clock.Advance(tick)
			synctest.Wait()
		}
		require.Equal(t, model.Completed, b.task(kept).State)
		lr.stop(t)
	})
}

// newest is a request no runner claims during the test (due in a year).
func newest(b *bundle) model.SubmitRequest {
	return model.SubmitRequest{User: "ana", Payload: `{"steps":[{"cost":1}]}`, CostBudget: 10, StepsMax: 5,
		RunAt: b.clock.Now().Add(365 * 24 * time.Hour)}
}

// A task the queue settles while a worker still runs its step (here its
// deadline, by the reaper) and prunes before the worker's next write: the
// write is told the task is not found, and the worker drops the claim as
// a lost one, not as an anomaly, and claims no more of it.
func TestAPrunedTaskEndsTheClaimQuietly(t *testing.T) {
	b := setup(t)
	id := b.submitRequest(model.SubmitRequest{User: "ana", Payload: `{"steps":[{"cost":1,"duration_ms":3000},{"cost":1}]}`,
		CostBudget: 10, StepsMax: 5, Deadline: epoch.Add(time.Second)})
	b.submitRequest(newest(b)) // no prune removes the newest task
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock))
	b.stepUntil(w, func(r worker.Report) bool { return r.Action == worker.ActionRun })
	require.Len(t, w.Claims(), 1)

	b.clock.Advance(1100 * time.Millisecond)
	reaped, err := b.q.Reap(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, reaped.Deadlines)
	require.Equal(t, model.Failed, b.task(id).State)
	b.clock.Advance(time.Millisecond)
	pruned, err := b.q.Prune(b.ctx, queue.PruneRequest{OlderThan: time.Millisecond, Actor: "ops"})
	require.NoError(t, err)
	require.Equal(t, int64(1), pruned.Tasks[model.Failed])
	_, err = b.q.Task(b.ctx, id)
	require.ErrorIs(t, err, model.ErrTaskNotFound)
	require.ErrorIs(t, err, model.ErrNotFound, "a missing task is still not found to every caller")

	gone := b.stepUntil(w, func(r worker.Report) bool { return r.TaskID == id && r.Write != "" })
	require.False(t, gone.Accepted)
	require.Equal(t, "claim dropped: the task was pruned", gone.Outcome)
	require.ErrorIs(t, gone.Err, model.ErrTaskNotFound)
	require.Empty(t, w.Claims())
	for _, r := range b.run(w, stepsMax) {
		require.NotEqual(t, id, r.TaskID, "nothing more of the pruned task: %s", r)
	}
}
