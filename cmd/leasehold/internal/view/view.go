// Package view is the queue's state as the command line's --json output
// and the HTTP API both show it: the JSON records of tasks, events,
// limits and schedules (snake_case, times RFC 3339 UTC), and the inspect
// report of the tasks that need an operator's eye.
package view

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/model"
)

// Task is a task on the wire.
type Task struct {
	ID              string `json:"id"`
	User            string `json:"user"`
	Key             string `json:"key"`
	State           string `json:"state"`
	Reason          string `json:"reason"`
	Version         int64  `json:"version"`
	Attempt         int    `json:"attempt"`
	AttemptsCharged int    `json:"attempts_charged"`
	AttemptsMax     int    `json:"attempts_max"`
	AttemptsFailed  int    `json:"attempts_failed"` // over the task's life: a requeue does not reset it
	CostUsed        int64  `json:"cost_used"`
	CostBudget      int64  `json:"cost_budget"`
	StepsUsed       int    `json:"steps_used"`
	StepsMax        int    `json:"steps_max"`
	Priority        int    `json:"priority"`
	Owner           string `json:"owner"`
	LeaseUntil      string `json:"lease_until"`
	HeartbeatAt     string `json:"heartbeat_at"`
	CancelRequested bool   `json:"cancel_requested"`
	CancelledBy     string `json:"cancelled_by"`
	ApprovedBy      string `json:"approved_by"`
	ApprovalGate    string `json:"approval_gate"`
	ApprovalVersion int64  `json:"approval_version"`
	ScheduleID      string `json:"schedule_id,omitempty"`
	ScheduleRun     int64  `json:"schedule_run,omitempty"`
	LastError       string `json:"last_error"`
	RunAt           string `json:"run_at"`
	Deadline        string `json:"deadline"`
	CreatedAt       string `json:"created_at"`
	UpdatedAt       string `json:"updated_at"`
}

// RFC3339 is t in RFC 3339 UTC with its stored precision; "" for the zero
// time.
func RFC3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// TaskOf is t's record. cancel_requested says a cancellation waits to be
// seen by the task's worker: a task that has ended (cancelled, or
// completed or failed before its worker saw the request) waits for
// nothing, and its cancelled_by and reason say what happened.
func TaskOf(t model.Task) Task {
	return Task{ID: t.ID, User: t.User, Key: t.Key, State: string(t.State), Reason: string(t.Reason),
		Version: t.Version, Attempt: t.Attempt, AttemptsCharged: t.AttemptsCharged, AttemptsMax: t.AttemptsMax,
		AttemptsFailed: t.AttemptsFailed, CostUsed: t.CostUsed, CostBudget: t.CostBudget, StepsUsed: t.StepsUsed, StepsMax: t.StepsMax,
		Priority: t.Priority, Owner: t.Owner, LeaseUntil: RFC3339(t.LeaseUntil), HeartbeatAt: RFC3339(t.HeartbeatAt),
		CancelRequested: CancelPending(t), CancelledBy: t.CancelledBy, ApprovedBy: t.ApprovedBy,
		ApprovalGate: t.ApprovalGate, ApprovalVersion: t.ApprovalVersion, ScheduleID: t.ScheduleID,
		ScheduleRun: t.ScheduleRun, LastError: t.LastError, RunAt: RFC3339(t.RunAt), Deadline: RFC3339(t.Deadline),
		CreatedAt: RFC3339(t.CreatedAt), UpdatedAt: RFC3339(t.UpdatedAt)}
}

// CancelPending reports whether a cancellation of t waits to be seen by
// its worker: requested, and the task not ended.
func CancelPending(t model.Task) bool { return t.CancelRequested && !t.State.Terminal() }

// CancelNote is what a task's status says of its cancellation, "" when
// there is none: who cancelled it; or who asked, and that the task has
// yet to stop, or ended otherwise first.
func CancelNote(t model.Task) string {
	switch {
	case t.State == model.Cancelled && t.CancelledBy != "":
		return "cancelled by " + t.CancelledBy
	case t.State == model.Cancelled:
		return ""
	case CancelPending(t):
		return fmt.Sprintf("requested by %s; the task stops before its next step", t.CancelledBy)
	case t.CancelRequested:
		return fmt.Sprintf("requested by %s; the task %s first", t.CancelledBy, t.State)
	}
	return ""
}

