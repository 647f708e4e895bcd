package model

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Operation bounds shared by the queue and Reference.
const (
	ClaimBatchLimit = 64                     // largest claim batch ever allowed
	LeaseMin        = 100 * time.Millisecond // shortest lease a claim may ask for
	LeaseMax        = time.Hour              // longest lease a claim may ask for
	CheckpointMax   = 16 << 10               // bytes of handler state per step
	ResultMax       = 4 << 10                // bytes of an effect's recorded result
	ErrorMessageMax = 512                    // bytes of a failure message kept as last_error (TruncateMessage)
	GateLengthMax   = 64                     // bytes of an approval gate name
	ReapBatchMax    = 256                    // tasks one reap pass settles
	SchedulesMax    = 1000                   // periodic schedules kept
	PeriodMin       = time.Second            // shortest schedule period
	PeriodMax       = 366 * 24 * time.Hour   // longest schedule period
	ClaimKindsMax   = 64                     // kinds one claim may name
)

// ClaimRequest asks for up to Max queued tasks for Worker under a lease of
// Lease.
type ClaimRequest struct {
	Worker string
	Max    int
	Lease  time.Duration
	// Kinds are the kinds the worker serves: the claim takes tasks of
	// these kinds only, and reads no task of another. Nil takes tasks of
	// every kind (tools and tests that serve them all).
	Kinds []string
}

// Validate checks the request against the batch bound batchMax.
func (r ClaimRequest) Validate(batchMax int) error {
	if err := CheckName("worker", r.Worker); err != nil {
		return err
	}
	if r.Max < 1 || r.Max > batchMax {
		return invalid("max", "must be between 1 and %d, got %d", batchMax, r.Max)
	}
	if err := checkClaimKinds(r.Kinds); err != nil {
		return err
	}
	return CheckLease(r.Lease)
}

// checkClaimKinds checks a claim's kinds: nil, or 1 to ClaimKindsMax
// valid kind names, none twice.
func checkClaimKinds(kinds []string) error {
	if kinds == nil {
		return nil
	}
	if len(kinds) == 0 || len(kinds) > ClaimKindsMax {
		return invalid("kinds", "must name 1 to %d kinds, got %d (nil names every kind)", ClaimKindsMax, len(kinds))
	}
	seen := make(map[string]bool, len(kinds))
	for i, k := range kinds {
		if err := CheckKind(fmt.Sprintf("kinds[%d]", i), k); err != nil {
			return err
		}
		if seen[k] {
			return invalid(fmt.Sprintf("kinds[%d]", i), "%s is named twice", k)
		}
		seen[k] = true
	}
	return nil
}

// KindsKey is a claim's kinds as one string, the same for the same set
// named in any order, and "" for every kind: claims of equal keys take
// from the same tasks, so a group may merge them.
func (r ClaimRequest) KindsKey() string { return KindsKey(r.Kinds) }

// KindsKey is ClaimRequest.KindsKey of kinds.
func KindsKey(kinds []string) string {
	if kinds == nil {
		return ""
	}
	sorted := slices.Clone(kinds)
	slices.Sort(sorted)
	return "[" + strings.Join(sorted, ",") + "]"
}

// Serves reports whether a claim for r may take a task of kind.
func (r ClaimRequest) Serves(kind string) bool {
	return r.Kinds == nil || slices.Contains(r.Kinds, kind)
}

// CheckLease validates a lease duration: bounded, and in whole
// milliseconds, the precision lease_until is stored at (a finer lease would
// be reported to the worker later than the queue enforces it).
func CheckLease(lease time.Duration) error {
	if lease < LeaseMin || lease > LeaseMax || lease%time.Millisecond != 0 {
		return invalid("lease", "must be whole milliseconds between %s and %s, got %s", LeaseMin, LeaseMax, lease)
	}
	return nil
}

// HeartbeatResult is what a heartbeat tells the worker.
type HeartbeatResult struct {
	LeaseUntil      time.Time
	CancelRequested bool
}

// StepWrite completes step Index of a claimed task, charging Cost and saving
// Checkpoint. Naming the index makes the write a compare-and-set: a retry
// after an ambiguous commit is recognised and not charged again.
type StepWrite struct {
	Claim      Claim
	Index      int
	Cost       int64
	Checkpoint string
}

// Validate checks the write's own fields.
func (w StepWrite) Validate() error {
	if err := checkStepIndex("index", w.Index); err != nil {
		return err
	}
	if w.Cost < 0 || w.Cost > CostBudgetMax {
		return invalid("cost", "must be between 0 and %d, got %d", CostBudgetMax, w.Cost)
	}
	if len(w.Checkpoint) > CheckpointMax {
		return invalid("checkpoint", "larger than %d bytes", CheckpointMax)
	}
	return nil
}

// StepResult is the queue's reply to a step write.
type StepResult struct {
	// Replayed is true when the step had already been completed under this
	// claim; nothing was charged.
	Replayed bool
	// CancelRequested reports requested cancellation, so the worker sees it
	// in its step reply as well as in its heartbeat.
	CancelRequested bool
}

