package worker_test

// Handlers whose own code runs long, through the live Runner (a goroutine
// per run, heartbeats going on) and the stepped Worker (Inline). The live
// tests run in a testing/synctest bubble under the fake clock, as the
// runner's other tests do: the handler waits on the clock, and the test
// drives the clock a tick at a time once everything is blocked.

import (
	"context"
	"fmt"
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

// slowHandler is a HandlerFunc's function that takes d on clock, or
// returns its context's cause once its context is done; it records when
// it began, the cause it saw, and when it saw it. With late set, it
// returns a result even when its context is done (a handler that ignores
// cancellation).
type slowHandler struct {
	clock clockwork.Clock
	d     time.Duration
	late  bool

	mu      sync.Mutex
	began   time.Time
	opID    string
	cause   error
	causeAt time.Time
}

func (h *slowHandler) run(ctx context.Context, _ model.Task, opID string) (string, error) {
	h.mu.Lock()
	h.began, h.opID = h.clock.Now(), opID
	h.mu.Unlock()
	select {
	case <-h.clock.After(h.d):
		return "done", nil
	case <-ctx.Done():
		h.mu.Lock()
		h.cause, h.causeAt = context.Cause(ctx), h.clock.Now()
		h.mu.Unlock()
		if h.late {
			return "late result", nil
		}
		return "", context.Cause(ctx)
	}
}

func (h *slowHandler) started() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.began.IsZero()
}

func (h *slowHandler) seen() (cause error, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cause, h.causeAt
}

// startSlow submits one task and starts a runner named w1 whose handler
// is h, with no Service, its log in logs and edit applied.
func startSlow(l *live, h *slowHandler, logs *syncBuilder, edit ...func(*worker.Config, *worker.RunOptions)) (string, *liveRunner) {
	id := l.b.submit(`{"work":"long"}`, 10, 5)
	lr := l.start("w1", nil, append([]func(*worker.Config, *worker.RunOptions){func(c *worker.Config, _ *worker.RunOptions) {
		c.Handler, c.Service = worker.HandlerFunc(h.run), nil
		c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	}}, edit...)...)
	return id, lr
}

// A handler whose Run takes five leases completes on its first attempt:
// the slot heartbeats on schedule while it runs (the task's last heartbeat
// time advances every interval, and the worker logs each heartbeat with
// how long the run has taken), and its result is the step's checkpoint.
// The handler gets the step's operation ID.
func TestRunnerHeartbeatsAHandlerThatRunsLongerThanItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		h := &slowHandler{clock: b.clock, d: 5 * testLease}
		var logs syncBuilder
		id, lr := startSlow(l, h, &logs)

		var beats []time.Time
		l.drive(200, func() {
			if at := b.task(id).HeartbeatAt; !at.IsZero() && (len(beats) == 0 || at.After(beats[len(beats)-1])) {
				beats = append(beats, at)
			}
		}, func() bool { return b.task(id).State == model.Completed })
		lr.stop(t)

		task := b.task(id)
		require.Equal(t, int64(1), task.Version, "completed under its first claim")
		require.Zero(t, task.AttemptsCharged)
		require.Equal(t, "done", task.Checkpoint)
		require.Equal(t, epoch.Add(5*testLease), b.clock.Now(), "the run took its 10s")
		// The claim set the first; a heartbeat every interval of the 10s run
		// set each of the others.
		require.Len(t, beats, 1+int(5*testLease/testHeartbeat), "the last heartbeat time advanced every interval of the run")
		for i, at := range beats {
			require.Equal(t, epoch.Add(time.Duration(i)*testHeartbeat), at)
		}
		require.Empty(t, b.eventsOf(id, model.EventLeaseExpired))
		require.Equal(t, model.OperationID(id, 0), h.opID)
		require.Equal(t, 20, strings.Count(logs.String(), `"msg":"heartbeat"`), "every heartbeat of the run is in the log")
		require.Contains(t, logs.String(), `"msg":"heartbeat","worker":"w1","task_id":"`+id+`","attempt":1,`)
		require.Contains(t, logs.String(), `"step":0,"run_ms":9500,`)
	})
}

