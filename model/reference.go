package model

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"time"
)

// Clock is the time source Reference reads; clockwork.Clock satisfies it.
type Clock interface {
	Now() time.Time
}

// Reference is an in-memory implementation of the queue's semantics, kept
// deliberately simple (linear scans, no indexes, no counters) so that it can
// serve as the oracle the durable queue is compared against. It implements
// the same operations with the same signatures as package queue. It is not
// safe for concurrent use.
type Reference struct {
	clock      Clock
	ids        IDSource
	rand       Rand
	backoff    Backoff
	limits     Limits
	userLimits map[string]UserLimit
	tasks      map[string]*Task
	order      []string // task IDs by Seq
	events     []Event
	effects    map[string]*Effect
	effectIDs  []string // op IDs in insertion order
	schedules  map[string]*Schedule
	queueWait  Histogram
	runTime    Histogram
	seq        int64
	eventSeq   int64                 // the last event's number: a prune removes events, never a number
	tombstones map[string]*Tombstone // by TaskKey
	pruned     Metrics               // the counts of the events pruned, and the tasks (Pruned)
}

// ReferenceOptions configures a Reference. Clock, IDs and Rand are required.
type ReferenceOptions struct {
	Clock   Clock
	IDs     IDSource
	Rand    Rand
	Backoff Backoff // zero: DefaultBackoff
	Limits  *Limits // nil: DefaultLimits
}

// NewReference returns an empty Reference.
func NewReference(o ReferenceOptions) *Reference {
	r := &Reference{
		clock: o.Clock, ids: o.IDs, rand: o.Rand, backoff: o.Backoff,
		limits:     DefaultLimits,
		userLimits: map[string]UserLimit{},
		tasks:      map[string]*Task{},
		effects:    map[string]*Effect{},
		schedules:  map[string]*Schedule{},
		tombstones: map[string]*Tombstone{},
		queueWait:  NewHistogram(),
		runTime:    NewHistogram(),
	}
	if r.backoff == (Backoff{}) {
		r.backoff = DefaultBackoff
	}
	if o.Limits != nil {
		r.limits = *o.Limits
	}
	return r
}

func (r *Reference) now() time.Time { return Truncate(r.clock.Now()) }

func (r *Reference) emit(e Event) {
	r.eventSeq++
	e.Seq = r.eventSeq
	e.At = r.now()
	r.events = append(r.events, e)
}

// Submit validates, deduplicates and admits a request.
func (r *Reference) Submit(_ context.Context, req SubmitRequest) (SubmitResult, error) {
	if req.ScheduleID != "" || req.ScheduleRun != 0 {
		return SubmitResult{}, invalid("schedule_id", "set only by the scheduler")
	}
	n, err := Normalize(req)
	if err != nil {
		return SubmitResult{}, err
	}
	if err := CheckCallerKey(n.Key); err != nil {
		return SubmitResult{}, err
	}
	return r.submit(n, n.User)
}

func (r *Reference) submit(n Normalized, actor string) (SubmitResult, error) {
	return r.submitAs(n, actor, "")
}

// submitAs is submit with the new task's ID drawn already (SubmitMany), or
// drawn here when id is "".
func (r *Reference) submitAs(n Normalized, actor, id string) (SubmitResult, error) {
	if held, hash, ok := r.keyHolder(n.User, n.Key); ok {
		if hash == n.Hash {
			return SubmitResult{TaskID: held, Replay: true}, nil
		}
		return SubmitResult{}, fmt.Errorf("user %s key %s is task %s: %w", n.User, n.Key, held, ErrIdempotencyConflict)
	}
	now := r.now()
	if err := n.CheckTimely(now); err != nil {
		return SubmitResult{}, err
	}
	if err := r.admit(n.User); err != nil {
		return SubmitResult{}, err
	}
	if id == "" {
		id = NewIDFor(r.ids, TaskIDPrefix, TaskKey(n.User, n.Key))
		if err := CheckNewTaskID(id); err != nil {
			return SubmitResult{}, err
		}
	}
	r.seq++
	runAt := n.RunAt
	if runAt.IsZero() {
		runAt = now
	}
	t := &Task{
		ID: id, Seq: r.seq, User: n.User, Key: n.Key,
		RequestHash: n.Hash, Kind: n.Kind, Payload: n.Payload, State: Queued, Priority: n.Priority,
		RunAt: runAt, Deadline: n.Deadline, AttemptsMax: r.limits.AttemptsMax,
		QueuedAt: now, CostBudget: n.CostBudget, StepsMax: n.StepsMax,
		ScheduleID: n.ScheduleID, ScheduleRun: n.ScheduleRun,
		CreatedAt: now, UpdatedAt: now,
	}
	r.tasks[t.ID] = t
	r.order = append(r.order, t.ID)
	r.emit(Event{TaskID: t.ID, Kind: EventSubmitted, To: Queued, Actor: actor})
	return SubmitResult{TaskID: t.ID}, nil
}

