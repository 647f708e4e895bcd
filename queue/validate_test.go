package queue

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
)

// withSyntheticIntake sets the binary's payload validator.
func withSyntheticIntake(o *Options) { o.ValidatePayload = worker.ValidateSynthetic }

// ValidatePayload refuses, before anything is written, a payload the
// handler could never plan: the error is ErrInvalidInput, names the
// payload's field and states the rule without the value, and the database
// files are byte for byte what they were.
func TestValidatePayloadRefusesAtIntakeWritingNothing(t *testing.T) {
	b := setupFile(t, withSyntheticIntake)
	b.task(b.submit())
	for _, tc := range []struct{ name, payload, field, message string }{
		{"unknown field", `{"foo":1}`, "payload.foo", "payload.foo: unknown field (allowed: steps)"},
		{"steps not an array", `{"steps":"x"}`, "payload.steps", "payload.steps: must be an array of step objects"},
		{"negative cost", `{"steps":[{"cost":-1}]}`, "payload.steps[0].cost", "payload.steps[0].cost: must be an integer from 0 to 1000000000"},
		{"fail kind", `{"steps":[{"cost":1},{"cost":1},{"fail":"sometimes-4111-1111-SUPERSECRET"}]}`, "payload.steps[2].fail",
			`payload.steps[2].fail: must be "transient" or "permanent"`},
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
