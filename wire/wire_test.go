package wire

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// TestTaskRecordHasTheDesignedFields: a task's record carries at least
// the fields DESIGN.md lists for --json, snake_case, times in RFC 3339
// UTC and "" for a time not set; last_event_seq only when the sender set
// it.
func TestTaskRecordHasTheDesignedFields(t *testing.T) {
	created := time.Date(2026, 12, 1, 9, 0, 0, 500_000_000, time.FixedZone("CET", 3600))
	task := model.Task{ID: "t_0a", User: "ana", State: model.Cancelled, Reason: model.CancelledByCaller, Version: 3,
		CancelRequested: true, CancelledBy: "ana", CreatedAt: created, UpdatedAt: created.Add(time.Second)}
	b, err := json.Marshal(TaskOf(task))
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(b, &fields))
	for _, name := range []string{"id", "user", "state", "reason", "version", "attempt", "cost_used", "cost_budget",
		"steps_used", "steps_max", "cancel_requested", "cancelled_by", "approved_by", "run_at", "deadline",
		"created_at", "updated_at"} {
		require.Contains(t, fields, name)
	}
	require.Equal(t, "2026-12-01T08:00:00.5Z", fields["created_at"])
	require.Equal(t, "", fields["run_at"])
	require.Equal(t, "cancelled_by_caller", fields["reason"])
	require.Equal(t, false, fields["cancel_requested"], "a cancelled task waits for no cancellation")
	require.NotContains(t, fields, "last_event_seq")

	var back Task
	require.NoError(t, json.Unmarshal(b, &back))
	require.True(t, back.CreatedAt.Equal(created))
	require.True(t, back.RunAt.IsZero())
	require.Equal(t, model.Cancelled, back.State)
}

// TestEventRecordNamesItsUserWhenKnown: the API's events carry their
// task's user and kind (as task_kind: kind is the event's own); a record
// made without them leaves the fields out rather than claim the empty
// user.
func TestEventRecordNamesItsUserWhenKnown(t *testing.T) {
	e := model.Event{Seq: 7, TaskID: "t_0a", Kind: model.EventSubmitted, To: model.Queued, Actor: "ana"}
	with, err := json.Marshal(EventOf(e, "ana", "report"))
	require.NoError(t, err)
	require.Contains(t, string(with), `"user":"ana"`)
	require.Contains(t, string(with), `"task_kind":"report"`)
	require.Contains(t, string(with), `"kind":"submitted"`)
	without, err := json.Marshal(EventOf(e, "", ""))
	require.NoError(t, err)
	require.NotContains(t, string(without), `"user"`)
	require.NotContains(t, string(without), `"task_kind"`)
	require.Contains(t, string(without), `"kind":"submitted"`)
}

// TestSubmitRequestRoundTrips: the client's body of a request is read
// back by the server as the same request, and a time it cannot read is
// refused naming its field.
func TestSubmitRequestRoundTrips(t *testing.T) {
	req := model.SubmitRequest{User: "ana", Key: "k1", Payload: `{"steps":[]}`, CostBudget: 5, StepsMax: 2, Priority: -3,
		RunAt: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), Deadline: time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)}
	b, err := json.Marshal(SubmitRequestOf(req))
	require.NoError(t, err)
	var body SubmitRequest
	require.NoError(t, json.Unmarshal(b, &body))
	got, err := body.Model()
	require.NoError(t, err)
	require.Equal(t, req, got)

	plain, err := json.Marshal(SubmitRequestOf(model.SubmitRequest{User: "ana", Key: "k2", Payload: `{}`, CostBudget: 1, StepsMax: 1}))
	require.NoError(t, err)
	require.JSONEq(t, `{"user":"ana","key":"k2","payload":{},"cost_budget":1,"steps_max":1}`, string(plain))

	_, err = SubmitRequest{User: "ana", Key: "k3", Payload: json.RawMessage(`{}`), Deadline: "tomorrow"}.Model()
	var v *model.ValidationError
	require.True(t, errors.As(err, &v), "%v", err)
	require.Equal(t, "deadline", v.Field)
	require.ErrorIs(t, err, model.ErrInvalidInput)
}

// TestTimeReadsWhatItWrites: a Time survives its own encoding; "" is the
// zero time and anything but a string or RFC 3339 is refused.
func TestTimeReadsWhatItWrites(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 123_000_000, time.UTC)
	b, err := json.Marshal(TimeOf(at))
	require.NoError(t, err)
	require.Equal(t, `"2026-12-01T09:00:00.123Z"`, string(b))
	var back Time
	require.NoError(t, json.Unmarshal(b, &back))
	require.True(t, back.Equal(at))
	require.NoError(t, json.Unmarshal([]byte(`""`), &back))
	require.True(t, back.IsZero())
	require.Error(t, json.Unmarshal([]byte(`"yesterday"`), &back))
	require.Error(t, json.Unmarshal([]byte(`17`), &back))
}

// TestTaskRecordShowsAResultOnceCompleted: a task's record carries its
// kind, and its result (its last step's checkpoint) once it has completed
// only.
func TestTaskRecordShowsAResultOnceCompleted(t *testing.T) {
	task := model.Task{ID: "t_1", Kind: "report", State: model.Running, Checkpoint: "half"}
	running, err := json.Marshal(TaskOf(task))
	require.NoError(t, err)
	require.Contains(t, string(running), `"kind":"report"`)
	require.NotContains(t, string(running), `"result"`)
	task.State, task.Checkpoint = model.Completed, "report written"
	done, err := json.Marshal(TaskOf(task))
	require.NoError(t, err)
	require.Contains(t, string(done), `"result":"report written"`)
}