func (r *Reference) admit(user string) error {
	var total, mine int
	for _, t := range r.tasks {
		if t.State.Active() {
			total++
			if t.User == user {
				mine++
			}
		}
	}
	_, depthMax := r.userLimit(user)
	if depthMax > 0 && mine >= depthMax {
		return fmt.Errorf("user %s has %d active tasks (limit %d): %w", user, mine, depthMax, ErrQueueFull)
	}
	if r.limits.DepthMax > 0 && total >= r.limits.DepthMax {
		return fmt.Errorf("%d active tasks (limit %d): %w", total, r.limits.DepthMax, ErrQueueFull)
	}
	return nil
}

func (r *Reference) userLimit(user string) (runningMax, depthMax int) {
	u, ok := r.userLimits[user]
	if !ok {
		u = UserLimit{User: user, RunningMax: Inherit, DepthMax: Inherit}
	}
	return u.Effective(r.limits)
}

func (r *Reference) running(user string) int {
	n := 0
	for _, t := range r.tasks {
		if t.State == Running && t.User == user {
			n++
		}
	}
	return n
}

// claimOrder sorts candidates by priority (high first), run_at, then seq.
func claimOrder(ts []*Task) {
	sort.Slice(ts, func(i, j int) bool {
		a, b := ts[i], ts[j]
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		if !a.RunAt.Equal(b.RunAt) {
			return a.RunAt.Before(b.RunAt)
		}
		return a.Seq < b.Seq
	})
}

// Claim claims up to req.Max eligible queued tasks. As in the queue, the
// batch is checked against ClaimBatchLimit first and against the stored
// ClaimBatchMax only when some task is claimable: an idle poll is answered
// without reading the limits.
func (r *Reference) Claim(_ context.Context, req ClaimRequest) ([]Claimed, error) {
	if err := req.Validate(ClaimBatchLimit); err != nil {
		return nil, err
	}
	now := r.now()
	if len(r.claimable(now, req)) == 0 {
		return nil, nil
	}
	if err := req.Validate(r.limits.ClaimBatchMax); err != nil {
		return nil, err
	}
	return r.claimUpTo(req, now), nil
}

// claimUpTo claims up to req.Max claimable tasks at now, in claim order,
// req already checked.
func (r *Reference) claimUpTo(req ClaimRequest, now time.Time) []Claimed {
	var out []Claimed
	for len(out) < req.Max {
		candidates := r.claimable(now, req)
		if len(candidates) == 0 {
			break
		}
		claimOrder(candidates)
		t := candidates[0]
		r.queueWait.Observe(now.Sub(eligibleAt(t)))
		t.State, t.Version, t.Attempt = Running, t.Version+1, t.Attempt+1
		t.Owner, t.LeaseUntil, t.ClaimedAt, t.HeartbeatAt, t.UpdatedAt = req.Worker, now.Add(req.Lease), now, now, now
		r.emit(Event{TaskID: t.ID, Kind: EventClaimed, Attempt: t.Attempt, Fence: t.Version,
			From: Queued, To: Running, Actor: req.Worker})
		out = append(out, Claimed{Claim: claimOf(t), Task: *t})
	}
	return out
}

// CompleteAndClaim completes c as Complete does and then, in the same
// write, claims up to next.Max tasks for next as Claim does, the claim
// seeing the completion (its user's running count down by one). next is
// checked before anything is written: against ClaimBatchLimit, and a
// batch of more than one against the stored ClaimBatchMax whether or not
// anything is due (the queue reads the limits for it first). A refused
// completion (a stale claim, its event kept) claims nothing.
func (r *Reference) CompleteAndClaim(ctx context.Context, c Claim, next ClaimRequest) ([]Claimed, error) {
	if err := next.Validate(ClaimBatchLimit); err != nil {
		return nil, err
	}
	if next.Max > 1 {
		if err := next.Validate(r.limits.ClaimBatchMax); err != nil {
			return nil, err
		}
	}
	if err := r.Complete(ctx, c); err != nil {
		return nil, err
	}
	return r.claimUpTo(next, r.now()), nil
}

// claimable returns the queued tasks a claim for req at now may take: of
// a kind it serves, due, within their deadline, and of a user below its
// running limit.
func (r *Reference) claimable(now time.Time, req ClaimRequest) []*Task {
	var out []*Task
	for _, t := range r.tasks {
		if t.State != Queued || t.RunAt.After(now) || t.PastDeadline(now) || !req.Serves(t.Kind) {
			continue
		}
		if limit, _ := r.userLimit(t.User); limit > 0 && r.running(t.User) >= limit {
			continue
		}
		out = append(out, t)
	}
	return out
}

func claimOf(t *Task) Claim {
	return Claim{TaskID: t.ID, Fence: t.Version, Owner: t.Owner, Attempt: t.Attempt, LeaseUntil: t.LeaseUntil}
}

func eligibleAt(t *Task) time.Time {
	if t.RunAt.After(t.QueuedAt) {
		return t.RunAt
	}
	return t.QueuedAt
}

