package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
)

// runTarget is what a step's run makes its effect on: it counts the
// applications of each operation (once per operation ID for a Dedup
// target) and answers whether one was applied.
type runTarget struct {
	mu      sync.Mutex
	kind    worker.ServiceKind
	applied map[string]int
	runs    int
	asked   []string
	// gate, when set, holds each status query until it is closed.
	gate chan struct{}
}

func newRunTarget(kind worker.ServiceKind) *runTarget {
	return &runTarget{kind: kind, applied: map[string]int{}}
}

func (r *runTarget) apply(op string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs++
	if r.kind == worker.Dedup && r.applied[op] > 0 {
		return
	}
	r.applied[op]++
}

func (r *runTarget) status(ctx context.Context, op string, _ int64) (bool, string, error) {
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return false, "", context.Cause(ctx)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, op)
	return r.applied[op] > 0, fmt.Sprintf("sent %s", op), nil
}

// ledgerHandler has one step, whose run makes its effect on target: it
// checks that the intent is on record first, applies, and fails
// transiently after applying while the task has failed fewer than
// failAfterApply attempts.
type ledgerHandler struct {
	b              *bundle
	target         *runTarget
	failAfterApply int
	noStatus       bool
}

func (h *ledgerHandler) Plan(model.Task) ([]worker.StepSpec, error) {
	l := &worker.RunLedger{Kind: h.target.kind}
	if !h.noStatus {
		l.Status = h.target.status
	}
	return []worker.StepSpec{{Cost: 1, Effect: "mail", Ledger: l}}, nil
}

func (h *ledgerHandler) Run(ctx context.Context, task model.Task, index int, _ worker.StepSpec) (string, error) {
	op := model.OperationID(task.ID, index)
	effects, err := h.b.q.Effects(ctx, task.ID)
	if err != nil || len(effects) != 1 || effects[0].OpID != op || effects[0].Receipted() {
		return "", fmt.Errorf("%w: the run began without its intent on record (%v, %v)", worker.ErrPermanent, effects, err)
	}
	h.target.apply(op)
	if task.AttemptsFailed < h.failAfterApply {
		return "", fmt.Errorf("%w: failed after applying", worker.ErrTransient)
	}
	return "sent " + op, nil
}

func (b *bundle) ledgerWorker(id string, h *ledgerHandler) *worker.Worker {
	b.t.Helper()
	return b.newWorker(id, nil, func(c *worker.Config) { c.Handler = h })
}

// A step whose run makes its effect records the intent before the run
// and the receipt, with the run's checkpoint as its result, after it; it
// needs no Service.
func TestRunLedgerRecordsIntentThenReceipt(t *testing.T) {
	b := setup(t)
	id := b.submit(`{}`, 5, 5)
	target := newRunTarget(worker.Plain)
	b.run(b.ledgerWorker("w1", &ledgerHandler{b: b, target: target}), stepsMax)

	op := model.OperationID(id, 0)
	task := b.task(id)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, "sent "+op, task.Checkpoint)
	require.Equal(t, 1, target.applied[op])
	require.Equal(t, []model.EventKind{model.EventSubmitted, model.EventClaimed, model.EventEffectIntent,
		model.EventEffectReceipt, model.EventStep, model.EventCompleted}, b.kinds(id))
	effects, err := b.q.Effects(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, "sent "+op, effects[0].Result)
}

// An earlier claim recorded the intent and crashed before its run: Dedup
// runs it; Queryable asks, finds it not applied, and sends it to review
// (the old claim's run might still apply it); Plain sends it to review
// without asking.
func TestRunLedgerIntentLeftByACrashedClaim(t *testing.T) {
	for _, tc := range []struct {
		kind    worker.ServiceKind
		state   model.State
		applied int
		asked   int
	}{
		{worker.Dedup, model.Completed, 1, 0},
		{worker.Queryable, model.NeedsReview, 0, 1},
		{worker.Plain, model.NeedsReview, 0, 0},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			b := setup(t)
			id := b.submit(`{}`, 5, 5)
			op := model.OperationID(id, 0)
			target := newRunTarget(tc.kind)
			b.stepUntil(b.ledgerWorker("w1", &ledgerHandler{b: b, target: target}), is(worker.ActionIntent, string(model.IntentRecorded)))
			require.Zero(t, target.runs, "nothing ran before the intent")

			b.expire(id)
			b.run(b.ledgerWorker("w2", &ledgerHandler{b: b, target: target}), stepsMax)
			task := b.task(id)
			require.Equal(t, tc.state, task.State)
			require.Equal(t, tc.applied, target.applied[op])
			require.Len(t, target.asked, tc.asked)
			if tc.state == model.NeedsReview {
				require.Equal(t, model.UncertainEffect, task.Reason)
				require.Zero(t, target.runs, "never run blindly again")
			}
		})
	}
}

