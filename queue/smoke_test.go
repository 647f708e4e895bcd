package queue

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

func TestSmoke(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	q, err := Open(ctx, Options{Path: Memory, Clock: clock, IDs: model.NewSeededIDs(1)})
	require.NoError(t, err)
	defer q.Close()
	res, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: "k1", Payload: `{"steps":[]}`, CostBudget: 10, StepsMax: 3})
	require.NoError(t, err)
	cs, err := q.Claim(ctx, model.ClaimRequest{Worker: "w1", Max: 2, Lease: time.Second})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	require.Equal(t, res.TaskID, cs[0].Claim.TaskID)
	_, err = q.CompleteStep(ctx, model.StepWrite{Claim: cs[0].Claim, Index: 0, Cost: 3})
	require.NoError(t, err)
	require.NoError(t, q.Complete(ctx, cs[0].Claim))
	require.ErrorIs(t, q.Complete(ctx, cs[0].Claim), ErrStaleClaim)
	evs, err := q.Events(ctx, res.TaskID)
	require.NoError(t, err)
	for _, e := range evs {
		t.Logf("%+v", e)
	}
	m, err := q.Metrics(ctx)
	require.NoError(t, err)
	t.Logf("%+v", m)
	require.NoError(t, q.CheckCounters(ctx))
}
