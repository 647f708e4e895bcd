package faults_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// dupBundle is a real in-memory queue wrapped in a faults.Queue.
type dupBundle struct {
	ctx   context.Context
	clock *clockwork.FakeClock
	raw   *queue.Queue
	wq    *faults.Queue
	id    string
	c     model.Claim
}

// setupDuplicate opens a queue, submits one task and claims it through the
// wrapper, with a duplicate armed before the claim (the claim must not
// spend it).
func setupDuplicate(t *testing.T) *dupBundle {
	t.Helper()
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(epoch)
	raw, err := queue.Open(ctx, queue.Options{Path: queue.Memory, Clock: clock,
		IDs: model.NewSeededIDs(1), BusyTimeout: queue.NoBusyTimeout})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, raw.CheckCounters(ctx))
		require.NoError(t, raw.Close())
	})
	res, err := raw.Submit(ctx, request("k1"))
	require.NoError(t, err)
	wq := faults.NewQueue(raw)
	wq.ArmDuplicate()
	cs, err := wq.Claim(ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: testLease})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	require.Equal(t, 1, wq.Armed(), "a claim is never duplicated")
	require.Equal(t, faults.QueueCounts{}, wq.Counts())
	return &dupBundle{ctx: ctx, clock: clock, raw: raw, wq: wq, id: res.TaskID, c: cs[0].Claim}
}

func TestQueueDuplicateCompleteChangesNothing(t *testing.T) {
	b := setupDuplicate(t)
	require.NoError(t, b.wq.Complete(b.ctx, b.c))
	d, ok := b.wq.Last()
	require.True(t, ok)
	require.Equal(t, model.WriteComplete, d.Write)
	require.Equal(t, b.id, d.TaskID)
	require.ErrorIs(t, d.Err, queue.ErrStaleClaim)
	require.NotErrorIs(t, d.Err, faults.ErrInjected, "the second delivery's error is the queue's own")

	task, err := b.raw.Task(b.ctx, b.id)
	require.NoError(t, err)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, 1, countEvents(t, b.raw, b.id, model.EventCompleted))
	evs, err := b.raw.Events(b.ctx, b.id)
	require.NoError(t, err)
	var stale []model.Event
	for _, e := range evs {
		if e.Kind == model.EventStaleWrite {
			stale = append(stale, e)
		}
	}
	require.Len(t, stale, 1)
	require.Equal(t, b.c.Fence, stale[0].Fence)
	require.Equal(t, model.Completed, stale[0].From)
	require.Equal(t, model.Completed, stale[0].To)

	require.Equal(t, faults.QueueCounts{Duplicated: 1, SecondRefused: 1}, b.wq.Counts())
	require.Zero(t, b.wq.Armed())
	require.Contains(t, b.wq.String(), "queue: armed duplicate=0 hold=0 every=-; kept 0; fired duplicated=1 second_refused=1; last complete task="+b.id+" fence=1 second=")
}

func TestQueueDuplicateStepChargedOnce(t *testing.T) {
	b := setupDuplicate(t)
	res, err := b.wq.CompleteStep(b.ctx, model.StepWrite{Claim: b.c, Index: 0, Cost: 3})
	require.NoError(t, err)
	require.False(t, res.Replayed, "the caller gets the first delivery's result")
	d, ok := b.wq.Last()
	require.True(t, ok)
	require.Equal(t, model.WriteStep, d.Write)
	require.NoError(t, d.Err, "the second delivery is recognised as a replay")

	task, err := b.raw.Task(b.ctx, b.id)
	require.NoError(t, err)
	require.Equal(t, int64(3), task.CostUsed)
	require.Equal(t, 1, task.StepsUsed)
	require.Equal(t, 1, countEvents(t, b.raw, b.id, model.EventStep))
	require.Equal(t, faults.QueueCounts{Duplicated: 1}, b.wq.Counts())
	require.Equal(t, "queue: armed duplicate=0 hold=0 every=-; kept 0; fired duplicated=1 second_refused=0; last step task="+b.id+" fence=1 second=accepted", b.wq.String())

	// Unarmed, the next write is delivered once.
	_, err = b.wq.CompleteStep(b.ctx, model.StepWrite{Claim: b.c, Index: 1, Cost: 2})
	require.NoError(t, err)
	require.Equal(t, 1, b.wq.Counts().Duplicated)
	task, err = b.raw.Task(b.ctx, b.id)
	require.NoError(t, err)
	require.Equal(t, int64(5), task.CostUsed)
}