// fenced checks a worker write. A stale write is recorded as an event and
// refused; a write past the deadline (for checkDeadline writes) fails the
// task.
func (r *Reference) fenced(c Claim, write Write, checkDeadline bool) (*Task, error) {
	t, ok := r.tasks[c.TaskID]
	if !ok {
		return nil, fmt.Errorf("task %s: %w", c.TaskID, ErrTaskNotFound)
	}
	now := r.now()
	if why := StaleReason(t.State, t.Version, t.LeaseUntil, c.Fence, now); why != "" {
		r.emit(Event{TaskID: t.ID, Kind: EventStaleWrite, Attempt: c.Attempt, Fence: c.Fence,
			From: t.State, To: t.State, Actor: c.Owner, Detail: DetailStale(write, why)})
		return nil, fmt.Errorf("%s task %s fence %d: %s: %w", write, t.ID, c.Fence, why, ErrStaleClaim)
	}
	if checkDeadline && t.PastDeadline(now) {
		r.settle(t, Failed, DeadlineExceeded, EventDeadline, c.Owner, "")
		return nil, fmt.Errorf("%s task %s: %w", write, t.ID, ErrDeadlineExceeded)
	}
	return t, nil
}

// StaleReason says why a write under fence is refused for a task in state
// with version and leaseUntil at now, or "" when the write may proceed.
func StaleReason(state State, version int64, leaseUntil time.Time, fence int64, now time.Time) string {
	switch {
	case version != fence:
		return fmt.Sprintf("fence %d is not current (version %d)", fence, version)
	case state != Running:
		return fmt.Sprintf("task is %s", state)
	case !now.Before(leaseUntil):
		return fmt.Sprintf("lease expired at %s", leaseUntil.Format(time.RFC3339Nano))
	}
	return ""
}

// settle ends the running claim of t (if any) and moves t to state.
func (r *Reference) settle(t *Task, to State, reason Reason, kind EventKind, actor, detail string) {
	now := r.now()
	from := t.State
	if from == Running {
		r.runTime.Observe(now.Sub(t.ClaimedAt))
	}
	t.State, t.Reason, t.UpdatedAt = to, reason, now
	t.Owner, t.LeaseUntil = "", time.Time{}
	if to == Queued {
		t.QueuedAt = now
	}
	if to == Completed { // a completed task keeps no last error
		t.LastError = ""
	}
	r.emit(Event{TaskID: t.ID, Kind: kind, Attempt: t.Attempt, Fence: t.Version,
		From: from, To: to, Reason: reason, Actor: actor, Detail: detail})
}

// Heartbeat extends the claim's lease and reports requested cancellation.
func (r *Reference) Heartbeat(_ context.Context, c Claim, lease time.Duration) (HeartbeatResult, error) {
	if err := CheckLease(lease); err != nil {
		return HeartbeatResult{}, err
	}
	t, err := r.fenced(c, WriteHeartbeat, true)
	if err != nil {
		return HeartbeatResult{}, err
	}
	now := r.now()
	t.LeaseUntil, t.HeartbeatAt, t.UpdatedAt = now.Add(lease), now, now
	return HeartbeatResult{LeaseUntil: t.LeaseUntil, CancelRequested: t.CancelRequested}, nil
}

// CompleteStep charges and records one completed step.
func (r *Reference) CompleteStep(_ context.Context, w StepWrite) (StepResult, error) {
	if err := w.Validate(); err != nil {
		return StepResult{}, err
	}
	t, err := r.fenced(w.Claim, WriteStep, true)
	if err != nil {
		return StepResult{}, err
	}
	if w.Index < t.StepsUsed {
		return StepResult{Replayed: true, CancelRequested: t.CancelRequested}, nil
	}
	if w.Index > t.StepsUsed {
		return StepResult{}, fmt.Errorf("step %d of task %s: next step is %d: %w", w.Index, t.ID, t.StepsUsed, ErrStepConflict)
	}
	if t.StepsUsed+1 > t.StepsMax {
		r.settle(t, Failed, StepsExhausted, EventFailed, w.Claim.Owner, DetailStep(w.Index, w.Cost))
		return StepResult{}, fmt.Errorf("step %d of task %s: %w", w.Index, t.ID, ErrStepsExhausted)
	}
	if t.CostUsed+w.Cost > t.CostBudget {
		r.settle(t, Failed, BudgetExhausted, EventFailed, w.Claim.Owner, DetailStep(w.Index, w.Cost))
		return StepResult{}, fmt.Errorf("step %d of task %s: %w", w.Index, t.ID, ErrBudgetExhausted)
	}
	t.StepsUsed, t.CostUsed = t.StepsUsed+1, t.CostUsed+w.Cost
	t.Checkpoint, t.UpdatedAt = w.Checkpoint, r.now()
	r.emit(Event{TaskID: t.ID, Kind: EventStep, Attempt: t.Attempt, Fence: t.Version,
		From: Running, To: Running, Actor: w.Claim.Owner, Detail: DetailStep(w.Index, w.Cost)})
	return StepResult{CancelRequested: t.CancelRequested}, nil
}

// RecordIntent records the intent to make the effect of a step, or reports
// that the operation already has a receipt or an uncertain outcome.
func (r *Reference) RecordIntent(_ context.Context, c Claim, step int) (IntentResult, error) {
	if err := CheckStepIndex(step); err != nil {
		return IntentResult{}, err
	}
	t, err := r.fenced(c, WriteIntent, true)
	if err != nil {
		return IntentResult{}, err
	}
	op := OperationID(t.ID, step)
	if e, ok := r.effects[op]; ok {
		switch {
		case e.Receipted():
			return IntentResult{OpID: op, Status: IntentReceipted, Result: e.Result}, nil
		case e.IntentFence == c.Fence:
			return IntentResult{OpID: op, Status: IntentRecorded}, nil
		default:
			return IntentResult{OpID: op, Status: IntentUncertain}, nil
		}
	}
	now := r.now()
	r.effects[op] = &Effect{OpID: op, TaskID: t.ID, Step: step, IntentFence: c.Fence, IntentAt: now}
	r.effectIDs = append(r.effectIDs, op)
	t.UpdatedAt = now
	r.emit(Event{TaskID: t.ID, Kind: EventEffectIntent, Attempt: t.Attempt, Fence: t.Version,
		OpID: op, From: Running, To: Running, Actor: c.Owner})
	return IntentResult{OpID: op, Status: IntentRecorded}, nil
}

