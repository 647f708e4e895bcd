package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

func TestParseSyntheticRefusesBadPayloads(t *testing.T) {
	tooMany := `{"steps":[` + strings.TrimSuffix(strings.Repeat(`{"cost":1},`, worker.SyntheticStepsMax+1), ",") + `]}`
	gate := "an approval gate does nothing else"
	for _, tc := range []struct {
		name, payload, field, problem string
	}{
		{"not json", `{"steps":`, "payload", "not well-formed JSON"},
		{"not an object", `[1,2]`, "payload", "must be a JSON object"},
		{"unknown top-level field", `{"steps":[],"retries":2}`, "retries", "unknown field (allowed: steps)"},
		{"foo", `{"foo":1}`, "foo", "unknown field"},
		{"steps not an array", `{"steps":"x"}`, "steps", "must be an array of step objects"},
		{"step not an object", `{"steps":[{"cost":1},7]}`, "steps[1]", "must be a JSON object"},
		{"unknown step field", `{"steps":[{"cost":1,"colour":"red"}]}`, "steps[0].colour", "unknown field"},
		{"unnameable field", `{"steps":[{"cost":1,"4111 1111":"x"}]}`, "steps[0](a field)", "unknown field"},
		{"bad fail kind", `{"steps":[{"cost":1},{"cost":1},{"cost":1,"fail":"sometimes"}]}`, "steps[2].fail", `must be "transient" or "permanent"`},
		{"fail not a string", `{"steps":[{"fail":3}]}`, "steps[0].fail", `must be "transient" or "permanent"`},
		{"negative cost", `{"steps":[{"cost":-1}]}`, "steps[0].cost", "must be an integer from 0 to 1000000000"},
		{"fractional cost", `{"steps":[{"cost":1.5}]}`, "steps[0].cost", "must be an integer from 0 to"},
		{"cost a string", `{"steps":[{"cost":"2"}]}`, "steps[0].cost", "must be an integer from 0 to"},
		{"cost above the budget bound", fmt.Sprintf(`{"steps":[{"cost":%d}]}`, model.CostBudgetMax+1), "steps[0].cost", "must be an integer from 0 to"},
		{"negative times", `{"steps":[{"fail":"transient","times":-1}]}`, "steps[0].times", "must be an integer from 0 to 10000"},
		{"negative duration", `{"steps":[{"duration_ms":-5}]}`, "steps[0].duration_ms", "must be an integer from 0 to 86400000"},
		{"duration over a day", `{"steps":[{"duration_ms":86400001}]}`, "steps[0].duration_ms", "must be an integer from 0 to 86400000"},
		{"effect name", `{"steps":[{"effect":"charge card"}]}`, "steps[0].effect", "must be a name of at most 64"},
		{"gate with an effect", `{"steps":[{"cost":1},{"approval":"manager","effect":"charge"}]}`, "steps[1]", gate},
		{"gate with a failure", `{"steps":[{"approval":"manager","fail":"permanent"}]}`, "steps[0]", gate},
		{"gate with a cost", `{"steps":[{"approval":"manager","cost":5}]}`, "steps[0]", gate},
		{"gate with a duration", `{"steps":[{"approval":"manager","duration_ms":100}]}`, "steps[0]", gate},
		{"trailing data", `{"steps":[{"cost":1}]} {"steps":[]}`, "payload", "trailing data after the object"},
		{"trailing brace", `{"steps":[{"cost":1}]}}`, "payload", "trailing data after the object"},
		{"gate name too long", `{"steps":[{"approval":"` + strings.Repeat("m", model.GateLengthMax+1) + `"}]}`, "steps[0].approval", "must be a gate name"},
		{"gate name characters", `{"steps":[{"approval":"boss man"}]}`, "steps[0].approval", "must be a gate name"},
		{"too many steps", tooMany, "steps", fmt.Sprintf("%d steps (limit %d)", worker.SyntheticStepsMax+1, worker.SyntheticStepsMax)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps, err := worker.ParseSynthetic(tc.payload)
			require.Nil(t, steps)
			var v *model.ValidationError
			require.ErrorAs(t, err, &v)
			require.ErrorIs(t, err, model.ErrInvalidInput)
			require.Equal(t, tc.field, v.Field)
			require.Contains(t, v.Problem, tc.problem)
			require.Equal(t, err, worker.ValidateSynthetic(json.RawMessage(tc.payload)))
		})
	}
}

