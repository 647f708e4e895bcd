package queuetest

import (
	"context"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// completeClaimer is a store that completes a claim and claims the next
// tasks in one write (the SQLite and PostgreSQL queues, and the reference
// model).
type completeClaimer interface {
	CompleteAndClaim(ctx context.Context, c model.Claim, next model.ClaimRequest) ([]model.Claimed, error)
}

// testCompleteAndClaim: the claim sees the completion made before it in
// the same write (the user's running count is down by one); a stale
// completion claims nothing and is recorded as any stale write is; a bad
// next request refuses the whole write, completion included; a completion
// with nothing due claims nothing.
func testCompleteAndClaim(s *suite) {
	t := s.t
	cc, ok := s.store.(completeClaimer)
	require.True(t, ok, "%T has no CompleteAndClaim", s.store)
	require.NoError(t, s.store.SetUserLimit(s.ctx, model.UserLimit{User: "ana", RunningMax: 1, DepthMax: model.Inherit}, "ops"))
	a1, first := s.running()
	a2 := s.submit()
	b1 := s.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	s.advance(time.Second)
	next := model.ClaimRequest{Worker: "w1", Max: 1, Lease: lease}
	claimed, err := cc.CompleteAndClaim(s.ctx, first, next)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, a2, claimed[0].Claim.TaskID, "ana's next task: her first is completed in the same write")
	require.Equal(t, model.Completed, s.task(a1).State)
	require.Equal(t, model.EventCompleted, s.lastEvent(a1).Kind)
	c := claimed[0]
	require.Equal(t, s.task(a2), c.Task, "the claim returns the task as claimed")
	require.EqualValues(t, 1, c.Claim.Fence)
	require.Equal(t, "w1", c.Claim.Owner)
	require.Equal(t, s.now().Add(lease), c.Claim.LeaseUntil)
	e := s.lastEvent(a2)
	require.Equal(t, model.EventClaimed, e.Kind)
	require.Equal(t, s.now(), e.At)

	// A stale completion claims nothing.
	before := s.task(a1)
	_, err = cc.CompleteAndClaim(s.ctx, first, next)
	s.requireStale(a1, first, "complete", err, before)
	require.Equal(t, model.Queued, s.task(b1).State, "a refused completion claims nothing")

	// A bad next request refuses the write: nothing is completed or claimed.
	for _, bad := range []struct {
		field string
		req   model.ClaimRequest
	}{
		{"max", model.ClaimRequest{Worker: "w1", Max: s.limits().ClaimBatchMax + 1, Lease: lease}},
		{"worker", model.ClaimRequest{Max: 1, Lease: lease}},
		{"lease", model.ClaimRequest{Worker: "w1", Max: 1, Lease: model.LeaseMin - time.Millisecond}},
	} {
		_, err = cc.CompleteAndClaim(s.ctx, c.Claim, bad.req)
		s.requireInvalid(err, bad.field)
		require.Equal(t, model.Running, s.task(a2).State, "a refused %s: nothing completed", bad.field)
		require.Equal(t, model.Queued, s.task(b1).State, "a refused %s: nothing claimed", bad.field)
	}

	// A batch takes what there is; with nothing due, the completion alone.
	claimed, err = cc.CompleteAndClaim(s.ctx, c.Claim, model.ClaimRequest{Worker: "w2", Max: 2, Lease: lease})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, b1, claimed[0].Claim.TaskID)
	require.Equal(t, model.Completed, s.task(a2).State)
	claimed, err = cc.CompleteAndClaim(s.ctx, claimed[0].Claim, next)
	require.NoError(t, err)
	require.Empty(t, claimed)
	require.Equal(t, model.Completed, s.task(b1).State)
	m := s.metrics()
	require.EqualValues(t, 3, m.Depth[model.Completed])
	require.EqualValues(t, 1, m.StaleWrites)
}