// RecordReceipt records the outcome of an operation the claim called (or
// reconciled). Repeating the same receipt under the same claim is accepted.
func (r *Reference) RecordReceipt(_ context.Context, c Claim, opID, result string) error {
	if len(result) > ResultMax {
		return invalid("result", "larger than %d bytes", ResultMax)
	}
	t, err := r.fenced(c, WriteReceipt, false)
	if err != nil {
		return err
	}
	e, ok := r.effects[opID]
	if !ok || e.TaskID != t.ID {
		return fmt.Errorf("operation %s of task %s has no intent: %w", opID, t.ID, ErrNotFound)
	}
	if e.Receipted() {
		if e.ReceiptFence == c.Fence && e.Result == result {
			return nil
		}
		return fmt.Errorf("operation %s: %w", opID, ErrEffectReceipted)
	}
	now := r.now()
	e.ReceiptFence, e.ReceiptAt, e.Result = c.Fence, now, result
	t.UpdatedAt = now
	r.emit(Event{TaskID: t.ID, Kind: EventEffectReceipt, Attempt: t.Attempt, Fence: t.Version,
		OpID: opID, From: Running, To: Running, Actor: c.Owner})
	return nil
}

// Pause parks the task at the approval gate of step, releasing the lease
// and recording the version an approval must name. If cancellation was
// requested the task is cancelled instead; the returned state says which.
func (r *Reference) Pause(_ context.Context, c Claim, step int, gate string) (State, error) {
	if err := CheckGate(gate); err != nil {
		return "", err
	}
	t, err := r.fenced(c, WritePause, true)
	if err != nil {
		return "", err
	}
	if step != t.StepsUsed {
		return "", fmt.Errorf("pause at step %d of task %s: next step is %d: %w", step, t.ID, t.StepsUsed, ErrStepConflict)
	}
	if t.CancelRequested {
		r.settle(t, Cancelled, CancelledByCaller, EventCancelled, c.Owner, "")
		return Cancelled, nil
	}
	if t.StepsUsed+1 > t.StepsMax {
		r.settle(t, Failed, StepsExhausted, EventFailed, c.Owner, DetailStep(step, 0))
		return "", fmt.Errorf("pause at step %d of task %s: %w", step, t.ID, ErrStepsExhausted)
	}
	t.StepsUsed++
	t.ApprovalGate, t.ApprovalVersion = gate, t.Version
	r.settle(t, WaitingForApproval, NoReason, EventPaused, c.Owner, DetailPause(gate, t.Version))
	return WaitingForApproval, nil
}

// CheckGate validates an approval gate name.
func CheckGate(gate string) error {
	if gate == "" {
		return invalid("gate", "required")
	}
	if len(gate) > GateLengthMax {
		return invalid("gate", "longer than %d bytes", GateLengthMax)
	}
	for i := 0; i < len(gate); i++ {
		if !isKeyByte(gate[i]) {
			return invalid("gate", "character %q at offset %d is not allowed", gate[i], i)
		}
	}
	return nil
}

// CheckStepIndex validates the step an effect intent names: an index a
// task could reach, 0 to StepsMaxLimit-1.
func CheckStepIndex(step int) error { return checkStepIndex("step", step) }

// checkStepIndex bounds a step index reported under field.
func checkStepIndex(field string, index int) error {
	if index < 0 || index >= StepsMaxLimit {
		return invalid(field, "must be between 0 and %d, got %d", StepsMaxLimit-1, index)
	}
	return nil
}

// Complete finishes the claimed task.
func (r *Reference) Complete(_ context.Context, c Claim) error {
	t, err := r.fenced(c, WriteComplete, false)
	if err != nil {
		return err
	}
	r.settle(t, Completed, NoReason, EventCompleted, c.Owner, "")
	return nil
}

// Fail ends the claim with a classified failure and returns the state the
// task reached.
func (r *Reference) Fail(_ context.Context, c Claim, f Failure) (State, error) {
	reason, err := f.Validate()
	if err != nil {
		return "", err
	}
	t, err := r.fenced(c, WriteFail, false)
	if err != nil {
		return "", err
	}
	t.LastError = TruncateMessage(f.Message)
	switch f.Class {
	case Permanent:
		r.settle(t, Failed, reason, EventFailed, c.Owner, "")
	case Uncertain:
		r.settle(t, NeedsReview, UncertainEffect, EventUncertain, c.Owner, f.OpID)
	default:
		r.chargeAttempt(t, EventRetry, c.Owner)
	}
	return t.State, nil
}

