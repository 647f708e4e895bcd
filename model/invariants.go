package model

import (
	"fmt"
	"reflect"
	"sort"
	"time"
)

// Violation is a broken invariant: which one, the task it concerns (if
// any), and what was observed.
type Violation struct {
	Invariant string
	TaskID    string
	Detail    string
}

// Error returns "invariant (task): detail".
func (v Violation) Error() string {
	if v.TaskID == "" {
		return v.Invariant + ": " + v.Detail
	}
	return v.Invariant + " (task " + v.TaskID + "): " + v.Detail
}

// Invariant names, as reported in Violation.Invariant.
const (
	InvStateValid       = "state-valid"
	InvReasonMatches    = "reason-matches-state"
	InvLeaseHeld        = "lease-held-only-while-running"
	InvBudget           = "budget-not-overspent"
	InvSteps            = "steps-within-limit"
	InvAttempts         = "attempts-within-limit"
	InvApprovalVersion  = "approval-version-recorded"
	InvCancelledBy      = "cancelled-names-who"
	InvAttemptIsVersion = "attempt-equals-version"
	InvUserLimit        = "per-user-running-limit"
	InvTerminalFrozen   = "terminal-never-changes"
	InvTransition       = "transition-allowed"
	InvMonotonic        = "counters-never-decrease"
	InvTaskKept         = "accepted-task-kept"
	InvSingleClaim      = "single-valid-claim"
	InvReceiptOnce      = "receipt-once"
	InvStepOnce         = "step-charged-once"
	InvScheduleRunOnce  = "schedule-run-once"
)

// reasonsFor lists the reasons a task in each state may carry.
var reasonsFor = map[State][]Reason{
	Queued:             {NoReason},
	Running:            {NoReason},
	WaitingForApproval: {NoReason},
	NeedsReview:        {AttemptsExhausted, UncertainEffect},
	Completed:          {NoReason, OperatorResolved},
	Failed:             {BudgetExhausted, StepsExhausted, PermanentError, DeadlineExceeded, OperatorResolved},
	Cancelled:          {CancelledByCaller, ApprovalRejected, OperatorResolved},
}

// CheckTask checks the invariants that hold for one task on its own.
func CheckTask(t Task) []Violation {
	var out []Violation
	bad := func(inv, format string, args ...any) {
		out = append(out, Violation{Invariant: inv, TaskID: t.ID, Detail: fmt.Sprintf(format, args...)})
	}
	if !t.State.Valid() {
		bad(InvStateValid, "unknown state %q", t.State)
		return out
	}
	reasonOK := false
	for _, r := range reasonsFor[t.State] {
		reasonOK = reasonOK || r == t.Reason
	}
	if !reasonOK {
		bad(InvReasonMatches, "state %s carries reason %q", t.State, t.Reason)
	}
	running := t.State == Running
	if running != (t.Owner != "") || running != !t.LeaseUntil.IsZero() {
		bad(InvLeaseHeld, "state %s with owner %q and lease until %v", t.State, t.Owner, t.LeaseUntil)
	}
	if t.CostUsed < 0 || t.CostUsed > t.CostBudget {
		bad(InvBudget, "cost used %d of budget %d", t.CostUsed, t.CostBudget)
	}
	if t.StepsUsed < 0 || t.StepsUsed > t.StepsMax {
		bad(InvSteps, "steps used %d of %d", t.StepsUsed, t.StepsMax)
	}
	if t.AttemptsCharged < 0 || t.AttemptsCharged > t.AttemptsMax {
		bad(InvAttempts, "attempts charged %d of %d", t.AttemptsCharged, t.AttemptsMax)
	} else if t.AttemptsFailed < t.AttemptsCharged {
		bad(InvAttempts, "attempts failed %d below attempts charged %d", t.AttemptsFailed, t.AttemptsCharged)
	}
	if t.State == WaitingForApproval && (t.ApprovalVersion != t.Version || t.ApprovalGate == "") {
		bad(InvApprovalVersion, "waiting at gate %q with recorded version %d, version %d", t.ApprovalGate, t.ApprovalVersion, t.Version)
	}
	if t.State == Cancelled && t.CancelledBy == "" {
		bad(InvCancelledBy, "cancelled without naming who cancelled")
	}
	if int64(t.Attempt) != t.Version {
		bad(InvAttemptIsVersion, "attempt %d, version %d", t.Attempt, t.Version)
	}
	return out
}

// CheckUserLimits checks that no user runs more tasks than its limit. A
// lowered limit does not stop tasks already running, so this holds after
// every claim, for the users who just claimed: call it with the snapshot
// taken after the claim.
func CheckUserLimits(tasks []Task, limits Limits, users []UserLimit) []Violation {
	overrides := map[string]UserLimit{}
	for _, u := range users {
		overrides[u.User] = u
	}
	running := map[string]int{}
	for _, t := range tasks {
		if t.State == Running {
			running[t.User]++
		}
	}
	names := make([]string, 0, len(running))
	for u := range running {
		names = append(names, u)
	}
	sort.Strings(names)
	var out []Violation
	for _, user := range names {
		u, ok := overrides[user]
		if !ok {
			u = UserLimit{User: user, RunningMax: Inherit, DepthMax: Inherit}
		}
		if limit, _ := u.Effective(limits); limit > 0 && running[user] > limit {
			out = append(out, Violation{Invariant: InvUserLimit,
				Detail: fmt.Sprintf("user %s runs %d tasks (limit %d)", user, running[user], limit)})
		}
	}
	return out
}