// Event is an audit event on the wire.
type Event struct {
	Seq     int64  `json:"seq"`
	TaskID  string `json:"task_id"`
	Kind    string `json:"kind"`
	Attempt int    `json:"attempt"`
	Fence   int64  `json:"fence"`
	OpID    string `json:"op_id"`
	From    string `json:"from"`
	To      string `json:"to"`
	Reason  string `json:"reason"`
	Actor   string `json:"actor"`
	At      string `json:"at"`
	Detail  string `json:"detail"`
	Scope   string `json:"scope"`
}

// EventOf is e's record.
func EventOf(e model.Event) Event {
	return Event{Seq: e.Seq, TaskID: e.TaskID, Kind: string(e.Kind), Attempt: e.Attempt, Fence: e.Fence,
		OpID: e.OpID, From: string(e.From), To: string(e.To), Reason: string(e.Reason), Actor: e.Actor,
		At: RFC3339(e.At), Detail: e.Detail, Scope: e.Scope}
}

// All maps each of xs to its record, in order. The result is never nil,
// so an empty list encodes as [], not null.
func All[T, R any](xs []T, of func(T) R) []R {
	out := make([]R, 0, len(xs))
	for _, x := range xs {
		out = append(out, of(x))
	}
	return out
}

// Limits is model.Limits on the wire: snake_case, the names its
// validation errors use.
type Limits struct {
	DepthMax       int   `json:"depth_max"`
	UserDepthMax   int   `json:"user_depth_max"`
	UserRunningMax int   `json:"user_running_max"`
	AttemptsMax    int   `json:"attempts_max"`
	GrantCostMax   int64 `json:"grant_cost_max"`
	GrantStepsMax  int   `json:"grant_steps_max"`
	ClaimBatchMax  int   `json:"claim_batch_max"`
}

// LimitsChange is model.LimitsChange on the wire (PUT /v1/limits): the
// limits named, each replacing its limit; the others stay as they are.
type LimitsChange struct {
	DepthMax       *int   `json:"depth_max,omitempty"`
	UserDepthMax   *int   `json:"user_depth_max,omitempty"`
	UserRunningMax *int   `json:"user_running_max,omitempty"`
	AttemptsMax    *int   `json:"attempts_max,omitempty"`
	GrantCostMax   *int64 `json:"grant_cost_max,omitempty"`
	GrantStepsMax  *int   `json:"grant_steps_max,omitempty"`
	ClaimBatchMax  *int   `json:"claim_batch_max,omitempty"`
}

// UserLimitChange is model.UserLimitChange on the wire (PUT
// /v1/limits/users/{user}).
type UserLimitChange struct {
	RunningMax *int `json:"running_max,omitempty"`
	DepthMax   *int `json:"depth_max,omitempty"`
}

// UserLimit is model.UserLimit on the wire.
type UserLimit struct {
	User       string `json:"user"`
	RunningMax int    `json:"running_max"`
	DepthMax   int    `json:"depth_max"`
}

// LimitsOf is the stored limits and the per-user overrides, as `limits
// --json` prints them and GET /v1/limits returns them.
func LimitsOf(limits model.Limits, users []model.UserLimit) map[string]any {
	return map[string]any{"limits": Limits(limits),
		"users": All(users, func(u model.UserLimit) UserLimit { return UserLimit(u) })}
}

// Schedule is a schedule on the wire, in the fields POST /v1/schedules
// takes.
type Schedule struct {
	ID         string          `json:"id"`
	User       string          `json:"user"`
	Payload    json.RawMessage `json:"payload"`
	CostBudget int64           `json:"cost_budget"`
	StepsMax   int             `json:"steps_max"`
	Priority   int             `json:"priority"`
	Origin     string          `json:"origin"`
	PeriodMs   int64           `json:"period_ms"`
	LastRun    int64           `json:"last_run"`
	CreatedAt  string          `json:"created_at"`
}

// ScheduleOf is s's record.
func ScheduleOf(s model.Schedule) Schedule {
	return Schedule{ID: s.ID, User: s.User, Payload: json.RawMessage(s.Payload), CostBudget: s.CostBudget,
		StepsMax: s.StepsMax, Priority: s.Priority, Origin: RFC3339(s.Origin), PeriodMs: s.Period.Milliseconds(),
		LastRun: s.LastRun, CreatedAt: RFC3339(s.CreatedAt)}
}