// chargeAttempt ends a claim that failed transiently or expired: cancelled
// if cancellation was requested, requeued with backoff while attempts
// remain, dead-lettered otherwise.
func (r *Reference) chargeAttempt(t *Task, kind EventKind, actor string) {
	if t.CancelRequested {
		r.settle(t, Cancelled, CancelledByCaller, kindOr(kind, EventCancelled), actor, "")
		return
	}
	t.AttemptsCharged++
	t.AttemptsFailed++
	if t.AttemptsCharged >= t.AttemptsMax {
		r.settle(t, NeedsReview, AttemptsExhausted, kindOr(kind, EventDeadLettered), actor,
			DetailDeadLetter(t.AttemptsCharged, t.AttemptsMax))
		return
	}
	delay := r.backoff.Delay(t.AttemptsCharged, DrawFor(r.rand, JitterKey(t.ID, t.Attempt)))
	t.RunAt = r.now().Add(delay)
	r.settle(t, Queued, NoReason, kind, actor, DetailRetry(t.AttemptsCharged, t.AttemptsMax, delay))
}

// kindOr keeps lease_expired as the kind of every outcome of an expiry and
// otherwise uses the outcome's own kind.
func kindOr(kind, outcome EventKind) EventKind {
	if kind == EventLeaseExpired {
		return kind
	}
	return outcome
}

// Release gives the claim back without charging an attempt; the task keeps
// its checkpoint. A task whose cancellation was requested is cancelled.
func (r *Reference) Release(_ context.Context, c Claim) (State, error) {
	t, err := r.fenced(c, WriteRelease, false)
	if err != nil {
		return "", err
	}
	if t.CancelRequested {
		r.settle(t, Cancelled, CancelledByCaller, EventCancelled, c.Owner, "")
		return Cancelled, nil
	}
	t.RunAt = r.now()
	r.settle(t, Queued, NoReason, EventReleased, c.Owner, "")
	return Queued, nil
}

// AcknowledgeCancel ends the claim of a task whose cancellation the worker
// observed.
func (r *Reference) AcknowledgeCancel(_ context.Context, c Claim) error {
	t, err := r.fenced(c, WriteCancelAck, false)
	if err != nil {
		return err
	}
	if !t.CancelRequested {
		return fmt.Errorf("task %s has no cancellation requested: %w", t.ID, ErrInvalidTransition)
	}
	r.settle(t, Cancelled, CancelledByCaller, EventCancelled, c.Owner, "")
	return nil
}

func (r *Reference) task(id string) (*Task, error) {
	t, ok := r.tasks[id]
	if !ok {
		return nil, fmt.Errorf("task %s: %w", id, ErrTaskNotFound)
	}
	return t, nil
}

// Cancel cancels a queued or waiting task at once and requests
// cancellation of a running one. Cancelling a cancelled task changes
// nothing.
func (r *Reference) Cancel(_ context.Context, id, actor string) (Task, error) {
	if err := CheckName("actor", actor); err != nil {
		return Task{}, err
	}
	t, err := r.task(id)
	if err != nil {
		return Task{}, err
	}
	switch t.State {
	case Queued, WaitingForApproval:
		t.CancelledBy = actor
		r.settle(t, Cancelled, CancelledByCaller, EventCancelled, actor, "")
	case Running:
		if !t.CancelRequested {
			t.CancelRequested, t.CancelledBy, t.UpdatedAt = true, actor, r.now()
			r.emit(Event{TaskID: t.ID, Kind: EventCancelRequested, Attempt: t.Attempt, Fence: t.Version,
				From: Running, To: Running, Actor: actor})
		}
	case Cancelled:
	default:
		return Task{}, fmt.Errorf("cancel task %s: task is %s: %w", id, t.State, ErrInvalidTransition)
	}
	return *t, nil
}

func (r *Reference) waiting(id, action string) (*Task, error) {
	t, err := r.task(id)
	if err != nil {
		return nil, err
	}
	if t.State != WaitingForApproval {
		return nil, fmt.Errorf("%s task %s: task is %s: %w", action, id, t.State, ErrInvalidTransition)
	}
	return t, nil
}

// Approve requeues a task waiting at its gate; version must be the one
// recorded when it paused.
func (r *Reference) Approve(_ context.Context, id string, version int64, actor string) error {
	if err := CheckName("actor", actor); err != nil {
		return err
	}
	t, err := r.waiting(id, "approve")
	if err != nil {
		return err
	}
	if version != t.ApprovalVersion {
		return fmt.Errorf("approve task %s version %d: recorded version is %d: %w", id, version, t.ApprovalVersion, ErrVersionMismatch)
	}
	t.ApprovedBy, t.RunAt = actor, r.now()
	r.settle(t, Queued, NoReason, EventApproved, actor, DetailPause(t.ApprovalGate, version))
	return nil
}

// Reject cancels a task waiting at its gate; version must be the one
// recorded when it paused.
func (r *Reference) Reject(_ context.Context, id string, version int64, actor string) error {
	if err := CheckName("actor", actor); err != nil {
		return err
	}
	t, err := r.waiting(id, "reject")
	if err != nil {
		return err
	}
	if version != t.ApprovalVersion {
		return fmt.Errorf("reject task %s version %d: recorded version is %d: %w", id, version, t.ApprovalVersion, ErrVersionMismatch)
	}
	t.CancelledBy = actor
	r.settle(t, Cancelled, ApprovalRejected, EventRejected, actor, DetailPause(t.ApprovalGate, t.ApprovalVersion))
	return nil
}

