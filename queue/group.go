package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/leasehold/leasehold/model"
)

// Group commit (DESIGN.md, SQLite rules). Concurrent write operations of
// one process share one transaction, each inside its own savepoint, so ten
// workers finishing at once pay one commit (one fsync under FULL), not ten.
//
// One writer goroutine per queue runs the groups. It never sleeps and
// reads no clock to decide what to group: a group is what queued while
// the previous group ran and committed, up to GroupMax operations. The
// queue it takes them from holds at most GroupQueueMax; a caller past that
// waits for room (back-pressure), or for its context.
//
// Inside a group, each operation's outcome follows from how it ended:
//
//   - accepted: kept, and acknowledged after the commit;
//   - refused with a record (commitThen: a stale-write event, a task
//     failed for its budget, steps or deadline): the record is kept and
//     the refusal returned after the commit;
//   - refused without a record (a validation, conflict or not-found
//     error): rolled back to its savepoint, refused, and the rest of the
//     group goes on;
//   - a statement error that is not a refusal (I/O, disk full, busy, out
//     of memory, which can roll back the whole transaction): the group is
//     rolled back and every member is told ErrNotApplied.
//
// A COMMIT that fails (or whose outcome the driver cannot report) tells
// every member whose writes it carried ErrOutcomeUnknown. A group of one
// runs exactly as an operation alone did before grouping: no savepoint,
// and the same statements, so a simulator stepping one operation at a time
// sees the same database calls and the same errors.
const (
	// GroupMax bounds the operations one group commit carries.
	GroupMax = 64
	// GroupQueueMax bounds the operations waiting for the writer.
	GroupQueueMax = 4 * GroupMax
)

// Group outcomes a caller can branch on. Both are storage errors: the
// operation may be retried (a fenced write retried after ErrOutcomeUnknown
// is recognised by its fence or step index).
var (
	// ErrNotApplied: the operation's transaction rolled back; nothing of
	// it was written.
	ErrNotApplied = errors.New("write not applied")
	// ErrOutcomeUnknown: the COMMIT that carried the operation failed or
	// could not report its outcome; it may or may not have been written.
	ErrOutcomeUnknown = errors.New("write outcome unknown")
)

// groupError is a storage error of a grouped write: its text is its
// cause's, and it matches both its kind (ErrNotApplied or
// ErrOutcomeUnknown) and its cause under errors.Is.
type groupError struct {
	kind  error
	cause error
}

func (e *groupError) Error() string   { return e.cause.Error() }
func (e *groupError) Unwrap() []error { return []error{e.kind, e.cause} }

func notApplied(cause error) error     { return &groupError{kind: ErrNotApplied, cause: cause} }
func outcomeUnknown(cause error) error { return &groupError{kind: ErrOutcomeUnknown, cause: cause} }

// member is one write operation waiting for, or running in, a group.
type member struct {
	caller context.Context // the caller's, checked before the operation runs
	ctx    context.Context // the caller's values without its cancellation
	op     string
	fn     func(t *txn) error
	err    error
	done   chan struct{} // closed once err is final
}

func (m *member) finish(err error) {
	m.err = err
	close(m.done)
}

// refusals are the protocol's refusals: an operation ending in one of
// them is rolled back alone. Any other error is a statement error.
var refusals = []error{
	model.ErrNotFound, model.ErrStaleClaim, model.ErrInvalidInput, model.ErrIdempotencyConflict,
	model.ErrQueueFull, model.ErrInvalidTransition, model.ErrVersionMismatch, model.ErrBudgetExhausted,
	model.ErrStepsExhausted, model.ErrStepConflict, model.ErrDeadlineExceeded, model.ErrEffectReceipted,
	model.ErrEffectUncertain,
}

func isRefusal(err error) bool {
	for _, r := range refusals {
		if errors.Is(err, r) {
			return true
		}
	}
	return false
}

// write runs fn as one write operation: in a group with whatever else is
// queued (or, for a queue opened Ungrouped, in a transaction of its own
// on the caller's goroutine). fn's error rolls the operation back, unless
// it was made by commitThen. A caller whose context ends before its
// operation joins a group gets the context's error and nothing runs; once
// joined, it waits for the group's outcome. Errors are wrapped with the
// operation's name; a commit error is always returned, never a false
// success.
//
// A storage failure is counted for Health, which reports the queue
// unhealthy until a probe succeeds after it.
func (q *Queue) write(ctx context.Context, op string, fn func(t *txn) error) error {
	err := q.writeGrouped(ctx, op, fn)
	if err != nil {
		q.health.noteFailure(err)
	}
	return err
}

func (q *Queue) writeGrouped(ctx context.Context, op string, fn func(t *txn) error) error {
	if err := q.checkOpen(op); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("queue: %s: %w", op, err)
	}
	m := &member{caller: ctx, ctx: context.WithoutCancel(ctx), op: op, fn: fn, done: make(chan struct{})}
	if q.ops == nil {
		q.runGroup([]*member{m})
		return m.err
	}
	select {
	case q.ops <- m:
	case <-ctx.Done():
		return fmt.Errorf("queue: %s: %w", op, ctx.Err())
	case <-q.writerDone:
		return fmt.Errorf("queue: %s: %w", op, ErrClosed)
	}
	select {
	case <-m.done:
	case <-q.writerDone:
		// The writer answers every operation it took before it stops; one
		// it never took was not run.
		select {
		case <-m.done:
		default:
			return notApplied(fmt.Errorf("queue: %s: %w", op, ErrClosed))
		}
	}
	return m.err
}

