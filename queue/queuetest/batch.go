package queuetest

import (
	"errors"
	"fmt"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// requireBatchItem checks that err refuses a batch at index, with sentinel
// as the request's own error.
func (s *suite) requireBatchItem(err error, index int, sentinel error) {
	s.t.Helper()
	var item *model.BatchItemError
	require.True(s.t, errors.As(err, &item), "want a *model.BatchItemError, got %T: %v", err, err)
	require.Equal(s.t, index, item.Index, "the error names the request: %v", err)
	require.ErrorIs(s.t, err, sentinel)
	require.Contains(s.t, err.Error(), fmt.Sprintf("batch item %d", index))
}

// A batch is stored in order, each task as Submit would store it; a bad
// request anywhere refuses the whole batch, naming its index, and nothing
// is written.
func testSubmitManyAllOrNothing(s *suite) {
	t := s.t
	reqs := []model.SubmitRequest{s.request(), s.request(func(r *model.SubmitRequest) { r.User = "bob" }), s.request()}
	res, err := s.store.SubmitMany(s.ctx, reqs)
	require.NoError(t, err)
	require.Len(t, res, 3)
	for i, r := range res {
		require.False(t, r.Replay)
		task := s.task(r.TaskID)
		require.Equal(t, reqs[i].User, task.User)
		require.Equal(t, reqs[i].Key, task.Key)
		require.Equal(t, model.Queued, task.State)
		require.Equal(t, s.now(), task.CreatedAt)
		require.Equal(t, []model.EventKind{model.EventSubmitted}, s.kinds(r.TaskID))
	}
	require.NotEqual(t, res[0].TaskID, res[2].TaskID)
	require.EqualValues(t, 3, s.metrics().Submitted)

	for _, c := range []struct {
		index int
		field string
		mod   func(*model.SubmitRequest)
	}{
		{0, "user", func(r *model.SubmitRequest) { r.User = "" }},
		{1, "payload", func(r *model.SubmitRequest) { r.Payload = `[1]` }},
		{2, "cost_budget", func(r *model.SubmitRequest) { r.CostBudget = 0 }},
		{2, "deadline", func(r *model.SubmitRequest) { r.Deadline = s.now().Add(-time.Second) }},
		{1, "schedule_id", func(r *model.SubmitRequest) { r.ScheduleID = "s1" }},
	} {
		batch := []model.SubmitRequest{s.request(), s.request(), s.request()}
		c.mod(&batch[c.index])
		_, err := s.store.SubmitMany(s.ctx, batch)
		s.requireBatchItem(err, c.index, model.ErrInvalidInput)
		s.requireInvalid(err, c.field)
	}
	_, err = s.store.SubmitMany(s.ctx, nil)
	s.requireInvalid(err, "batch")
	long := make([]model.SubmitRequest, model.SubmitBatchMax+1)
	for i := range long {
		long[i] = s.request()
	}
	_, err = s.store.SubmitMany(s.ctx, long)
	s.requireInvalid(err, "batch")
	require.Contains(t, err.Error(), fmt.Sprint(model.SubmitBatchMax))
	require.Equal(t, 3, s.count(model.ListFilter{}), "a refused batch writes nothing")
	require.EqualValues(t, 3, s.metrics().Submitted)
}

// Exact replays in a batch, of an earlier task or an earlier request of
// the same batch, return the original IDs marked replay; a changed request
// under a used key refuses the batch at its index.
func testSubmitManyReplays(s *suite) {
	t := s.t
	first := s.request()
	res, err := s.store.Submit(s.ctx, first)
	require.NoError(t, err)
	original := res.TaskID

	fresh := s.request()
	results, err := s.store.SubmitMany(s.ctx, []model.SubmitRequest{first, fresh, fresh})
	require.NoError(t, err)
	require.Equal(t, model.SubmitResult{TaskID: original, Replay: true}, results[0])
	require.False(t, results[1].Replay)
	require.Equal(t, model.SubmitResult{TaskID: results[1].TaskID, Replay: true}, results[2])
	require.Equal(t, 2, s.count(model.ListFilter{}))
	require.Len(t, s.events(original), 1, "a replay writes nothing")

	changed := first
	changed.CostBudget++
	_, err = s.store.SubmitMany(s.ctx, []model.SubmitRequest{s.request(), changed})
	s.requireBatchItem(err, 1, model.ErrIdempotencyConflict)

	again := s.request()
	againChanged := again
	againChanged.StepsMax++
	_, err = s.store.SubmitMany(s.ctx, []model.SubmitRequest{again, s.request(), againChanged})
	s.requireBatchItem(err, 2, model.ErrIdempotencyConflict)
	require.Equal(t, 2, s.count(model.ListFilter{}), "a refused batch writes nothing")
}

// The depth caps apply to the batch's new tasks as a whole: a batch that
// would pass the user's or the overall cap is refused at the request that
// would pass it, and replays do not count.
func testSubmitManyDepthCaps(s *suite) {
	t := s.t
	s.setLimits(func(l *model.Limits) { l.UserDepthMax, l.DepthMax = 3, 5 })
	kept := s.request()
	_, err := s.store.Submit(s.ctx, kept)
	require.NoError(t, err)

	// ana has 1 of 3: two more fit, a third does not.
	_, err = s.store.SubmitMany(s.ctx, []model.SubmitRequest{s.request(), s.request(), s.request()})
	s.requireBatchItem(err, 2, model.ErrQueueFull)
	require.Equal(t, 1, s.count(model.ListFilter{}))
	_, err = s.store.SubmitMany(s.ctx, []model.SubmitRequest{kept, s.request(), kept, s.request()})
	require.NoError(t, err, "replays take no room")
	require.Equal(t, 3, s.count(model.ListFilter{}))

	// 3 of 5 overall: bob's two fit, carol's third does not.
	bob := func(r *model.SubmitRequest) { r.User = "bob" }
	_, err = s.store.SubmitMany(s.ctx, []model.SubmitRequest{s.request(bob), s.request(bob),
		s.request(func(r *model.SubmitRequest) { r.User = "carol" })})
	s.requireBatchItem(err, 2, model.ErrQueueFull)
	require.Equal(t, 3, s.count(model.ListFilter{}))
}
