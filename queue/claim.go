package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/broken"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue/internal/seam"
)

// Claim claims up to req.Max queued tasks that are due, within their
// deadline, and whose user is below its running limit, in claim order
// (priority, then run_at, then submission). Each claim is a conditional
// write that moves the task to running, sets its owner and lease, and
// increments its version, the fence token every later write must name. The
// per-user limit is enforced inside the same transaction.
//
// An idle poll costs one read: when no task is claimable the queue answers
// without taking the write lock. So the request is checked first against
// the absolute bound model.ClaimBatchLimit, which needs no I/O, and against
// the stored limit (Limits.ClaimBatchMax) only inside the transaction: a
// batch above the stored limit is refused only when there is a task to
// claim. Whether there is one is decided inside the transaction too (for
// a batch of more than one, which alone can be refused), since in a group
// commit the members before the claim change what is claimable; the read
// before the write is only a fast path for the idle poll.
func (q *Queue) Claim(ctx context.Context, req model.ClaimRequest) ([]model.Claimed, error) {
	if err := req.Validate(model.ClaimBatchLimit); err != nil {
		return nil, err
	}
	found, err := q.anyClaimable(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("queue: claim: %w", err)
	}
	if !found {
		return nil, nil
	}
	var out []model.Claimed
	err = q.writeRetrying(ctx, "claim", func(t *txn) error {
		out = nil
		if req.Max > 1 {
			if found, err := t.anyClaimable(req); err != nil || !found {
				return err
			}
		}
		if err := t.checkClaimBatch(req); err != nil {
			return err
		}
		return t.claim(req, &out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// anyClaimable reports whether a claim for req would find a task now,
// outside any transaction.
func (q *Queue) anyClaimable(ctx context.Context, req model.ClaimRequest) (bool, error) {
	now := sql.Named("now", model.Millis(q.now()))
	var r row
	if req.Kinds == nil {
		r = q.readRow(ctx, qClaimAny, now)
	} else {
		r = q.readRow(ctx, qClaimAnyKinds, now, sql.Named("kinds", seam.KindsArg(req.Kinds)))
	}
	return scanFound(r)
}

// anyClaimable reports whether a claim for req would find a task inside
// t, seeing what t has written.
func (t *txn) anyClaimable(req model.ClaimRequest) (bool, error) {
	now := sql.Named("now", model.Millis(t.now))
	var r row
	if req.Kinds == nil {
		r = t.queryRow(qClaimAny, now)
	} else {
		r = t.queryRow(qClaimAnyKinds, now, sql.Named("kinds", seam.KindsArg(req.Kinds)))
	}
	return scanFound(r)
}

// scanFound reads qClaimAny's answer: a row when a task is claimable.
func scanFound(r row) (bool, error) {
	var found int
	err := r.Scan(&found)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// CompleteAndClaim completes c as Complete does and then, in the same
// write operation (one transaction, one commit), claims up to next.Max
// tasks for next as Claim does: a worker slot that finishes its task takes
// the next one without a commit of its own, so completions and claims of
// many slots share group commits. The claim sees the completion (its
// user's running count is down by one). next is checked before anything
// is written; a completion the queue refuses (a stale claim, its event
// kept) claims nothing and returns the refusal, as Complete does. It
// returns the claims made, none when nothing is due. In a group commit
// its completion is batched with the group's others (batch.go), and its
// claim made after them, merged with the claims of the group's other
// CompleteAndClaim of the same worker, lease and kinds into one store claim.
func (q *Queue) CompleteAndClaim(ctx context.Context, c model.Claim, next model.ClaimRequest) ([]model.Claimed, error) {
	if err := next.Validate(model.ClaimBatchLimit); err != nil {
		return nil, err
	}
	var out []model.Claimed
	op := &completion{claim: c, next: &claimAsk{req: next, out: &out}}
	if next.Max > 1 {
		// A batch of one is within every stored limit: only a larger one
		// reads the limits (and so keeps the operation from a fused group).
		op.check = func(t *txn) error { return t.checkClaimBatch(next) }
	}
	err := q.writeRetryingOp(ctx, "complete and claim", op.run, op, nil)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ClaimsOnCompletion reports whether a worker should claim its next task
// with the write that completes its last (CompleteAndClaim) rather than
// apart: true where writes are grouped (SQLite, and PostgreSQL since its
// counters are rows of changes and its claims wait on no users row, so a
// write that completes and then claims locks nothing another such write
// waits on in a cycle), so that completions and claims share commits.
func (q *Queue) ClaimsOnCompletion() bool { return q.store.Capabilities().Groups }

// checkClaimBatch checks req's batch against the stored claim_batch_max.
// A batch of one is within every stored limit (ClaimBatchMax is at least
// 1), so it needs no read of the limits.
func (t *txn) checkClaimBatch(req model.ClaimRequest) error {
	if req.Max == 1 {
		return nil
	}
	limits, err := t.limits()
	if err != nil {
		return err
	}
	return req.Validate(limits.ClaimBatchMax)
}

// claim claims up to req.Max tasks inside t and appends them to out.
func (t *txn) claim(req model.ClaimRequest, out *[]model.Claimed) error {
	return t.q.store.Claim(t, claimParams(req, req.Max), func(task model.Task) error {
		c, err := t.claimed(task, req)
		if err != nil {
			return err
		}
		*out = append(*out, c)
		return nil
	})
}

// claimParams is req as a store's Claim takes it, for up to max tasks.
func claimParams(req model.ClaimRequest, max int) seam.ClaimParams {
	kinds := broken.Pick(broken.ClaimIgnoresKinds, req.Kinds, nil)
	return seam.ClaimParams{Worker: req.Worker, Lease: req.Lease, Max: max, Kinds: kinds}
}

// claimed records the claim of task, which the store has just taken for
// req, and returns it with the task as the claim left it (times as the row
// stores them).
func (t *txn) claimed(task model.Task, req model.ClaimRequest) (model.Claimed, error) {
	c := claimedAt(task, req, t.now)
	if err := t.emit(claimedEvent(c)); err != nil {
		return model.Claimed{}, err
	}
	return c, nil
}

// claimedAt is the claim of task taken for req at now, with the task as
// the claim leaves it: running, version + 1 (the fence and the attempt),
// the owner and the lease, its claim times now.
func claimedAt(task model.Task, req model.ClaimRequest, at time.Time) model.Claimed {
	now := model.Millis(at)
	leaseUntil := model.Millis(at.Add(req.Lease))
	task.State, task.Version = model.Running, task.Version+1
	task.Attempt, task.Owner = int(task.Version), req.Worker
	task.LeaseUntil = model.FromMillis(leaseUntil)
	task.ClaimedAt, task.HeartbeatAt, task.UpdatedAt = model.FromMillis(now), model.FromMillis(now), model.FromMillis(now)
	claim := model.Claim{TaskID: task.ID, Fence: task.Version, Owner: task.Owner, Attempt: task.Attempt, LeaseUntil: task.LeaseUntil}
	return model.Claimed{Claim: claim, Task: task}
}

// claimedEvent is the event a claim records. PostgreSQL's
// complete_and_claim (functions.sql) writes the same for the claims it
// makes.
func claimedEvent(c model.Claimed) model.Event {
	return model.Event{TaskID: c.Task.ID, Kind: model.EventClaimed, Attempt: c.Task.Attempt,
		Fence: c.Task.Version, From: model.Queued, To: model.Running, Actor: c.Task.Owner}
}
