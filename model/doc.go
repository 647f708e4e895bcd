// Package model is the pure domain of leasehold: task states and the
// transitions allowed between them, reasons, failure classes, claims and
// fence tokens, budgets, intake validation and canonical request hashing,
// retry backoff, the invariants the queue must keep (as functions over
// snapshots of tasks and over histories of accepted writes), and Reference,
// an in-memory implementation of the queue's semantics, retention (Prune)
// included, used as the oracle in property tests.
//
// The package uses the standard library only. It performs no I/O, never
// reads the wall clock and never draws from global randomness: time and
// random numbers come in as arguments.
//
// # Usage
//
// The durable queue (package queue) and the Reference model accept the same
// requests (SubmitRequest, ClaimRequest, StepWrite, Failure, ...) and return
// the same records (Task, Claim, Event). Callers branch on the sentinel
// errors declared here (ErrStaleClaim, ErrNotFound, ErrQueueFull, ...), which
// package queue re-exports.
package model
