package queuetest

import (
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

func testUserRunningLimit(s *suite) {
	t := s.t
	require.NoError(t, s.store.SetUserLimit(s.ctx, model.UserLimit{User: "ana", RunningMax: 1, DepthMax: model.Inherit}, "ops"))
	_, users, err := s.store.Limits(s.ctx)
	require.NoError(t, err)
	require.Equal(t, []model.UserLimit{{User: "ana", RunningMax: 1, DepthMax: model.Inherit}}, users)
	a1 := s.submit()
	a2 := s.submit()
	b1 := s.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	claimed := s.claimN("w1", 3, lease)
	require.Len(t, claimed, 2, "ana's second task waits for her first")
	require.Equal(t, a1, claimed[0].Claim.TaskID)
	require.Equal(t, b1, claimed[1].Claim.TaskID)
	s.noClaim()
	require.NoError(t, s.store.Complete(s.ctx, claimed[0].Claim))
	require.Equal(t, a2, s.claim("w1").Claim.TaskID, "below the limit again")

	// Removing the limit frees the user at once.
	a3 := s.submit()
	s.noClaim()
	require.NoError(t, s.store.SetUserLimit(s.ctx, model.UserLimit{User: "ana", RunningMax: model.Inherit, DepthMax: model.Inherit}, "ops"))
	require.Equal(t, a3, s.claim("w1").Claim.TaskID)
}

func testDefaultRunningLimit(s *suite) {
	t := s.t
	s.setLimits(func(l *model.Limits) { l.UserRunningMax = 1 })
	a1 := s.submit()
	s.submit()
	b1 := s.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	claimed := s.claimN("w1", 3, lease)
	require.Len(t, claimed, 2)
	require.Equal(t, a1, claimed[0].Claim.TaskID)
	require.Equal(t, b1, claimed[1].Claim.TaskID)
	// An override above the default lets a user run more.
	require.NoError(t, s.store.SetUserLimit(s.ctx, model.UserLimit{User: "ana", RunningMax: 2, DepthMax: model.Inherit}, "ops"))
	require.Len(t, s.claimN("w1", 3, lease), 1)
}

// testRunningRoomAtTheBatch: a claim fills its batch with the next user's
// tasks when a user's room falls one short of the batch, and takes a
// user's tasks alone when its room is the whole batch. (PostgreSQL reads
// the candidates by one ordered scan, and keeps them only when each of
// their users has room for its share of them; a claim that kept them
// with a user one short would take that user's first three and stop.)
func testRunningRoomAtTheBatch(s *suite) {
	t := s.t
	require.NoError(t, s.store.SetUserLimit(s.ctx, model.UserLimit{User: "ana", RunningMax: 3, DepthMax: model.Inherit}, "ops"))
	var ana []string
	for range 4 {
		ana = append(ana, s.submit())
	}
	b1 := s.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	claimed := s.claimN("w1", 4, lease)
	require.Equal(t, []string{ana[0], ana[1], ana[2], b1}, claimedIDs(claimed), "ana has room for three: bob's task fills the batch")
	for _, c := range claimed {
		require.NoError(t, s.store.Complete(s.ctx, c.Claim))
	}

	require.NoError(t, s.store.SetUserLimit(s.ctx, model.UserLimit{User: "ana", RunningMax: 4, DepthMax: model.Inherit}, "ops"))
	for range 3 {
		ana = append(ana, s.submit())
	}
	b2 := s.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	claimed = s.claimN("w1", 4, lease)
	require.Equal(t, ana[3:7], claimedIDs(claimed), "ana has room for the whole batch")
	require.Equal(t, b2, s.claim("w2").Claim.TaskID)
}

// claimedIDs is the task IDs of claimed, in claim order.
func claimedIDs(claimed []model.Claimed) []string {
	ids := make([]string, len(claimed))
	for i, c := range claimed {
		ids[i] = c.Claim.TaskID
	}
	return ids
}

func testAdmissionDepth(s *suite) {
	t := s.t
	s.setLimits(func(l *model.Limits) { l.DepthMax = 2 })
	first := s.request()
	res, err := s.store.Submit(s.ctx, first)
	require.NoError(t, err)
	s.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	_, err = s.store.Submit(s.ctx, s.request(func(r *model.SubmitRequest) { r.User = "cy" }))
	require.ErrorIs(t, err, model.ErrQueueFull)
	require.Equal(t, 2, s.count(model.ListFilter{}), "nothing refused is written")
	require.EqualValues(t, 2, s.metrics().Submitted)
	replay, err := s.store.Submit(s.ctx, first)
	require.NoError(t, err, "a replay is not a new task")
	require.Equal(t, model.SubmitResult{TaskID: res.TaskID, Replay: true}, replay)

	// Running and waiting tasks count; settled ones do not.
	c := s.claim("w1")
	_, err = s.store.Submit(s.ctx, s.request())
	require.ErrorIs(t, err, model.ErrQueueFull)
	require.NoError(t, s.store.Complete(s.ctx, c.Claim))
	s.submit()
}

func testAdmissionUserDepth(s *suite) {
	t := s.t
	s.setLimits(func(l *model.Limits) { l.UserDepthMax = 1 })
	s.submit()
	_, err := s.store.Submit(s.ctx, s.request())
	require.ErrorIs(t, err, model.ErrQueueFull)
	s.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	require.NoError(t, s.store.SetUserLimit(s.ctx, model.UserLimit{User: "ana", RunningMax: model.Inherit, DepthMax: 2}, "ops"))
	s.submit()
	require.Equal(t, 3, s.count(model.ListFilter{}))
	require.Equal(t, 2, s.count(model.ListFilter{User: "ana"}))
}
