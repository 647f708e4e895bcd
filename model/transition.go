package model

// Action is what moves a task from one state to another; each row of the
// transition table in DESIGN.md is one (from, action, to) triple.
type Action string

const (
	// ActClaim: a worker claims a queued task.
	ActClaim Action = "claim"
	// ActCancel: a caller cancels a queued or waiting task.
	ActCancel Action = "cancel"
	// ActComplete: the claim's worker finishes the task.
	ActComplete Action = "complete"
	// ActFail: a permanent failure, or a budget, step limit or deadline
	// observed by the worker.
	ActFail Action = "fail"
	// ActRetry: a transient failure or lease expiry with attempts left
	// (charges an attempt).
	ActRetry Action = "retry"
	// ActDeadLetter: a transient failure or lease expiry on the last attempt
	// (charges an attempt).
	ActDeadLetter Action = "dead_letter"
	// ActUncertain: an effect's outcome is unknown and cannot be reconciled.
	ActUncertain Action = "uncertain"
	// ActPause: the task reaches an approval gate (lease released).
	ActPause Action = "pause"
	// ActRelease: the worker gives the claim back on shutdown (not charged).
	ActRelease Action = "release"
	// ActObserveCancel: the worker observes requested cancellation, or the
	// lease expires while cancellation is requested.
	ActObserveCancel Action = "observe_cancel"
	// ActApprove: an approver approves naming the recorded version.
	ActApprove Action = "approve"
	// ActReject: an approver rejects the task at its gate.
	ActReject Action = "reject"
	// ActDeadline: the task's deadline passed.
	ActDeadline Action = "deadline"
	// ActRequeue: an operator requeues a parked task with a bounded grant.
	ActRequeue Action = "requeue"
	// ActResolve: an operator settles a parked task.
	ActResolve Action = "resolve"
)

// Transition is one allowed row of the state machine.
type Transition struct {
	From   State
	Action Action
	To     State
	// Charged reports whether the transition charges an attempt against
	// attempts_max.
	Charged bool
}

// Transitions returns the state machine of DESIGN.md, one row per allowed
// (from, action, to) triple.
func Transitions() []Transition {
	return []Transition{
		{Queued, ActClaim, Running, false},
		{Queued, ActCancel, Cancelled, false},
		{Running, ActComplete, Completed, false},
		{Running, ActFail, Failed, false},
		{Running, ActRetry, Queued, true},
		{Running, ActDeadLetter, NeedsReview, true},
		{Running, ActUncertain, NeedsReview, false},
		{Running, ActPause, WaitingForApproval, false},
		{Running, ActRelease, Queued, false},
		{Running, ActObserveCancel, Cancelled, false},
		{WaitingForApproval, ActApprove, Queued, false},
		{WaitingForApproval, ActReject, Cancelled, false},
		{WaitingForApproval, ActCancel, Cancelled, false},
		{Queued, ActDeadline, Failed, false},
		{Running, ActDeadline, Failed, false},
		{WaitingForApproval, ActDeadline, Failed, false},
		{NeedsReview, ActRequeue, Queued, false},
		{NeedsReview, ActResolve, Completed, false},
		{NeedsReview, ActResolve, Failed, false},
		{NeedsReview, ActResolve, Cancelled, false},
	}
}

// Allows reports whether action may move a task from one state to another.
func Allows(from State, action Action, to State) bool {
	for _, t := range Transitions() {
		if t.From == from && t.Action == action && t.To == to {
			return true
		}
	}
	return false
}

// AllowedMove reports whether any action moves a task from one state to
// another. A task that stays in its state is always allowed.
func AllowedMove(from, to State) bool {
	if from == to {
		return true
	}
	for _, t := range Transitions() {
		if t.From == from && t.To == to {
			return true
		}
	}
	return false
}
