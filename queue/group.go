package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"

	"github.com/leasehold/leasehold/internal/broken"
	"github.com/leasehold/leasehold/model"
)

// Group commit (DESIGN.md, SQLite rules). Concurrent write operations of
// one process share one transaction, each inside its own savepoint, so ten
// workers finishing at once pay one commit (one fsync under FULL), not ten.
//
// There is no writer goroutine: the callers take turns leading. A caller
// whose operation finds no group running leads: it runs its own operation
// at once, and then, group after group, whatever queued meanwhile, until
// its own is answered (see await). The leader never sleeps and reads no
// clock to decide what to group: a group is what queued while the
// previous group ran and committed, up to GroupMax operations. The queue
// holds at most GroupQueueMax; a caller past that waits for room
// (back-pressure), or for its context.
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
	// GroupQueueMax bounds the operations waiting for a group.
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
	// completes, set for a completion, lets a group of several complete
	// it set-wise with the others (batch.go); fn is then what completes
	// builds, run whenever the member runs alone.
	completes *completion
	// submits, set for a Submit, lets a store run it in one statement
	// when it is alone in its group (submitone.go); fn runs it otherwise.
	submits *submission
	err     error
	done    chan struct{} // closed once err is final
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
	model.ErrBadIDSource,
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
	return q.writeOp(ctx, op, fn, nil, nil)
}

// writeOp is write for an operation that may be a completion (c, which
// fn must run whole: see completion.run) or a submit (s, which fn runs
// whole too: see submitone.go).
func (q *Queue) writeOp(ctx context.Context, op string, fn func(t *txn) error, c *completion, s *submission) error {
	err := q.writeGrouped(ctx, op, fn, c, s)
	q.commits.broadcast() // wake WaitEvents (watch.go)
	if err != nil {
		q.health.noteFailure(err)
	}
	return err
}

// writeOpAlone is writeOp for an operation that must run in a
// transaction of its own, not in a group with others (see
// writeRetryingOp): it takes a lane's lead, so it runs beside the other
// lanes' groups and Close waits for it, and runs as a group of one.
func (q *Queue) writeOpAlone(ctx context.Context, op string, fn func(t *txn) error, c *completion, s *submission) error {
	err := q.writeSolo(ctx, op, fn, c, s)
	q.commits.broadcast() // wake WaitEvents (watch.go)
	if err != nil {
		q.health.noteFailure(err)
	}
	return err
}

func (q *Queue) writeSolo(ctx context.Context, op string, fn func(t *txn) error, c *completion, s *submission) error {
	if err := q.checkOpen(op); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("queue: %s: %w", op, err)
	}
	if c != nil && c.next != nil {
		*c.next.out = nil
	}
	m := &member{caller: ctx, ctx: context.WithoutCancel(ctx), op: op, fn: fn, completes: c, submits: s, done: make(chan struct{})}
	if q.ops == nil {
		q.runGroup([]*member{m})
		return m.err
	}
	select {
	case q.lead <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("queue: %s: %w", op, ctx.Err())
	case <-q.closing:
		return fmt.Errorf("queue: %s: %w", op, ErrClosed)
	}
	defer func() { <-q.lead }()
	select {
	case <-q.closing:
		return fmt.Errorf("queue: %s: %w", op, ErrClosed)
	default:
	}
	q.runGroup([]*member{m})
	return m.err
}

func (q *Queue) writeGrouped(ctx context.Context, op string, fn func(t *txn) error, c *completion, s *submission) error {
	if err := q.checkOpen(op); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("queue: %s: %w", op, err)
	}
	if c != nil && c.next != nil {
		*c.next.out = nil // this run's claims only (a run after a conflict starts again)
	}
	m := &member{caller: ctx, ctx: context.WithoutCancel(ctx), op: op, fn: fn, completes: c, submits: s, done: make(chan struct{})}
	if h := q.hold; h != nil {
		return h.await(m)
	}
	if q.ops == nil {
		q.runGroup([]*member{m})
		return m.err
	}
	// The lead is free: run m at once, with whatever is queued, without
	// queueing it.
	select {
	case q.lead <- struct{}{}:
		select {
		case <-q.closing:
			<-q.lead
			return fmt.Errorf("queue: %s: %w", op, ErrClosed)
		default:
		}
		q.settle()
		q.runGroup(q.gather(m))
		<-q.lead
		return m.err
	default:
	}
	select {
	case q.ops <- m:
	case <-ctx.Done():
		return fmt.Errorf("queue: %s: %w", op, ctx.Err())
	case <-q.closing:
		return fmt.Errorf("queue: %s: %w", op, ErrClosed)
	}
	return q.await(m)
}

