package queue

import (
	"errors"

	"github.com/leasehold/leasehold/model"
)

// Sentinel errors. The operation errors are model's, re-exported so that
// callers of the queue need not import model to branch on them.
var (
	ErrNotFound            = model.ErrNotFound
	ErrStaleClaim          = model.ErrStaleClaim
	ErrInvalidInput        = model.ErrInvalidInput
	ErrIdempotencyConflict = model.ErrIdempotencyConflict
	ErrQueueFull           = model.ErrQueueFull
	ErrInvalidTransition   = model.ErrInvalidTransition
	ErrVersionMismatch     = model.ErrVersionMismatch
	ErrBudgetExhausted     = model.ErrBudgetExhausted
	ErrStepsExhausted      = model.ErrStepsExhausted
	ErrStepConflict        = model.ErrStepConflict
	ErrDeadlineExceeded    = model.ErrDeadlineExceeded
	ErrEffectReceipted     = model.ErrEffectReceipted
	ErrBadIDSource         = model.ErrBadIDSource

	// ErrSchemaTooNew: the database was written by a newer build; this one
	// refuses to touch it.
	ErrSchemaTooNew = errors.New("database schema is newer than this build supports")
	// ErrSchemaOutdated: the database needs migrations this build has; run
	// the migrate command (which snapshots first).
	ErrSchemaOutdated = errors.New("database schema is older than this build; migrate it first")
	// ErrSchemaMismatch: an applied migration differs from this build's
	// copy of it.
	ErrSchemaMismatch = errors.New("applied migration differs from this build's")
	// ErrClosed: the queue has been closed; every operation after Close
	// fails with it.
	ErrClosed = errors.New("queue closed")
	// ErrSQLiteOnly: the operation works on SQLite files only (snapshots
	// and restores), and was given another store's database.
	ErrSQLiteOnly = errors.New("snapshots are SQLite files")
)