// A run applied its effect and then failed: the next attempt finds the
// intent without a receipt. Dedup runs it again (the target applies it
// once); Queryable asks, finds it applied, and records the receipt
// without running it; Plain goes to review.
func TestRunLedgerAppliedThenFailed(t *testing.T) {
	for _, tc := range []struct {
		kind  worker.ServiceKind
		state model.State
		runs  int
	}{
		{worker.Dedup, model.Completed, 2},
		{worker.Queryable, model.Completed, 1},
		{worker.Plain, model.NeedsReview, 1},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			b := setup(t)
			id := b.submit(`{}`, 5, 5)
			op := model.OperationID(id, 0)
			target := newRunTarget(tc.kind)
			h := &ledgerHandler{b: b, target: target, failAfterApply: 1}
			w := b.ledgerWorker("w1", h)
			b.stepUntil(w, is(worker.ActionFail, ""))
			require.Equal(t, model.Queued, b.task(id).State)
			b.untilDue(id)
			b.run(w, stepsMax)

			task := b.task(id)
			require.Equal(t, tc.state, task.State)
			require.Equal(t, 1, target.applied[op], "applied once")
			require.Equal(t, tc.runs, target.runs)
			if tc.state == model.Completed {
				require.Equal(t, "sent "+op, task.Checkpoint)
				require.Len(t, b.eventsOf(id, model.EventEffectReceipt), 1)
			}
		})
	}
}

// A receipt on record: the next claim (the first crashed before its step
// write) does not run the step again; the receipt's result becomes the
// step's checkpoint.
func TestRunLedgerReceiptedIsNotRunAgain(t *testing.T) {
	b := setup(t)
	id := b.submit(`{}`, 5, 5)
	op := model.OperationID(id, 0)
	target := newRunTarget(worker.Plain)
	b.stepUntil(b.ledgerWorker("w1", &ledgerHandler{b: b, target: target}), is(worker.ActionReceipt, ""))
	b.expire(id)
	b.run(b.ledgerWorker("w2", &ledgerHandler{b: b, target: target}), stepsMax)

	task := b.task(id)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, 1, target.runs)
	require.Equal(t, "sent "+op, task.Checkpoint)
}

// A ledger that can answer but has no Status fails the task before
// anything runs or is recorded.
func TestRunLedgerQueryableNeedsStatus(t *testing.T) {
	b := setup(t)
	id := b.submit(`{}`, 5, 5)
	target := newRunTarget(worker.Queryable)
	b.run(b.ledgerWorker("w1", &ledgerHandler{b: b, target: target, noStatus: true}), stepsMax)
	task := b.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Contains(t, task.LastError, "has no Status")
	require.Empty(t, b.eventsOf(id, model.EventEffectIntent))
	require.Zero(t, target.runs)
}

// A status query that takes longer than the lease runs through the
// executor like a step's run: the slot heartbeats meanwhile, and the
// claim that asked records the receipt.
func TestRunLedgerStatusIsHeartbeated(t *testing.T) {
	b := setup(t)
	id := b.submit(`{}`, 5, 5)
	target := newRunTarget(worker.Queryable)
	h := &ledgerHandler{b: b, target: target, failAfterApply: 1}
	w := b.newWorker("w1", nil, func(c *worker.Config) { c.Handler, c.Executor = h, worker.Goroutines{} })
	// The first attempt applies and fails: wait for its end (its run ends
	// in a goroutine), then let the retry come due.
	b.stepUntil(w, is(worker.ActionFail, ""))
	b.untilDue(id)
	target.gate = make(chan struct{})
	b.stepUntil(w, is(worker.ActionReconcile, "status query started"))
	heartbeats := 0
	for heartbeats < 2*int(testLease/testHeartbeat) {
		r := b.step(w)
		if r.Action == worker.ActionHeartbeat {
			require.True(t, r.Accepted, "%s", r)
			heartbeats++
		}
		if r.Action == worker.ActionIdle {
			b.clock.Advance(r.Wait)
		}
	}
	close(target.gate)
	b.run(w, stepsMax)

	task := b.task(id)
	require.Equal(t, model.Completed, task.State, "the claim held through the query")
	require.Equal(t, 2, task.Attempt)
	require.Equal(t, 1, target.runs)
	effects, err := b.q.Effects(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(2), effects[0].ReceiptFence)
}