// Reap fails tasks whose deadline passed and settles running tasks whose
// lease expired, at most ReapBatchMax of each, in submission order.
func (r *Reference) Reap(_ context.Context) (ReapResult, error) {
	now := r.now()
	var res ReapResult
	for _, id := range r.order {
		t := r.tasks[id]
		if t.State.Active() && t.PastDeadline(now) {
			if res.Deadlines == ReapBatchMax {
				res.More = true
				break
			}
			r.settle(t, Failed, DeadlineExceeded, EventDeadline, ReaperActor, "")
			res.Deadlines++
		}
	}
	for _, id := range r.order {
		t := r.tasks[id]
		if t.State == Running && !now.Before(t.LeaseUntil) {
			if res.Expired == ReapBatchMax {
				res.More = true
				break
			}
			r.chargeAttempt(t, EventLeaseExpired, ReaperActor)
			res.Expired++
		}
	}
	return res, nil
}

// ReaperActor is the actor recorded for the reaper's transitions.
const ReaperActor = "reaper"

// parked returns the task if it is in needs_review.
func (r *Reference) parked(id, action string) (*Task, error) {
	t, err := r.task(id)
	if err != nil {
		return nil, err
	}
	if t.State != NeedsReview {
		return nil, fmt.Errorf("%s task %s: task is %s: %w", action, id, t.State, ErrInvalidTransition)
	}
	return t, nil
}

// CheckGrant validates a requeue grant against the configured maxima.
func CheckGrant(g Grant, l Limits) error {
	if g.Cost < 0 || g.Cost > l.GrantCostMax {
		return invalid("grant_cost", "must be between 0 and %d, got %d", l.GrantCostMax, g.Cost)
	}
	if g.Steps < 0 || g.Steps > l.GrantStepsMax {
		return invalid("grant_steps", "must be between 0 and %d, got %d", l.GrantStepsMax, g.Steps)
	}
	return nil
}

// Requeue returns a parked task to the queue with a bounded budget grant
// and a fresh set of attempts. It resumes from its checkpoint.
func (r *Reference) Requeue(_ context.Context, id string, g Grant, actor string) error {
	if err := CheckName("actor", actor); err != nil {
		return err
	}
	if err := CheckGrant(g, r.limits); err != nil {
		return err
	}
	t, err := r.parked(id, "requeue")
	if err != nil {
		return err
	}
	t.CostBudget += g.Cost
	t.StepsMax += g.Steps
	t.AttemptsCharged, t.RunAt = 0, r.now()
	r.settle(t, Queued, NoReason, EventRequeued, actor, DetailGrant(g))
	return nil
}

// Resolve settles a parked task as completed, failed or cancelled.
func (r *Reference) Resolve(_ context.Context, id string, to State, actor string) error {
	if err := CheckName("actor", actor); err != nil {
		return err
	}
	if !to.Terminal() {
		return invalid("as", "must be completed, failed or cancelled, got %q", to)
	}
	t, err := r.parked(id, "resolve")
	if err != nil {
		return err
	}
	if to == Cancelled {
		t.CancelledBy = actor
	}
	r.settle(t, to, OperatorResolved, EventResolved, actor, "")
	return nil
}

// SettleEffect records an operator's finding about an uncertain effect of a
// parked task: applied (a receipt is recorded, so it is never called again)
// or not applied (the intent is removed, so the step makes it afresh).
func (r *Reference) SettleEffect(_ context.Context, opID string, applied bool, actor string) error {
	if err := CheckName("actor", actor); err != nil {
		return err
	}
	e, ok := r.effects[opID]
	if !ok {
		return fmt.Errorf("operation %s: %w", opID, ErrNotFound)
	}
	t, err := r.parked(e.TaskID, "settle effect of")
	if err != nil {
		return err
	}
	if e.Receipted() {
		return fmt.Errorf("operation %s: %w", opID, ErrEffectReceipted)
	}
	now := r.now()
	if applied {
		e.ReceiptAt, e.ReceiptBy, e.Result = now, actor, "settled by operator"
	} else {
		delete(r.effects, opID)
		for i, op := range r.effectIDs {
			if op == opID {
				r.effectIDs = append(r.effectIDs[:i:i], r.effectIDs[i+1:]...)
				break
			}
		}
	}
	t.UpdatedAt = now
	r.emit(Event{TaskID: t.ID, Kind: EventEffectSettled, Attempt: t.Attempt, Fence: t.Version, OpID: opID,
		From: t.State, To: t.State, Actor: actor, Detail: DetailEffectSettled(opID, applied)})
	return nil
}

// Task returns one task.
func (r *Reference) Task(_ context.Context, id string) (Task, error) {
	t, err := r.task(id)
	if err != nil {
		return Task{}, err
	}
	return *t, nil
}

// TaskByKey returns the task user submitted under the idempotency key
// key (queue.Queue's TaskByKey): ErrNotFound when there is none.
func (r *Reference) TaskByKey(_ context.Context, user, key string) (Task, error) {
	t := r.byKey(user, key)
	if t == nil {
		return Task{}, fmt.Errorf("a task of user %s under that key: %w", user, ErrNotFound)
	}
	return *t, nil
}

