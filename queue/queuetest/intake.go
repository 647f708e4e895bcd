package queuetest

import (
	"strings"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

func testSubmitReplayConflict(s *suite) {
	t := s.t
	req := s.request(func(r *model.SubmitRequest) { r.Payload = `{ "b": [1, 2], "a": "x" }` })
	res, err := s.store.Submit(s.ctx, req)
	require.NoError(t, err)
	require.False(t, res.Replay)
	id := res.TaskID
	task := s.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, model.NoReason, task.Reason)
	require.Equal(t, "ana", task.User)
	require.Equal(t, req.Key, task.Key)
	require.Equal(t, `{"a":"x","b":[1,2]}`, task.Payload, "the payload is stored in canonical form")
	require.Equal(t, s.now(), task.RunAt, "no run_at means now")
	require.Equal(t, s.now(), task.CreatedAt)
	require.Zero(t, task.Version)
	require.Zero(t, task.Attempt)
	require.Equal(t, s.limits().AttemptsMax, task.AttemptsMax)
	require.Equal(t, []model.EventKind{model.EventSubmitted}, s.kinds(id))
	submitted := s.lastEvent(id)
	require.Equal(t, model.Queued, submitted.To)
	require.Equal(t, "ana", submitted.Actor)

	// An exact replay, even spelled differently and later, returns the
	// original task and writes nothing.
	s.advance(time.Minute)
	replay := req
	replay.Payload = `{"a":"x","b":[1,2]}`
	res, err = s.store.Submit(s.ctx, replay)
	require.NoError(t, err)
	require.Equal(t, model.SubmitResult{TaskID: id, Replay: true}, res)
	require.Equal(t, task, s.task(id))
	require.Len(t, s.events(id), 1)

	// The same key with a different request is a conflict, and the original
	// is untouched.
	changed := req
	changed.CostBudget++
	_, err = s.store.Submit(s.ctx, changed)
	require.ErrorIs(t, err, model.ErrIdempotencyConflict)
	require.Equal(t, task, s.task(id))
	require.Len(t, s.events(id), 1)
	require.Equal(t, 1, s.count(model.ListFilter{}))

	// Keys are unique per user: another user may use the same one.
	other := req
	other.User = "bob"
	res, err = s.store.Submit(s.ctx, other)
	require.NoError(t, err)
	require.False(t, res.Replay)
	require.NotEqual(t, id, res.TaskID)
	require.EqualValues(t, 2, s.metrics().Submitted)
}

func testSubmitValidation(s *suite) {
	t := s.t
	for _, c := range []struct {
		field string
		mod   func(*model.SubmitRequest)
	}{
		{"user", func(r *model.SubmitRequest) { r.User = "" }},
		{"user", func(r *model.SubmitRequest) { r.User = "a b" }},
		{"key", func(r *model.SubmitRequest) { r.Key = strings.Repeat("k", model.KeyLengthMax+1) }},
		{"payload", func(r *model.SubmitRequest) { r.Payload = `{"a":` }},
		{"payload", func(r *model.SubmitRequest) { r.Payload = `[1]` }},
		{"cost_budget", func(r *model.SubmitRequest) { r.CostBudget = 0 }},
		{"steps_max", func(r *model.SubmitRequest) { r.StepsMax = model.StepsMaxLimit + 1 }},
		{"priority", func(r *model.SubmitRequest) { r.Priority = model.PriorityMax + 1 }},
		{"deadline", func(r *model.SubmitRequest) { r.Deadline = s.now().Add(-time.Second) }},
		{"deadline", func(r *model.SubmitRequest) { r.RunAt, r.Deadline = s.now().Add(time.Hour), s.now().Add(time.Minute) }},
	} {
		_, err := s.store.Submit(s.ctx, s.request(c.mod))
		s.requireInvalid(err, c.field)
	}
	require.Zero(t, s.count(model.ListFilter{}), "a refused request writes nothing")
	require.Zero(t, s.metrics().Submitted)
}
