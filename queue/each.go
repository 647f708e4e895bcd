package queue

import (
	"context"
	"fmt"

	"github.com/leasehold/leasehold/model"
)

// CompleteEachAndClaim completes each of claims as CompleteAndClaim does,
// each claiming up to next.Max tasks, as one write operation per claim
// queued together, so that they share a group commit (and, where the
// store fuses groups, one statement: see Fused groups): a worker slot
// that ran several tasks it claimed ahead completes them in one round
// trip and claims as many again. Each operation's outcome is its own, as
// if it were a CompleteAndClaim of its own: errs[i] is claims[i]'s (nil
// when it was completed), and claimed holds the tasks the accepted ones
// claimed, in claims' order. A completion refused or not applied claims
// nothing.
func (q *Queue) CompleteEachAndClaim(ctx context.Context, claims []model.Claim, next model.ClaimRequest) (claimed []model.Claimed, errs []error) {
	errs = make([]error, len(claims))
	if err := next.Validate(model.ClaimBatchLimit); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return nil, errs
	}
	outs := make([][]model.Claimed, len(claims))
	ops := make([]*completion, len(claims))
	for i, c := range claims {
		ops[i] = &completion{claim: c, next: &claimAsk{req: next, out: &outs[i]}}
		if next.Max > 1 {
			op := ops[i]
			op.check = func(t *txn) error { return t.checkClaimBatch(op.next.req) }
		}
	}
	errs = q.writeEach(ctx, "complete and claim", ops)
	for i, op := range ops {
		if errs[i] == nil || !retryable(errs[i]) {
			continue
		}
		// A conflict rolled its group back: each is run again alone, as
		// writeRetryingOp runs it.
		for run := 2; ; run++ {
			errs[i] = q.writeOp(ctx, "complete and claim", op.run, op, nil)
			if run == conflictRetriesMax || !retryable(errs[i]) {
				break
			}
		}
	}
	for i := range ops {
		if errs[i] == nil {
			claimed = append(claimed, outs[i]...)
		}
	}
	return claimed, errs
}

// ClaimsAhead reports whether a worker's slots should claim tasks ahead
// of the ones they run and complete them several to a write
// (CompleteEachAndClaim): where the store runs a group of completions and
// their claims as one statement (PostgreSQL's fused groups), whose cost is
// mostly per statement, so that more completions a statement cost less
// each (docs/PERF.md). SQLite's group commit keeps one task a slot.
func (q *Queue) ClaimsAhead() bool { return q.store.Capabilities().Fuse != nil && q.fuse }

// writeEach runs each completion of ops as a write operation of its own,
// queued together so that one group carries them all when it can (up to
// GroupMax with whatever else is queued), and returns each one's outcome.
func (q *Queue) writeEach(ctx context.Context, op string, ops []*completion) []error {
	errs := make([]error, len(ops))
	if err := q.checkOpen(op); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("queue: %s: %w", op, err)
		}
		return errs
	}
	members := make([]*member, len(ops))
	for i, c := range ops {
		*c.next.out = nil
		members[i] = &member{caller: ctx, ctx: context.WithoutCancel(ctx), op: op, fn: c.run, completes: c,
			done: make(chan struct{})}
	}
	switch {
	case q.ops == nil:
		for _, m := range members {
			q.runGroup([]*member{m})
		}
	case len(members) <= GroupMax && q.tryLead():
		q.settle()
		group := members
	gather:
		for len(group) < GroupMax {
			select {
			case m := <-q.ops:
				group = append(group, m)
			default:
				break gather
			}
		}
		q.runGroup(group)
		<-q.lead
	default:
		q.queueEach(ctx, op, members)
		for _, m := range members {
			q.await(m)
		}
	}
	q.commits.broadcast()
	for i, m := range members {
		<-m.done
		errs[i] = m.err
		if m.err != nil {
			q.health.noteFailure(m.err)
		}
	}
	return errs
}

// queueEach queues members for the groups, in order; one that cannot be
// queued (its context ended, or the queue is closing) is answered so.
func (q *Queue) queueEach(ctx context.Context, op string, members []*member) {
	for _, m := range members {
		select {
		case q.ops <- m:
		case <-ctx.Done():
			m.finish(fmt.Errorf("queue: %s: %w", op, ctx.Err()))
		case <-q.closing:
			m.finish(fmt.Errorf("queue: %s: %w", op, ErrClosed))
		}
	}
}

// tryLead takes a lead token when one is free, for a caller about to run
// a group at once; false means every lane is leading.
func (q *Queue) tryLead() bool {
	select {
	case q.lead <- struct{}{}:
	default:
		return false
	}
	select {
	case <-q.closing:
		<-q.lead
		return false
	default:
	}
	return true
}
