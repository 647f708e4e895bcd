package wire

import (
	"encoding/json"

	"github.com/leasehold/leasehold/model"
)

// Task is a task on the wire.
type Task struct {
	ID              string       `json:"id"`
	User            string       `json:"user"`
	Key             string       `json:"key"`
	Kind            string       `json:"kind"`
	State           model.State  `json:"state"`
	Reason          model.Reason `json:"reason"`
	Version         int64        `json:"version"`
	Attempt         int          `json:"attempt"`
	AttemptsCharged int          `json:"attempts_charged"`
	AttemptsMax     int          `json:"attempts_max"`
	// AttemptsFailed counts over the task's life: a requeue does not
	// reset it.
	AttemptsFailed int    `json:"attempts_failed"`
	CostUsed       int64  `json:"cost_used"`
	CostBudget     int64  `json:"cost_budget"`
	StepsUsed      int    `json:"steps_used"`
	StepsMax       int    `json:"steps_max"`
	Priority       int    `json:"priority"`
	Owner          string `json:"owner"`
	LeaseUntil     Time   `json:"lease_until"`
	HeartbeatAt    Time   `json:"heartbeat_at"`
	// CancelRequested says a cancellation waits for the task to stop; it
	// is false once the task has ended (CancelPending).
	CancelRequested bool   `json:"cancel_requested"`
	CancelledBy     string `json:"cancelled_by"`
	ApprovedBy      string `json:"approved_by"`
	ApprovalGate    string `json:"approval_gate"`
	ApprovalVersion int64  `json:"approval_version"`
	ScheduleID      string `json:"schedule_id,omitempty"`
	ScheduleRun     int64  `json:"schedule_run,omitempty"`
	LastError       string `json:"last_error"`
	// Result is what the last step of a completed task returned
	// (model.Task.Result); left out before the task completes.
	Result    string `json:"result,omitempty"`
	RunAt     Time   `json:"run_at"`
	Deadline  Time   `json:"deadline"`
	CreatedAt Time   `json:"created_at"`
	UpdatedAt Time   `json:"updated_at"`
	// Payload is the task's payload, sent by GET /v1/tasks/{id} to a
	// token that may read the task (one acting for its user); listed
	// tasks and the command line's records leave it out.
	Payload json.RawMessage `json:"payload,omitempty"`
	// LastEventSeq is the sequence number of the task's latest audit
	// event, sent by GET /v1/tasks/{id} (read before the record, so the
	// record is at least as new): what a long-poll waits past. Listed
	// tasks and the command line's records leave it out.
	LastEventSeq int64 `json:"last_event_seq,omitempty"`
}

// TaskOf is t's record, without LastEventSeq.
func TaskOf(t model.Task) Task {
	return Task{ID: t.ID, User: t.User, Key: t.Key, Kind: t.Kind, State: t.State, Reason: t.Reason,
		Version: t.Version, Attempt: t.Attempt, AttemptsCharged: t.AttemptsCharged, AttemptsMax: t.AttemptsMax,
		AttemptsFailed: t.AttemptsFailed, CostUsed: t.CostUsed, CostBudget: t.CostBudget, StepsUsed: t.StepsUsed, StepsMax: t.StepsMax,
		Priority: t.Priority, Owner: t.Owner, LeaseUntil: TimeOf(t.LeaseUntil), HeartbeatAt: TimeOf(t.HeartbeatAt),
		CancelRequested: CancelPending(t), CancelledBy: t.CancelledBy, ApprovedBy: t.ApprovedBy,
		ApprovalGate: t.ApprovalGate, ApprovalVersion: t.ApprovalVersion, ScheduleID: t.ScheduleID,
		ScheduleRun: t.ScheduleRun, LastError: t.LastError, Result: t.Result(), RunAt: TimeOf(t.RunAt), Deadline: TimeOf(t.Deadline),
		CreatedAt: TimeOf(t.CreatedAt), UpdatedAt: TimeOf(t.UpdatedAt)}
}

// CancelPending reports whether a cancellation of t waits to be seen by
// its worker: requested, and the task not ended. A task that has ended
// (cancelled, or completed or failed before its worker saw the request)
// waits for nothing, and its cancelled_by and reason say what happened.
func CancelPending(t model.Task) bool { return t.CancelRequested && !t.State.Terminal() }

// Event is an audit event on the wire.
type Event struct {
	Seq     int64           `json:"seq"`
	TaskID  string          `json:"task_id"`
	Kind    model.EventKind `json:"kind"`
	Attempt int             `json:"attempt"`
	Fence   int64           `json:"fence"`
	OpID    string          `json:"op_id"`
	From    model.State     `json:"from"`
	To      model.State     `json:"to"`
	Reason  model.Reason    `json:"reason"`
	Actor   string          `json:"actor"`
	// User is the user of the event's task, where the sender read it (the
	// API always does); left out for an event that concerns no task.
	User string `json:"user,omitempty"`
	// TaskKind is the kind of the event's task, beside User where the
	// sender read it (Kind is the event's own kind).
	TaskKind string `json:"task_kind,omitempty"`
	At       Time   `json:"at"`
	Detail   string `json:"detail"`
	Scope    string `json:"scope"`
}

// EventOf is e's record; user and taskKind are its task's user and kind
// ("" when unknown or when it concerns no task).
func EventOf(e model.Event, user, taskKind string) Event {
	return Event{Seq: e.Seq, TaskID: e.TaskID, Kind: e.Kind, Attempt: e.Attempt, Fence: e.Fence,
		OpID: e.OpID, From: e.From, To: e.To, Reason: e.Reason, Actor: e.Actor, User: user, TaskKind: taskKind,
		At: TimeOf(e.At), Detail: e.Detail, Scope: e.Scope}
}

// TaskPage is one page of tasks (GET /v1/tasks, list --json); Next is the
// cursor of the page after it, "" when this page is the last.
type TaskPage struct {
	Tasks []Task `json:"tasks"`
	Next  string `json:"next"`
}

// Inspection is one task the inspect report shows (GET /v1/inspect,
// inspect --json), with what to do about it.
type Inspection struct {
	Task           Task  `json:"task"`
	LeaseAgeMs     int64 `json:"lease_age_ms,omitempty"`
	HeartbeatAgeMs int64 `json:"heartbeat_age_ms,omitempty"`
	LeaseExpired   bool  `json:"lease_expired,omitempty"`
	// Unreceipted are the operation IDs of effects with an intent and no
	// receipt, sorted.
	Unreceipted []string `json:"effects_without_receipt,omitempty"`
	QueuedForMs int64    `json:"queued_for_ms,omitempty"`
	Advice      string   `json:"advice"`
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
