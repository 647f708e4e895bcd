package worker_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/worker"
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
