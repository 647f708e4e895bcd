package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

// effectCase is what one service kind must do in one effect scenario.
type effectCase struct {
	kind   worker.ServiceKind
	state  model.State
	reason model.Reason
	log    func(op string) []string // the service's calls and status queries, in order
}

// requireSettled checks the task's end state and, for a completed task,
// that the effect's receipt is on record with the first application's
// result; a task sent to review leaves the effect without a receipt.
func requireSettled(t *testing.T, b *bundle, id string, tc effectCase, receiptFence int64) {
	t.Helper()
	task := b.task(id)
	require.Equal(t, tc.state, task.State)
	require.Equal(t, tc.reason, task.Reason)
	effects, err := b.q.Effects(b.ctx, id)
	require.NoError(t, err)
	require.Len(t, effects, 1)
	switch tc.state {
	case model.Completed:
		require.True(t, effects[0].Receipted())
		require.Equal(t, "charge#1", effects[0].Result, "the receipt holds the first application's result")
		require.Equal(t, receiptFence, effects[0].ReceiptFence)
		require.Equal(t, 3, task.StepsUsed)
		require.Equal(t, int64(8), task.CostUsed)
		require.Len(t, b.eventsOf(id, model.EventEffectReceipt), 1)
	case model.NeedsReview:
		require.False(t, effects[0].Receipted(), "nobody knows the outcome: no receipt")
		require.Equal(t, 1, task.StepsUsed, "the effect step is not charged")
		require.Equal(t, int64(2), task.CostUsed)
		parked := b.eventsOf(id, model.EventUncertain)
		require.Len(t, parked, 1)
		require.Equal(t, model.UncertainEffect, parked[0].Reason)
		require.Contains(t, task.LastError, effects[0].OpID)
	default:
		t.Fatalf("unexpected state %s", tc.state)
	}
}

// The claim's own call loses its response: a Dedup service is called
// again; Fenced and Queryable are asked and the receipt recorded; Plain
// cannot say, so the task goes to review. The effect is applied once.
func TestLostResponseOnOwnCall(t *testing.T) {
	for _, tc := range []effectCase{
		{worker.Dedup, model.Completed, model.NoReason, func(op string) []string { return []string{"call " + op + " 1", "call " + op + " 1"} }},
		{worker.Fenced, model.Completed, model.NoReason, func(op string) []string { return []string{"call " + op + " 1", "status " + op + " 1"} }},
		{worker.Queryable, model.Completed, model.NoReason, func(op string) []string { return []string{"call " + op + " 1", "status " + op + " 1"} }},
		{worker.Plain, model.NeedsReview, model.UncertainEffect, func(op string) []string { return []string{"call " + op + " 1"} }},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			b := setup(t)
			id := b.submit(effectPayload, 10, 5)
			op := model.OperationID(id, 1)
			fake := workertest.NewService(tc.kind, b.clock)
			svc := faults.NewService(fake)
			svc.ArmLostResponse()
			w := b.newWorker("w1", svc)
			reports := b.run(w, stepsMax)

			require.Equal(t, 1, svc.Counts().LostResponse)
			require.Equal(t, 1, fake.Applications(op), "applied exactly once")
			require.Equal(t, tc.log(op), fake.Log())
			require.Equal(t, 1, count(reports, is(worker.ActionCall, "outcome unknown")))
			requireSettled(t, b, id, tc, 1)
			require.Zero(t, b.task(id).AttemptsCharged)
		})
	}
}