// A refusal names the field and the rule, never the value refused.
func TestParseSyntheticNeverQuotesTheValue(t *testing.T) {
	const secret = "4111-1111-SUPERSECRET"
	for _, payload := range []string{
		`{"steps":[{"fail":"` + secret + `"}]}`,
		`{"steps":[{"effect":"` + secret + ` x"}]}`,
		`{"steps":[{"approval":"` + secret + ` x"}]}`,
		`{"steps":[{"cost":"` + secret + `"}]}`,
		`{"steps":"` + secret + `"}`,
		`{"steps":[{"` + secret + ` x":1}]}`,
		`{"` + secret + `!":1}`,
		`{"steps":[` + secret + `]}`,
	} {
		_, err := worker.ParseSynthetic(payload)
		require.Error(t, err, payload)
		require.NotContains(t, err.Error(), "SUPERSECRET", payload)
		_, err = worker.Synthetic{}.Plan(model.Task{ID: "t1", Payload: payload})
		require.Error(t, err, payload)
		require.NotContains(t, err.Error(), "SUPERSECRET", payload)
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
	require.EqualError(t, err, "synthetic payload: steps[0].cost: must be an integer from 0 to 1000000000")
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

	for failed := range 2 {
		task.AttemptsFailed = failed
		_, err = h.Run(ctx, task, 1, plan[1])
		require.ErrorIs(t, err, worker.ErrTransient, "attempt %d", failed+1)
		require.Equal(t, model.Transient, worker.Classify(err))
		require.ErrorContains(t, err, fmt.Sprintf("fails on attempt %d", failed+1))
	}
	task.AttemptsFailed = 2
	_, err = h.Run(ctx, task, 1, plan[1])
	require.NoError(t, err, "a transient failure stops once the task has failed times attempts")
	task.AttemptsCharged, task.AttemptsFailed = 0, 2 // requeued after two failures
	_, err = h.Run(ctx, task, 1, plan[1])
	require.NoError(t, err, "a requeue, which zeroes the charged attempts, does not make the step fail again")

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
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock))
	reports := b.run(w, stepsMax)

	task := b.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.PermanentError, task.Reason)
	require.Equal(t, "synthetic payload: steps[1].colour: unknown field (allowed: approval, cost, duration_ms, effect, fail, times, timeout_ms)", task.LastError)
	require.Zero(t, task.StepsUsed)
	require.Zero(t, task.CostUsed)
	require.Zero(t, task.AttemptsCharged)
	require.Equal(t, []model.EventKind{model.EventSubmitted, model.EventClaimed, model.EventFailed}, b.kinds(id))
	require.Equal(t, 1, count(reports, is(worker.ActionFail, "permanent failure: to failed")))
}

// A payload value the handler refuses reaches neither the task's
// last_error, nor an event, nor the worker's log: the refusal names the
// field and the rule. (The binary refuses such a payload at submit; a
// queue without ValidatePayload, as here, lets it reach a worker.)
func TestRefusedPayloadValueReachesNoErrorEventOrLog(t *testing.T) {
	const secret = "4111-1111-SUPERSECRET"
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1},{"cost":1,"fail":"`+secret+`"}]}`, 10, 5)
	var logs strings.Builder
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock), func(c *worker.Config) { c.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	reports := b.run(w, stepsMax)

	task := b.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, `synthetic payload: steps[1].fail: must be "transient" or "permanent"`, task.LastError)
	for _, e := range b.events(id) {
		require.NotContains(t, e.Detail, "SUPERSECRET")
	}
	for _, r := range reports {
		require.NotContains(t, r.String(), "SUPERSECRET")
	}
	require.Contains(t, logs.String(), `"task_id":"`+id+`"`)
	require.NotContains(t, logs.String(), "SUPERSECRET")
}
