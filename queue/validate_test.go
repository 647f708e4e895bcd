package queue

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// withStepsIntake sets the synthetic kind's payload validator to one that allows one field, steps,
// an array, and refuses as the binary's (worker.ValidateSynthetic) does:
// with a *model.ValidationError naming the field, never quoting a value.
// (The queue's tests cannot import worker, which imports queue.)
func withStepsIntake(o *Options) {
	o.Validators = map[string]model.PayloadValidator{model.KindSynthetic: func(payload json.RawMessage) error {
		var top map[string]json.RawMessage
		if err := json.Unmarshal(payload, &top); err != nil {
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
	}}
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
		o.Validators = map[string]model.PayloadValidator{
			model.KindSynthetic: func(json.RawMessage) error { return errors.New("not a job\nwe know") }}
	})
	_, err := b.q.Submit(b.ctx, b.request())
	require.ErrorIs(t, err, ErrInvalidInput)
	require.EqualError(t, err, "payload: not a job we know")
}

// Validators apply by kind: a payload is checked by its own kind's
// validator only, and a kind without one accepts any JSON object.
func TestValidatorsApplyByKind(t *testing.T) {
	b := setup(t, withStepsIntake, func(o *Options) {
		o.Validators["report"] = func(payload json.RawMessage) error {
			var top map[string]json.RawMessage
			if err := json.Unmarshal(payload, &top); err != nil || top["day"] == nil {
				return &model.ValidationError{Field: "day", Problem: "required"}
			}
			return nil
		}
	})
	for i, tc := range []struct{ kind, payload, refusal string }{
		{"report", `{"day":"2026-03-01"}`, ""},
		{"report", `{"steps":[]}`, "payload.day: required"},
		{"", `{"day":"2026-03-01"}`, "payload.day: unknown field (allowed: steps)"},
		{model.KindSynthetic, `{"steps":[]}`, ""},
		{"free-form", `{"anything":[1,{"at":"all"}]}`, ""},
		{"bad kind", `{}`, "kind: character ' ' at offset 3 is not allowed"},
		{"free-form", `[1]`, "payload: must be a JSON object"},
	} {
		req := b.request()
		req.Key = fmt.Sprintf("by-kind-%d", i)
		req.Kind, req.Payload = tc.kind, tc.payload
		_, err := b.q.Submit(b.ctx, req)
		if tc.refusal == "" {
			require.NoError(t, err, "%+v", tc)
			continue
		}
		require.ErrorIs(t, err, ErrInvalidInput, "%+v", tc)
		require.EqualError(t, err, tc.refusal)
		spec := model.ScheduleSpec{User: "ana", Kind: tc.kind, Payload: tc.payload, CostBudget: 5, StepsMax: 3,
			Origin: epoch, Period: time.Hour}
		_, err = b.q.AddSchedule(b.ctx, spec, "ops")
		require.EqualError(t, err, tc.refusal, "a schedule's payload is checked as a submit's is")
	}
}