// List returns tasks in submission order.
func (r *Reference) List(_ context.Context, f ListFilter) ([]Task, error) {
	limit, err := f.CheckedLimit()
	if err != nil {
		return nil, err
	}
	var out []Task
	for _, id := range r.order {
		t := r.tasks[id]
		if (f.State == "" || t.State == f.State) && (f.User == "" || t.User == f.User) {
			out = append(out, *t)
			if len(out) == limit {
				break
			}
		}
	}
	return out, nil
}

// CheckedLimit validates the filter and returns the number of tasks to
// return at most.
func (f ListFilter) CheckedLimit() (int, error) {
	if f.State != "" && !f.State.Valid() {
		return 0, invalid("state", "unknown state %q", f.State)
	}
	switch {
	case f.Limit == 0:
		return ListLimitDefault, nil
	case f.Limit < 0 || f.Limit > ListLimitMax:
		return 0, invalid("limit", "must be between 1 and %d, got %d", ListLimitMax, f.Limit)
	}
	return f.Limit, nil
}

// Events returns one task's events in order; an empty ID returns every
// event.
func (r *Reference) Events(_ context.Context, taskID string) ([]Event, error) {
	var out []Event
	for _, e := range r.events {
		if taskID == "" || e.TaskID == taskID {
			out = append(out, e)
		}
	}
	return out, nil
}

// Effects returns one task's effects ledger rows by step; an empty ID
// returns every row.
func (r *Reference) Effects(_ context.Context, taskID string) ([]Effect, error) {
	var out []Effect
	for _, op := range r.effectIDs {
		e := r.effects[op]
		if taskID == "" || e.TaskID == taskID {
			out = append(out, *e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].TaskID != out[j].TaskID {
			return r.tasks[out[i].TaskID].Seq < r.tasks[out[j].TaskID].Seq
		}
		return out[i].Step < out[j].Step
	})
	return out, nil
}

// Limits returns the limits and the per-user overrides (by user).
func (r *Reference) Limits(_ context.Context) (Limits, []UserLimit, error) {
	users := make([]UserLimit, 0, len(r.userLimits))
	for _, u := range r.userLimits {
		users = append(users, u)
	}
	sort.Slice(users, func(i, j int) bool { return users[i].User < users[j].User })
	return r.limits, users, nil
}

// SetLimits replaces the limits.
func (r *Reference) SetLimits(_ context.Context, l Limits, actor string) error {
	if err := CheckName("actor", actor); err != nil {
		return err
	}
	if err := l.Validate(); err != nil {
		return err
	}
	r.limits = l
	r.emit(Event{Kind: EventLimitsSet, Actor: actor, Detail: DetailLimits(l)})
	return nil
}

// SetUserLimit sets one user's overrides; both Inherit removes them.
func (r *Reference) SetUserLimit(_ context.Context, u UserLimit, actor string) error {
	if err := CheckName("actor", actor); err != nil {
		return err
	}
	if err := u.Validate(); err != nil {
		return err
	}
	if u.RunningMax == Inherit && u.DepthMax == Inherit {
		delete(r.userLimits, u.User)
	} else {
		r.userLimits[u.User] = u
	}
	r.emit(Event{Kind: EventLimitsSet, Actor: actor, Detail: DetailUserLimit(u)})
	return nil
}

// AddSchedule stores a periodic schedule.
func (r *Reference) AddSchedule(_ context.Context, spec ScheduleSpec, actor string) (Schedule, error) {
	if err := CheckName("actor", actor); err != nil {
		return Schedule{}, err
	}
	spec, err := spec.Validate()
	if err != nil {
		return Schedule{}, err
	}
	if len(r.schedules) >= SchedulesMax {
		return Schedule{}, fmt.Errorf("%d schedules (limit %d): %w", len(r.schedules), SchedulesMax, ErrQueueFull)
	}
	s := &Schedule{ID: NewIDFor(r.ids, ScheduleIDPrefix, ScheduleKey(spec)), ScheduleSpec: spec, LastRun: -1, CreatedAt: r.now()}
	r.schedules[s.ID] = s
	r.emit(Event{Kind: EventScheduleAdded, Actor: actor, Detail: DetailSchedule(s.ID)})
	return *s, nil
}

