package faults_test

import (
	"context"
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
	ctx context.Context
	raw *queue.Queue
	wq  *faults.Queue
	id  string
	c   model.Claim
}

// setupDuplicate opens a queue, submits one task and claims it through the
// wrapper, with a duplicate armed before the claim (the claim must not
// spend it).
func setupDuplicate(t *testing.T) *dupBundle {
	t.Helper()
	ctx := context.Background()
	raw, err := queue.Open(ctx, queue.Options{Path: queue.Memory, Clock: clockwork.NewFakeClockAt(epoch),
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
	return &dupBundle{ctx: ctx, raw: raw, wq: wq, id: res.TaskID, c: cs[0].Claim}
}

func TestQueueDuplicateCompleteChangesNothing(t *testing.T) {
	b := setupDuplicate(t)
	require.NoError(t, b.wq.Complete(b.ctx, b.c))
	write, err := b.wq.LastDuplicate()
	require.Equal(t, "complete", write)
	require.ErrorIs(t, err, queue.ErrStaleClaim)
	require.NotErrorIs(t, err, faults.ErrInjected, "the second delivery's error is the queue's own")

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
	d, ok := b.wq.Last()
	require.True(t, ok)
	require.Equal(t, b.id, d.TaskID)
	require.Contains(t, b.wq.String(), "queue: armed duplicate=0; fired duplicated=1 second_refused=1; last complete task="+b.id+" fence=1 second=")
}

func TestQueueDuplicateStepChargedOnce(t *testing.T) {
	b := setupDuplicate(t)
	res, err := b.wq.CompleteStep(b.ctx, model.StepWrite{Claim: b.c, Index: 0, Cost: 3})
	require.NoError(t, err)
	require.False(t, res.Replayed, "the caller gets the first delivery's result")
	write, err := b.wq.LastDuplicate()
	require.Equal(t, "step", write)
	require.NoError(t, err, "the second delivery is recognised as a replay")

	task, err := b.raw.Task(b.ctx, b.id)
	require.NoError(t, err)
	require.Equal(t, int64(3), task.CostUsed)
	require.Equal(t, 1, task.StepsUsed)
	require.Equal(t, 1, countEvents(t, b.raw, b.id, model.EventStep))
	require.Equal(t, faults.QueueCounts{Duplicated: 1}, b.wq.Counts())
	require.Equal(t, "queue: armed duplicate=0; fired duplicated=1 second_refused=0; last step task="+b.id+" fence=1 second=accepted", b.wq.String())

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
			got, err := q.LastDuplicate()
			require.Equal(t, name, got)
			require.NoError(t, err)
			d, ok := q.Last()
			require.True(t, ok)
			require.Equal(t, faults.Duplicate{Write: name, TaskID: "t1", Fence: 7}, d)
		})
	}
}

func TestQueueDisarm(t *testing.T) {
	inner := &countingQueue{calls: map[string]int{}}
	q := faults.NewQueue(inner)
	q.ArmDuplicate()
	q.ArmDuplicate()
	require.Equal(t, 2, q.Armed())
	require.Equal(t, "queue: armed duplicate=2; fired duplicated=0 second_refused=0", q.String())
	q.Disarm()
	require.NoError(t, q.Complete(context.Background(), model.Claim{TaskID: "t1"}))
	require.Equal(t, 1, inner.calls["complete"])
	write, err := q.LastDuplicate()
	require.Empty(t, write)
	require.NoError(t, err)
	_, ok := q.Last()
	require.False(t, ok)
}