// CheckSnapshot checks every per-task invariant.
func CheckSnapshot(tasks []Task) []Violation {
	var out []Violation
	for _, t := range tasks {
		out = append(out, CheckTask(t)...)
	}
	return out
}

// CheckChange checks one task across two snapshots: a terminal task never
// changes, the state moved along an allowed transition (or stayed), and the
// version and the amounts used never went down.
func CheckChange(before, after Task) []Violation {
	var out []Violation
	bad := func(inv, format string, args ...any) {
		out = append(out, Violation{Invariant: inv, TaskID: before.ID, Detail: fmt.Sprintf(format, args...)})
	}
	if before.State.Terminal() {
		if !reflect.DeepEqual(before, after) {
			bad(InvTerminalFrozen, "%s task changed: %s", before.State, diffTasks(before, after))
		}
		return out
	}
	if !AllowedMove(before.State, after.State) {
		bad(InvTransition, "%s -> %s is not a transition", before.State, after.State)
	}
	if after.Version < before.Version || after.CostUsed < before.CostUsed || after.StepsUsed < before.StepsUsed {
		bad(InvMonotonic, "version %d->%d, cost used %d->%d, steps used %d->%d",
			before.Version, after.Version, before.CostUsed, after.CostUsed, before.StepsUsed, after.StepsUsed)
	}
	return out
}

// diffTasks names the fields that differ between two snapshots of a task.
func diffTasks(a, b Task) string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var fields []string
	for i := 0; i < va.NumField(); i++ {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			fields = append(fields, fmt.Sprintf("%s %v -> %v", va.Type().Field(i).Name, va.Field(i).Interface(), vb.Field(i).Interface()))
		}
	}
	return fmt.Sprint(fields)
}

// AcceptedWrite is one worker write the queue accepted: the claim it was
// made under and when, in the order the queue accepted them. Owner and
// LeaseUntil, when known, let History check that one claim has one owner
// and that no write is accepted after its claim's lease ran out.
type AcceptedWrite struct {
	TaskID string
	Fence  int64
	Kind   string // claim, heartbeat, step, effect_intent, ...
	At     time.Time
	Owner  string
	// LeaseUntil is the lease a claim or heartbeat set; zero for others.
	LeaseUntil time.Time
}

// claimSpan is what History keeps of one claim.
type claimSpan struct {
	last  time.Time // the claim's latest accepted write
	owner string
	// leaseUntil is the lease accepted claims and heartbeats surely set;
	// leaseMaybe also counts heartbeats that may have been applied.
	leaseUntil, leaseMaybe time.Time
}

// History checks accepted writes as they arrive: for each task, once a
// write under fence f+1 has been accepted, no write under a fence ≤ f may
// be, so no two claims' accepted-write intervals overlap; one fence belongs
// to one owner; and no write is accepted at or after the end of its
// claim's lease. It keeps the latest fence per task and a few facts about
// each claim.
type History struct {
	latest map[string]int64
	spans  map[string]map[int64]claimSpan
}

// NewHistory returns an empty History.
func NewHistory() *History {
	return &History{latest: map[string]int64{}, spans: map[string]map[int64]claimSpan{}}
}

// Accept records w and returns a violation if it was accepted under an
// older claim than one already seen for the task, before the end of an
// older claim's interval, under another owner's fence, or after its
// claim's lease ran out.
func (h *History) Accept(w AcceptedWrite) *Violation {
	bad := func(format string, args ...any) *Violation {
		return &Violation{Invariant: InvSingleClaim, TaskID: w.TaskID, Detail: fmt.Sprintf(format, args...)}
	}
	latest, seen := h.latest[w.TaskID]
	if seen && w.Fence < latest {
		return bad("%s under fence %d accepted after a write under fence %d", w.Kind, w.Fence, latest)
	}
	spans := h.spans[w.TaskID]
	if spans == nil {
		spans = map[int64]claimSpan{}
		h.spans[w.TaskID] = spans
	}
	if prev := spans[latest]; seen && w.Fence > latest && w.At.Before(prev.last) {
		return bad("claim %d began at %v, before claim %d's last write at %v", w.Fence, w.At, latest, prev.last)
	}
	span, ok := spans[w.Fence]
	switch {
	case !ok:
		span = claimSpan{owner: w.Owner}
	case w.Owner != "" && span.owner != "" && w.Owner != span.owner:
		return bad("%s under fence %d accepted from %s, but %s holds that claim", w.Kind, w.Fence, w.Owner, span.owner)
	case !span.leaseMaybe.IsZero() && !w.At.Before(span.leaseMaybe):
		return bad("%s under fence %d accepted at %v, after its lease ran out at %v", w.Kind, w.Fence, w.At, span.leaseMaybe)
	}
	span.last = w.At
	if !w.LeaseUntil.IsZero() {
		span.leaseUntil = w.LeaseUntil
		if w.LeaseUntil.After(span.leaseMaybe) {
			span.leaseMaybe = w.LeaseUntil
		}
	}
	spans[w.Fence] = span
	h.latest[w.TaskID] = w.Fence
	return nil
}

