// Package worker runs claimed tasks as step machines.
//
// A Slot holds one claim and advances its task one Step at a time; a Step
// is at most one queue transaction plus at most one external call. A
// Worker owns a bounded set of slots and a claimer; its Step picks the next
// slot (or the claimer) that has something to do, so a driver can advance
// it one action at a time. The simulator drives Worker.Step under a fake
// clock; the live Runner drives the same slots with the real clock, one
// goroutine per slot.
//
// # Running a worker
//
// A program opens its queue, writes a Handler, and runs a Runner until it
// is told to stop:
//
//  1. Open the queue (queue.Open) with the real clock and randomid.Source
//     as its ID source.
//  2. Write the handler. The simple form is a HandlerFunc: one function of
//     the task, run as its one step, given the step's operation ID to pass
//     as the idempotency key of any external call it makes itself (such a
//     call is outside the effects ledger). The planned form is a Handler:
//     Plan lists the task's steps (costs, approval gates, effects the
//     ledger guards), Run performs each. Only a handler whose steps declare
//     ledgered effects (see Effectful) needs a Service.
//  3. NewRunner with a Config (ID, Queue, Handler, Clock; Lease and
//     Concurrency as needed) and RunOptions. RunOptions.Housekeeper (the
//     queue) has the runner also reap expired leases and deadlines and
//     enqueue due periodic runs; at least one process serving a queue
//     should run it. RunOptions.ShutdownGrace bounds the drain.
//  4. Runner.Run with a context the program cancels on SIGTERM: it claims
//     and runs tasks until then, and then shuts down gracefully, letting
//     runs under way and effects in flight finish within the grace and
//     releasing the claims. It returns an error wrapping ErrClaimsLeft if
//     the grace ran out first.
//
// Each step's Run runs through the runner's Executor, in a goroutine of
// its own, while the slot heartbeats on schedule: a Run may take far
// longer than the lease. Its context is cancelled, with a cause
// context.Cause reads, when the task's cancellation is requested
// (ErrCancelRequested), the claim is lost (ErrLeaseLost), the shutdown
// grace ends (ErrShutdown) or the step's timeout passes (ErrStepTimeout,
// a transient failure). What a Run returns after its claim was lost is
// dropped and logged, never written. See Example for a whole program.
//
// # Several kinds
//
// A worker serves the kinds of task it has handlers for. Kinds is a
// registry of them, each kind's handler and the validator of its
// payloads; as the Config's Handler it routes each task to its kind's
// handler, and the worker's claims name its kinds, so it never claims a
// task of another kind. Its Validators go to queue.Options.Validators
// (and httpapi.Options.Validators), so that a payload its handler could
// not run is refused at submit:
//
//	kinds := worker.Kinds{
//		"report": {Handler: worker.HandlerFunc(writeReport), Validate: checkReport},
//		"email":  {Handler: worker.HandlerFunc(sendEmail)},
//	}
//	q, err := queue.Open(ctx, queue.Options{Path: path, Clock: clock, IDs: randomid.Source{},
//		Validators: kinds.Validators()}) // a payload its handler could not run is refused at submit
//
// A worker whose Handler is not a Kinds claims tasks of every kind.
//
// # Stepping a worker
//
//	w, err := worker.New(worker.Config{ID: "w1", Queue: q, Handler: worker.Synthetic{}, Service: svc, Clock: clock})
//	if err != nil {
//		return err
//	}
//	for ctx.Err() == nil {
//		if r := w.Step(ctx); r.Wait > 0 {
//			clock.Sleep(r.Wait) // a simulator advances its fake clock instead
//		}
//	}
//	w.Shutdown() // stop claiming; finish runs and effects in flight, release the rest
//	for !w.Drained() {
//		if r := w.Step(context.WithoutCancel(ctx)); r.Wait > 0 {
//			clock.Sleep(r.Wait)
//		}
//	}
//
// A stepped Worker runs handlers Inline, inside its Step; the simulator
// gives it an executor of its own, whose runs begin and end as events of
// its schedule.
//
// # Guarantees
//
// Before every step of a task the slot checks requested cancellation, the
// deadline, the step limit and the cost budget. Customer-visible effects
// follow the ledger protocol: record intent (fenced), call the service with
// the operation ID and fence, record the receipt (fenced). An operation
// with a receipt is never called again; one with intent but no receipt is
// reconciled according to what the service can do (see ServiceKind), and
// otherwise the task goes to needs_review.
//
// A step whose run makes its effect itself (StepSpec.Ledger: a program
// the worker runs, as package worker/command's handler does) follows the
// same protocol around the run: intent before the run begins, receipt
// (the run's checkpoint) once it succeeds; an intent an earlier run left
// is settled, through the run ledger's own Status for a kind that can
// answer, before anything runs again.
package worker
