// Package liverun is the live run's orchestration: it plays
// scenarios.Portfolio, the workload the simulator runs, against real
// `leasehold worker` processes over one SQLite file and the wall clock,
// adds the live fault stories (SIGKILL mid-task, SIGSTOP past the lease,
// the database locked by another connection, a completion delivered
// twice), checks every expected outcome while it runs and returns them as
// a Result, the typed record that `leasehold demo` writes to result.json
// and `leasehold evidence` reads back with Read.
//
// The run's caller is the Go client (package client) over HTTP: the run
// starts `leasehold serve` over the workers' database, on a free loopback
// port, with a token per user (named after the user, so the audit trail
// records each user as the actor of its submits and cancels), one per
// approver and one for the operator, handed over in LEASEHOLD_TOKENS, and
// submits, waits (long-polls on the task's next event), cancels, approves
// and sets limits through it. The run's checks read the database itself
// (queue.Open), as an auditor would: the metrics sampler, the audit trail
// and each task's final record. The server and the workers are child
// processes of this binary; nothing they print is read back except the
// workers' structured (JSON) log records, for the two stories whose only
// witness is the worker itself.
//
// # The duplicate-delivery fault entry
//
// The story of a completion delivered twice needs a worker whose queue
// writes arrive twice, as a retrying network would deliver them. That
// fault is not a worker flag: the run starts that worker with the
// environment variable LEASEHOLD_LIVERUN_DUPLICATE set to a write kind
// (here "complete"), and the worker command passes its queue through
// WorkerQueue, which wraps it with faults.Queue only when the variable is
// set. Nothing else in the production commands imports faults, and
// `leasehold worker --help` lists no fault.
package liverun
