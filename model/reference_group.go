package model

import "context"

// What a group commit of several writes needs of the reference besides
// the writes themselves (DESIGN.md, group commit): a group's completions
// are made set-wise before its other members run, and the claims that
// follow them run after, each seeing every completion of the group.

// CompleteIfCurrent completes c when a completion of it would be accepted
// now (its fence current, the task running, the lease unexpired) and
// reports whether it did; otherwise it writes nothing, not even the
// stale-write event, which the completion records in its own turn when it
// runs whole.
func (r *Reference) CompleteIfCurrent(c Claim) bool {
	t, ok := r.tasks[c.TaskID]
	if !ok || StaleReason(t.State, t.Version, t.LeaseUntil, c.Fence, r.now()) != "" {
		return false
	}
	r.settle(t, Completed, NoReason, EventCompleted, c.Owner, "")
	return true
}

// CheckClaimBatch checks a claim request's batch against the stored
// claim_batch_max, as CompleteAndClaim does before it writes anything.
func (r *Reference) CheckClaimBatch(req ClaimRequest) error {
	if req.Max == 1 {
		return nil
	}
	return req.Validate(r.limits.ClaimBatchMax)
}

// ClaimAfterCompletion is the claim of a CompleteAndClaim whose completion
// was made already (CompleteIfCurrent): up to req.Max tasks, in claim
// order, taking the running room any completion before it freed. req was
// checked before the completion.
func (r *Reference) ClaimAfterCompletion(_ context.Context, req ClaimRequest) []Claimed {
	return r.claimUpTo(req, r.now())
}

// RunningRoom returns how many tasks of user are running and the user's
// running limit (0: none).
func (r *Reference) RunningRoom(user string) (running, limit int) {
	limit, _ = r.userLimit(user)
	return r.running(user), limit
}
