package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

// writeCall is one worker write a countingQueue saw, accepted or not.
type writeCall struct {
	kind string
	at   time.Time
}

// countingQueue passes every call to the queue and records each worker
// write it is asked to make (every call but Claim) with the time it was
// made, whether the queue accepts it or not.
type countingQueue struct {
	worker.Queue
	clock clockwork.Clock

	mu     sync.Mutex
	writes []writeCall
}

func (q *countingQueue) saw(kind string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.writes = append(q.writes, writeCall{kind: kind, at: q.clock.Now()})
}

func (q *countingQueue) seen() []writeCall {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]writeCall(nil), q.writes...)
}

func (q *countingQueue) Heartbeat(ctx context.Context, c model.Claim, lease time.Duration) (model.HeartbeatResult, error) {
	q.saw("heartbeat")
	return q.Queue.Heartbeat(ctx, c, lease)
}

func (q *countingQueue) CompleteStep(ctx context.Context, w model.StepWrite) (model.StepResult, error) {
	q.saw("step")
	return q.Queue.CompleteStep(ctx, w)
}

func (q *countingQueue) RecordIntent(ctx context.Context, c model.Claim, step int) (model.IntentResult, error) {
	q.saw("effect_intent")
	return q.Queue.RecordIntent(ctx, c, step)
}

func (q *countingQueue) RecordReceipt(ctx context.Context, c model.Claim, opID, result string) error {
	q.saw("effect_receipt")
	return q.Queue.RecordReceipt(ctx, c, opID, result)
}

func (q *countingQueue) Pause(ctx context.Context, c model.Claim, step int, gate string) (model.State, error) {
	q.saw("pause")
	return q.Queue.Pause(ctx, c, step, gate)
}

func (q *countingQueue) Complete(ctx context.Context, c model.Claim) error {
	q.saw("complete")
	return q.Queue.Complete(ctx, c)
}

func (q *countingQueue) Fail(ctx context.Context, c model.Claim, f model.Failure) (model.State, error) {
	q.saw("fail")
	return q.Queue.Fail(ctx, c, f)
}

func (q *countingQueue) Release(ctx context.Context, c model.Claim) (model.State, error) {
	q.saw("release")
	return q.Queue.Release(ctx, c)
}

func (q *countingQueue) AcknowledgeCancel(ctx context.Context, c model.Claim) error {
	q.saw("cancel_ack")
	return q.Queue.AcknowledgeCancel(ctx, c)
}

// While storage is down a slot's heartbeats fail and back off; once its
// own view of the lease has run out it drops the claim without another
// write (heartbeat included): the reaper owns the task now.
func TestSlotPastItsLeaseMakesNoWrite(t *testing.T) {
	b := setupStorage(t)
	id := b.submit(`{"steps":[{"cost":1,"duration_ms":6000},{"cost":1}]}`, 10, 5)
	q := &countingQueue{Queue: b.q, clock: b.clock}
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock), func(c *worker.Config) {
		c.Queue = q
		c.StorageBackoffMin, c.StorageBackoffMax = 300*time.Millisecond, 900*time.Millisecond
	})
	claim := b.stepUntil(w, func(r worker.Report) bool { return len(r.Claims) == 1 }).Claims[0]
	leaseUntil := claim.LeaseUntil
	require.Equal(t, epoch.Add(testLease), leaseUntil)

	b.storage.SetUnavailable(true)
	r := b.stepUntil(w, is(worker.ActionCheckLease, ""))
	require.Equal(t, "lease expired locally; claim dropped", r.Outcome)
	require.Equal(t, leaseUntil, b.clock.Now(), "the slot wakes at its lease's end, not at its next backoff")
	require.Empty(t, w.Claims())
	require.Empty(t, r.Write)

	writes := q.seen()
	require.NotEmpty(t, writes, "heartbeats were tried while the lease held")
	for _, c := range writes {
		require.Equal(t, "heartbeat", c.kind)
		require.True(t, c.at.Before(leaseUntil), "a %s at %s, past the lease (%s)", c.kind, c.at, leaseUntil)
	}
	for range stepsMax / 10 {
		r := b.step(w)
		if r.Action == worker.ActionIdle && r.Wait > 0 {
			b.clock.Advance(r.Wait)
		}
	}
	require.Len(t, q.seen(), len(writes), "nothing written after the drop")

	b.storage.SetUnavailable(false)
	require.Equal(t, model.Running, b.task(id).State, "left for the reaper")
	require.Empty(t, b.eventsOf(id, model.EventStaleWrite), "no refused write either")
	res, err := b.q.Reap(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Expired)
}

