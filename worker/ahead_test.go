package worker_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
)

var _ worker.EachCompleteClaimer = (*recordingQueue)(nil)

// CompleteEachAndClaim passes to the queue's and records each completion
// it accepted, then each claim made, and how many completions the write
// carried.
func (q *recordingQueue) CompleteEachAndClaim(ctx context.Context, claims []model.Claim, next model.ClaimRequest) ([]model.Claimed, []error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	claimed, errs := q.inner.(worker.EachCompleteClaimer).CompleteEachAndClaim(ctx, claims, next)
	q.each = append(q.each, len(claims))
	for i, c := range claims {
		q.record(errs[i], "complete", c)
	}
	for _, c := range claimed {
		q.record(nil, "claim", c.Claim)
	}
	return claimed, errs
}

func (q *recordingQueue) ClaimsAhead() bool {
	ec, ok := q.inner.(worker.EachCompleteClaimer)
	return ok && ec.ClaimsAhead()
}

// eachCalls returns how many completions each CompleteEachAndClaim carried.
func (q *recordingQueue) eachCalls() []int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]int(nil), q.each...)
}

// laneQueue is a recording queue that says claiming ahead pays (as
// PostgreSQL's does), over the tests' SQLite queue.
type laneQueue struct{ *recordingQueue }

func (laneQueue) ClaimsAhead() bool { return true }

// A runner whose slots claim ahead completes the tasks of a lane several
// to a write, each task claimed once, under one valid claim at a time.
func TestRunnerLanesCompleteSeveralTasksInOneWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		var ids []string
		for range 12 {
			ids = append(ids, b.submit(`{"steps":[{"cost":1,"duration_ms":100}]}`, 10, 5))
		}
		lr := l.start("w1", newLiveService(worker.Dedup, nil), func(c *worker.Config, _ *worker.RunOptions) {
			c.Concurrency, c.ClaimAhead = 2, 3
			c.Queue = laneQueue{l.q}
		})
		l.drive(200, nil, func() bool { return l.all(ids, model.Completed) })
		lr.stop(t)
		most := 0
		for _, n := range l.q.eachCalls() {
			most = max(most, n)
		}
		require.Equal(t, 4, most, "a write completed a whole lane: its task and the 3 it held")
		for _, id := range ids {
			require.Equal(t, int64(1), b.task(id).Version, "%s claimed once", id)
		}
		l.checkReports()
	})
}

// A lane whose task runs past a heartbeat interval is flushed: the
// completion it held is written on its own, no later than that task's
// heartbeat was due, and the tasks waiting are released (no attempt
// charged) to be claimed again; every task completes once.
func TestRunnerFlushesALaneBehindALongTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		short := b.submit(`{"steps":[{"cost":1,"duration_ms":100}]}`, 10, 5)
		long := b.submit(`{"steps":[{"cost":1,"duration_ms":3000}]}`, 10, 5)
		waiting := []string{
			b.submit(`{"steps":[{"cost":1,"duration_ms":100}]}`, 10, 5),
			b.submit(`{"steps":[{"cost":1,"duration_ms":100}]}`, 10, 5),
		}
		ids := append([]string{short, long}, waiting...)
		lr := l.start("w1", newLiveService(worker.Dedup, nil), func(c *worker.Config, _ *worker.RunOptions) {
			c.Concurrency, c.ClaimAhead = 1, 3
			c.Queue = laneQueue{l.q}
		})
		l.drive(200, nil, func() bool { return l.all(ids, model.Completed) })
		lr.stop(t)
		done := b.eventsOf(short, model.EventCompleted)
		require.Len(t, done, 1)
		require.False(t, done[0].At.After(epoch.Add(testHeartbeat+tick)),
			"the held completion was written by its heartbeat, not after the long task (%s)", done[0].At)
		require.True(t, done[0].At.Before(b.eventsOf(long, model.EventCompleted)[0].At))
		for _, id := range waiting {
			require.Contains(t, b.kinds(id), model.EventReleased, "%s was released while the long task ran", id)
			task := b.task(id)
			require.Equal(t, 0, task.AttemptsCharged, "a release charges no attempt")
		}
		for _, id := range ids {
			require.Len(t, b.eventsOf(id, model.EventCompleted), 1, id)
		}
		l.checkReports()
	})
}

// A negative ClaimAhead turns lanes off: every completion is a write of
// its own.
func TestRunnerWithoutLanes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		var ids []string
		for range 6 {
			ids = append(ids, b.submit(`{"steps":[{"cost":1,"duration_ms":100}]}`, 10, 5))
		}
		lr := l.start("w1", newLiveService(worker.Dedup, nil), func(c *worker.Config, _ *worker.RunOptions) {
			c.Concurrency, c.ClaimAhead = 2, -1
			c.Queue = laneQueue{l.q}
		})
		l.drive(200, nil, func() bool { return l.all(ids, model.Completed) })
		lr.stop(t)
		require.Empty(t, l.q.eachCalls())
		l.checkReports()
	})
}
