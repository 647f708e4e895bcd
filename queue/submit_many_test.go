package queue

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/faults/storagefault"
	"github.com/leasehold/leasehold/model"
)

func batchRequests(n int) []model.SubmitRequest {
	var reqs []model.SubmitRequest
	for i := range n {
		r := model.SubmitRequest{User: fmt.Sprintf("u%d", i%3), Key: fmt.Sprintf("k%d", i), Payload: `{"steps":[{"cost":1}]}`,
			CostBudget: 10, StepsMax: 5, Priority: i%3 - 1}
		if i%4 == 0 {
			r.RunAt, r.Deadline = epoch.Add(time.Duration(i)*time.Second), epoch.Add(time.Hour)
		}
		reqs = append(reqs, r)
	}
	return reqs
}

// SubmitMany writes exactly what Submit writes for each request, one by
// one: the same tasks, events, metrics and counters (a user under a
// running limit covers the claim flags).
func TestSubmitManyWritesWhatSubmitWrites(t *testing.T) {
	reqs := batchRequests(40)
	build := func(bulk bool) *bundle {
		b := setup(t)
		require.NoError(t, b.q.SetUserLimit(b.ctx, model.UserLimit{User: "u0", RunningMax: 1, DepthMax: model.Inherit}, "test"))
		if bulk {
			res, err := b.q.SubmitMany(b.ctx, reqs)
			require.NoError(t, err)
			require.Len(t, res, len(reqs))
		} else {
			for _, r := range reqs {
				_, err := b.q.Submit(b.ctx, r)
				require.NoError(t, err)
			}
		}
		require.NoError(t, b.q.CheckCounters(b.ctx))
		return b
	}
	one, bulk := build(false), build(true)
	all := model.ListFilter{Limit: model.ListLimitMax}
	want, err := one.q.List(one.ctx, all)
	require.NoError(t, err)
	got, err := bulk.q.List(bulk.ctx, all)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, one.events(""), bulk.events(""))
	wantMetrics, err := one.q.Metrics(one.ctx)
	require.NoError(t, err)
	gotMetrics, err := bulk.q.Metrics(bulk.ctx)
	require.NoError(t, err)
	require.Equal(t, wantMetrics, gotMetrics)
	// The first claim of each takes the same task.
	c1, c2 := one.claim("w1"), bulk.claim("w1")
	require.Equal(t, c1.Claim.TaskID, c2.Claim.TaskID)
}

// The payload validator refuses a batch at the request it refuses, naming
// the payload's field.
func TestSubmitManyValidatesPayloads(t *testing.T) {
	b := setup(t, func(o *Options) {
		o.ValidatePayload = func(payload string) error {
			if payload == `{"bad":true}` {
				return &model.ValidationError{Field: "bad", Problem: "not allowed"}
			}
			return nil
		}
	})
	reqs := batchRequests(3)
	reqs[1].Payload = `{"bad":true}`
	_, err := b.q.SubmitMany(b.ctx, reqs)
	var item *model.BatchItemError
	require.True(t, errors.As(err, &item))
	require.Equal(t, 1, item.Index)
	var v *model.ValidationError
	require.True(t, errors.As(err, &v))
	require.Equal(t, "payload.bad", v.Field)
	require.Empty(t, b.events(""))
}

// A batch whose COMMIT fails is not acknowledged: ErrOutcomeUnknown, and
// nothing of it is in the database.
func TestSubmitManyCommitFailure(t *testing.T) {
	g := setupGroup(t)
	g.storage.Arm(storagefault.FailCommit)
	_, err := g.q.SubmitMany(g.ctx, batchRequests(10))
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	require.ErrorIs(t, err, storagefault.ErrInjected)
	require.Zero(t, g.taskCount())
	res, err := g.q.SubmitMany(g.ctx, batchRequests(10))
	require.NoError(t, err)
	require.Len(t, res, 10)
	require.Equal(t, 10, g.taskCount())
}