// countingQueue is a worker.Queue that counts the calls it receives.
type countingQueue struct{ calls map[string]int }

func (q *countingQueue) Claim(context.Context, model.ClaimRequest) ([]model.Claimed, error) {
	q.calls["claim"]++
	return nil, nil
}
func (q *countingQueue) Heartbeat(context.Context, model.Claim, time.Duration) (model.HeartbeatResult, error) {
	q.calls["heartbeat"]++
	return model.HeartbeatResult{}, nil
}
func (q *countingQueue) CompleteStep(context.Context, model.StepWrite) (model.StepResult, error) {
	q.calls["step"]++
	return model.StepResult{}, nil
}
func (q *countingQueue) RecordIntent(context.Context, model.Claim, int) (model.IntentResult, error) {
	q.calls["effect_intent"]++
	return model.IntentResult{}, nil
}
func (q *countingQueue) RecordReceipt(context.Context, model.Claim, string, string) error {
	q.calls["effect_receipt"]++
	return nil
}
func (q *countingQueue) Pause(context.Context, model.Claim, int, string) (model.State, error) {
	q.calls["pause"]++
	return model.WaitingForApproval, nil
}
func (q *countingQueue) Complete(context.Context, model.Claim) error {
	q.calls["complete"]++
	return nil
}
func (q *countingQueue) Fail(context.Context, model.Claim, model.Failure) (model.State, error) {
	q.calls["fail"]++
	return model.Failed, nil
}
func (q *countingQueue) Release(context.Context, model.Claim) (model.State, error) {
	q.calls["release"]++
	return model.Queued, nil
}
func (q *countingQueue) AcknowledgeCancel(context.Context, model.Claim) error {
	q.calls["cancel_ack"]++
	return nil
}

// Every fenced write is duplicated when armed and delivered once when not;
// a claim is always delivered once.
func TestQueueDuplicatesEveryFencedWrite(t *testing.T) {
	ctx := context.Background()
	c := model.Claim{TaskID: "t1", Fence: 7}
	writes := map[string]func(q *faults.Queue){
		"heartbeat":      func(q *faults.Queue) { q.Heartbeat(ctx, c, testLease) },
		"step":           func(q *faults.Queue) { q.CompleteStep(ctx, model.StepWrite{Claim: c}) },
		"effect_intent":  func(q *faults.Queue) { q.RecordIntent(ctx, c, 0) },
		"effect_receipt": func(q *faults.Queue) { q.RecordReceipt(ctx, c, "op", "ok") },
		"pause":          func(q *faults.Queue) { q.Pause(ctx, c, 0, "manager") },
		"complete":       func(q *faults.Queue) { q.Complete(ctx, c) },
		"fail":           func(q *faults.Queue) { q.Fail(ctx, c, model.Failure{}) },
		"release":        func(q *faults.Queue) { q.Release(ctx, c) },
		"cancel_ack":     func(q *faults.Queue) { q.AcknowledgeCancel(ctx, c) },
	}
	require.Len(t, writes, 9)
	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			inner := &countingQueue{calls: map[string]int{}}
			q := faults.NewQueue(inner)
			write(q)
			require.Equal(t, map[string]int{name: 1}, inner.calls)
			q.ArmDuplicate()
			q.Claim(ctx, model.ClaimRequest{})
			write(q)
			require.Equal(t, map[string]int{name: 3, "claim": 1}, inner.calls)
			d, ok := q.Last()
			require.True(t, ok)
			require.Equal(t, faults.Duplicate{Write: model.Write(name), TaskID: "t1", Fence: 7}, d)
		})
	}
}