// Schedules returns the schedules by ID.
func (r *Reference) Schedules(_ context.Context) ([]Schedule, error) {
	out := make([]Schedule, 0, len(r.schedules))
	for _, s := range r.schedules {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// RemoveSchedule deletes a schedule; runs already enqueued stay.
func (r *Reference) RemoveSchedule(_ context.Context, id, actor string) error {
	if err := CheckName("actor", actor); err != nil {
		return err
	}
	if _, ok := r.schedules[id]; !ok {
		return fmt.Errorf("schedule %s: %w", id, ErrNotFound)
	}
	delete(r.schedules, id)
	r.emit(Event{Kind: EventScheduleRemoved, Actor: actor, Detail: DetailSchedule(id)})
	return nil
}

// EnqueueDue enqueues, for each schedule, its latest due run if that run
// was not enqueued yet; earlier missed runs are collapsed into it.
func (r *Reference) EnqueueDue(ctx context.Context) (EnqueueResult, error) {
	schedules, _ := r.Schedules(ctx)
	now := r.now()
	var res EnqueueResult
	for _, s := range schedules {
		k := s.DueRun(now)
		if k <= s.LastRun {
			continue
		}
		n, err := Normalize(SubmitRequest{User: s.User, Key: RunKey(s.ID, k), Kind: s.Kind, Payload: s.Payload,
			CostBudget: s.CostBudget, StepsMax: s.StepsMax, Priority: s.Priority,
			RunAt: s.Origin.Add(time.Duration(k) * s.Period), ScheduleID: s.ID, ScheduleRun: k})
		if err != nil {
			return res, err
		}
		sub, err := r.submit(n, "schedule:"+s.ID)
		if errors.Is(err, ErrQueueFull) {
			res.Refused++
			continue
		}
		if err != nil {
			return res, err
		}
		r.schedules[s.ID].LastRun = k
		if !sub.Replay {
			res.Enqueued++
			res.Collapsed += k - s.LastRun - 1
		}
	}
	return res, nil
}

// Metrics returns the queue's metrics snapshot.
func (r *Reference) Metrics(_ context.Context) (Metrics, error) {
	m := Metrics{Depth: map[State]int64{}, ByKind: map[string]Counts{}, QueueWait: cloneHistogram(r.queueWait),
		RunTime: cloneHistogram(r.runTime)}
	for _, s := range States() {
		m.Depth[s] = 0
	}
	now := r.now()
	var oldest time.Time
	for _, id := range r.order {
		t := r.tasks[id]
		m.Depth[t.State]++
		if t.State == Queued && !t.RunAt.After(now) && (oldest.IsZero() || eligibleAt(t).Before(oldest)) {
			oldest = eligibleAt(t)
		}
	}
	if !oldest.IsZero() {
		m.OldestQueuedAge = now.Sub(oldest)
	}
	for _, e := range r.events {
		TallyKind(&m, r.taskKind(e.TaskID), e.Kind, e.From, e.To, e.Reason, 1)
	}
	addCounts(&m, r.pruned)
	return m, nil
}

// taskKind is the kind of task id, or KindUnknown where there is no such
// task: what the queue's counters file an event of that task under.
func (r *Reference) taskKind(id string) string {
	if t, ok := r.tasks[id]; ok {
		return t.Kind
	}
	return KindUnknown
}

func cloneHistogram(h Histogram) Histogram {
	h.Counts = append([]int64(nil), h.Counts...)
	return h
}

// Clone returns a deep copy of r that shares only its clock, ID source,
// random source and backoff policy: the simulator's oracle keeps one before
// an operation whose outcome a storage fault may leave unknown, so that
// both successors (applied or not) can be compared with the real queue.
// Sharing the sources is sound when they derive from keys (DerivedIDs,
// DerivedRand), as the oracle's do.
func (r *Reference) Clone() *Reference {
	c := *r
	c.userLimits = make(map[string]UserLimit, len(r.userLimits))
	for k, v := range r.userLimits {
		c.userLimits[k] = v
	}
	c.tasks = make(map[string]*Task, len(r.tasks))
	for k, v := range r.tasks {
		t := *v
		c.tasks[k] = &t
	}
	c.order = append([]string(nil), r.order...)
	c.events = append([]Event(nil), r.events...)
	c.effects = make(map[string]*Effect, len(r.effects))
	for k, v := range r.effects {
		e := *v
		c.effects[k] = &e
	}
	c.effectIDs = append([]string(nil), r.effectIDs...)
	c.schedules = make(map[string]*Schedule, len(r.schedules))
	for k, v := range r.schedules {
		s := *v
		c.schedules[k] = &s
	}
	c.tombstones = make(map[string]*Tombstone, len(r.tombstones))
	for k, v := range r.tombstones {
		s := *v
		c.tombstones[k] = &s
	}
	c.queueWait, c.runTime = cloneHistogram(r.queueWait), cloneHistogram(r.runTime)
	c.pruned.ByKind = maps.Clone(r.pruned.ByKind)
	return &c
}

// EventCount returns how many events the reference has appended.
func (r *Reference) EventCount() int { return len(r.events) }

// LastEventSeq returns the number of the last event the reference
// appended (a prune removes events, never a number).
func (r *Reference) LastEventSeq() int64 { return r.eventSeq }

// EventsSince returns the events numbered above seq, in order: what was
// appended since LastEventSeq returned seq, whatever a prune removed
// before them.
func (r *Reference) EventsSince(seq int64) []Event {
	i := len(r.events)
	for i > 0 && r.events[i-1].Seq > seq {
		i--
	}
	if i == len(r.events) {
		return nil
	}
	return append([]Event(nil), r.events[i:]...)
}

// EventsFrom returns the events after the first n, in order.
func (r *Reference) EventsFrom(n int) []Event {
	if n >= len(r.events) {
		return nil
	}
	return append([]Event(nil), r.events[n:]...)
}

// EffectsOf returns one task's ledger rows by step (Effects without the
// error and the sort over every row).
func (r *Reference) EffectsOf(taskID string) []Effect {
	var out []Effect
	for _, op := range r.effectIDs {
		if e := r.effects[op]; e.TaskID == taskID {
			out = append(out, *e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	return out
}