// An earlier claim recorded intent and crashed before calling. A Dedup
// service is simply called; a Fenced one is asked first (which registers
// the new fence) and then called, so the old claim's late call is refused;
// Queryable finds it not applied but cannot rule out a late call from the
// old claim, and Plain cannot say: both go to review without calling.
func TestIntentLeftByACrashedClaim(t *testing.T) {
	for _, tc := range []effectCase{
		{worker.Dedup, model.Completed, model.NoReason, func(op string) []string { return []string{"call " + op + " 2"} }},
		{worker.Fenced, model.Completed, model.NoReason, func(op string) []string { return []string{"status " + op + " 2", "call " + op + " 2"} }},
		{worker.Queryable, model.NeedsReview, model.UncertainEffect, func(op string) []string { return []string{"status " + op + " 2"} }},
		{worker.Plain, model.NeedsReview, model.UncertainEffect, func(op string) []string { return nil }},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			b := setup(t)
			id := b.submit(effectPayload, 10, 5)
			op := model.OperationID(id, 1)
			fake := workertest.NewService(tc.kind, b.clock)
			svc := faults.NewService(fake)
			a := b.newWorker("w1", svc)
			r := b.stepUntil(a, is(worker.ActionIntent, string(model.IntentRecorded)))
			require.Equal(t, op, r.OpID)

			b.expire(id) // a crashes: nothing of it runs again until below
			bw := b.newWorker("w2", svc)
			reports := b.run(bw, stepsMax)
			require.Equal(t, 1, count(reports, is(worker.ActionIntent, string(model.IntentUncertain))))
			require.Equal(t, tc.log(op), fake.Log())
			requireSettled(t, b, id, tc, 2)
			if tc.state == model.Completed {
				require.Equal(t, 1, fake.Applications(op))
			} else {
				require.Zero(t, fake.Applications(op), "sent to review without calling")
			}

			if tc.kind == worker.Fenced {
				// The old claim, stalled after its lease check, calls late
				// under its fence: the service refuses it.
				_, err := svc.Call(b.ctx, worker.Call{OpID: op, TaskID: id, Effect: "charge", Fence: 1})
				require.ErrorIs(t, err, worker.ErrStaleFence)
				require.Equal(t, 1, fake.Applications(op), "the late call was not applied")
			}

			// The old worker, stepped again, finds its lease run out and
			// drops the claim without a write or a call.
			calls, events := fake.CallCount(), len(b.events(id))
			r = b.step(a)
			require.Equal(t, worker.ActionCheckLease, r.Action)
			require.Equal(t, "lease expired locally; claim dropped", r.Outcome)
			require.NoError(t, r.Err)
			require.Empty(t, r.Write)
			require.Empty(t, a.Claims())
			require.Len(t, fake.Calls(), calls)
			require.Len(t, b.events(id), events, "no write: not even a refused one")
		})
	}
}

// An earlier claim called, lost the response and crashed before the
// receipt. Fenced and Queryable are asked, find it applied and record the
// receipt without calling; Dedup is called again and answers the first
// result; Plain goes to review. Applied exactly once.
func TestCallLeftUnreceiptedByACrashedClaim(t *testing.T) {
	for _, tc := range []effectCase{
		{worker.Dedup, model.Completed, model.NoReason, func(op string) []string { return []string{"call " + op + " 1", "call " + op + " 2"} }},
		{worker.Fenced, model.Completed, model.NoReason, func(op string) []string { return []string{"call " + op + " 1", "status " + op + " 2"} }},
		{worker.Queryable, model.Completed, model.NoReason, func(op string) []string { return []string{"call " + op + " 1", "status " + op + " 2"} }},
		{worker.Plain, model.NeedsReview, model.UncertainEffect, func(op string) []string { return []string{"call " + op + " 1"} }},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			b := setup(t)
			id := b.submit(effectPayload, 10, 5)
			op := model.OperationID(id, 1)
			fake := workertest.NewService(tc.kind, b.clock)
			svc := faults.NewService(fake)
			svc.ArmLostResponse()
			a := b.newWorker("w1", svc)
			r := b.stepUntil(a, is(worker.ActionCall, ""))
			require.Equal(t, "outcome unknown", r.Outcome)
			require.True(t, r.Called)

			b.expire(id)
			bw := b.newWorker("w2", svc)
			b.run(bw, stepsMax)
			require.Equal(t, tc.log(op), fake.Log())
			require.Equal(t, 1, fake.Applications(op), "applied exactly once")
			requireSettled(t, b, id, tc, 2)
		})
	}
}

