package wire

import (
	"encoding/json"

	"github.com/leasehold/leasehold/model"
)

// SubmitRequest is a submit on the wire: the body of POST /v1/tasks, an
// item of POST /v1/tasks/batch, and a line of submit --batch. Its times
// are the RFC 3339 strings sent ("" for none), read by Model.
type SubmitRequest struct {
	User       string          `json:"user"`
	Key        string          `json:"key"`
	Kind       string          `json:"kind,omitempty"`
	Payload    json.RawMessage `json:"payload"`
	CostBudget int64           `json:"cost_budget"`
	StepsMax   int             `json:"steps_max"`
	Priority   int             `json:"priority,omitempty"`
	RunAt      string          `json:"run_at,omitempty"`
	Deadline   string          `json:"deadline,omitempty"`
}

// SubmitRequestOf is r on the wire.
func SubmitRequestOf(r model.SubmitRequest) SubmitRequest {
	return SubmitRequest{User: r.User, Key: r.Key, Kind: r.Kind, Payload: json.RawMessage(r.Payload), CostBudget: r.CostBudget,
		StepsMax: r.StepsMax, Priority: r.Priority, RunAt: TimeOf(r.RunAt).String(), Deadline: TimeOf(r.Deadline).String()}
}

// Model is the request the queue takes; a time it cannot read is a
// *model.ValidationError naming run_at or deadline. The queue validates
// the rest.
func (b SubmitRequest) Model() (model.SubmitRequest, error) {
	req := model.SubmitRequest{User: b.User, Key: b.Key, Kind: b.Kind, Payload: string(b.Payload), CostBudget: b.CostBudget,
		StepsMax: b.StepsMax, Priority: b.Priority}
	var err error
	if req.RunAt, err = ParseTime("run_at", b.RunAt); err != nil {
		return req, err
	}
	if req.Deadline, err = ParseTime("deadline", b.Deadline); err != nil {
		return req, err
	}
	return req, nil
}

// SubmitResult is the answer to a submit: the task's ID, and whether the
// request replayed an earlier one under the same key (the original
// task's ID).
type SubmitResult struct {
	TaskID string `json:"task_id"`
	Replay bool   `json:"replay"`
}

// SubmitResultOf is r on the wire.
func SubmitResultOf(r model.SubmitResult) SubmitResult {
	return SubmitResult{TaskID: r.TaskID, Replay: r.Replay}
}

// BatchRequest is POST /v1/tasks/batch: the submits of one transaction.
type BatchRequest struct {
	Tasks []SubmitRequest `json:"tasks"`
}

// BatchResult answers POST /v1/tasks/batch: each submit's result, in
// order.
type BatchResult struct {
	Results []SubmitResult `json:"results"`
}

// ScheduleRequest is POST /v1/schedules: a periodic task's template, its
// first run (Origin, RFC 3339, required) and its period.
type ScheduleRequest struct {
	User       string          `json:"user"`
	Kind       string          `json:"kind,omitempty"`
	Payload    json.RawMessage `json:"payload"`
	CostBudget int64           `json:"cost_budget"`
	StepsMax   int             `json:"steps_max"`
	Priority   int             `json:"priority"`
	Origin     string          `json:"origin"`
	PeriodMs   int64           `json:"period_ms"`
}

// Settled answers POST /v1/effects/{op}/settle: the operation, the
// outcome recorded and who recorded it.
type Settled struct {
	OpID    string `json:"op_id"`
	Applied bool   `json:"applied"`
	By      string `json:"by"`
}

// Health is GET /healthz: status "ok", or "unavailable" with the storage
// failure's class (disk_full, busy, io_error, timeout, ...).
type Health struct {
	Status string `json:"status"`
	Class  string `json:"class,omitempty"`
}

// Error is the body of every refusal: a one-line message, the API's error
// code (docs/API.md lists them) and the field or path value it is about,
// if any.
type Error struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	Field string `json:"field,omitempty"`
}