// MayExtend records that a heartbeat of the claim may have been applied
// although its caller saw an error (an ambiguous commit): the lease may run
// until leaseUntil, so later writes are judged against that.
func (h *History) MayExtend(taskID string, fence int64, leaseUntil time.Time) {
	span, ok := h.spans[taskID][fence]
	if !ok || !leaseUntil.After(span.leaseMaybe) {
		return
	}
	span.leaseMaybe = leaseUntil
	h.spans[taskID][fence] = span
}

// LeaseUntil returns the lease of a task's claim as its accepted claim and
// heartbeats surely set it (the reaper may not expire it earlier).
func (h *History) LeaseUntil(taskID string, fence int64) (time.Time, bool) {
	span, ok := h.spans[taskID][fence]
	return span.leaseUntil, ok && !span.leaseUntil.IsZero()
}

// EventChecker checks an audit trail as it grows, one event at a time: no
// step index of a task is charged twice and no operation is receipted
// twice. The zero value is not ready; use NewEventChecker.
type EventChecker struct {
	steps    map[taskStep]bool // steps charged
	receipts map[string]bool   // operation IDs receipted
}

// taskStep names one step of one task.
type taskStep struct {
	task  string
	index int
}

// NewEventChecker returns a checker that has seen no event.
func NewEventChecker() *EventChecker {
	return &EventChecker{steps: map[taskStep]bool{}, receipts: map[string]bool{}}
}

// Check checks e against the events seen before it and records it.
func (c *EventChecker) Check(e Event) *Violation {
	switch e.Kind {
	case EventStep:
		var index int
		if _, err := fmt.Sscanf(e.Detail, "step %d", &index); err != nil {
			return &Violation{Invariant: InvStepOnce, TaskID: e.TaskID, Detail: "unreadable step event " + e.Detail}
		}
		key := taskStep{e.TaskID, index}
		if c.steps[key] {
			return &Violation{Invariant: InvStepOnce, TaskID: e.TaskID, Detail: fmt.Sprintf("step %d charged twice", index)}
		}
		c.steps[key] = true
	case EventEffectReceipt:
		if c.receipts[e.OpID] {
			return &Violation{Invariant: InvReceiptOnce, TaskID: e.TaskID, Detail: e.OpID + " receipted twice"}
		}
		c.receipts[e.OpID] = true
	}
	return nil
}

// CheckEvents checks an audit trail (one task's or the whole queue's, in
// order) with an EventChecker and returns every violation.
func CheckEvents(events []Event) []Violation {
	var out []Violation
	c := NewEventChecker()
	for _, e := range events {
		if v := c.Check(e); v != nil {
			out = append(out, *v)
		}
	}
	return out
}

// ScheduleRunChecker checks tasks as they are first seen: no schedule run
// (schedule, k) is enqueued as more than one task. The zero value is not
// ready; use NewScheduleRunChecker.
type ScheduleRunChecker struct {
	runs map[scheduleRun]string // run -> task ID
}

// scheduleRun names run k of a schedule.
type scheduleRun struct {
	schedule string
	k        int64
}

// NewScheduleRunChecker returns a checker that has seen no task.
func NewScheduleRunChecker() *ScheduleRunChecker {
	return &ScheduleRunChecker{runs: map[scheduleRun]string{}}
}

// Check checks a task seen for the first time against the tasks seen
// before it and records it. A task not made by a schedule always passes.
func (c *ScheduleRunChecker) Check(t Task) *Violation {
	if t.ScheduleID == "" {
		return nil
	}
	key := scheduleRun{t.ScheduleID, t.ScheduleRun}
	if other, dup := c.runs[key]; dup {
		return &Violation{Invariant: InvScheduleRunOnce, TaskID: t.ID,
			Detail: fmt.Sprintf("run %s/%d also enqueued as task %s", t.ScheduleID, t.ScheduleRun, other)}
	}
	c.runs[key] = t.ID
	return nil
}

// CheckScheduleRuns checks that no schedule run (schedule, k) was enqueued
// as more than one task, with a ScheduleRunChecker over tasks.
func CheckScheduleRuns(tasks []Task) []Violation {
	var out []Violation
	c := NewScheduleRunChecker()
	for _, t := range tasks {
		if v := c.Check(t); v != nil {
			out = append(out, *v)
		}
	}
	return out
}
