package model

import (
	"fmt"
	"strings"
)

// State is the lifecycle state of a task. The SQLite schema repeats the
// list in a CHECK constraint; a test proves the two agree.
type State string

const (
	// Queued tasks wait to be claimed once their run_at has come.
	Queued State = "queued"
	// Running tasks are held by exactly one claim under a lease.
	Running State = "running"
	// WaitingForApproval tasks are paused at a gate; no lease is held.
	WaitingForApproval State = "waiting_for_approval"
	// NeedsReview tasks are parked until an operator acts (dead letter,
	// uncertain effect).
	NeedsReview State = "needs_review"
	// Completed is terminal: the task finished its work.
	Completed State = "completed"
	// Failed is terminal: the task stopped for the reason it carries.
	Failed State = "failed"
	// Cancelled is terminal: a caller, approver or operator stopped it.
	Cancelled State = "cancelled"
)

// States lists every state in lifecycle order.
func States() []State {
	return []State{Queued, Running, WaitingForApproval, NeedsReview, Completed, Failed, Cancelled}
}

// Valid reports whether s is one of the declared states.
func (s State) Valid() bool {
	for _, known := range States() {
		if s == known {
			return true
		}
	}
	return false
}

// Terminal reports whether s never changes again.
func (s State) Terminal() bool {
	return s == Completed || s == Failed || s == Cancelled
}

// Active reports whether a task in s counts towards admission depth:
// queued, running or waiting for approval. Parked and terminal tasks do not.
func (s State) Active() bool {
	return s == Queued || s == Running || s == WaitingForApproval
}

// String returns the state's name.
func (s State) String() string { return string(s) }

// ParseState returns the state named name, or an error naming the value.
func ParseState(name string) (State, error) {
	s := State(name)
	if !s.Valid() {
		names := make([]string, 0, len(States()))
		for _, st := range States() {
			names = append(names, string(st))
		}
		return "", fmt.Errorf("unknown state %q: want %s", name, strings.Join(names, ", "))
	}
	return s, nil
}

// Reason is the machine-readable cause carried by a terminal or parked task.
type Reason string

const (
	// NoReason is carried by queued, running and waiting tasks.
	NoReason Reason = ""
	// BudgetExhausted: a step would have spent more than the cost budget.
	BudgetExhausted Reason = "budget_exhausted"
	// StepsExhausted: the task reached its step limit.
	StepsExhausted Reason = "steps_exhausted"
	// PermanentError: a step failed in a way that retrying cannot fix.
	PermanentError Reason = "permanent_error"
	// CancelledByCaller: cancellation was requested and observed.
	CancelledByCaller Reason = "cancelled_by_caller"
	// ApprovalRejected: an approver rejected the task at its gate.
	ApprovalRejected Reason = "approval_rejected"
	// AttemptsExhausted: the last attempt ended in a transient failure or a
	// lease expiry (dead letter).
	AttemptsExhausted Reason = "attempts_exhausted"
	// UncertainEffect: an effect's outcome is unknown and cannot be
	// reconciled with the external service.
	UncertainEffect Reason = "uncertain_effect"
	// DeadlineExceeded: the task's deadline passed before it finished.
	DeadlineExceeded Reason = "deadline_exceeded"
	// OperatorResolved: an operator settled a task from needs_review.
	OperatorResolved Reason = "operator_resolved"
)

// Reasons lists every non-empty reason.
func Reasons() []Reason {
	return []Reason{BudgetExhausted, StepsExhausted, PermanentError, CancelledByCaller,
		ApprovalRejected, AttemptsExhausted, UncertainEffect, DeadlineExceeded, OperatorResolved}
}

// Valid reports whether r is empty or one of the declared reasons.
func (r Reason) Valid() bool {
	if r == NoReason {
		return true
	}
	for _, known := range Reasons() {
		if r == known {
			return true
		}
	}
	return false
}

// String returns the reason's name.
func (r Reason) String() string { return string(r) }

// FailureClass says how a failed step is routed.
type FailureClass string

const (
	// Transient failures are retried with backoff while attempts remain.
	Transient FailureClass = "transient"
	// Permanent failures fail the task now.
	Permanent FailureClass = "permanent"
	// Uncertain failures leave an effect's outcome unknown: reconcile or
	// review, never call blindly again.
	Uncertain FailureClass = "uncertain"
)

// Valid reports whether c is a declared class.
func (c FailureClass) Valid() bool {
	return c == Transient || c == Permanent || c == Uncertain
}

// String returns the class's name.
func (c FailureClass) String() string { return string(c) }