// IntentStatus is the effects ledger's answer to an intent.
type IntentStatus string

const (
	// IntentRecorded: the intent is on record for this claim; call the
	// service.
	IntentRecorded IntentStatus = "recorded"
	// IntentReceipted: the operation already has a receipt; never call it
	// again.
	IntentReceipted IntentStatus = "receipted"
	// IntentUncertain: an earlier claim recorded intent but no receipt;
	// reconcile with the service or send the task to review.
	IntentUncertain IntentStatus = "uncertain"
)

// IntentResult is the outcome of recording an intent.
type IntentResult struct {
	OpID   string
	Status IntentStatus
	Result string // the receipt's result when Status is IntentReceipted
}

// Failure describes why a claim ends unsuccessfully.
type Failure struct {
	Class FailureClass
	// Reason applies to permanent failures: PermanentError (the default),
	// BudgetExhausted, StepsExhausted or DeadlineExceeded.
	Reason  Reason
	OpID    string // the uncertain operation, for Uncertain
	Message string // kept (truncated) as the task's last error
}

// Validate checks the failure's fields and returns the reason it records.
func (f Failure) Validate() (Reason, error) {
	switch f.Class {
	case Transient:
		return NoReason, nil
	case Uncertain:
		return UncertainEffect, nil
	case Permanent:
		switch f.Reason {
		case NoReason:
			return PermanentError, nil
		case PermanentError, BudgetExhausted, StepsExhausted, DeadlineExceeded:
			return f.Reason, nil
		}
		return "", invalid("reason", "%q is not a reason a worker may fail with", f.Reason)
	}
	return "", invalid("class", "%q is not a failure class", f.Class)
}

// Grant is the budget an operator adds when requeueing a parked task.
type Grant struct {
	Cost  int64
	Steps int
}

// Limits are the admission caps and bounds stored in the database, so that
// every process enforces the same ones. Zero means unlimited where noted.
type Limits struct {
	DepthMax       int   // active tasks across all users; 0 unlimited
	UserDepthMax   int   // default active tasks per user; 0 unlimited
	UserRunningMax int   // default running tasks per user; 0 unlimited
	AttemptsMax    int   // charged attempts before dead letter, at least 1
	GrantCostMax   int64 // largest cost grant on requeue
	GrantStepsMax  int   // largest step grant on requeue
	ClaimBatchMax  int   // largest claim batch, 1 to ClaimBatchLimit
}

// DefaultLimits are the limits a new database starts with.
var DefaultLimits = Limits{
	DepthMax:       100_000,
	UserDepthMax:   10_000,
	UserRunningMax: 0,
	AttemptsMax:    3,
	GrantCostMax:   10_000,
	GrantStepsMax:  1_000,
	ClaimBatchMax:  16,
}

// Range is an integer field's inclusive range.
type Range struct{ Min, Max int64 }

// Contains reports whether v is inside r, bounds included.
func (r Range) Contains(v int64) bool { return v >= r.Min && v <= r.Max }

// LimitRanges are the inclusive ranges of Limits' fields, by their names
// on the wire.
var LimitRanges = map[string]Range{
	"depth_max":        {0, 10_000_000},
	"user_depth_max":   {0, 10_000_000},
	"user_running_max": {0, 100_000},
	"attempts_max":     {1, 100},
	"grant_cost_max":   {0, CostBudgetMax},
	"grant_steps_max":  {0, StepsMaxLimit},
	"claim_batch_max":  {1, ClaimBatchLimit},
}

// UserLimitRanges are the inclusive ranges of UserLimit's fields, Inherit
// included.
var UserLimitRanges = map[string]Range{
	"running_max": {Inherit, 100_000},
	"depth_max":   {Inherit, 10_000_000},
}

// Validate checks every limit's range.
func (l Limits) Validate() error {
	checks := []struct {
		field string
		value int64
	}{
		{"depth_max", int64(l.DepthMax)},
		{"user_depth_max", int64(l.UserDepthMax)},
		{"user_running_max", int64(l.UserRunningMax)},
		{"attempts_max", int64(l.AttemptsMax)},
		{"grant_cost_max", l.GrantCostMax},
		{"grant_steps_max", int64(l.GrantStepsMax)},
		{"claim_batch_max", int64(l.ClaimBatchMax)},
	}
	for _, c := range checks {
		if r := LimitRanges[c.field]; !r.Contains(c.value) {
			return invalid(c.field, "must be between %d and %d, got %d", r.Min, r.Max, c.value)
		}
	}
	return nil
}

// Inherit marks a per-user limit that follows the default in Limits.
const Inherit = -1

// UserLimit overrides the default limits for one user. Inherit (-1) keeps
// the default; 0 is unlimited.
type UserLimit struct {
	User       string
	RunningMax int
	DepthMax   int
}

