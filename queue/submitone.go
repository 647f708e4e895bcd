package queue

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue/internal/seam"
)

// A submit in one statement. A store whose round trips cost (PostgreSQL)
// runs a submit as one statement (seam.Submitter): the key's lookup,
// admission and the task with its submitted event, which the protocol's
// own statements (txn.submit, SQLite's way) take seven for. The one body
// runs alone and in a group: a group holding nothing but one Submit (a
// caller submitting a task at a time, the usual case) runs it as its own
// transaction, with no BEGIN or COMMIT; in a group of more, or an
// Unfused queue's, it is one statement of the group's transaction
// (txn.submitInOne). The outcomes are the protocol's statements', word for
// word: a replay returns the original task's ID, a refusal (a changed
// request under a used key, a deadline already passed, a full queue) is
// the same error with nothing written. Alone, the statement's own
// failures are a fused group's (fused.go): a server's error rolled it
// back (ErrNotApplied, with the error's class, so a raced key or a
// conflict is run again), and a connection lost while it ran leaves it
// unknown (ErrOutcomeUnknown).

// submission is a Submit as a store may run it alone: the normalized
// request, the actor its event names, its scope, and where its result
// goes.
type submission struct {
	n     model.Normalized
	actor string
	scope string
	out   *model.SubmitResult
}

// submitOutcome is how a lone submit ended (seam.SubmitOutcome).
type submitOutcome = seam.SubmitOutcome

// runSubmitFused runs members as a lone submit when they are one and the
// store can; false means they run the usual way.
func (q *Queue) runSubmitFused(members []*member) bool {
	f := q.store.Capabilities().Submit
	if f == nil || !q.fuse || len(members) != 1 || members[0].submits == nil {
		return false
	}
	m, s := members[0], members[0].submits
	now := q.now()
	out, unknown, err := q.submitIn(f, runner{q}, s, now)
	if err != nil {
		m.statementFailed(err, unknown)
		return true
	}
	q.stats.submitsFused.Add(1)
	res, err := s.result(out, now)
	if err == nil {
		*s.out = res
		if out.Kind == seam.SubmitInserted && !s.runAt(now).After(now) {
			q.readyCommitted() // wake idle workers (wake.go)
		}
	}
	m.finish(err)
	return true
}

// submitIn runs s at now through f's one statement, run by on, with the
// task's ID drawn first, as the statement may insert it; one it did not
// insert is given back (Queue.unusedID).
func (q *Queue) submitIn(f seam.Submitter, on seam.Querier, s *submission, now time.Time) (submitOutcome, bool, error) {
	id, err := q.newID(model.TaskIDPrefix, model.TaskKey(s.n.User, s.n.Key))
	if err != nil {
		return submitOutcome{}, false, err
	}
	out, unknown, err := f.SubmitOne(on, seam.SubmitParams{ID: id, Request: s.n, RunAt: s.runAt(now), Now: now,
		Timely: s.n.CheckTimely(now) == nil, Actor: s.actor, Scope: s.scope})
	if !unknown && (err != nil || out.Kind != seam.SubmitInserted) {
		q.unusedID(model.TaskIDPrefix, id)
	}
	return out, unknown, err
}

// submitInOne runs the submit of n for actor as the store's one
// statement inside t: the body a lone submit runs alone. Whether it
// committed is the group's to say, so the statement's own unknown is not
// read.
func (t *txn) submitInOne(f seam.Submitter, n model.Normalized, actor string) (model.SubmitResult, error) {
	s := &submission{n: n, actor: submitter(t.ctx, actor), scope: model.ScopeOf(t.ctx)}
	out, _, err := t.q.submitIn(f, t, s, t.now)
	if err != nil {
		return model.SubmitResult{}, err
	}
	if out.Kind == seam.SubmitInserted {
		t.madeReady(s.runAt(t.now))
	}
	return s.result(out, t.now)
}

// runAt is when s's task becomes due: its run_at, or now.
func (s *submission) runAt(now time.Time) time.Time {
	if s.n.RunAt.IsZero() {
		return now
	}
	return s.n.RunAt
}

// result is the Submit's result or refusal for out, as txn.submit gives
// them.
func (s *submission) result(out submitOutcome, now time.Time) (model.SubmitResult, error) {
	n := s.n
	switch out.Kind {
	case seam.SubmitInserted:
		return model.SubmitResult{TaskID: out.TaskID}, nil
	case seam.SubmitReplay:
		return model.SubmitResult{TaskID: out.TaskID, Replay: true}, nil
	case seam.SubmitConflict:
		return model.SubmitResult{}, fmt.Errorf("user %s key %s is task %s: %w", n.User, n.Key, out.TaskID, model.ErrIdempotencyConflict)
	case seam.SubmitUntimely:
		if err := n.CheckTimely(now); err != nil {
			return model.SubmitResult{}, err
		}
		return model.SubmitResult{}, fmt.Errorf("queue: submit: the store found the request untimely, the queue did not")
	case seam.SubmitUserFull:
		return model.SubmitResult{}, fmt.Errorf("user %s has %d active tasks (limit %d): %w", n.User, out.N, out.Limit, model.ErrQueueFull)
	case seam.SubmitQueueFull:
		return model.SubmitResult{}, fmt.Errorf("%d active tasks (limit %d): %w", out.N, out.Limit, model.ErrQueueFull)
	}
	return model.SubmitResult{}, fmt.Errorf("queue: submit: the store reported %q", out.Kind)
}