// A cancellation requested while the handler runs cancels its context at
// the slot's next heartbeat (within one interval), with ErrCancelRequested
// as its cause; the handler returns, and the task ends cancelled with no
// step charged.
func TestRunnerCancelDuringRunCancelsTheHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		h := &slowHandler{clock: b.clock, d: time.Hour}
		var logs syncBuilder
		id, lr := startSlow(l, h, &logs)
		l.drive(20, nil, h.started)
		b.clock.Advance(1200 * time.Millisecond) // between two heartbeats
		synctest.Wait()

		_, err := b.q.Cancel(b.ctx, id, "carol")
		require.NoError(t, err)
		asked := b.clock.Now()
		l.drive(20, nil, func() bool { return b.task(id).State == model.Cancelled })
		lr.stop(t)

		cause, at := h.seen()
		require.ErrorIs(t, cause, worker.ErrCancelRequested)
		require.LessOrEqual(t, at.Sub(asked), testHeartbeat, "seen within one heartbeat interval")
		task := b.task(id)
		require.Equal(t, model.CancelledByCaller, task.Reason)
		require.Equal(t, "carol", task.CancelledBy)
		require.Zero(t, task.StepsUsed)
		require.Contains(t, logs.String(), `"msg":"run cancelled"`)
		require.Contains(t, logs.String(), `"cause":"task cancellation requested"`)
	})
}

// staleBeatQueue refuses every heartbeat as stale once refuse is set, as
// the queue does once another claim is current.
type staleBeatQueue struct {
	worker.Queue
	mu     sync.Mutex
	refuse bool
}

func (q *staleBeatQueue) Heartbeat(ctx context.Context, c model.Claim, lease time.Duration) (model.HeartbeatResult, error) {
	q.mu.Lock()
	refuse := q.refuse
	q.mu.Unlock()
	if refuse {
		return model.HeartbeatResult{}, model.ErrStaleClaim
	}
	return q.Queue.Heartbeat(ctx, c, lease)
}

func (q *staleBeatQueue) set() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.refuse = true
}

// A heartbeat refused while the handler runs (the claim is lost) cancels
// its context with ErrLeaseLost at once; the result the handler returns
// afterwards is dropped and logged, never written: no step is charged and
// no checkpoint saved under the lost claim.
func TestRunnerLeaseLostCancelsTheHandlerAndDropsItsResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		h := &slowHandler{clock: b.clock, d: time.Hour, late: true}
		q := &staleBeatQueue{Queue: b.q}
		var logs syncBuilder
		id, lr := startSlow(l, h, &logs, func(c *worker.Config, o *worker.RunOptions) {
			c.Queue = q
			o.Housekeeper = nil
		})
		l.drive(20, nil, h.started)
		b.clock.Advance(700 * time.Millisecond)
		synctest.Wait()

		q.set()
		refusedFrom := b.clock.Now()
		l.drive(20, nil, func() bool { cause, _ := h.seen(); return cause != nil })
		synctest.Wait()
		cause, at := h.seen()
		require.ErrorIs(t, cause, worker.ErrLeaseLost)
		require.LessOrEqual(t, at.Sub(refusedFrom), testHeartbeat, "at the first refused heartbeat")
		require.Empty(t, lr.r.Claims(), "the claim is left")
		require.Contains(t, logs.String(), `"msg":"run result dropped, not written: the claim ended while it ran","worker":"w1","task_id":"`+id+`"`)
		require.Contains(t, logs.String(), `"cause":"claim lost"`)
		lr.stop(t)

		task := b.task(id)
		require.Equal(t, model.Running, task.State, "left to the reaper")
		require.Zero(t, task.StepsUsed)
		require.Empty(t, task.Checkpoint, "the late result was not written")
		require.Empty(t, b.eventsOf(id, model.EventStep))
	})
}