// Validate checks the user name and both limits.
func (u UserLimit) Validate() error {
	if err := CheckName("user", u.User); err != nil {
		return err
	}
	if r := UserLimitRanges["running_max"]; !r.Contains(int64(u.RunningMax)) {
		return invalid("running_max", "must be -1 (inherit) or between 0 and %d, got %d", r.Max, u.RunningMax)
	}
	if r := UserLimitRanges["depth_max"]; !r.Contains(int64(u.DepthMax)) {
		return invalid("depth_max", "must be -1 (inherit) or between 0 and %d, got %d", r.Max, u.DepthMax)
	}
	return nil
}

// Effective returns the user's running and depth limits under defaults.
func (u UserLimit) Effective(defaults Limits) (runningMax, depthMax int) {
	runningMax, depthMax = u.RunningMax, u.DepthMax
	if runningMax == Inherit {
		runningMax = defaults.UserRunningMax
	}
	if depthMax == Inherit {
		depthMax = defaults.UserDepthMax
	}
	return runningMax, depthMax
}

// ScheduleSpec describes periodic work: its k-th run is due at
// Origin + k·Period (k = 0, 1, ...), never computed from when the last run
// finished.
type ScheduleSpec struct {
	User string
	// Kind is each run's kind; empty is KindSynthetic.
	Kind       string
	Payload    string
	CostBudget int64
	StepsMax   int
	Priority   int
	Origin     time.Time
	Period     time.Duration
}

// Schedule is a stored periodic schedule.
type Schedule struct {
	ID string
	ScheduleSpec
	// LastRun is the last run k enqueued, -1 before the first.
	LastRun   int64
	CreatedAt time.Time
}

// WithDefaults returns the spec with its kind's defaults (by kind) filling
// the cost budget and step limit it names none of, as NormalizeWith fills
// a request's: a schedule's runs are the queue's own requests, made from
// the spec as stored, so the spec stores the filled values.
func (s ScheduleSpec) WithDefaults(defaults map[string]RequestDefaults) ScheduleSpec {
	kind, err := NormalizeKind("kind", s.Kind)
	if err != nil {
		return s // Validate refuses the kind
	}
	filled := defaults[kind].fill(SubmitRequest{CostBudget: s.CostBudget, StepsMax: s.StepsMax})
	s.CostBudget, s.StepsMax = filled.CostBudget, filled.StepsMax
	return s
}

// Validate checks the spec; the task fields are checked as a submit would.
func (s ScheduleSpec) Validate() (ScheduleSpec, error) {
	if s.Period < PeriodMin || s.Period > PeriodMax || s.Period%time.Millisecond != 0 {
		return s, invalid("period", "must be whole milliseconds between %s and %s, got %s", PeriodMin, PeriodMax, s.Period)
	}
	if s.Origin.IsZero() {
		return s, invalid("origin", "required")
	}
	n, err := Normalize(SubmitRequest{User: s.User, Key: "schedule", Kind: s.Kind, Payload: s.Payload,
		CostBudget: s.CostBudget, StepsMax: s.StepsMax, Priority: s.Priority, RunAt: s.Origin})
	if err != nil {
		return s, err
	}
	s.Kind, s.Payload, s.Origin = n.Kind, n.Payload, n.RunAt
	return s, nil
}

// RunKeyPrefix starts the idempotency key of every schedule run. Callers
// may not use it: a caller's task holding a run's key would make that run
// conflict, and the scheduler's pass fail, on every pass.
const RunKeyPrefix = "schedule/"

// RunKey is the idempotency key of a schedule's k-th run.
func RunKey(scheduleID string, k int64) string {
	return fmt.Sprintf("%s%s/%d", RunKeyPrefix, scheduleID, k)
}

// CheckCallerKey refuses a caller's idempotency key in the scheduler's
// namespace (RunKeyPrefix).
func CheckCallerKey(key string) error {
	if strings.HasPrefix(key, RunKeyPrefix) {
		return invalid("key", "keys starting with %q are reserved for schedule runs", RunKeyPrefix)
	}
	return nil
}

// DueRun returns the latest run due at now (-1 when none is due yet).
func (s Schedule) DueRun(now time.Time) int64 {
	if now.Before(s.Origin) {
		return -1
	}
	return int64(now.Sub(s.Origin) / s.Period)
}

// EnqueueResult counts what one pass of the scheduler did. Missed runs are
// collapsed: after downtime only the latest due run is enqueued, and the
// runs skipped over are counted in Collapsed.
type EnqueueResult struct {
	Enqueued  int
	Collapsed int64
	Refused   int // runs refused by admission; retried on the next pass
}

// ReapResult counts what one reap pass did.
type ReapResult struct {
	Expired   int // leases expired and settled
	Deadlines int // tasks failed because their deadline passed
	More      bool
}

// ListFilter selects tasks for List. Zero values select everything.
type ListFilter struct {
	State State
	User  string
	Limit int // 0 means ListLimitDefault
}

// ListLimitDefault and ListLimitMax bound List.
const (
	ListLimitDefault = 100
	ListLimitMax     = 10_000
)
