package model

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stepClock is a clock the test moves by hand.
type stepClock struct{ at time.Time }

func (c *stepClock) Now() time.Time { return c.at }

// settle submits a task under key and runs it to the end: completed, or
// failed with an effect whose intent has no receipt.
func settle(t *testing.T, r *Reference, key string, open bool) (string, SubmitRequest) {
	t.Helper()
	ctx := context.Background()
	req := SubmitRequest{User: "ana", Key: key, Payload: `{"a":1}`, CostBudget: 5, StepsMax: 3}
	res, err := r.Submit(ctx, req)
	require.NoError(t, err)
	claimed, err := r.Claim(ctx, ClaimRequest{Worker: "w1", Max: 1, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	c := claimed[0].Claim
	if open {
		_, err = r.RecordIntent(ctx, c, 0)
		require.NoError(t, err)
		_, err = r.Fail(ctx, c, Failure{Class: Permanent, Message: "no"})
	} else {
		err = r.Complete(ctx, c)
	}
	require.NoError(t, err)
	return res.TaskID, req
}

// TestReferencePrune: the reference prunes a terminal task with its
// events, keeps one with an effect without its receipt and the newest task,
// answers a replay from the tombstone until a later prune expires it, and
// its counters still account for every task submitted.
func TestReferencePrune(t *testing.T) {
	ctx := context.Background()
	clock := &stepClock{at: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
	r := NewReference(ReferenceOptions{Clock: clock, IDs: NewSeededIDs(1), Rand: rand.New(rand.NewPCG(1, 2))})
	done, req := settle(t, r, "k1", false)
	open, _ := settle(t, r, "k2", true)
	newest, _ := settle(t, r, "k3", false)
	clock.at = clock.at.Add(time.Hour)
	before, _ := r.Metrics(ctx)

	spec := PruneSpec{OlderThan: time.Hour, KeepKeys: time.Minute, Batch: 500, Actor: "ops"}
	dry, err := r.Prune(ctx, PruneSpec{OlderThan: time.Hour, Batch: 500, DryRun: true, Actor: "ops"})
	require.NoError(t, err)
	res, err := r.Prune(ctx, spec)
	require.NoError(t, err)
	require.Equal(t, map[State]int64{Completed: 1}, res.Tasks)
	require.Equal(t, int64(1), res.Kept)
	require.Equal(t, []string{open}, dry.KeptIDs)
	require.Equal(t, dry.Tasks, res.Tasks)
	require.Equal(t, dry.Events, res.Events)
	require.Equal(t, 1, res.Transactions)
	_, err = r.Task(ctx, done)
	require.ErrorIs(t, err, ErrNotFound)
	for _, id := range []string{open, newest} {
		_, err = r.Task(ctx, id)
		require.NoError(t, err)
	}
	evs, _ := r.Events(ctx, done)
	require.Empty(t, evs)
	all, _ := r.Events(ctx, "")
	last := all[len(all)-1]
	require.Equal(t, EventPruned, last.Kind)
	require.Greater(t, last.Seq, int64(len(all)), "numbered after the events pruned")
	after, _ := r.Metrics(ctx)
	require.Equal(t, before.Completions, after.Completions, "the pruned task's completion still counts")
	require.Equal(t, int64(1), after.Pruned)
	require.True(t, after.Reconciles())

	replay, err := r.Submit(ctx, req)
	require.NoError(t, err)
	require.Equal(t, SubmitResult{TaskID: done, Replay: true}, replay)
	changed := req
	changed.CostBudget++
	_, err = r.Submit(ctx, changed)
	require.ErrorIs(t, err, ErrIdempotencyConflict)

	clock.at = clock.at.Add(time.Minute)
	res, err = r.Prune(ctx, spec)
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Expired)
	fresh, err := r.Submit(ctx, changed)
	require.NoError(t, err)
	require.False(t, fresh.Replay)
	require.NotEqual(t, done, fresh.TaskID)
}