// Disarm cancels everything armed: duplicates, holds and DuplicateEvery,
// and drops kept writes.
func TestQueueDisarm(t *testing.T) {
	ctx := context.Background()
	inner := &countingQueue{calls: map[string]int{}}
	q := faults.NewQueue(inner)
	q.ArmDuplicate()
	q.ArmDuplicate()
	q.ArmHold()
	q.DuplicateEvery("complete")
	require.Equal(t, 2, q.Armed())
	require.Equal(t, "queue: armed duplicate=2 hold=1 every=complete; kept 0; fired duplicated=0 second_refused=0", q.String())
	require.NoError(t, q.AcknowledgeCancel(ctx, model.Claim{TaskID: "t0"}))
	require.Equal(t, "queue: armed duplicate=1 hold=0 every=complete; kept 1; fired duplicated=1 second_refused=0; "+
		"last cancel_ack task=t0 fence=0 second=accepted", q.String())

	q.Disarm()
	require.Zero(t, q.Armed())
	require.Equal(t, "queue: armed duplicate=0 hold=0 every=-; kept 0; fired duplicated=1 second_refused=0; "+
		"last cancel_ack task=t0 fence=0 second=accepted", q.String(), "counts and the last duplicate are kept")
	require.NoError(t, q.Complete(ctx, model.Claim{TaskID: "t1"}))
	require.Equal(t, 1, inner.calls["complete"], "DuplicateEvery stopped too")
	_, ok := q.Redeliver()
	require.False(t, ok, "the kept write was dropped")
	require.Equal(t, map[string]int{"cancel_ack": 2, "complete": 1}, inner.calls)
	require.Equal(t, 1, q.Counts().Duplicated)
}

func TestQueueLastIsEmptyUntilADuplicate(t *testing.T) {
	q := faults.NewQueue(&countingQueue{calls: map[string]int{}})
	require.NoError(t, q.Complete(context.Background(), model.Claim{TaskID: "t1"}))
	d, ok := q.Last()
	require.False(t, ok)
	require.Equal(t, faults.Duplicate{}, d)
	require.Equal(t, "queue: armed duplicate=0 hold=0 every=-; kept 0; fired duplicated=0 second_refused=0", q.String())
}

// DuplicateEvery delivers every write it names twice, as a client that
// always retries would, and only that write; claims never; an empty name
// stops it. An armed duplicate hitting the same write is spent, and the
// write is still delivered only twice.
func TestQueueDuplicateEvery(t *testing.T) {
	ctx := context.Background()
	c := model.Claim{TaskID: "t1", Fence: 3}
	inner := &countingQueue{calls: map[string]int{}}
	q := faults.NewQueue(inner)
	q.DuplicateEvery("complete")
	for range 3 {
		require.NoError(t, q.Complete(ctx, c))
	}
	_, err := q.Heartbeat(ctx, c, testLease)
	require.NoError(t, err)
	_, err = q.Claim(ctx, model.ClaimRequest{})
	require.NoError(t, err)
	require.Equal(t, map[string]int{"complete": 6, "heartbeat": 1, "claim": 1}, inner.calls)
	require.Equal(t, faults.QueueCounts{Duplicated: 3}, q.Counts())
	require.Contains(t, q.String(), "every=complete")

	q.ArmDuplicate()
	require.NoError(t, q.Complete(ctx, c))
	require.Equal(t, 8, inner.calls["complete"], "delivered twice, not three times")
	require.Zero(t, q.Armed(), "the armed duplicate was spent on it")

	q.DuplicateEvery("")
	require.NoError(t, q.Complete(ctx, c))
	require.Equal(t, 9, inner.calls["complete"])
	require.Equal(t, faults.QueueCounts{Duplicated: 4}, q.Counts())
	require.Contains(t, q.String(), "every=-")
}

