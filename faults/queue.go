package faults

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/worker"
)

// Queue is a queue.WorkerWrites that wraps another (the real queue) and
// delivers a fenced write twice on command, as a network or a retrying
// client might: it simulates duplicate delivery, at once (ArmDuplicate,
// DuplicateEvery) or late (ArmHold, then Redeliver). The caller receives
// the first delivery's result; the second delivery's error (usually the
// queue's stale-claim rejection, model.ErrStaleClaim, or nil for a write
// the queue recognises as a replay) is recorded for Last. Queue makes up
// no errors of its own. Claims are never duplicated. With nothing armed
// every call is forwarded once, unchanged. Queue is safe for concurrent
// use.
type Queue struct {
	inner queue.WorkerWrites

	mu     sync.Mutex
	armed  int // writes to deliver twice at once
	counts QueueCounts
	last   Duplicate   // the latest duplicate; Write is "" until one
	every  model.Write // a write always delivered twice ("": none)
	holds  int         // writes to keep for a late second delivery
	held   []heldWrite // kept writes, oldest first
}

// heldWrite is a write kept for a late second delivery.
type heldWrite struct {
	write model.Write
	claim model.Claim
	call  func() (any, error) // the write; its result is the queue's answer
}

// Redelivery is a kept write delivered a second time, late, and the
// queue's answer to it.
type Redelivery struct {
	Write model.Write // the write, as a worker.Report names it
	Claim model.Claim // the claim the write was made under
	Err   error       // the queue's answer to the second delivery
	// LeaseUntil is the lease a redelivered heartbeat set when the queue
	// accepted it, as the queue reported it; zero otherwise.
	LeaseUntil time.Time
}

// HeldMax bounds the writes a Queue keeps for late delivery.
const HeldMax = 8

var (
	_ queue.WorkerWrites     = (*Queue)(nil)
	_ worker.CompleteClaimer = (*Queue)(nil)
)

// Duplicate records one duplicated write and its second delivery's error.
type Duplicate struct {
	Write  model.Write // one of Writes
	TaskID string
	Fence  int64
	Err    error // the second delivery's error; nil if it was accepted
}

// String renders the duplicate on one line.
func (d Duplicate) String() string {
	s := fmt.Sprintf("%s task=%s fence=%d", d.Write, d.TaskID, d.Fence)
	if d.Err != nil {
		return s + fmt.Sprintf(" second=%q", d.Err.Error())
	}
	return s + " second=accepted"
}

// QueueCounts counts duplicated writes.
type QueueCounts struct {
	// Duplicated counts writes delivered twice.
	Duplicated int
	// SecondRefused counts second deliveries that returned an error.
	SecondRefused int
}

// String lists the counts in a fixed order.
func (c QueueCounts) String() string {
	return fmt.Sprintf("duplicated=%d second_refused=%d", c.Duplicated, c.SecondRefused)
}

// NewQueue wraps inner.
func NewQueue(inner queue.WorkerWrites) *Queue {
	if inner == nil {
		panic("faults: NewQueue needs a queue")
	}
	return &Queue{inner: inner}
}

// ArmDuplicate makes the next fenced write (not a claim) be delivered
// twice. Arming again duplicates that many more writes, one each.
func (q *Queue) ArmDuplicate() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.armed++
}

// Writes names the fenced writes the Queue can duplicate (every one).
var Writes = model.FencedWrites()

// DuplicateEvery makes every write named write ("complete", "step", ...)
// be delivered twice from now on, as a client that always retries would;
// an empty name stops it.
func (q *Queue) DuplicateEvery(write model.Write) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.every = write
}

// ArmHold makes the next fenced write be delivered now and kept, to be
// delivered again by Redeliver: a late duplicate, as when a network
// replays a request long after its claim expired. Arming again keeps that
// many more writes, one each. At most HeldMax writes are kept at once; a
// hold armed while that many are kept waits until Redeliver makes room.
func (q *Queue) ArmHold() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.holds++
}

// Redeliver delivers the oldest kept write a second time, now, and returns
// what it was and the queue's answer; ok is false when nothing is kept.
func (q *Queue) Redeliver() (r Redelivery, ok bool) {
	q.mu.Lock()
	if len(q.held) == 0 {
		q.mu.Unlock()
		return Redelivery{}, false
	}
	h := q.held[0]
	q.held = q.held[1:]
	q.mu.Unlock()
	res, err := h.call()
	q.record(Duplicate{Write: h.write, TaskID: h.claim.TaskID, Fence: h.claim.Fence, Err: err})
	r = Redelivery{Write: h.write, Claim: h.claim, Err: err}
	if hb, isHeartbeat := res.(model.HeartbeatResult); isHeartbeat && err == nil {
		r.LeaseUntil = hb.LeaseUntil
	}
	return r, true
}

// Disarm cancels every armed duplicate and hold, stops DuplicateEvery and
// drops kept writes. Counts and Last are kept.
func (q *Queue) Disarm() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.armed, q.every, q.holds, q.held = 0, "", 0, nil
}

// Armed returns the number of duplicates armed and not yet fired.
func (q *Queue) Armed() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.armed
}

// Counts returns how many writes were duplicated.
func (q *Queue) Counts() QueueCounts {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.counts
}

// Last returns the most recent duplicate (delivered at once or late by
// Redeliver) and its second delivery's error; ok is false if none.
func (q *Queue) Last() (d Duplicate, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.last, q.last.Write != ""
}

