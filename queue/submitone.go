package queue

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/model"
)

// A lone submit. On a store whose round trips cost (PostgreSQL), a group
// holding nothing but one Submit (a caller submitting a task at a time,
// the usual case) is run as one statement that is its own transaction
// (submitFuser.submitOne): the key's lookup, admission and the task with
// its submitted event, which the usual way runs as seven statements
// between BEGIN and COMMIT. The outcomes are the usual way's, word for
// word: a replay returns the original task's ID, a refusal (a changed
// request under a used key, a deadline already passed, a full queue) is
// the same error with nothing written. The statement's own failures are a
// fused group's (fused.go): a server's error rolled it back (ErrNotApplied,
// with the error's class, so a raced key or a conflict is run again), and
// a connection lost while it ran leaves it unknown (ErrOutcomeUnknown).

// submitFuser is a store that runs a lone submit in one statement.
type submitFuser interface {
	// submitOne runs s at now as one statement outside any transaction
	// and returns its outcome. An error is the statement's: unknown
	// reports whether it may have committed.
	submitOne(q *Queue, s *submission, now time.Time) (out submitOutcome, unknown bool, err error)
}

// submission is a Submit as a store may run it alone: the normalized
// request, the actor its event names, its scope, and where its result
// goes.
type submission struct {
	n     model.Normalized
	actor string
	scope string
	out   *model.SubmitResult
}

// submitOutcome is what submit_one reports: how it ended, the task's ID
// where there is one, and the count and limit a full queue's refusal
// names.
type submitOutcome struct {
	kind     string // inserted, replay, conflict, untimely, user_full or queue_full
	taskID   string
	n, limit int64
}

// runSubmitFused runs members as a lone submit when they are one and the
// store can; false means they run the usual way.
func (q *Queue) runSubmitFused(members []*member) bool {
	f := q.store.capabilities().submitAlone
	if f == nil || !q.fuse || len(members) != 1 || members[0].submits == nil {
		return false
	}
	m, s := members[0], members[0].submits
	now := q.now()
	out, unknown, err := f.submitOne(q, s, now)
	if err != nil {
		m.statementFailed(err, unknown)
		return true
	}
	q.stats.submitsFused.Add(1)
	res, err := s.result(out, now)
	if err == nil {
		*s.out = res
		if out.kind == "inserted" && !s.runAt(now).After(now) {
			q.local.signal() // wake this process's idle workers (localwake.go)
		}
	}
	m.finish(err)
	return true
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
	switch out.kind {
	case "inserted":
		return model.SubmitResult{TaskID: out.taskID}, nil
	case "replay":
		return model.SubmitResult{TaskID: out.taskID, Replay: true}, nil
	case "conflict":
		return model.SubmitResult{}, fmt.Errorf("user %s key %s is task %s: %w", n.User, n.Key, out.taskID, model.ErrIdempotencyConflict)
	case "untimely":
		if err := n.CheckTimely(now); err != nil {
			return model.SubmitResult{}, err
		}
		return model.SubmitResult{}, fmt.Errorf("queue: submit: the store found the request untimely, the queue did not")
	case "user_full":
		return model.SubmitResult{}, fmt.Errorf("user %s has %d active tasks (limit %d): %w", n.User, out.n, out.limit, model.ErrQueueFull)
	case "queue_full":
		return model.SubmitResult{}, fmt.Errorf("%d active tasks (limit %d): %w", out.n, out.limit, model.ErrQueueFull)
	}
	return model.SubmitResult{}, fmt.Errorf("queue: submit: the store reported %q", out.kind)
}