// DuplicateEvery against the real queue: each completion's second delivery
// is refused as stale and recorded; the task completes once.
func TestQueueDuplicateEveryOnTheQueue(t *testing.T) {
	b := setupDuplicate(t)
	b.wq.Disarm()
	b.wq.DuplicateEvery("complete")
	require.NoError(t, b.wq.Complete(b.ctx, b.c))
	require.Equal(t, faults.QueueCounts{Duplicated: 1, SecondRefused: 1}, b.wq.Counts())
	d, ok := b.wq.Last()
	require.True(t, ok)
	require.Equal(t, model.WriteComplete, d.Write)
	require.ErrorIs(t, d.Err, queue.ErrStaleClaim)
	require.Equal(t, 1, countEvents(t, b.raw, b.id, model.EventCompleted))
	require.Equal(t, 1, countEvents(t, b.raw, b.id, model.EventStaleWrite))
}

// ArmHold keeps the next fenced write (delivered now, once) for Redeliver,
// which delivers it again later and records the queue's answer: a late
// heartbeat from a claim that has since expired is refused as stale and
// extends nothing.
func TestQueueHoldAndRedeliver(t *testing.T) {
	b := setupDuplicate(t)
	b.wq.Disarm()
	_, ok := b.wq.Redeliver()
	require.False(t, ok, "nothing kept yet")

	b.wq.ArmHold()
	_, err := b.wq.Claim(b.ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: testLease})
	require.NoError(t, err)
	require.Contains(t, b.wq.String(), "hold=1 every=-; kept 0", "a claim is never kept")
	hb, err := b.wq.Heartbeat(b.ctx, b.c, testLease)
	require.NoError(t, err)
	require.Contains(t, b.wq.String(), "hold=0 every=-; kept 1")
	require.Equal(t, faults.QueueCounts{}, b.wq.Counts(), "kept, not yet delivered twice")
	_, ok = b.wq.Last()
	require.False(t, ok)

	// The claim expires and is taken over; the kept heartbeat arrives late.
	clock := b.clock
	clock.Advance(testLease + time.Second)
	_, err = b.raw.Reap(b.ctx)
	require.NoError(t, err)
	task, err := b.raw.Task(b.ctx, b.id)
	require.NoError(t, err)
	clock.Advance(task.RunAt.Sub(clock.Now()))
	next, err := b.raw.Claim(b.ctx, model.ClaimRequest{Worker: "w2", Max: 1, Lease: testLease})
	require.NoError(t, err)
	require.Len(t, next, 1)

	late, ok := b.wq.Redeliver()
	require.True(t, ok)
	require.Equal(t, model.WriteHeartbeat, late.Write)
	require.Equal(t, b.c, late.Claim)
	err = late.Err
	require.ErrorIs(t, err, queue.ErrStaleClaim)
	require.True(t, late.LeaseUntil.IsZero(), "a refused heartbeat set no lease")
	d, ok := b.wq.Last()
	require.True(t, ok)
	require.Equal(t, faults.Duplicate{Write: "heartbeat", TaskID: b.id, Fence: b.c.Fence, Err: err}, d)
	require.Equal(t, faults.QueueCounts{Duplicated: 1, SecondRefused: 1}, b.wq.Counts())
	task, err = b.raw.Task(b.ctx, b.id)
	require.NoError(t, err)
	require.Equal(t, next[0].Claim.LeaseUntil, task.LeaseUntil, "the late heartbeat extended nothing")
	require.True(t, hb.LeaseUntil.Before(task.LeaseUntil))

	_, ok = b.wq.Redeliver()
	require.False(t, ok, "a kept write is delivered again once")
}