// A service that refuses a call before applying it is retried after a
// backoff under the same claim; the effect is applied once.
func TestServiceUnavailableIsRetried(t *testing.T) {
	for _, kind := range worker.ServiceKinds() {
		t.Run(string(kind), func(t *testing.T) {
			b := setup(t)
			id := b.submit(effectPayload, 10, 5)
			op := model.OperationID(id, 1)
			fake := workertest.NewService(kind, b.clock)
			svc := faults.NewService(fake)
			svc.ArmUnavailable()
			svc.ArmUnavailable()
			reports := b.run(b.newWorker("w1", svc), stepsMax)

			require.Equal(t, 2, svc.Counts().Unavailable)
			var refused []string
			for _, r := range reports {
				if r.Action == worker.ActionCall && r.Err != nil {
					require.ErrorIs(t, r.Err, worker.ErrUnavailable)
					refused = append(refused, r.Outcome)
				}
			}
			require.Equal(t, []string{"service unavailable; retry in 100ms", "service unavailable; retry in 200ms"}, refused,
				"the retry backs off")
			require.Equal(t, []string{fmt.Sprintf("call %s 1", op)}, fake.Log(), "refused calls never reach the service")
			require.Equal(t, 1, fake.Applications(op))
			task := b.task(id)
			require.Equal(t, model.Completed, task.State)
			require.Equal(t, int64(1), task.Version)
		})
	}
}

// A Fenced service that refuses the claim's own call as stale means a newer
// claim exists: the worker drops its claim without a receipt.
func TestStaleFenceRefusalDropsTheClaim(t *testing.T) {
	b := setup(t)
	id := b.submit(effectPayload, 10, 5)
	op := model.OperationID(id, 1)
	fake := workertest.NewService(worker.Fenced, b.clock)
	_, _, err := fake.Status(b.ctx, op, 7) // a newer claim asked about the operation
	require.NoError(t, err)
	w := b.newWorker("w1", fake)
	r := b.stepUntil(w, is(worker.ActionCall, ""))
	require.ErrorIs(t, r.Err, worker.ErrStaleFence)
	require.Equal(t, "refused: stale fence; claim dropped", r.Outcome)
	require.Empty(t, w.Claims())
	require.Zero(t, fake.Applications(op))
	effects, err := b.q.Effects(b.ctx, id)
	require.NoError(t, err)
	require.Len(t, effects, 1)
	require.False(t, effects[0].Receipted())
}

// An earlier claim recorded the receipt and crashed before charging the
// step. The next claim finds the operation receipted and never calls it
// again, whatever the service can do.
func TestReceiptedOperationIsNeverCalledAgain(t *testing.T) {
	for _, kind := range worker.ServiceKinds() {
		t.Run(string(kind), func(t *testing.T) {
			b := setup(t)
			id := b.submit(effectPayload, 10, 5)
			op := model.OperationID(id, 1)
			fake := workertest.NewService(kind, b.clock)
			a := b.newWorker("w1", fake)
			b.stepUntil(a, is(worker.ActionReceipt, ""))

			b.expire(id)
			reports := b.run(b.newWorker("w2", fake), stepsMax)
			require.Equal(t, 1, count(reports, is(worker.ActionIntent, string(model.IntentReceipted))))
			require.Equal(t, []string{"call " + op + " 1"}, fake.Log(), "only the first claim called")
			require.Equal(t, 1, fake.Applications(op))

			task := b.task(id)
			require.Equal(t, model.Completed, task.State)
			require.Equal(t, int64(8), task.CostUsed)
			steps := b.eventsOf(id, model.EventStep)
			require.Len(t, steps, 3)
			require.Equal(t, "step 1 cost 5", steps[1].Detail)
			require.Equal(t, int64(2), steps[1].Fence, "the second claim charged the effect's step")
			require.Len(t, b.eventsOf(id, model.EventEffectReceipt), 1)
		})
	}
}

