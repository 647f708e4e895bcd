package queue

import (
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue/internal/seam"
)

// Fused groups. On a store whose round trips cost (PostgreSQL: each
// statement waits for the server's answer, BEGIN and COMMIT included), a
// group made only of completions, each perhaps claiming its next task
// (a worker's slots finishing their tasks: CompleteAndClaim), is run as
// one statement that is its own transaction (seam.Fuser):
// the completions under complete_batch's checks with their completed
// events, then one claim of the sum of the members' Max (the merged claim
// of batch.go) with its claimed events. One round trip instead of five,
// and the same rows, events and counters as the group run the usual way.
//
// A group is fused only when the usual way would have batched every
// member and merged every claim into one store claim: two or more
// completions (batchMin), each of a task no other member completes, whose
// text JSON carries (jsonSafe), with nothing to check first (a claim of
// one: CompleteAndClaim's check reads the limits only for more) and
// nothing to run after but its claim; every claim of the same worker,
// lease and kinds, at most model.ClaimBatchLimit tasks in all; and one scope, the
// events'. Every member runs at one time, the group's.
//
// The outcomes are a group's. The statement matched every claim and
// committed: each member is answered, its claims handed out in member
// order, each its Max, the first tasks in claim order to the first member
// (as mergedClaim hands them out). A claim did not match: the statement
// wrote nothing, and the group runs the usual way, where the refusal is
// recorded in its member's savepoint. The server reported an error: the
// statement's transaction rolled back, and every member is told
// ErrNotApplied (with the error's class, so a conflict is run again). The
// connection failed while the statement ran: it may have committed, and
// every member is told ErrOutcomeUnknown.

// errFusedMismatch: a fused group's statement did not match every claim
// and wrote nothing.
var errFusedMismatch = seam.ErrFusedMismatch

// fusedGroup is what a fused group's statement is given.
type fusedGroup = seam.FusedParams

// runFused runs members as a fused group when they qualify and the store
// can; false means the group is to run the usual way (it did not
// qualify, or a claim did not match and nothing was written).
func (q *Queue) runFused(members []*member) bool {
	f := q.store.Capabilities().Fuse
	if f == nil || !q.fuse {
		return false
	}
	plan, ok := q.planFused(members)
	if !ok {
		return false
	}
	taken, unknown, err := f.CompleteAndClaim(runner{q}, plan)
	switch {
	case errors.Is(err, errFusedMismatch):
		q.stats.fallbacks.Add(1)
		return false
	case err != nil:
		for _, m := range members {
			m.statementFailed(err, unknown)
		}
		return true
	}
	q.stats.fused.Add(1)
	q.stats.batched.Add(int64(len(members)))
	err = q.handOut(members, taken, plan)
	for _, m := range members {
		m.finish(err)
	}
	return true
}

// statementFailed answers m, whose group ran as one statement that failed
// with err: ErrOutcomeUnknown when the statement may have committed
// (unknown), ErrNotApplied otherwise.
func (m *member) statementFailed(err error, unknown bool) {
	cause := fmt.Errorf("queue: %s: %w", m.op, err)
	if unknown {
		m.finish(outcomeUnknown(cause))
	} else {
		m.finish(notApplied(cause))
	}
}

// planFused returns the fused statement's input for members, or false
// when they do not qualify (see Fused groups).
func (q *Queue) planFused(members []*member) (fusedGroup, bool) {
	if len(members) < batchMin {
		return fusedGroup{}, false
	}
	f := fusedGroup{Now: q.now(), Scope: model.ScopeOf(members[0].ctx)}
	if !jsonSafe(f.Scope) {
		return fusedGroup{}, false
	}
	seen := make(map[string]bool, len(members))
	claiming := 0
	for _, m := range members {
		c := m.completes
		if c == nil || c.check != nil || c.then != nil || seen[c.claim.TaskID] ||
			!jsonSafe(c.claim.TaskID) || !jsonSafe(c.claim.Owner) || model.ScopeOf(m.ctx) != f.Scope {
			return fusedGroup{}, false
		}
		seen[c.claim.TaskID] = true
		f.Claims = append(f.Claims, [3]any{c.claim.TaskID, c.claim.Fence, model.Millis(f.Now)})
		f.Events = append(f.Events, eventRowAt(completedEvent(c.claim), f.Now, f.Scope))
		if c.next == nil {
			continue
		}
		req := c.next.req
		if claiming > 0 && (req.Worker != f.Claim.Worker || req.Lease != f.Claim.Lease ||
			req.KindsKey() != model.KindsKey(f.Claim.Kinds)) {
			return fusedGroup{}, false
		}
		f.Claim.Worker, f.Claim.Lease, f.Claim.Kinds = req.Worker, req.Lease, req.Kinds
		f.Claim.Max += req.Max
		claiming++
	}
	if f.Claim.Max > model.ClaimBatchLimit {
		return fusedGroup{}, false
	}
	return f, true
}

// handOut gives the tasks taken to the claiming members in member order,
// each up to its Max, as the claims made at the group's time, and counts
// them. It returns an error, every member's, only if a task is left over
// (which the store's claim of f.max never leaves): the statement
// committed, and what became of that task is the reaper's to settle.
func (q *Queue) handOut(members []*member, taken []model.Task, f fusedGroup) error {
	k, claiming := 0, 0
	for _, m := range members {
		ask := m.completes.next
		if ask == nil {
			continue
		}
		claiming++
		for n := 0; n < ask.req.Max && k < len(taken); n++ {
			*ask.out = append(*ask.out, claimedAt(taken[k], ask.req, f.Now))
			k++
		}
	}
	if claiming > 1 {
		q.stats.merged.Add(int64(claiming))
	}
	if k < len(taken) {
		return outcomeUnknown(fmt.Errorf("queue: complete and claim: %d tasks taken for %d asked", len(taken), f.Claim.Max))
	}
	return nil
}

// FusedStats reports how many groups the queue ran fused (one statement
// each: see Fused groups) and how many it tried to fuse but ran the usual
// way because a claim did not match.
func (q *Queue) FusedStats() (fused, fallbacks int64) {
	return q.stats.fused.Load(), q.stats.fallbacks.Load()
}
