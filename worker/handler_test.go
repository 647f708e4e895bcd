package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
)

func TestParseSyntheticRefusesBadPayloads(t *testing.T) {
	tooMany := `{"steps":[` + strings.TrimSuffix(strings.Repeat(`{"cost":1},`, worker.SyntheticStepsMax+1), ",") + `]}`
	for _, tc := range []struct {
		name, payload, want string
	}{
		{"not json", `{"steps":`, "synthetic payload"},
		{"unknown top-level field", `{"steps":[],"retries":2}`, `unknown field "retries"`},
		{"unknown step field", `{"steps":[{"cost":1,"colour":"red"}]}`, `unknown field "colour"`},
		{"bad fail kind", `{"steps":[{"cost":1,"fail":"sometimes"}]}`, `fail must be transient or permanent, got "sometimes"`},
		{"negative cost", `{"steps":[{"cost":-1}]}`, "step 0: cost -1 out of range"},
		{"cost above the budget bound", fmt.Sprintf(`{"steps":[{"cost":%d}]}`, model.CostBudgetMax+1), "out of range"},
		{"negative times", `{"steps":[{"fail":"transient","times":-1}]}`, "times or duration_ms out of range"},
		{"negative duration", `{"steps":[{"duration_ms":-5}]}`, "times or duration_ms out of range"},
		{"duration over a day", `{"steps":[{"duration_ms":86400001}]}`, "times or duration_ms out of range"},
		{"gate with an effect", `{"steps":[{"cost":1},{"approval":"manager","effect":"charge"}]}`, "step 1: an approval gate does nothing else"},
		{"gate with a failure", `{"steps":[{"approval":"manager","fail":"permanent"}]}`, "an approval gate does nothing else"},
		{"gate with a cost", `{"steps":[{"approval":"manager","cost":5}]}`, "an approval gate does nothing else"},
		{"gate with a duration", `{"steps":[{"approval":"manager","duration_ms":100}]}`, "an approval gate does nothing else"},
		{"trailing data", `{"steps":[{"cost":1}]} {"steps":[]}`, "trailing data"},
		{"trailing brace", `{"steps":[{"cost":1}]}}`, "trailing data"},
		{"gate name too long", `{"steps":[{"approval":"` + strings.Repeat("m", model.GateLengthMax+1) + `"}]}`, "gate"},
		{"too many steps", tooMany, fmt.Sprintf("%d steps (limit %d)", worker.SyntheticStepsMax+1, worker.SyntheticStepsMax)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps, err := worker.ParseSynthetic(tc.payload)
			require.Nil(t, steps)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestParseSyntheticAcceptsTheDesignExample(t *testing.T) {
	payload := `{"steps": [{"cost": 2}, {"cost": 5, "effect": "charge"}, {"approval": "manager"},
		{"cost": 1, "fail": "transient", "times": 1}, {"cost": 1, "duration_ms": 1500}]}`
	steps, err := worker.ParseSynthetic(payload)
	require.NoError(t, err)
	require.Equal(t, []worker.SyntheticStep{{Cost: 2}, {Cost: 5, Effect: "charge"}, {Approval: "manager"},
		{Cost: 1, Fail: "transient", Times: 1}, {Cost: 1, DurationMs: 1500}}, steps)

	plan, err := worker.Synthetic{}.Plan(model.Task{ID: "t1", Payload: payload})
	require.NoError(t, err)
	require.Equal(t, []worker.StepSpec{{Cost: 2, Data: steps[0]}, {Cost: 5, Effect: "charge", Data: steps[1]},
		{Approval: "manager", Data: steps[2]}, {Cost: 1, Data: steps[3]},
		{Cost: 1, Duration: 1500 * time.Millisecond, Data: steps[4]}}, plan)

	exact := `{"steps":[` + strings.TrimSuffix(strings.Repeat(`{"cost":1},`, worker.SyntheticStepsMax), ",") + `]}`
	steps, err = worker.ParseSynthetic(exact)
	require.NoError(t, err)
	require.Len(t, steps, worker.SyntheticStepsMax)
}

func TestSyntheticPlanRefusesABadPayload(t *testing.T) {
	plan, err := worker.Synthetic{}.Plan(model.Task{ID: "t1", Payload: `{"steps":[{"cost":-3}]}`})
	require.Nil(t, plan)
	require.ErrorContains(t, err, "cost -3 out of range")
}

func TestSyntheticRun(t *testing.T) {
	ctx := context.Background()
	task := model.Task{ID: "t1", Payload: `{"steps":[{"cost":1},{"cost":1,"fail":"transient","times":2},{"fail":"permanent"}]}`}
	h := worker.Synthetic{}
	plan, err := h.Plan(task)
	require.NoError(t, err)
	require.Len(t, plan, 3)

	checkpoint, err := h.Run(ctx, task, 0, plan[0])
	require.NoError(t, err)
	require.Empty(t, checkpoint, "the step index is the resume point; no checkpoint of its own")

	for charged := range 2 {
		task.AttemptsCharged = charged
		_, err = h.Run(ctx, task, 1, plan[1])
		require.ErrorIs(t, err, worker.ErrTransient, "attempt %d", charged+1)
		require.Equal(t, model.Transient, worker.Classify(err))
		require.ErrorContains(t, err, fmt.Sprintf("fails on attempt %d", charged+1))
	}
	task.AttemptsCharged = 2
	_, err = h.Run(ctx, task, 1, plan[1])
	require.NoError(t, err, "a transient failure stops once times attempts have been charged")

	_, err = h.Run(ctx, task, 2, plan[2])
	require.ErrorIs(t, err, worker.ErrPermanent)
	require.Equal(t, model.Permanent, worker.Classify(err))

	_, err = h.Run(ctx, task, 3, worker.StepSpec{Cost: 1})
	require.ErrorIs(t, err, worker.ErrPermanent, "a step the handler did not plan is a permanent error")
	require.ErrorContains(t, err, "not planned by the synthetic handler")
}

// Run works from the plan made at claim time and does not parse the
// payload again: with the payload gone, each step still runs as planned.
func TestSyntheticRunUsesThePlanNotThePayload(t *testing.T) {
	ctx := context.Background()
	task := model.Task{ID: "t1", Payload: `{"steps":[{"cost":1},{"cost":1,"fail":"permanent"}]}`}
	h := worker.Synthetic{}
	plan, err := h.Plan(task)
	require.NoError(t, err)
	require.Equal(t, worker.SyntheticStep{Cost: 1, Fail: "permanent"}, plan[1].Data, "the plan carries each step for Run")

	task.Payload = "not json: a re-parse would fail every step"
	_, err = h.Run(ctx, task, 0, plan[0])
	require.NoError(t, err)
	_, err = h.Run(ctx, task, 1, plan[1])
	require.ErrorIs(t, err, worker.ErrPermanent)
	require.ErrorContains(t, err, "step 1 fails permanently")
}

func TestClassifyDefaultsToTransient(t *testing.T) {
	require.Equal(t, model.Transient, worker.Classify(errors.New("connection reset")))
	require.Equal(t, model.Permanent, worker.Classify(fmt.Errorf("wrapped: %w", worker.ErrPermanent)))
}

// A task whose payload the handler cannot plan fails permanently on its
// first claim, without running a step or charging an attempt.
func TestUnparsablePayloadFailsPermanently(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1},{"cost":1,"colour":"red"}]}`, 10, 5)
	w := b.newWorker("w1", newFakeService(worker.Dedup))
	reports := b.run(w, stepsMax)

	task := b.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.PermanentError, task.Reason)
	require.Contains(t, task.LastError, `unknown field "colour"`)
	require.Zero(t, task.StepsUsed)
	require.Zero(t, task.CostUsed)
	require.Zero(t, task.AttemptsCharged)
	require.Equal(t, []model.EventKind{model.EventSubmitted, model.EventClaimed, model.EventFailed}, b.kinds(id))
	require.Equal(t, 1, count(reports, is(worker.ActionFail, "permanent failure: to failed")))
}
