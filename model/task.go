package model

import "time"

// Task is a snapshot of one task as the queue stores it. Times are UTC with
// millisecond precision; a zero time means "not set".
type Task struct {
	ID          string
	Seq         int64 // insertion order; the claim order's unique tiebreaker
	User        string
	Key         string // idempotency key, unique per user
	RequestHash string // SHA-256 of the canonical request, hex
	Kind        string // the handler that runs it (SubmitRequest.Kind)
	Payload     string // canonical JSON
	State       State
	Reason      Reason
	Priority    int
	RunAt       time.Time
	Deadline    time.Time
	// Version is the fence token: claims increment it, nothing else does.
	Version int64
	// Attempt is the number of claims so far, the current claim's number
	// while running. Since only a claim increments the version, it always
	// equals Version; it is kept as its own field because callers read it
	// as a count and the fence as a token.
	Attempt int
	// AttemptsCharged counts attempts that ended in a transient failure or a
	// lease expiry; AttemptsMax bounds it.
	AttemptsCharged int
	AttemptsMax     int
	// AttemptsFailed counts the same attempts over the task's whole life:
	// an operator's requeue zeroes AttemptsCharged but not this, so a
	// handler can tell how often the task has failed across requeues.
	AttemptsFailed int
	Owner          string
	LeaseUntil     time.Time
	HeartbeatAt    time.Time
	ClaimedAt      time.Time
	// QueuedAt is when the task last entered queued.
	QueuedAt   time.Time
	CostBudget int64
	CostUsed   int64
	StepsMax   int
	// StepsUsed counts completed steps (approval gates included); it is
	// also the index of the next step to run, the resume point.
	StepsUsed       int
	Checkpoint      string // handler state saved with the last step
	CancelRequested bool
	CancelledBy     string
	ApprovedBy      string
	ApprovalGate    string
	// ApprovalVersion is the version recorded when the task paused at its
	// gate; approve must name it.
	ApprovalVersion int64
	ScheduleID      string
	ScheduleRun     int64
	LastError       string
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// Result is the task's result: what its last step returned (the
// checkpoint saved with it, at most CheckpointMax bytes: a larger one is
// refused when the step is written, never cut), once the task has
// completed; "" before, and for a task that ended otherwise.
func (t Task) Result() string {
	if t.State != Completed {
		return ""
	}
	return t.Checkpoint
}

// PastDeadline reports whether the task's deadline has passed at now: only
// once the clock is beyond it, so a task is still claimable and may still
// be written at its deadline. A task without a deadline never passes it.
// The claim query (deadline >= :now) and the reaper's (deadline < :now)
// state the same rule in SQL.
func (t Task) PastDeadline(now time.Time) bool { return deadlinePassed(t.Deadline, now) }

// deadlinePassed is the one deadline rule: a zero deadline never passes; a
// set one has passed once now is after it.
func deadlinePassed(deadline, now time.Time) bool {
	return !deadline.IsZero() && now.After(deadline)
}

// Claim is a worker's hold on a running task. Every worker write names it;
// the queue accepts the write only while Fence is the task's version, the
// task is running and the lease has not expired at the queue's clock.
type Claim struct {
	TaskID     string
	Fence      int64
	Owner      string
	Attempt    int
	LeaseUntil time.Time
}

// AttemptID names one claim of one task: the task ID and attempt number.
func (c Claim) AttemptID() string { return AttemptID(c.TaskID, c.Attempt) }

// Claimed is a claim together with the task as it was at claim time.
type Claimed struct {
	Claim Claim
	Task  Task
}

// EventKind names what an audit event records.
type EventKind string

// Event kinds. Worker writes that are refused as stale are recorded as
// EventStaleWrite, with the stale claim's attempt and fence.
const (
	EventSubmitted       EventKind = "submitted"
	EventClaimed         EventKind = "claimed"
	EventStep            EventKind = "step"
	EventEffectIntent    EventKind = "effect_intent"
	EventEffectReceipt   EventKind = "effect_receipt"
	EventPaused          EventKind = "paused"
	EventApproved        EventKind = "approved"
	EventRejected        EventKind = "rejected"
	EventReleased        EventKind = "released"
	EventCompleted       EventKind = "completed"
	EventFailed          EventKind = "failed"
	EventRetry           EventKind = "retry"
	EventDeadLettered    EventKind = "dead_lettered"
	EventUncertain       EventKind = "uncertain"
	EventLeaseExpired    EventKind = "lease_expired"
	EventCancelRequested EventKind = "cancel_requested"
	EventCancelled       EventKind = "cancelled"
	EventDeadline        EventKind = "deadline_exceeded"
	EventRequeued        EventKind = "requeued"
	EventResolved        EventKind = "resolved"
	EventStaleWrite      EventKind = "stale_write"
	EventLimitsSet       EventKind = "limits_set"
	EventScheduleAdded   EventKind = "schedule_added"
	EventScheduleRemoved EventKind = "schedule_removed"
	EventEffectSettled   EventKind = "effect_settled"
	EventRestored        EventKind = "restored"
	EventMigrated        EventKind = "migrated"
	// EventPruned records one prune transaction (retention): what it
	// removed, and by whom. It concerns no task: its tasks' own events are
	// what it removed.
	EventPruned EventKind = "pruned"
	// EventRetentionSet records a change of the stored retention policy.
	EventRetentionSet EventKind = "retention_set"
)

// Event is one row of the append-only audit trail. It never holds payload
// contents or credentials.
type Event struct {
	Seq     int64
	TaskID  string // empty for events that concern no task (limits, schedules)
	Kind    EventKind
	Attempt int
	Fence   int64
	OpID    string // operation ID for effect events
	From    State
	To      State
	Reason  Reason
	Actor   string
	At      time.Time
	Detail  string // short, non-sensitive explanation
	// Scope is the authority the action was taken under (ScopeSubmit,
	// ScopeApprove, ScopeOperate); empty for workers and the reaper.
	Scope string
}

// Effect is one row of the effects ledger.
type Effect struct {
	OpID         string
	TaskID       string
	Step         int
	IntentFence  int64
	IntentAt     time.Time
	ReceiptFence int64     // the claim that recorded the receipt; 0 if an operator did
	ReceiptAt    time.Time // zero while the outcome is unknown
	ReceiptBy    string    // the operator who settled it, if one did
	Result       string
}

// Receipted reports whether the effect's outcome has been recorded.
func (e Effect) Receipted() bool { return !e.ReceiptAt.IsZero() }

// Millis converts t to Unix milliseconds; the zero time is 0.
func Millis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// FromMillis converts Unix milliseconds to a UTC time; 0 is the zero time.
func FromMillis(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// Truncate returns t in UTC with millisecond precision, the precision the
// queue stores.
func Truncate(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Millisecond)
}
