package model

import (
	"errors"
	"fmt"
)

// Sentinel errors returned by the queue and by Reference. Callers branch on
// them with errors.Is; package queue re-exports them.
var (
	// ErrNotFound: no task (or schedule) has that ID.
	ErrNotFound = errors.New("not found")
	// ErrTaskNotFound: no task has that ID. It is an ErrNotFound (errors.Is
	// holds for both) with the same message; a worker whose fenced write
	// meets it knows the task it held is gone (pruned after it settled),
	// not that the write named a missing operation.
	ErrTaskNotFound error = taskNotFound{}
	// ErrStaleClaim: a worker write named a fence that is not current, a
	// task that is not running, or a lease that has expired. The task is
	// unchanged; the rejection is recorded as an event.
	ErrStaleClaim = errors.New("stale claim")
	// ErrInvalidInput: a request failed validation; see ValidationError.
	ErrInvalidInput = errors.New("invalid input")
	// ErrIdempotencyConflict: the idempotency key was used by this user for
	// a different request. The original task is untouched.
	ErrIdempotencyConflict = errors.New("idempotency key reused with a different request")
	// ErrQueueFull: admission refused the submit (overall or per-user depth).
	ErrQueueFull = errors.New("queue full")
	// ErrInvalidTransition: the task's state does not allow the action.
	ErrInvalidTransition = errors.New("transition not allowed")
	// ErrVersionMismatch: an approval named a version other than the one
	// recorded at the gate.
	ErrVersionMismatch = errors.New("version does not match the recorded version")
	// ErrBudgetExhausted: a step would spend more than the cost budget; the
	// task has been failed with budget_exhausted.
	ErrBudgetExhausted = errors.New("cost budget exhausted")
	// ErrStepsExhausted: a step would exceed the step limit; the task has
	// been failed with steps_exhausted.
	ErrStepsExhausted = errors.New("step limit reached")
	// ErrStepConflict: a step write named an index other than the task's
	// next step and is not a retry of the step just completed.
	ErrStepConflict = errors.New("step index conflict")
	// ErrDeadlineExceeded: the task's deadline has passed; the task has been
	// failed with deadline_exceeded.
	ErrDeadlineExceeded = errors.New("deadline exceeded")
	// ErrEffectReceipted: the operation already has a receipt; it must never
	// be called again.
	ErrEffectReceipted = errors.New("effect already receipted")
	// ErrBadIDSource: the IDSource the queue was given handed out a task ID
	// that breaks TaskIDRule; nothing was written. It is the embedding
	// program's mistake, not the caller's.
	ErrBadIDSource = errors.New("the ID source handed out an ID that breaks the rule")
)

// ValidationError names the field that failed validation and what was wrong
// with it. It matches ErrInvalidInput under errors.Is.
type ValidationError struct {
	Field   string
	Problem string
}

// Error returns "field: problem".
func (e *ValidationError) Error() string { return e.Field + ": " + e.Problem }

// Is reports whether target is ErrInvalidInput.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidInput }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// taskNotFound is ErrTaskNotFound: it reads as ErrNotFound and matches it.
type taskNotFound struct{}

func (taskNotFound) Error() string { return ErrNotFound.Error() }

func (taskNotFound) Is(target error) bool { return target == ErrNotFound }
