package queue

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// withDefaults opens the queue with request defaults by kind.
func withDefaults(d map[string]model.RequestDefaults) option {
	return func(o *Options) { o.Defaults = d }
}

// A request that names no cost budget or step limit takes its kind's
// defaults at intake (Submit, SubmitMany, AddSchedule), after it is hashed
// as sent: sent again it is an exact replay, under other defaults too, and
// a request naming the same values is another request. A request that
// names them is stored and hashed as a queue without defaults stores and
// hashes it.
func TestIntakeAppliesTheKindsDefaults(t *testing.T) {
	b := setupFile(t, withDefaults(map[string]model.RequestDefaults{"report": {CostBudget: 7, StepsMax: 3}}))
	bare := model.SubmitRequest{User: "ana", Key: "r1", Kind: "report", Payload: `{"month":"2026-03"}`}
	res, err := b.q.Submit(b.ctx, bare)
	require.NoError(t, err)
	require.False(t, res.Replay)
	task, err := b.q.Task(b.ctx, res.TaskID)
	require.NoError(t, err)
	require.Equal(t, int64(7), task.CostBudget)
	require.Equal(t, 3, task.StepsMax)
	sent, err := model.Normalize(model.SubmitRequest{User: "ana", Key: "r1", Kind: "report", Payload: `{"month":"2026-03"}`,
		CostBudget: 1, StepsMax: 1})
	require.NoError(t, err)
	require.NotEqual(t, sent.Hash, task.RequestHash)

	again, err := b.q.Submit(b.ctx, bare)
	require.NoError(t, err)
	require.Equal(t, model.SubmitResult{TaskID: res.TaskID, Replay: true}, again)
	named := bare
	named.CostBudget, named.StepsMax = 7, 3
	_, err = b.q.Submit(b.ctx, named)
	require.ErrorIs(t, err, model.ErrIdempotencyConflict, "naming the defaults' values is another request")

	second := bare
	second.Key = "r2"
	batch, err := b.q.SubmitMany(b.ctx, []model.SubmitRequest{bare, second})
	require.NoError(t, err)
	require.Equal(t, model.SubmitResult{TaskID: res.TaskID, Replay: true}, batch[0])
	require.False(t, batch[1].Replay)
	task, err = b.q.Task(b.ctx, batch[1].TaskID)
	require.NoError(t, err)
	require.Equal(t, int64(7), task.CostBudget)

	named.Key = "r3"
	res3, err := b.q.Submit(b.ctx, named)
	require.NoError(t, err)
	task, err = b.q.Task(b.ctx, res3.TaskID)
	require.NoError(t, err)
	plain, err := model.Normalize(named)
	require.NoError(t, err)
	require.Equal(t, plain.Hash, task.RequestHash, "a request naming its budget hashes as without defaults")

	s, err := b.q.AddSchedule(b.ctx, model.ScheduleSpec{User: "ana", Kind: "report", Payload: `{"month":"2026-03"}`,
		Origin: epoch.Add(time.Hour), Period: time.Hour}, "ops")
	require.NoError(t, err)
	require.Equal(t, int64(7), s.CostBudget)
	require.Equal(t, 3, s.StepsMax)
	b.close()

	// The defaults changed: the request as sent is still an exact replay
	// of the task it made, which keeps the budget it was given.
	b2 := b.reopen(2, withDefaults(map[string]model.RequestDefaults{"report": {CostBudget: 20, StepsMax: 9}}))
	again, err = b2.q.Submit(b2.ctx, bare)
	require.NoError(t, err)
	require.Equal(t, model.SubmitResult{TaskID: res.TaskID, Replay: true}, again)
	task, err = b2.q.Task(b2.ctx, res.TaskID)
	require.NoError(t, err)
	require.Equal(t, int64(7), task.CostBudget)
	b2.close()

	// No defaults: the request naming none is refused, nothing written;
	// the one naming its values replays as before.
	b3 := b.reopen(3)
	_, err = b3.q.Submit(b3.ctx, model.SubmitRequest{User: "ana", Key: "r9", Kind: "report", Payload: `{}`})
	require.ErrorIs(t, err, model.ErrInvalidInput)
	require.ErrorContains(t, err, "cost_budget")
	again, err = b3.q.Submit(b3.ctx, named)
	require.NoError(t, err)
	require.Equal(t, model.SubmitResult{TaskID: res3.TaskID, Replay: true}, again)
}