// String describes everything armed (duplicates, holds, DuplicateEvery's
// write or "-"), the writes kept for Redeliver, the counts and the last
// duplicate, e.g. "queue: armed duplicate=1 hold=0 every=complete; kept 0;
// fired duplicated=2 second_refused=2; last complete task=t1 fence=1
// second=...".
func (q *Queue) String() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	every := q.every
	if every == "" {
		every = "-"
	}
	s := fmt.Sprintf("queue: armed duplicate=%d hold=%d every=%s; kept %d; fired %s", q.armed, q.holds, every, len(q.held), q.counts)
	if q.last.Write != "" {
		s += "; last " + q.last.String()
	}
	return s
}

func (q *Queue) record(d Duplicate) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.counts.Duplicated++
	if d.Err != nil {
		q.counts.SecondRefused++
	}
	q.last = d
}

// deliver runs call once, or twice when a duplicate is armed (an armed
// one is spent first) or DuplicateEvery names the write, and returns the
// first delivery's result. An armed hold, while fewer than HeldMax writes
// are kept, keeps the write for Redeliver. What to do is decided under one
// lock; the kept write's closure is made only when one is kept.
func deliver[T any](q *Queue, write model.Write, c model.Claim, call func() (T, error)) (T, error) {
	q.mu.Lock()
	twice := q.armed > 0 || (q.every != "" && q.every == write)
	if q.armed > 0 {
		q.armed--
	}
	if q.holds > 0 && len(q.held) < HeldMax {
		q.holds--
		q.held = append(q.held, heldWrite{write: write, claim: c, call: func() (any, error) { return call() }})
	}
	q.mu.Unlock()
	res, err := call()
	if twice {
		_, second := call()
		q.record(Duplicate{Write: write, TaskID: c.TaskID, Fence: c.Fence, Err: second})
	}
	return res, err
}

// none adapts a write that returns only an error.
type none struct{}

// Claim is forwarded once; it is never duplicated.
func (q *Queue) Claim(ctx context.Context, req model.ClaimRequest) ([]model.Claimed, error) {
	return q.inner.Claim(ctx, req)
}

// Heartbeat forwards the heartbeat, twice if a duplicate is armed.
func (q *Queue) Heartbeat(ctx context.Context, c model.Claim, lease time.Duration) (model.HeartbeatResult, error) {
	return deliver(q, "heartbeat", c, func() (model.HeartbeatResult, error) { return q.inner.Heartbeat(ctx, c, lease) })
}

// CompleteStep forwards the step write, twice if a duplicate is armed.
func (q *Queue) CompleteStep(ctx context.Context, w model.StepWrite) (model.StepResult, error) {
	return deliver(q, "step", w.Claim, func() (model.StepResult, error) { return q.inner.CompleteStep(ctx, w) })
}

// RecordIntent forwards the intent, twice if a duplicate is armed.
func (q *Queue) RecordIntent(ctx context.Context, c model.Claim, step int) (model.IntentResult, error) {
	return deliver(q, "effect_intent", c, func() (model.IntentResult, error) { return q.inner.RecordIntent(ctx, c, step) })
}

// RecordReceipt forwards the receipt, twice if a duplicate is armed.
func (q *Queue) RecordReceipt(ctx context.Context, c model.Claim, opID, result string) error {
	_, err := deliver(q, "effect_receipt", c, func() (none, error) { return none{}, q.inner.RecordReceipt(ctx, c, opID, result) })
	return err
}

// Pause forwards the pause, twice if a duplicate is armed.
func (q *Queue) Pause(ctx context.Context, c model.Claim, step int, gate string) (model.State, error) {
	return deliver(q, "pause", c, func() (model.State, error) { return q.inner.Pause(ctx, c, step, gate) })
}

// Complete forwards the completion, twice if a duplicate is armed.
func (q *Queue) Complete(ctx context.Context, c model.Claim) error {
	_, err := deliver(q, "complete", c, func() (none, error) { return none{}, q.inner.Complete(ctx, c) })
	return err
}

// Fail forwards the failure, twice if a duplicate is armed.
func (q *Queue) Fail(ctx context.Context, c model.Claim, f model.Failure) (model.State, error) {
	return deliver(q, "fail", c, func() (model.State, error) { return q.inner.Fail(ctx, c, f) })
}

// Release forwards the release, twice if a duplicate is armed.
func (q *Queue) Release(ctx context.Context, c model.Claim) (model.State, error) {
	return deliver(q, "release", c, func() (model.State, error) { return q.inner.Release(ctx, c) })
}

// AcknowledgeCancel forwards the acknowledgement, twice if a duplicate is
// armed.
func (q *Queue) AcknowledgeCancel(ctx context.Context, c model.Claim) error {
	_, err := deliver(q, "cancel_ack", c, func() (none, error) { return none{}, q.inner.AcknowledgeCancel(ctx, c) })
	return err
}

// ClaimsOnCompletion reports whether the wrapped queue completes and
// claims in one write and says to (see CompleteAndClaim).
func (q *Queue) ClaimsOnCompletion() bool {
	cc, ok := q.inner.(worker.CompleteClaimer)
	return ok && cc.ClaimsOnCompletion()
}

// CompleteAndClaim forwards the completion and its claim as one write,
// twice if a duplicate is armed (the second delivery's completion is
// stale, and a stale completion claims nothing). A wrapped queue without
// the write refuses it as invalid, writing nothing.
func (q *Queue) CompleteAndClaim(ctx context.Context, c model.Claim, next model.ClaimRequest) ([]model.Claimed, error) {
	cc, ok := q.inner.(worker.CompleteClaimer)
	if !ok {
		return nil, &model.ValidationError{Field: "next", Problem: fmt.Sprintf("%T does not claim on completion", q.inner)}
	}
	return deliver(q, "complete", c, func() ([]model.Claimed, error) { return cc.CompleteAndClaim(ctx, c, next) })
}