// await waits for m's group and returns m's outcome, leading groups
// itself whenever no one else does: the caller that takes the lead runs
// what is queued, group after group, until its own operation is answered,
// then hands the lead on (to whichever waiting caller takes it). So an
// operation arriving at an idle queue runs on its caller's goroutine at
// once, and operations arriving while a group commits form the next group.
func (q *Queue) await(m *member) error {
	for {
		// Once Close has begun, no new group starts: Close takes the lead
		// for good and answers what is queued.
		select {
		case <-m.done:
			return m.err
		case <-q.closing:
			select {
			case <-m.done:
				return m.err
			default:
				return notApplied(fmt.Errorf("queue: %s: %w", m.op, ErrClosed))
			}
		default:
		}
		select {
		case <-m.done:
			return m.err
		case <-q.closing:
		case q.lead <- struct{}{}:
			select {
			case <-q.closing:
				<-q.lead // Close is waiting for the lead
				continue
			default:
			}
			q.leadUntil(m)
			<-q.lead
			<-m.done // answered, or in another lane's group
			return m.err
		}
	}
}

// leadUntil runs groups of what is queued until m is answered, or until
// the queue is empty while m is not: m is then in the group of another
// lane's leader, which answers it.
func (q *Queue) leadUntil(m *member) {
	for {
		select {
		case <-m.done:
			return
		default:
		}
		select {
		case first := <-q.ops:
			q.settle()
			q.runGroup(q.gather(first))
		default:
			if cap(q.lead) == 1 {
				panic("queue: group leader found its own operation neither queued nor answered")
			}
			return
		}
	}
}

// settleYields is how many yields in a row without a new operation end
// a leader's settle. Fewer end it while the slots a group has just
// answered are still on their way back, and they wait a whole commit for
// the next group; many more spend the processor the slots need
// (docs/PERF.md has the counts measured). A yield with nothing else to run
// returns at once, so an operation alone at an idle queue waits some
// microseconds more.
const settleYields = 64

// settle yields the processor before a leader gathers its group, for as
// long as operations keep arriving while it yields (up to GroupMax): the
// callers the last group just answered (a worker's slots, each about to
// write again) get to queue, and join this group instead of waiting for
// the next commit. It ends after settleYields yields in a row that saw no
// new operation. It is no sleep and reads no clock, and one that arrives
// later joins the next group as before.
func (q *Queue) settle() {
	idle := 0
	for queued := len(q.ops); queued < GroupMax && idle < settleYields; {
		runtime.Gosched()
		if now := len(q.ops); now != queued {
			queued, idle = now, 0
			continue
		}
		idle++
	}
}

// startGroups makes the queue group its writes, with up to lanes groups
// running at once (each a leader of its own: lead holds a token per
// leader). SQLite, one writer at a time, has one lane; PostgreSQL several,
// so that one group's statements do not wait for another's round trips.
func (q *Queue) startGroups(lanes int) {
	q.ops = make(chan *member, GroupQueueMax)
	q.lead = make(chan struct{}, max(lanes, 1))
	q.closing = make(chan struct{})
}

// stopGroups, for Close, stops new groups from starting, waits for those
// running, takes every lead for good and answers what is still queued with
// ErrClosed.
func (q *Queue) stopGroups() {
	close(q.closing)
	for range cap(q.lead) {
		q.lead <- struct{}{}
	}
	for {
		select {
		case m := <-q.ops:
			m.finish(notApplied(fmt.Errorf("queue: %s: %w", m.op, ErrClosed)))
		default:
			return
		}
	}
}

// groupStats counts the groups a queue has run, and how many of each size
// (sizes[k] counts the groups of k operations; sizes[0] is unused), and
// the completions its batch statements matched (batch.go).
type groupStats struct {
	groups, ops, largest atomic.Int64
	sizes                [GroupMax + 1]atomic.Int64
	batched              atomic.Int64
	// merged counts the claims made by merged store claims (batch.go).
	merged atomic.Int64
	// fused counts the groups run as one statement, and fallbacks those
	// whose statement matched not every claim and so ran the usual way
	// (fused.go).
	fused, fallbacks atomic.Int64
	// submitsFused counts the lone submits run as one statement
	// (submitone.go).
	submitsFused atomic.Int64
}

func (s *groupStats) add(size int) {
	s.groups.Add(1)
	s.ops.Add(int64(size))
	s.sizes[min(size, GroupMax)].Add(1)
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

// GroupSizes returns how many group commits of each size the queue has run:
// element k counts the groups that carried k write operations (element 0
// is always zero), up to GroupMax.
func (q *Queue) GroupSizes() []int64 {
	out := make([]int64, GroupMax+1)
	for k := range out {
		out[k] = q.stats.sizes[k].Load()
	}
	return out
}

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
	q.truncateLogAfterDiskFull()
	if q.runFused(live) || q.runSubmitFused(live) {
		return
	}
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
		if broken.On(broken.GroupUnknownMixed) && len(live) > 1 {
			first := live[0]
			q.runGroup([]*member{{caller: context.Background(), ctx: first.ctx, op: first.op, fn: first.fn,
				completes: first.completes, submits: first.submits, done: make(chan struct{})}})
		}
		for i, m := range live {
			if g.alone[i] {
				m.finish(g.results[i]) // rolled back to its savepoint: refused either way
				continue
			}
			m.finish(outcomeUnknown(fmt.Errorf("queue: %s: commit: %w", m.op, err)))
		}
		return
	}
	if g.madeReady() {
		q.readyCommitted() // wake idle workers (wake.go)
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
	// pending are events made but not inserted yet (batch.go: flush).
	pending [][12]any
}