// A run still under way when the shutdown grace ends has its context
// cancelled with ErrShutdown; Run returns ErrClaimsLeft, and the claim is
// left to the reaper.
func TestRunnerShutdownGraceCancelsTheRunUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		h := &slowHandler{clock: b.clock, d: time.Hour}
		var logs syncBuilder
		const grace = time.Second
		id, lr := startSlow(l, h, &logs, func(_ *worker.Config, o *worker.RunOptions) {
			o.ShutdownGrace = grace
			o.Housekeeper = nil
		})
		l.drive(20, nil, h.started)
		claim := lr.r.Claims()[0]
		lr.cancel()
		stopped := b.clock.Now()
		l.drive(int(grace/tick)+1, nil, lr.returned)
		synctest.Wait()

		require.ErrorIs(t, lr.err, worker.ErrClaimsLeft)
		require.Equal(t, []worker.LeftClaim{{Claim: claim, Why: "still held when the shutdown grace ended"}}, lr.r.Left())
		cause, at := h.seen()
		require.ErrorIs(t, cause, worker.ErrShutdown)
		require.Equal(t, stopped.Add(grace), at, "cancelled as the grace ended, not before")
		require.Equal(t, model.Running, b.task(id).State)
		require.Contains(t, logs.String(), `"cause":"worker shutdown grace ended"`)
	})
}

// A step whose run outlasts its timeout (timeout_ms) has the run cancelled
// with ErrStepTimeout and fails as a transient failure: charged, retried
// after its backoff.
func TestStepTimeoutIsATransientFailure(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1,"duration_ms":3000,"timeout_ms":1000}]}`, 10, 5)
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock))
	r := b.stepUntil(w, is(worker.ActionFail, ""))
	require.Equal(t, "transient failure: to queued", r.Outcome)
	require.Equal(t, epoch.Add(time.Second), b.clock.Now(), "failed as the timeout passed")
	task := b.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, 1, task.AttemptsCharged)
	require.Equal(t, "step 0 timed out after 1s", task.LastError)
	require.Zero(t, task.StepsUsed)
}

// Config.StepTimeout bounds the steps that set none; a handler that ends
// on the timeout's cause reads ErrStepTimeout.
func TestConfigStepTimeoutBoundsEveryStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		h := &slowHandler{clock: b.clock, d: time.Hour}
		var logs syncBuilder
		id, lr := startSlow(l, h, &logs, func(c *worker.Config, o *worker.RunOptions) {
			c.StepTimeout = 1500 * time.Millisecond
			o.Housekeeper = nil
		})
		l.drive(40, nil, func() bool { return b.task(id).AttemptsCharged == 1 })
		lr.stop(t)
		cause, at := h.seen()
		require.ErrorIs(t, cause, worker.ErrStepTimeout)
		require.Equal(t, h.began.Add(1500*time.Millisecond), at)
		require.Equal(t, "step 0 timed out after 1.5s", b.task(id).LastError)
	})
}

// A HandlerFunc gets the step's operation ID, its result is the step's
// checkpoint, a panic fails the task permanently, and a checkpoint over
// the limit fails it permanently too; none needs a Service.
func TestHandlerFuncRunsAsOneStep(t *testing.T) {
	b := setup(t)
	ok := b.submit(`{"n":1}`, 10, 5)
	panics := b.submit(`{"n":2}`, 10, 5)
	huge := b.submit(`{"n":3}`, 10, 5)
	var ops []string
	fn := func(_ context.Context, task model.Task, opID string) (string, error) {
		ops = append(ops, opID)
		switch task.ID {
		case panics:
			panic("boom")
		case huge:
			return strings.Repeat("x", model.CheckpointMax+1), nil
		}
		return "receipt-" + opID, nil
	}
	w, err := worker.New(worker.Config{ID: "w1", Queue: b.q, Handler: worker.HandlerFunc(fn), Clock: b.clock, Concurrency: 3,
		Lease: testLease, Heartbeat: testHeartbeat})
	require.NoError(t, err)
	b.run(w, stepsMax)

	require.ElementsMatch(t, []string{model.OperationID(ok, 0), model.OperationID(panics, 0), model.OperationID(huge, 0)}, ops)
	task := b.task(ok)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, "receipt-"+model.OperationID(ok, 0), task.Checkpoint)
	require.Equal(t, 1, task.StepsUsed)
	require.Zero(t, task.CostUsed, "the simple form's step costs nothing")

	task = b.task(panics)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.PermanentError, task.Reason)
	require.Equal(t, "permanent failure: the handler of step 0 panicked: boom", task.LastError)

	task = b.task(huge)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, fmt.Sprintf("step 0 returned a checkpoint of %d bytes (limit %d)", model.CheckpointMax+1, model.CheckpointMax), task.LastError)
}
