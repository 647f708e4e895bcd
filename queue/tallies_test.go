package queue

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// TestHistogramBucketsMatchModel checks that the triggers that keep the
// queue-wait and run-time histograms (migration 0002, which repeats
// model.HistogramBounds in SQL) bucket every duration as model.BucketOf
// does: each bound, one millisecond either side of it, and zero.
func TestHistogramBucketsMatchModel(t *testing.T) {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	q, err := Open(ctx, Options{Path: Memory, Clock: clock, IDs: model.NewSeededIDs(1)})
	require.NoError(t, err)
	defer q.Close()

	durations := []time.Duration{0}
	for _, b := range model.HistogramBounds {
		for _, ms := range []int64{b - 1, b, b + 1} {
			durations = append(durations, time.Duration(ms)*time.Millisecond)
		}
	}
	wantWait, wantRun := model.NewHistogram(), model.NewHistogram()
	for i, d := range durations {
		_, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: fmt.Sprintf("k%d", i), Payload: `{}`,
			CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
		clock.Advance(d)
		claimed, err := q.Claim(ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: model.LeaseMax})
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		wantWait.Observe(d)
		clock.Advance(d)
		require.NoError(t, q.Complete(ctx, claimed[0].Claim))
		wantRun.Observe(d)
	}
	m, err := q.Metrics(ctx)
	require.NoError(t, err)
	require.Equal(t, wantWait, m.QueueWait)
	require.Equal(t, wantRun, m.RunTime)
	require.NotZero(t, m.QueueWait.Counts[len(model.HistogramBounds)], "the last bucket is reached")
}