// shortClaimQueue reports every claim's lease as ending after short, as a
// claim reply that arrived late would: the worker's own view of the lease
// is then shorter than the queue's.
type shortClaimQueue struct {
	worker.Queue
	short time.Duration
}

func (q shortClaimQueue) Claim(ctx context.Context, req model.ClaimRequest) ([]model.Claimed, error) {
	cs, err := q.Queue.Claim(ctx, req)
	for i := range cs {
		cs[i].Claim.LeaseUntil = cs[i].Claim.LeaseUntil.Add(q.short - req.Lease)
	}
	return cs, err
}

// The worker checks its own view of the lease before calling: once that
// has run out it drops the claim without calling, even though the queue
// still accepted its intent.
func TestLeaseExpiredLocallyBeforeTheCall(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1,"duration_ms":150,"effect":"charge"}]}`, 10, 5)
	fake := workertest.NewService(worker.Dedup, b.clock)
	var logged bytes.Buffer
	w := b.newWorker("w1", fake, func(c *worker.Config) {
		c.Queue = shortClaimQueue{Queue: b.q, short: 200 * time.Millisecond}
		c.Logger = slog.New(slog.NewJSONHandler(&logged, nil))
	})
	b.stepUntil(w, is(worker.ActionIntent, string(model.IntentRecorded)))
	require.Equal(t, epoch.Add(150*time.Millisecond), b.clock.Now())
	b.clock.Advance(100 * time.Millisecond) // a stall between the intent and the call

	r := b.step(w)
	require.Equal(t, worker.ActionCheckLease, r.Action)
	require.Equal(t, "lease expired locally; claim dropped", r.Outcome)
	require.Empty(t, w.Claims())
	require.Empty(t, fake.Calls())
	require.Equal(t, model.Running, b.task(id).State, "the queue's lease has not run out yet")
	// The log record says why the claim was left in a field of its own,
	// which the live run reads instead of the message's wording.
	var left []string
	for _, line := range bytes.Split(bytes.TrimSpace(logged.Bytes()), []byte("\n")) {
		var rec struct {
			Left string `json:"left"`
		}
		require.NoError(t, json.Unmarshal(line, &rec), "%s", line)
		if rec.Left != "" {
			left = append(left, rec.Left)
		}
	}
	require.Equal(t, []string{worker.LeftLeaseExpired}, left)
}

// While the service stays unavailable across several heartbeats, the call's
// retry delays keep doubling up to the cap: the heartbeats the queue
// accepts in between reset the storage backoff, not the service's.
func TestServiceBackoffGrowsAcrossHeartbeats(t *testing.T) {
	b := setup(t)
	id := b.submit(effectPayload, 10, 5)
	op := model.OperationID(id, 1)
	fake := workertest.NewService(worker.Dedup, b.clock)
	svc := faults.NewService(fake)
	const refusals = 6
	for range refusals {
		svc.ArmUnavailable()
	}
	w := b.newWorker("w1", svc, func(c *worker.Config) { c.StorageBackoffMax = 800 * time.Millisecond })
	reports := b.run(w, stepsMax)

	var refused []string
	beatsBetween := 0
	for _, r := range reports {
		switch {
		case r.Action == worker.ActionCall && r.Err != nil:
			require.ErrorIs(t, r.Err, worker.ErrUnavailable)
			refused = append(refused, r.Outcome)
		case r.Action == worker.ActionHeartbeat && r.Accepted && len(refused) > 0 && len(refused) < refusals:
			beatsBetween++
		}
	}
	require.Equal(t, []string{"service unavailable; retry in 100ms", "service unavailable; retry in 200ms",
		"service unavailable; retry in 400ms", "service unavailable; retry in 800ms",
		"service unavailable; retry in 800ms", "service unavailable; retry in 800ms"}, refused)
	require.GreaterOrEqual(t, beatsBetween, 2, "heartbeats were accepted while the service was down")
	require.Equal(t, 1, fake.Applications(op))
	task := b.task(id)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, int64(1), task.Version, "the heartbeats kept the claim throughout")
}

// Every call to the service follows the local lease check, including a
// call made again after reconciliation or after the service was
// unavailable: once the worker's own view of the lease has run out, it
// drops the claim instead of calling.
func TestEveryCallFollowsTheLeaseCheck(t *testing.T) {
	// shortLease makes the worker believe its claims end after 200ms (the
	// queue's lease is the usual 2s; heartbeats are due at 500ms).
	shortLease := func(b *bundle) func(*worker.Config) {
		return func(c *worker.Config) { c.Queue = shortClaimQueue{Queue: b.q, short: 200 * time.Millisecond} }
	}
	expired := is(worker.ActionCheckLease, "lease expired locally; claim dropped")

	t.Run("dedup resend after a lost response", func(t *testing.T) {
		b := setup(t)
		id := b.submit(effectPayload, 10, 5)
		op := model.OperationID(id, 1)
		fake := workertest.NewService(worker.Dedup, b.clock)
		svc := faults.NewService(fake)
		svc.ArmLostResponse()
		w := b.newWorker("w1", svc, shortLease(b))
		b.stepUntil(w, is(worker.ActionCall, "outcome unknown"))

		b.clock.Advance(250 * time.Millisecond) // a stall before reconciling
		r := b.step(w)
		require.True(t, expired(r), "reconciling a dedup service checks the lease before calling again: %s", r)
		require.Empty(t, w.Claims())
		require.Equal(t, []string{"call " + op + " 1"}, fake.Log(), "not called again")
	})

	t.Run("fenced resend after the status query", func(t *testing.T) {
		b := setup(t)
		id := b.submit(effectPayload, 10, 5)
		op := model.OperationID(id, 1)
		fake := workertest.NewService(worker.Fenced, b.clock)
		a := b.newWorker("w1", fake)
		b.stepUntil(a, is(worker.ActionIntent, string(model.IntentRecorded)))
		b.expire(id) // a crashes before calling

		w := b.newWorker("w2", fake, shortLease(b))
		b.stepUntil(w, is(worker.ActionReconcile, "not applied; call again"))
		b.clock.Advance(250 * time.Millisecond) // a stall after the query
		r := b.step(w)
		require.True(t, expired(r), "the resend checks the lease first: %s", r)
		require.Empty(t, w.Claims())
		require.Equal(t, []string{"status " + op + " 2"}, fake.Log(), "not called")
		require.Zero(t, fake.Applications(op))
	})

	t.Run("retry after the service was unavailable", func(t *testing.T) {
		b := setup(t)
		id := b.submit(effectPayload, 10, 5)
		fake := workertest.NewService(worker.Dedup, b.clock)
		svc := faults.NewService(fake)
		svc.ArmUnavailable()
		w := b.newWorker("w1", svc, shortLease(b), func(c *worker.Config) { c.StorageBackoffMin = 300 * time.Millisecond })
		r := b.stepUntil(w, is(worker.ActionCall, "service unavailable; retry in 300ms"))
		require.ErrorIs(t, r.Err, worker.ErrUnavailable)

		r = b.stepUntil(w, func(r worker.Report) bool { return r.Action != worker.ActionIdle && r.Action != worker.ActionWait })
		require.True(t, expired(r), "the slot wakes at the end of its lease, before the backoff ends: %s", r)
		require.Equal(t, epoch.Add(200*time.Millisecond), b.clock.Now())
		require.Empty(t, w.Claims())
		require.Empty(t, fake.Calls(), "the refused call never reached the service, and there was no other")
		require.Equal(t, model.Running, b.task(id).State, "the queue's lease has not run out yet")
	})
}
