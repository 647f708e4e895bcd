// Package chaos is the kill storm: it runs real leasehold worker processes
// over file databases (SQLite, WAL, synchronous=FULL), attacks them while a
// caller submits, cancels, approves and rejects tasks through the queue's
// Go API, and then checks, Jepsen-style, what the databases, the external
// service's own ledger and the event trail say happened.
//
// A run has one lane per service kind (dedup, fenced, queryable, plain):
// each lane is a database, a service ledger and its own worker processes,
// since a worker serves one kind of service. The attacks are SIGKILLs of
// random workers (each restarted), SIGSTOPs past the lease followed by
// SIGCONT (late results; every other stop freezes a worker while it waits
// inside a service call, so that it calls late under a replaced fence),
// and kills aimed between an effect's intent and its receipt: the ledger's lock is held until a worker waits inside its
// call, and that worker is killed either before the service applies the
// operation or, holding the queue's lock too, after it applied it and
// before the receipt can be written.
//
// The checker reports lost tasks, operations applied twice, applications
// without an intent (the service logs every call it answers, so late calls
// are counted too), stale writes accepted, budgets or step limits
// overspent, PRAGMA integrity_check, and the porcupine linearizability
// verdict of every task's claims and fenced writes (see History). The run
// is live: real processes and the wall clock; its randomness comes from one
// seed, printed at the start, so the attack plan and the workload can be
// drawn again, though the timing of real processes cannot.
//
// # Usage
//
//	res, err := chaos.Run(ctx, chaos.Config{Binary: self, Dir: "out/chaos", Seed: 7, Kills: 30, Stops: 6, Tasks: 80})
//	// res is also written to Dir/result.json (ReadResult reads it back),
//	// the page to Dir/index.html; res.Pass is false on any violation.
package chaos