// A kept heartbeat delivered late while its claim still holds is accepted,
// and Redeliver reports the lease the queue set, not one the caller would
// have to guess.
func TestQueueRedeliveredHeartbeatReportsItsLease(t *testing.T) {
	b := setupDuplicate(t)
	b.wq.Disarm()
	b.wq.ArmHold()
	first, err := b.wq.Heartbeat(b.ctx, b.c, testLease)
	require.NoError(t, err)
	b.clock.Advance(testLease / 2)
	late, ok := b.wq.Redeliver()
	require.True(t, ok)
	require.NoError(t, late.Err)
	require.Equal(t, model.WriteHeartbeat, late.Write)
	task, err := b.raw.Task(b.ctx, b.id)
	require.NoError(t, err)
	require.Equal(t, task.LeaseUntil, late.LeaseUntil, "the lease the queue stored")
	require.Equal(t, model.Truncate(b.clock.Now()).Add(testLease), late.LeaseUntil)
	require.True(t, first.LeaseUntil.Before(late.LeaseUntil), "the late heartbeat extended the lease")

	b.wq.ArmHold()
	require.NoError(t, b.wq.Complete(b.ctx, b.c))
	late, ok = b.wq.Redeliver()
	require.True(t, ok)
	require.ErrorIs(t, late.Err, queue.ErrStaleClaim)
	require.True(t, late.LeaseUntil.IsZero(), "only a heartbeat reports a lease")
}

// Holds keep writes oldest first, at most HeldMax at once; a hold armed
// while HeldMax are kept waits for Redeliver to make room.
func TestQueueHoldBound(t *testing.T) {
	ctx := context.Background()
	inner := &countingQueue{calls: map[string]int{}}
	q := faults.NewQueue(inner)
	for range faults.HeldMax + 1 {
		q.ArmHold()
	}
	for i := range faults.HeldMax + 1 {
		_, err := q.Heartbeat(ctx, model.Claim{TaskID: fmt.Sprintf("t%d", i), Fence: 1}, testLease)
		require.NoError(t, err)
	}
	require.Equal(t, faults.HeldMax+1, inner.calls["heartbeat"], "each delivered once now")
	require.Contains(t, q.String(), fmt.Sprintf("hold=1 every=-; kept %d", faults.HeldMax))

	first, ok := q.Redeliver()
	require.True(t, ok)
	require.NoError(t, first.Err)
	require.Equal(t, "t0", first.Claim.TaskID, "oldest first")
	require.NoError(t, q.Complete(ctx, model.Claim{TaskID: "late", Fence: 1}))
	require.Contains(t, q.String(), fmt.Sprintf("hold=0 every=-; kept %d", faults.HeldMax), "the waiting hold took the freed room")
	var order []string
	for {
		r, ok := q.Redeliver()
		if !ok {
			break
		}
		order = append(order, string(r.Write)+" "+r.Claim.TaskID)
	}
	require.Len(t, order, faults.HeldMax)
	require.Equal(t, "heartbeat t1", order[0])
	require.Equal(t, "complete late", order[len(order)-1])
	require.Equal(t, 2*faults.HeldMax+1, inner.calls["heartbeat"], "HeldMax+1 first deliveries, HeldMax late ones")
	require.Equal(t, 2, inner.calls["complete"])
	require.Equal(t, faults.HeldMax+1, q.Counts().Duplicated)
}

// With nothing armed a write is forwarded once and allocates nothing of
// the Queue's own beyond the forwarding closure (no kept-write closure).
func TestQueueUnarmedDeliveryAllocations(t *testing.T) {
	ctx := context.Background()
	inner := &countingQueue{calls: map[string]int{}}
	q := faults.NewQueue(inner)
	c := model.Claim{TaskID: "t1", Fence: 1}
	base := testing.AllocsPerRun(100, func() { _ = inner.Complete(ctx, c) })
	wrapped := testing.AllocsPerRun(100, func() { _ = q.Complete(ctx, c) })
	require.LessOrEqual(t, wrapped-base, 1.0, "at most the forwarding closure")
}
