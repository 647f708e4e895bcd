package client

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/model"
)

// Time is a time on the wire: RFC 3339 in UTC, or the empty string for
// none (the zero Time).
type Time struct{ time.Time }

// MarshalJSON writes RFC 3339 UTC, or "" for the zero time.
func (t Time) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte(`""`), nil
	}
	return json.Marshal(t.UTC().Format(time.RFC3339Nano))
}

// UnmarshalJSON reads RFC 3339, or "" as the zero time.
func (t *Time) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("time: %w", err)
	}
	if s == "" {
		t.Time = time.Time{}
		return nil
	}
	parsed, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("time: %w", err)
	}
	t.Time = parsed
	return nil
}

// Task is a task as the API returns it.
type Task struct {
	ID              string      `json:"id"`
	User            string      `json:"user"`
	Key             string      `json:"key"`
	State           model.State `json:"state"`
	Reason          string      `json:"reason"`
	Version         int64       `json:"version"`
	Attempt         int         `json:"attempt"`
	AttemptsCharged int         `json:"attempts_charged"`
	AttemptsMax     int         `json:"attempts_max"`
	AttemptsFailed  int         `json:"attempts_failed"`
	CostUsed        int64       `json:"cost_used"`
	CostBudget      int64       `json:"cost_budget"`
	StepsUsed       int         `json:"steps_used"`
	StepsMax        int         `json:"steps_max"`
	Priority        int         `json:"priority"`
	Owner           string      `json:"owner"`
	LeaseUntil      Time        `json:"lease_until"`
	HeartbeatAt     Time        `json:"heartbeat_at"`
	CancelRequested bool        `json:"cancel_requested"` // a cancellation waits for the task to stop; false once it has ended
	CancelledBy     string      `json:"cancelled_by"`
	ApprovedBy      string      `json:"approved_by"`
	ApprovalGate    string      `json:"approval_gate"`
	ApprovalVersion int64       `json:"approval_version"`
	ScheduleID      string      `json:"schedule_id,omitempty"`
	ScheduleRun     int64       `json:"schedule_run,omitempty"`
	LastError       string      `json:"last_error"`
	RunAt           Time        `json:"run_at"`
	Deadline        Time        `json:"deadline"`
	CreatedAt       Time        `json:"created_at"`
	UpdatedAt       Time        `json:"updated_at"`
	// LastEventSeq is the sequence number of the task's latest audit
	// event: what WaitTask waits past.
	LastEventSeq int64 `json:"last_event_seq"`
}

// Event is one audit event.
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
	// User is the user of the event's task ("" for an event that
	// concerns no task).
	User   string `json:"user"`
	At     Time   `json:"at"`
	Detail string `json:"detail"`
	Scope  string `json:"scope"`
}

// SubmitResult is the answer to a submit: the task's ID, and whether the
// request replayed an earlier one under the same key.
type SubmitResult struct {
	TaskID string `json:"task_id"`
	Replay bool   `json:"replay"`
}

// submitBody is a submit on the wire.
type submitBody struct {
	User       string          `json:"user"`
	Key        string          `json:"key"`
	Payload    json.RawMessage `json:"payload"`
	CostBudget int64           `json:"cost_budget"`
	StepsMax   int             `json:"steps_max"`
	Priority   int             `json:"priority,omitempty"`
	RunAt      string          `json:"run_at,omitempty"`
	Deadline   string          `json:"deadline,omitempty"`
}

func submitBodyOf(r model.SubmitRequest) submitBody {
	b := submitBody{User: r.User, Key: r.Key, Payload: json.RawMessage(r.Payload), CostBudget: r.CostBudget,
		StepsMax: r.StepsMax, Priority: r.Priority}
	if !r.RunAt.IsZero() {
		b.RunAt = r.RunAt.UTC().Format(time.RFC3339Nano)
	}
	if !r.Deadline.IsZero() {
		b.Deadline = r.Deadline.UTC().Format(time.RFC3339Nano)
	}
	return b
}

// ListOptions selects tasks for List. Zero values select everything.
type ListOptions struct {
	State        model.State
	User         string
	CreatedFrom  time.Time
	CreatedUntil time.Time // exclusive
	ScheduleID   string
	Limit        int    // 0: the server's default
	After        string // the Next of the previous page
}

