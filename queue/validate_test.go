package queue

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// withStepsIntake sets a payload validator that allows one field, steps,
// an array, and refuses as the binary's (worker.ValidateSynthetic) does:
// with a *model.ValidationError naming the field, never quoting a value.
// (The queue's tests cannot import worker, which imports queue.)
func withStepsIntake(o *Options) {
	o.ValidatePayload = func(payload string) error {
		var top map[string]json.RawMessage
		if err := json.Unmarshal([]byte(payload), &top); err != nil {
			return &model.ValidationError{Field: "payload", Problem: "must be a JSON object"}
		}
		for name, value := range top {
			if name != "steps" {
				return &model.ValidationError{Field: "payload." + name, Problem: "unknown field (allowed: steps)"}
			}
			var steps []json.RawMessage
			if err := json.Unmarshal(value, &steps); err != nil {
				return &model.ValidationError{Field: "payload.steps", Problem: "must be an array of step objects"}
			}
		}
		return nil
	}
}

// ValidatePayload refuses, before anything is written, a payload the
// handler could never plan: the error is ErrInvalidInput, names the
// payload's field and states the rule without the value, and the database
// files are byte for byte what they were.
func TestValidatePayloadRefusesAtIntakeWritingNothing(t *testing.T) {
	b := setupFile(t, withStepsIntake)
	b.task(b.submit())
	for _, tc := range []struct{ name, payload, field, message string }{
		{"unknown field", `{"foo":1}`, "payload.foo", "payload.foo: unknown field (allowed: steps)"},
		{"steps not an array", `{"steps":"x"}`, "payload.steps", "payload.steps: must be an array of step objects"},
		{"secret in a refused field", `{"card":"4111-1111-SUPERSECRET"}`, "payload.card", "payload.card: unknown field (allowed: steps)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, dump := fileHashes(t, b.path), b.dump()
			req := b.request()
			req.Payload = tc.payload
			_, err := b.q.Submit(b.ctx, req)
			require.ErrorIs(t, err, ErrInvalidInput)
			var v *model.ValidationError
			require.ErrorAs(t, err, &v)
			require.Equal(t, tc.field, v.Field)
			require.EqualError(t, err, tc.message)
			require.Equal(t, dump, b.dump())
			require.Equal(t, files, fileHashes(t, b.path), "database files changed")

			spec := model.ScheduleSpec{User: "ana", Payload: tc.payload, CostBudget: 5, StepsMax: 3,
				Origin: epoch, Period: time.Hour}
			_, err = b.q.AddSchedule(b.ctx, spec, "ops")
			require.ErrorIs(t, err, ErrInvalidInput)
			require.EqualError(t, err, tc.message, "a schedule's payload is checked as a submit's is")
			require.Equal(t, dump, b.dump())
		})
	}
	// A valid payload still goes through.
	req := b.request()
	req.Payload = `{"steps":[{"cost":1,"fail":"transient","times":1}]}`
	_, err := b.q.Submit(b.ctx, req)
	require.NoError(t, err)
}

// A validator that returns a plain error is refused as the payload's.
func TestValidatePayloadPlainErrorNamesThePayload(t *testing.T) {
	b := setup(t, func(o *Options) {
		o.ValidatePayload = func(string) error { return errors.New("not a job\nwe know") }
	})
	_, err := b.q.Submit(b.ctx, b.request())
	require.ErrorIs(t, err, ErrInvalidInput)
	require.EqualError(t, err, "payload: not a job we know")
}
