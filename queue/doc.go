// Package queue is leasehold's durable task queue. Its protocol is written
// once over a storage seam (queue/internal/seam): SQLite
// (modernc.org/sqlite, pure Go, queue/internal/sqlite) is the default
// store, PostgreSQL (queue/internal/postgres) the shared one.
//
// Callers submit tasks and get an ID at once; workers claim them under a
// lease with a fence token (the task's version), run them step by step
// within a cost and step budget, record customer-visible effects in a
// ledger (intent before the call, receipt after), pause at approval gates,
// and settle them. Every worker write names its claim and is accepted only
// while the fence is current, the task is running and the lease has not
// expired at the queue's clock; a refused write changes nothing in the task
// and is recorded as an event of its own.
//
// # Usage
//
//	q, err := queue.Open(ctx, queue.Options{Path: "leasehold.db", Clock: clock, IDs: ids})
//	res, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: "k1", Payload: `{"steps":[]}`, CostBudget: 10, StepsMax: 5})
//	claims, err := q.Claim(ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: 30 * time.Second})
//	_, err = q.CompleteStep(ctx, model.StepWrite{Claim: claims[0].Claim, Index: 0, Cost: 2})
//	err = q.Complete(ctx, claims[0].Claim)
//
// The queue never reads the wall clock or the database's clock: time comes
// from the clockwork.Clock in Options and is bound as a parameter. IDs come
// from the model.IDSource in Options; backoff jitter from its model.Rand.
// Each store's SQL lives in its package's sql/ as embedded .sql files:
// numbered migrations and named queries, whose {broken:...} placeholders are the only place the
// broken variants (internal/broken) change a statement.
package queue