// startWriter starts the queue's writer goroutine.
func (q *Queue) startWriter() {
	q.ops = make(chan *member, GroupQueueMax)
	q.stopWriter = make(chan struct{})
	q.writerDone = make(chan struct{})
	go q.writer()
}

// writer runs groups until stopWriter closes, then answers whatever is
// still queued with ErrClosed.
func (q *Queue) writer() {
	defer close(q.writerDone)
	for {
		// A stop comes first: once Close has begun, nothing more is run.
		select {
		case <-q.stopWriter:
			q.refuseQueued()
			return
		default:
		}
		select {
		case m := <-q.ops:
			q.runGroup(q.gather(m))
		case <-q.stopWriter:
			q.refuseQueued()
			return
		}
	}
}

// refuseQueued answers every queued operation with ErrClosed.
func (q *Queue) refuseQueued() {
	for {
		select {
		case m := <-q.ops:
			m.finish(notApplied(fmt.Errorf("queue: %s: %w", m.op, ErrClosed)))
		default:
			return
		}
	}
}

// groupStats counts the groups a queue's writer has run.
type groupStats struct {
	groups, ops, largest atomic.Int64
}

func (s *groupStats) add(size int) {
	s.groups.Add(1)
	s.ops.Add(int64(size))
	for {
		largest := s.largest.Load()
		if int64(size) <= largest || s.largest.CompareAndSwap(largest, int64(size)) {
			return
		}
	}
}

// GroupStats reports how many group commits the queue has run and how many
// write operations they carried (an Ungrouped queue counts each operation
// as a group of one).
func (q *Queue) GroupStats() (groups, ops int64) { return q.stats.groups.Load(), q.stats.ops.Load() }

// gather returns first and whatever else is queued now, up to GroupMax.
func (q *Queue) gather(first *member) []*member {
	members := []*member{first}
	for len(members) < GroupMax {
		select {
		case m := <-q.ops:
			members = append(members, m)
		default:
			return members
		}
	}
	return members
}

// runGroup runs the members in one transaction and answers each. A member
// whose caller gave up before the group started is answered with its
// context's error and not run.
func (q *Queue) runGroup(members []*member) {
	live := members[:0]
	for _, m := range members {
		if err := m.caller.Err(); err != nil {
			m.finish(fmt.Errorf("queue: %s: %w", m.op, err))
			continue
		}
		live = append(live, m)
	}
	if len(live) == 0 {
		return
	}
	q.stats.add(len(live))
	// The transaction is the group's: no one caller's cancellation may end
	// it (database/sql rolls back a cancelled transaction asynchronously).
	tx, err := q.db.BeginTx(context.Background(), nil)
	if err != nil {
		for _, m := range live {
			m.finish(notApplied(fmt.Errorf("queue: %s: begin: %w", m.op, err)))
		}
		return
	}
	g := &group{q: q, tx: tx, members: live, results: make([]error, len(live)), alone: make([]bool, len(live))}
	defer g.prepareLater()
	if !g.run() {
		return
	}
	if err := tx.Commit(); err != nil {
		for i, m := range live {
			if g.alone[i] {
				m.finish(g.results[i]) // rolled back to its savepoint: refused either way
				continue
			}
			m.finish(outcomeUnknown(fmt.Errorf("queue: %s: commit: %w", m.op, err)))
		}
		return
	}
	for i, m := range live {
		m.finish(g.results[i])
	}
}

// group is one group commit's transaction and what its members returned.
type group struct {
	q       *Queue
	tx      *sql.Tx
	members []*member
	txns    []*txn
	results []error
	// alone marks a member refused and rolled back to its savepoint: its
	// outcome does not depend on the commit.
	alone []bool
}

// run runs every member; false means the group was rolled back and every
// member answered.
func (g *group) run() bool {
	savepoints := len(g.members) > 1
	local := map[string]*sql.Stmt{}
	for i, m := range g.members {
		t := &txn{q: g.q, ctx: m.ctx, tx: g.tx, now: g.q.now(), local: local}
		g.txns = append(g.txns, t)
		if savepoints {
			if _, err := t.exec("group_savepoint"); err != nil {
				g.rollback(i, err)
				return false
			}
		}
		ferr := m.fn(t)
		var keep committed
		switch {
		case ferr == nil:
		case errors.As(ferr, &keep):
			g.results[i] = keep.err
		case savepoints && isRefusal(ferr):
			if _, err := t.exec("group_rollback"); err != nil {
				g.rollback(i, err)
				return false
			}
			g.results[i], g.alone[i] = ferr, true
		default:
			g.rollback(i, ferr)
			return false
		}
	}
	return true
}

// rollback rolls the group back after member failed with err (a refusal
// in a group of one, or a statement error) and answers every member: the
// one that failed with its error, the others ErrNotApplied.
func (g *group) rollback(failed int, err error) {
	rerr := g.tx.Rollback()
	if rerr != nil && errors.Is(rerr, sql.ErrTxDone) {
		rerr = nil
	}
	for i, m := range g.members {
		if i != failed {
			m.finish(notApplied(fmt.Errorf("queue: %s: another write in its group failed in storage; rolled back", m.op)))
			continue
		}
		out := err
		if rerr != nil {
			out = fmt.Errorf("queue: %s: %w (rollback: %v)", m.op, err, rerr)
		}
		if !isRefusal(err) {
			out = notApplied(out)
		}
		m.finish(out)
	}
}

// prepareLater prepares on the database the statements the group's
// transactions could only prepare for themselves.
func (g *group) prepareLater() {
	for _, t := range g.txns {
		g.q.prepareLater(t.ctx, t)
	}
}