// TaskPage is one page of tasks; Next is the cursor of the page after it,
// "" when this page is the last.
type TaskPage struct {
	Tasks []Task `json:"tasks"`
	Next  string `json:"next"`
}

// Inspection is one stuck or uncertain task, as GET /v1/inspect reports
// it.
type Inspection struct {
	Task           Task     `json:"task"`
	LeaseAgeMs     int64    `json:"lease_age_ms,omitempty"`
	HeartbeatAgeMs int64    `json:"heartbeat_age_ms,omitempty"`
	LeaseExpired   bool     `json:"lease_expired,omitempty"`
	Unreceipted    []string `json:"effects_without_receipt,omitempty"`
	QueuedForMs    int64    `json:"queued_for_ms,omitempty"`
	Advice         string   `json:"advice"`
}

// Limits are the queue-wide limits.
type Limits struct {
	DepthMax       int   `json:"depth_max"`
	UserDepthMax   int   `json:"user_depth_max"`
	UserRunningMax int   `json:"user_running_max"`
	AttemptsMax    int   `json:"attempts_max"`
	GrantCostMax   int64 `json:"grant_cost_max"`
	GrantStepsMax  int   `json:"grant_steps_max"`
	ClaimBatchMax  int   `json:"claim_batch_max"`
}

// UserLimit is one user's override; model.Inherit (-1) inherits the
// queue-wide limit.
type UserLimit struct {
	User       string `json:"user"`
	RunningMax int    `json:"running_max"`
	DepthMax   int    `json:"depth_max"`
}

// LimitsChange names the queue-wide limits to change (UpdateLimits): each
// field set replaces its limit; a nil field leaves its limit as it is.
type LimitsChange struct {
	DepthMax       *int   `json:"depth_max,omitempty"`
	UserDepthMax   *int   `json:"user_depth_max,omitempty"`
	UserRunningMax *int   `json:"user_running_max,omitempty"`
	AttemptsMax    *int   `json:"attempts_max,omitempty"`
	GrantCostMax   *int64 `json:"grant_cost_max,omitempty"`
	GrantStepsMax  *int   `json:"grant_steps_max,omitempty"`
	ClaimBatchMax  *int   `json:"claim_batch_max,omitempty"`
}

// UserLimitChange names a user's limits to change (UpdateUserLimit); a
// nil field keeps the user's override (or inherits). model.Inherit (-1)
// inherits the queue-wide limit, 0 is unlimited.
type UserLimitChange struct {
	RunningMax *int `json:"running_max,omitempty"`
	DepthMax   *int `json:"depth_max,omitempty"`
}

// Value returns a pointer to v, for the fields of LimitsChange and
// UserLimitChange: client.LimitsChange{DepthMax: client.Value(2)}.
func Value[T any](v T) *T { return &v }

// LimitsView is the queue-wide limits and every user's override.
type LimitsView struct {
	Limits Limits      `json:"limits"`
	Users  []UserLimit `json:"users"`
}

// Schedule is a periodic task.
type Schedule struct {
	ID         string          `json:"id"`
	User       string          `json:"user"`
	Payload    json.RawMessage `json:"payload"`
	CostBudget int64           `json:"cost_budget"`
	StepsMax   int             `json:"steps_max"`
	Priority   int             `json:"priority"`
	Origin     Time            `json:"origin"`
	PeriodMs   int64           `json:"period_ms"`
	LastRun    int64           `json:"last_run"`
	CreatedAt  Time            `json:"created_at"`
}

// ScheduleSpec is a schedule to add.
type ScheduleSpec struct {
	User       string
	Payload    string // JSON
	CostBudget int64
	StepsMax   int
	Priority   int
	Origin     time.Time // zero: now
	Period     time.Duration
}

// Settled is the answer to SettleEffect.
type Settled struct {
	OpID    string `json:"op_id"`
	Applied bool   `json:"applied"`
	By      string `json:"by"`
}

// Health is GET /healthz: status "ok", or "unavailable" with the storage
// failure's class.
type Health struct {
	Status string `json:"status"`
	Class  string `json:"class,omitempty"`
}
