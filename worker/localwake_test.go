package worker_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
)

// TestRunnerWokenBySubmitInProcess: on SQLite, a runner idle at PollMax
// (a minute) whose Waker is the queue claims and completes a task
// submitted through the same *queue.Queue without the fake clock moving:
// the commit woke it, not its poll. A runner whose queue is no Waker (the
// recording wrapper, with no RunOptions.Waker) still waits out its poll:
// the wake-up is what claimed the task, and polling stays the fallback.
func TestRunnerWokenBySubmitInProcess(t *testing.T) {
	for _, woken := range []bool{true, false} {
		t.Run(map[bool]string{true: "woken", false: "polling"}[woken], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := setup(t)
				l := newLive(b)
				lr := l.start("w1", newLiveService(worker.Dedup, nil), func(c *worker.Config, o *worker.RunOptions) {
					c.PollMin, c.PollMax = time.Minute, time.Minute
					if woken {
						o.Waker = b.q
					}
				})
				synctest.Wait() // idle: its first claim found nothing
				require.Len(t, l.q.claimCalls(), 1)

				later := b.submitRequest(model.SubmitRequest{User: "ana", Payload: `{"steps":[{"cost":1}]}`,
					CostBudget: 10, StepsMax: 5, RunAt: epoch.Add(time.Hour)})
				synctest.Wait()
				require.Len(t, l.q.claimCalls(), 1, "a task due later wakes no one")

				id := b.submit(`{"steps":[{"cost":1}]}`, 10, 5)
				synctest.Wait()
				require.Equal(t, epoch, b.clock.Now())
				if !woken {
					require.Equal(t, model.Queued, b.task(id).State, "without a wake-up the task waits for the poll")
					b.clock.Advance(time.Minute)
					synctest.Wait()
				}
				require.Equal(t, model.Completed, b.task(id).State)
				require.Equal(t, model.Queued, b.task(later).State)
				calls := l.q.claimCalls()
				require.Len(t, calls, 3, "the claim of the task, and the claimer's next finding nothing")
				require.Equal(t, 1, calls[1].claimed)
				require.Zero(t, calls[2].claimed)
				if woken {
					require.Equal(t, epoch, calls[1].at, "claimed at once, not at the poll")
				} else {
					require.Equal(t, epoch.Add(time.Minute), calls[1].at)
				}
				lr.stop(t)
				l.checkReports()
			})
		})
	}
}