// run runs every member; false means the group was rolled back and every
// member answered. Its completions are batched first (batch.go).
func (g *group) run() bool {
	local := map[string]*sql.Stmt{}
	for _, m := range g.members {
		g.txns = append(g.txns, &txn{q: g.q, ctx: m.ctx, tx: g.tx, now: g.q.now(), local: local})
	}
	parts, ok := g.parts()
	if !ok {
		return false
	}
	savepoints := len(g.members) > 1
	for i, p := range parts {
		if p.fn == nil {
			continue
		}
		if p.bare {
			g.txns[i].buffer = &g.pending
		} else if err := g.flush(); err != nil {
			g.abort(err)
			return false
		}
		if !g.runPart(i, p, savepoints && !p.bare) {
			return false
		}
		g.txns[i].buffer = nil
	}
	if err := g.flush(); err != nil {
		g.abort(err)
		return false
	}
	return true
}

// runPart runs member i's part, inside a savepoint of its own when
// savepoint is set; false means the group was rolled back and every
// member answered.
func (g *group) runPart(i int, p part, savepoint bool) bool {
	t := g.txns[i]
	if savepoint {
		if _, err := t.exec(qGroupSavepoint); err != nil {
			g.rollback(err, i)
			return false
		}
	}
	ferr := p.fn(t)
	var keep committed
	switch {
	case ferr == nil:
	case errors.As(ferr, &keep) && savepoint && broken.On(broken.GroupRefusalLosesRecord):
		if _, err := t.exec(qGroupRollback); err != nil {
			g.rollback(err, i)
			return false
		}
		g.results[i], g.alone[i] = keep.err, true
	case errors.As(ferr, &keep):
		g.results[i] = keep.err
	case savepoint && isRefusal(ferr):
		if _, err := t.exec(qGroupRollback); err != nil {
			g.rollback(err, i)
			return false
		}
		g.results[i], g.alone[i] = ferr, true
	case savepoint && admissionBusy(ferr):
		// Its admission could not wait in a transaction that had written:
		// rolled back alone, and run again in a transaction of its own
		// (writeRetryingOp); the rest of the group goes on.
		if _, err := t.exec(qGroupRollback); err != nil {
			g.rollback(err, i)
			return false
		}
		g.results[i], g.alone[i] = notApplied(fmt.Errorf("queue: %s: %w", g.members[i].op, ferr)), true
	default:
		g.rollback(ferr, append([]int{i}, p.with...)...)
		return false
	}
	return true
}

// sqlStater is a storage error that carries a SQLSTATE (PostgreSQL's),
// which a conflict's refusal names.
type sqlStater interface{ SQLState() string }

// rollback rolls the group back after the failed members (one, or those
// whose claims one merged claim made: batch.go) failed with err (a
// refusal in a group of one, or a statement error) and answers every
// member: the failed with err, the others ErrNotApplied.
func (g *group) rollback(err error, failed ...int) {
	rerr := g.tx.Rollback()
	if rerr != nil && errors.Is(rerr, sql.ErrTxDone) {
		rerr = nil
	}
	var cause sqlStater
	conflict := !isRefusal(err) && ClassOf(err) == ClassConflict && errors.As(err, &cause)
	for i, m := range g.members {
		if !slices.Contains(failed, i) {
			other := fmt.Errorf("queue: %s: another write in its group failed in storage; rolled back", m.op)
			if conflict {
				other = groupConflict{op: m.op, state: cause.SQLState()}
			}
			m.finish(notApplied(other))
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

// groupConflict is what the other members of a group are told when the
// database rolled the group back as a conflict (a deadlock or a
// serialization failure, on PostgreSQL when another machine's writers
// lock the same rows): it carries the failure's SQLSTATE, and so its
// class, ClassConflict, so that writeRetrying runs the member again; the
// failure's own text (which may name another member's values) stays out.
type groupConflict struct {
	op    string
	state string
}

func (e groupConflict) Error() string {
	return fmt.Sprintf("queue: %s: its group was rolled back as a conflict (SQLSTATE %s)", e.op, e.state)
}

// SQLState is the SQLSTATE of the conflict that rolled the group back.
func (e groupConflict) SQLState() string { return e.state }

// prepareLater prepares on the database the statements the group's
// transactions could only prepare for themselves.
func (g *group) prepareLater() {
	for _, t := range g.txns {
		g.q.prepareLater(t.ctx, t)
	}
}
