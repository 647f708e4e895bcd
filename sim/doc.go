// Package sim is leasehold's deterministic simulator: one seed drives the
// real workers (worker.Worker, stepped one action at a time) and the real
// queue (SQLite in memory, or PostgreSQL in a schema of its own: see
// Store; through the faults storage injector) in one goroutine, under a
// fake clock, through crashes, stalls, graceful shutdowns, duplicate and
// late deliveries, lost service responses and storage faults; and it
// checks, after every event, that the run kept the contract.
//
// A run (Run, with a Config naming a scenario and a seed) has three parts:
//
//   - The schedule (Generate): the scenario's submits, then worker steps,
//     clock advances (some landing exactly on a lease_until, run_at or
//     deadline, or 1 ms before), reaper runs, scripted caller actions,
//     the careless client's writes, operator limit changes and faults, all
//     drawn from streams split from the seed (seed.go), so the same seed
//     gives the same schedule and the same trace, whose SHA-256 is the
//     run's fingerprint.
//   - The world (World): applies each event to the real parts, and sends
//     every queue operation also to model.Reference in lockstep
//     (oracle.go); the two must agree on each outcome, return value,
//     appended event and touched row, with a fault at or after COMMIT
//     accepted as either successor.
//   - The checks: the invariants over the audit trail and snapshots
//     (check.go, invariants.go), then, faults healed, a liveness phase
//     that must settle every task (liveness.go), then the scenario's
//     expected outcomes. A failing run reports the event, both sides'
//     records and the replay command, and Shrink cuts its schedule down.
//
// A sweep (Sweep) runs many seeds and sums their coverage maps
// (coverage.go): which state transitions, refusal classes and fault kinds
// at worker phases its seeds reached. In a sweep of at least
// scenarios.CoverageSeedsMin seeds a cell the scenario declares and no
// seed reached fails the sweep.
//
// Nothing below sim knows it is simulated: the world uses the production
// worker and queue as they are, with faults injected at their interfaces.
package sim
