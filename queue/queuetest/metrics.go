package queuetest

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

func testMetricsReconcile(s *suite) {
	t := s.t
	m := s.metrics()
	for _, state := range model.States() {
		n, ok := m.Depth[state]
		require.True(t, ok, "a depth for every state, %s included", state)
		require.Zero(t, n)
	}

	done := s.submit()
	failed := s.submit()
	retried := s.submit()
	cancelled := s.submit()
	s.submit() // stays queued
	s.advance(2 * time.Second)
	claimed := s.claimN("w1", 3, lease)
	require.Len(t, claimed, 3)
	require.Equal(t, []string{done, failed, retried},
		[]string{claimed[0].Claim.TaskID, claimed[1].Claim.TaskID, claimed[2].Claim.TaskID})
	s.advance(300 * time.Millisecond)
	require.NoError(t, s.store.Complete(s.ctx, claimed[0].Claim))
	_, err := s.store.Fail(s.ctx, claimed[1].Claim, model.Failure{Class: model.Permanent})
	require.NoError(t, err)
	_, err = s.store.Fail(s.ctx, claimed[2].Claim, model.Failure{Class: model.Transient})
	require.NoError(t, err)
	_, err = s.store.Cancel(s.ctx, cancelled, "caller")
	require.NoError(t, err)
	require.ErrorIs(t, s.store.Complete(s.ctx, claimed[0].Claim), model.ErrStaleClaim)

	m = s.metrics()
	require.Equal(t, map[model.State]int64{model.Queued: 2, model.Running: 0, model.WaitingForApproval: 0,
		model.NeedsReview: 0, model.Completed: 1, model.Failed: 1, model.Cancelled: 1}, m.Depth)
	require.EqualValues(t, 5, m.Submitted)
	require.EqualValues(t, 1, m.Completions)
	require.EqualValues(t, 1, m.Failures)
	require.EqualValues(t, 1, m.Cancellations)
	require.EqualValues(t, 1, m.Retries)
	require.EqualValues(t, 1, m.StaleWrites)
	require.Zero(t, m.LeaseExpiries)
	require.Zero(t, m.Reviews)

	// Queue wait and run time are separate distributions: three claims
	// that each waited 2s, and three claims that each ran 300ms.
	wait := model.NewHistogram()
	for range 3 {
		wait.Observe(2 * time.Second)
	}
	require.Equal(t, wait, m.QueueWait)
	run := model.NewHistogram()
	for range 3 {
		run.Observe(300 * time.Millisecond)
	}
	require.Equal(t, run, m.RunTime)
	// The oldest due queued task has waited since its submission; the one
	// in backoff is not due yet.
	require.Equal(t, 2300*time.Millisecond, m.OldestQueuedAge)
}