// A runner whose storage is unavailable receives a stop: its slot cannot
// release, so the drain would wait for storage forever. The shutdown grace
// bounds it: Run returns ErrClaimsLeft within the grace, logging each
// claim it left with its task ID, attempt and fence.
func TestRunnerShutdownGraceBoundsTheDrainWhileStorageIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setupStorage(t)
		l := newLive(b)
		id := b.submit(`{"steps":[{"cost":1,"duration_ms":60000}]}`, 10, 5)
		var logs syncBuilder
		const grace = 1500 * time.Millisecond
		lr := l.start("w1", newLiveService(worker.Dedup, nil), func(c *worker.Config, o *worker.RunOptions) {
			c.Lease, c.Heartbeat = 10*time.Second, time.Second
			c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
			o.ShutdownGrace = grace
			o.Housekeeper = nil
		})
		l.drive(20, nil, func() bool { return len(lr.r.Claims()) == 1 })
		claim := lr.r.Claims()[0]

		b.storage.SetUnavailable(true)
		l.drive(30, nil, func() bool { return b.storage.Counts().Unavailable > 0 })
		lr.cancel()
		stopped := b.clock.Now()
		l.drive(int(grace/tick)+1, nil, lr.returned)
		require.LessOrEqual(t, b.clock.Now().Sub(stopped), grace, "Run returned within the grace")
		require.ErrorIs(t, lr.err, worker.ErrClaimsLeft)
		require.Equal(t, []worker.LeftClaim{{Claim: claim, Why: "still held when the shutdown grace ended"}}, lr.r.Left())
		require.Contains(t, logs.String(), `"msg":"claim left to the reaper","worker":"w1","task_id":"`+id+`","attempt":1,`)
		require.Contains(t, logs.String(), `"fence":1,"why":"still held when the shutdown grace ended"`)

		b.storage.SetUnavailable(false)
		require.Equal(t, model.Running, b.task(id).State, "the claim is the reaper's")
	})
}

// With the default grace (the lease), a slot whose lease runs out during
// the drain drops the claim before the grace ends: Run returns as soon as
// it has, still reporting the claim as left.
func TestRunnerDrainReportsAClaimDroppedAtItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setupStorage(t)
		l := newLive(b)
		id := b.submit(`{"steps":[{"cost":1,"duration_ms":60000}]}`, 10, 5)
		lr := l.start("w1", newLiveService(worker.Dedup, nil), func(_ *worker.Config, o *worker.RunOptions) {
			o.Housekeeper = nil
		})
		l.drive(20, nil, func() bool { return len(lr.r.Claims()) == 1 })
		claim := lr.r.Claims()[0]
		// Stop a tick after the claim, so that the grace (the lease, from
		// the stop) ends after the lease does, not at the same instant.
		b.clock.Advance(tick)
		synctest.Wait()
		b.storage.SetUnavailable(true)
		lr.cancel()
		l.drive(int(testLease/tick)+1, nil, lr.returned)
		require.Equal(t, claim.LeaseUntil, b.clock.Now(), "returned when the lease ran out")
		require.ErrorIs(t, lr.err, worker.ErrClaimsLeft)
		require.Equal(t, []worker.LeftClaim{{Claim: claim, Why: "lease expired locally"}}, lr.r.Left())
		for _, r := range l.allReports() {
			if r.Write != "" && r.Write != "claim" {
				require.True(t, r.at.Before(claim.LeaseUntil), "no write past the lease: %s", r.Report)
			}
		}
		b.storage.SetUnavailable(false)
		require.Equal(t, model.Running, b.task(id).State)
	})
}

// A drain that releases every claim within the grace returns nil: the run
// under way (1s, under the default grace of the 2s lease) ends, its step
// is committed, and the claim is released.
func TestRunnerDrainWithinTheGraceReturnsNil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		id := b.submit(`{"steps":[{"cost":1,"duration_ms":1000},{"cost":1}]}`, 10, 5)
		lr := l.start("w1", newLiveService(worker.Dedup, nil))
		l.drive(20, nil, func() bool { return len(lr.r.Claims()) == 1 })
		l.drain(lr, 20)
		require.Empty(t, lr.r.Left())
		task := b.task(id)
		require.Equal(t, model.Queued, task.State)
		require.Equal(t, 1, task.StepsUsed)
		require.Zero(t, task.AttemptsCharged)
	})
}

func TestRunnerRefusesANegativeGrace(t *testing.T) {
	b := setup(t)
	_, err := worker.NewRunner(worker.Config{ID: "w1", Queue: b.q, Handler: worker.Synthetic{},
		Service: workertest.NewService(worker.Dedup, b.clock), Clock: b.clock}, worker.RunOptions{ShutdownGrace: -time.Second})
	require.ErrorIs(t, err, model.ErrInvalidInput)
	require.ErrorContains(t, err, "shutdown_grace")
}

// syncBuilder is a strings.Builder safe for the runner's goroutines.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
