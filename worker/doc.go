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
// # Usage
//
//	w := worker.New(worker.Config{ID: "w1", Queue: q, Handler: worker.Synthetic{}, Service: svc, Clock: clock})
//	for {
//		r := w.Step(ctx)
//		if r.Wait > 0 { /* advance or sleep until r.Wait has passed */ }
//	}
//	w.Shutdown() // stop claiming; finish effects in flight, release the rest
//
// Before every step of a task the slot checks requested cancellation, the
// deadline, the step limit and the cost budget. Customer-visible effects
// follow the ledger protocol: record intent (fenced), call the service with
// the operation ID and fence, record the receipt (fenced). An operation
// with a receipt is never called again; one with intent but no receipt is
// reconciled according to what the service can do (see ServiceKind), and
// otherwise the task goes to needs_review.
package worker
