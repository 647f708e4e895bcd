package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/worker"
)

// The oracle's checks, as reported in model.Violation.Invariant: the
// reference model and the real queue disagree on an operation's outcome,
// on what it returned, on the events it appended, on the rows of the tasks
// it touched, or on the effects ledger.
const (
	InvOracleOutcome = "oracle-outcome"
	InvOracleReturns = "oracle-returns"
	InvOracleEvents  = "oracle-events"
	InvOracleRows    = "oracle-rows"
	InvOracleEffects = "oracle-effects"
)

// lockstep is the world's queue: every operation the world performs goes
// to the real queue and then to model.Reference, and the two must agree on
// the outcome (accepted, or refused for the same reason), on what the
// operation returned, on the events it appended, on the rows of the tasks
// it touched and on their effects ledger. A storage fault at COMMIT makes
// the outcome unknown: the real state must then match one of the two
// successors (applied or not), and the reference carries on from that
// one. A storage fault before COMMIT must leave the operation unapplied.
//
// Reads, and every method lockstep does not define, go to the real queue
// alone (it is embedded). It keeps the real rows of every task as last
// read (the mirror), which the stated invariants (invariants.go) read.
// With no reference (the oracle off) every write goes to the queue alone.
type lockstep struct {
	*queue.Queue
	ref     *model.Reference
	ctx     context.Context
	storage *faults.Storage
	clock   clockwork.Clock
	report  func(kind, taskID, detail string)
	// limitsChanged is told the limits in force after every change.
	limitsChanged func(model.Limits, []model.UserLimit)
	// cover is the world's coverage map, for the paths writes take.
	cover *recorder
	// served holds, by worker name, the kinds each worker serves (nil:
	// every worker serves every kind), for InvClaimKinds.
	served map[string][]string

	lastSeq int64                 // real events compared so far
	refSeen int64                 // the last reference event compared (its number)
	rows    map[string]model.Task // the real row of every task, as last read
	order   []string              // task IDs in submission order
	// gone holds the last rows of the tasks a prune removed (forget), for
	// the world's reads of its tasks' ends.
	gone   map[string]model.Task
	limits model.Limits // the limits in force
	users  map[string]model.UserLimit
	watch  map[claimKey]*cancelSeen // claims whose worker saw cancellation requested
	ops    int                      // operations compared
	// unchecked holds the real events read since the checker last took
	// them (takeEvents), so that it need not read them again.
	unchecked []model.Event
	// held, set while the world holds the queue's writes for a group
	// (oracle_group.go), pairs each held write with its operation.
	held *heldGroup
}

// takeEvents returns the real events read since the last call.
func (l *lockstep) takeEvents() []model.Event {
	out := l.unchecked
	l.unchecked = nil
	return out
}

// row returns the real row of task id as last read, reading it when the
// mirror does not have it (with the oracle off it has none).
func (l *lockstep) row(id string) (model.Task, error) {
	if t, ok := l.rows[id]; ok {
		return t, nil
	}
	if t, ok := l.gone[id]; ok {
		return t, nil
	}
	var t model.Task
	var err error
	l.storage.Bypass(func() { t, err = l.Queue.Task(l.ctx, id) })
	return t, err
}

// newLockstep returns the lockstep over q, with a reference whose sources
// derive from seed as the queue's do, or none when oracle is false.
func newLockstep(ctx context.Context, q *queue.Queue, storage *faults.Storage, clock clockwork.Clock, seed uint64, oracle bool) (*lockstep, error) {
	l := &lockstep{Queue: q, ctx: ctx, storage: storage, clock: clock, rows: map[string]model.Task{}, cover: &recorder{},
		users: map[string]model.UserLimit{}, watch: map[claimKey]*cancelSeen{}, report: func(string, string, string) {},
		limitsChanged: func(model.Limits, []model.UserLimit) {}}
	limits, _, err := q.Limits(ctx)
	if err != nil {
		return nil, fmt.Errorf("sim: read limits: %w", err)
	}
	l.limits = limits
	if oracle {
		l.ref = model.NewReference(model.ReferenceOptions{Clock: clock, IDs: model.NewDerivedIDsAt(subSeed(seed, streamIDs), clock.Now),
			Rand: model.NewDerivedRand(subSeed(seed, streamJitter)), Limits: &limits})
	}
	return l, nil
}

// op is one operation as lockstep runs it on both sides.
type op[T any] struct {
	name    string   // the operation and its arguments, for reports
	targets []string // the tasks it names
	effects bool     // it may change the effects ledger without an effect event
	real    func() (T, error)
	ref     func(r *model.Reference) (T, error)
	same    func(real, ref T) string // "" when the returned values agree; nil: nothing to compare
	// check, when set, runs after the real call with the mirror still as
	// it was before the operation, and returns what to run once the real
	// rows are in the mirror: the stated invariants (invariants.go).
	check func(res T, err error) (after func())
	// completes and next, set for a completion (Complete, and
	// CompleteAndClaim with its claim), let a group's reference complete
	// it set-wise with the group's others (oracle_group.go).
	completes *model.Claim
	next      *model.ClaimRequest
}

// run performs o on the real queue and, with the oracle on, on the
// reference, and compares them.
func run[T any](l *lockstep, o op[T]) (T, error) {
	if l.held != nil && l.ref != nil {
		return runHeld(l, o)
	}
	commits := l.storage.Commits()
	res, err := o.real()
	if l.ref == nil {
		return res, err
	}
	return compareAlone(l, o, res, err, commits)
}

// compareAlone compares o, run alone on the real queue with the outcome
// res, err (commits counted the real commits before it), with the
// reference.
func compareAlone[T any](l *lockstep, o op[T], res T, err error, commits int64) (T, error) {
	l.ops++
	changed := l.storage.Commits() != commits
	var after func()
	if o.check != nil {
		after = o.check(res, err)
	}
	storage := isStorage(err)
	switch {
	case storage && !atCommit(err):
		// Refused before COMMIT: nothing may have changed.
		l.settle(o, l.ref, nil, changed)
	case storage:
		before := l.ref.Clone()
		_, _ = o.ref(l.ref)
		l.settle(o, l.ref, before, changed)
	default:
		refRes, refErr := o.ref(l.ref)
		if real, ref := errorClass(err), errorClass(refErr); real != ref {
			l.report(InvOracleOutcome, first(o.targets), fmt.Sprintf("%s: queue %s (%v), reference %s (%v)%s",
				o.name, real, err, ref, refErr, l.where()))
		} else if err == nil && o.same != nil {
			if d := o.same(res, refRes); d != "" {
				l.report(InvOracleReturns, first(o.targets), fmt.Sprintf("%s returned %s%s", o.name, d, l.where()))
			}
		}
		l.settle(o, l.ref, nil, changed)
	}
	if after != nil {
		after()
	}
	return res, err
}

// isStorage reports whether err is a storage error: injected, or a group's
// "not applied" or "outcome unknown".
func isStorage(err error) bool {
	return errors.Is(err, faults.ErrInjected) || errors.Is(err, queue.ErrNotApplied) || errors.Is(err, queue.ErrOutcomeUnknown)
}

// where names the operation's place in the run, for reports.
func (l *lockstep) where() string {
	return fmt.Sprintf(" (operation %d at +%dms)", l.ops, l.clock.Since(Epoch).Milliseconds())
}

func first(ids []string) string {
	if len(ids) > 0 {
		return ids[0]
	}
	return ""
}

// atCommit reports whether an injected storage error hit the COMMIT, after
// which the transaction may have been applied: the queue says the outcome
// is unknown, or the fault names the commit.
func atCommit(err error) bool {
	if errors.Is(err, queue.ErrOutcomeUnknown) {
		return true
	}
	if errors.Is(err, queue.ErrNotApplied) {
		return false
	}
	var fe *faults.Error
	return errors.As(err, &fe) && fe.Op == "commit"
}

// errorClasses are the refusal classes the two sides must agree on.
var errorClasses = []struct {
	name string
	err  error
}{
	{"stale-claim", model.ErrStaleClaim},
	{"idempotency-conflict", model.ErrIdempotencyConflict},
	{"version-mismatch", model.ErrVersionMismatch},
	{"step-conflict", model.ErrStepConflict},
	{"effect-receipted", model.ErrEffectReceipted},
	{"queue-full", model.ErrQueueFull},
	{"not-allowed", model.ErrInvalidTransition},
	{"bad-input", model.ErrInvalidInput},
	{"budget-exhausted", model.ErrBudgetExhausted},
	{"steps-exhausted", model.ErrStepsExhausted},
	{"deadline-exceeded", model.ErrDeadlineExceeded},
	{"not-found", model.ErrNotFound},
	{"storage", faults.ErrInjected},
	{"storage", queue.ErrNotApplied},
	{"storage", queue.ErrOutcomeUnknown},
}

// errorClass names err's class: "accepted" for nil, "other" for an error
// of no known class.
func errorClass(err error) string {
	if err == nil {
		return "accepted"
	}
	for _, c := range errorClasses {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "other"
}

// realView is what the real queue shows after an operation: the events it
// appended and the rows and ledgers of the tasks concerned.
type realView struct {
	events  []model.Event
	rows    map[string]model.Task // absent: no such task
	effects map[string][]model.Effect
}

// settle compares the real queue's state after operation o with the
// reference ref (and, when before is set, with the unapplied successor
// before, adopting whichever matches), then takes the real rows into the
// mirror. changed says whether the real queue committed anything.
func (l *lockstep) settle(o opInfo, ref, before *model.Reference, changed bool) {
	ids := append([]string(nil), o.taskIDs()...)
	refEvents := ref.EventsSince(l.refSeen)
	ids = appendTasks(ids, refEvents)
	var beforeEvents []model.Event
	if before != nil {
		beforeEvents = before.EventsSince(l.refSeen)
		ids = appendTasks(ids, beforeEvents)
	}
	view, err := l.read(ids, changed, o.touchesEffects() || hasEffectEvent(refEvents) || hasEffectEvent(beforeEvents))
	if err != nil {
		l.report(InvReadable, "", err.Error())
		return
	}
	kind, detail := l.diff(ref, refEvents, view)
	if kind != "" && before != nil {
		kind2, detail2 := l.diff(before, beforeEvents, view)
		if kind2 == "" {
			l.ref = before
			kind = ""
		} else {
			detail = fmt.Sprintf("matches neither successor of an unknown commit: applied: %s; not applied: %s", detail, detail2)
		}
	}
	if kind != "" {
		l.report(kind, first(ids), fmt.Sprintf("%s: %s%s", o.label(), detail, l.where()))
	}
	if len(view.events) > 0 {
		l.lastSeq = view.events[len(view.events)-1].Seq
		l.unchecked = append(l.unchecked, view.events...)
	}
	l.refSeen = l.ref.LastEventSeq()
	for id, t := range view.rows {
		if _, known := l.rows[id]; !known {
			l.order = append(l.order, id)
		}
		l.rows[id] = t
	}
	l.observe(view.events)
}

// opInfo is what settle needs of an operation, whatever it returns.
type opInfo interface {
	taskIDs() []string
	touchesEffects() bool
	label() string
}

func (o op[T]) taskIDs() []string    { return o.targets }
func (o op[T]) touchesEffects() bool { return o.effects }
func (o op[T]) label() string        { return o.name }

func appendTasks(ids []string, events []model.Event) []string {
	for _, e := range events {
		if e.TaskID != "" && !hasTask(ids, e.TaskID) {
			ids = append(ids, e.TaskID)
		}
	}
	return ids
}

func hasTask(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func hasEffectEvent(events []model.Event) bool {
	for _, e := range events {
		switch e.Kind {
		case model.EventEffectIntent, model.EventEffectReceipt, model.EventEffectSettled, model.EventUncertain:
			return true
		}
	}
	return false
}

// read reads the real queue, around the fault plan: the events after the
// last compared, then the rows (and, with effects, the ledgers) of ids and
// of the tasks those events name. When nothing was committed the events
// are none and the rows are the mirror's.
func (l *lockstep) read(ids []string, changed, effects bool) (realView, error) {
	view := realView{rows: map[string]model.Task{}}
	var err error
	l.storage.Bypass(func() {
		if changed {
			if view.events, err = l.Queue.EventsAfter(l.ctx, l.lastSeq, model.ListLimitMax); err != nil {
				return
			}
			ids = appendTasks(ids, view.events)
		}
		for _, id := range ids {
			if !changed {
				if t, ok := l.rows[id]; ok {
					view.rows[id] = t
				}
			} else {
				t, terr := l.Queue.Task(l.ctx, id)
				switch {
				case terr == nil:
					view.rows[id] = t
				case !errors.Is(terr, model.ErrNotFound):
					err = terr
					return
				}
			}
			if effects {
				if view.effects == nil {
					view.effects = map[string][]model.Effect{}
				}
				if view.effects[id], err = l.Queue.Effects(l.ctx, id); err != nil {
					return
				}
			}
		}
	})
	return view, err
}

// diff compares the real view with the reference ref, whose events since
// the last comparison are refEvents; it returns the check that fails and
// both sides' records, or "".
func (l *lockstep) diff(ref *model.Reference, refEvents []model.Event, view realView) (kind, detail string) {
	if len(view.events) != len(refEvents) {
		return InvOracleEvents, fmt.Sprintf("queue appended %d events %s, reference %d %s",
			len(view.events), eventsText(view.events), len(refEvents), eventsText(refEvents))
	}
	for i := range refEvents {
		if keyOf(view.events[i]) != keyOf(refEvents[i]) {
			return InvOracleEvents, fmt.Sprintf("event %d of the operation: queue %s, reference %s", i+1,
				eventText(view.events[i]), eventText(refEvents[i]))
		}
	}
	for _, id := range sortedKeys(view.rows) {
		real, inReal := view.rows[id]
		want, err := ref.Task(l.ctx, id)
		inRef := err == nil
		switch {
		case inReal != inRef:
			return InvOracleRows, fmt.Sprintf("task %s exists in the queue: %t, in the reference: %t", id, inReal, inRef)
		case !inReal:
			continue
		}
		if d := rowDiff(real, want); d != "" {
			return InvOracleRows, fmt.Sprintf("task %s: %s", id, d)
		}
	}
	for _, id := range sortedKeys(view.rows) {
		got, read := view.effects[id]
		if !read {
			continue
		}
		if d := effectsDiff(got, ref.EffectsOf(id)); d != "" {
			return InvOracleEffects, fmt.Sprintf("task %s ledger: %s", id, d)
		}
	}
	return "", ""
}

// sortedKeys returns the task IDs of rows in order, so reports are
// deterministic.
func sortedKeys(rows map[string]model.Task) []string {
	ids := make([]string, 0, len(rows))
	for id := range rows {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// eventKey is what the two sides must agree on in an event: everything
// but the sequence number (a rolled-back transaction may burn one).
type eventKey struct {
	taskID, opID, actor, detail, scope string
	kind                               model.EventKind
	attempt                            int
	fence, at                          int64
	from, to                           model.State
	reason                             model.Reason
}

func keyOf(e model.Event) eventKey {
	return eventKey{taskID: e.TaskID, opID: e.OpID, actor: e.Actor, detail: e.Detail, scope: e.Scope, kind: e.Kind,
		attempt: e.Attempt, fence: e.Fence, at: model.Millis(e.At), from: e.From, to: e.To, reason: e.Reason}
}

// eventText renders an event as the comparison sees it.
func eventText(e model.Event) string {
	return fmt.Sprintf("{%s task=%s attempt=%d fence=%d op=%s %s->%s reason=%s actor=%s at=%d detail=%q scope=%s}",
		e.Kind, e.TaskID, e.Attempt, e.Fence, e.OpID, e.From, e.To, e.Reason, e.Actor, model.Millis(e.At), e.Detail, e.Scope)
}

func eventsText(events []model.Event) string {
	parts := make([]string, len(events))
	for i, e := range events {
		parts[i] = eventText(e)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// rowText renders the fields of a task row the two sides must agree on.
func rowText(t model.Task) string {
	return fmt.Sprintf("state=%s reason=%s version=%d attempt=%d charged=%d failed=%d attempts_max=%d cost=%d/%d steps=%d/%d "+
		"cancel_requested=%t cancelled_by=%s approved_by=%s gate=%s approval_version=%d run_at=%d deadline=%d "+
		"owner=%s lease_until=%d priority=%d user=%s key=%s schedule=%s/%d checkpoint=%q last_error=%q "+
		"queued_at=%d claimed_at=%d heartbeat_at=%d created_at=%d updated_at=%d hash=%s payload=%q",
		t.State, t.Reason, t.Version, t.Attempt, t.AttemptsCharged, t.AttemptsFailed, t.AttemptsMax, t.CostUsed, t.CostBudget,
		t.StepsUsed, t.StepsMax, t.CancelRequested, t.CancelledBy, t.ApprovedBy, t.ApprovalGate, t.ApprovalVersion,
		model.Millis(t.RunAt), model.Millis(t.Deadline), t.Owner, model.Millis(t.LeaseUntil), t.Priority, t.User, t.Key,
		t.ScheduleID, t.ScheduleRun, t.Checkpoint, t.LastError, model.Millis(t.QueuedAt), model.Millis(t.ClaimedAt),
		model.Millis(t.HeartbeatAt), model.Millis(t.CreatedAt), model.Millis(t.UpdatedAt), t.RequestHash, t.Payload)
}

// rowDiff returns both rows when they disagree, or "". Every field but
// Seq (a rolled-back insert may burn one) is compared, times at the
// millisecond the queue stores.
func rowDiff(real, ref model.Task) string {
	if rowKey(real) == rowKey(ref) {
		return ""
	}
	return "queue {" + rowText(real) + "}, reference {" + rowText(ref) + "}"
}

// rowKey returns t without its sequence number and with its times as
// milliseconds (a time's location pointer may differ between equal
// instants).
func rowKey(t model.Task) model.Task {
	t.Seq = 0
	for _, at := range []*time.Time{&t.RunAt, &t.Deadline, &t.LeaseUntil, &t.HeartbeatAt, &t.ClaimedAt, &t.QueuedAt, &t.CreatedAt, &t.UpdatedAt} {
		*at = time.UnixMilli(model.Millis(*at))
	}
	return t
}

func effectText(e model.Effect) string {
	return fmt.Sprintf("{%s step=%d intent=%d@%d receipt=%d@%d by=%s result=%q}", e.OpID, e.Step, e.IntentFence,
		model.Millis(e.IntentAt), e.ReceiptFence, model.Millis(e.ReceiptAt), e.ReceiptBy, e.Result)
}

func effectsDiff(real, ref []model.Effect) string {
	a, b := make([]string, len(real)), make([]string, len(ref))
	for i, e := range real {
		a[i] = effectText(e)
	}
	for i, e := range ref {
		b[i] = effectText(e)
	}
	x, y := strings.Join(a, " "), strings.Join(b, " ")
	if x == y {
		return ""
	}
	return "queue [" + x + "], reference [" + y + "]"
}

// final compares every row, every ledger row and the whole audit trail of
// the two sides: what per-operation comparisons of touched tasks could
// miss.
func (l *lockstep) final() {
	if l.ref == nil {
		return
	}
	var tasks []model.Task
	var effects []model.Effect
	var events []model.Event
	var err error
	l.storage.Bypass(func() {
		if tasks, err = l.Queue.List(l.ctx, model.ListFilter{Limit: model.ListLimitMax}); err != nil {
			return
		}
		if effects, err = l.Queue.Effects(l.ctx, ""); err != nil {
			return
		}
		events, err = l.Queue.Events(l.ctx, "")
	})
	if err != nil {
		l.report(InvReadable, "", err.Error())
		return
	}
	if len(events) != l.ref.EventCount() {
		l.report(InvOracleEvents, "", fmt.Sprintf("at the end the queue's audit trail holds %d events, the reference's %d", len(events), l.ref.EventCount()))
		return
	}
	want, _ := l.ref.List(l.ctx, model.ListFilter{Limit: model.ListLimitMax})
	if len(tasks) != len(want) {
		l.report(InvOracleRows, "", fmt.Sprintf("at the end the queue holds %d tasks, the reference %d", len(tasks), len(want)))
		return
	}
	for i := range tasks {
		if tasks[i].ID != want[i].ID {
			l.report(InvOracleRows, tasks[i].ID, fmt.Sprintf("at the end task %d is %s in the queue, %s in the reference", i, tasks[i].ID, want[i].ID))
			return
		}
		if d := rowDiff(tasks[i], want[i]); d != "" {
			l.report(InvOracleRows, tasks[i].ID, "at the end: "+d)
			return
		}
	}
	wantEffects, _ := l.ref.Effects(l.ctx, "")
	if d := effectsDiff(effects, wantEffects); d != "" {
		l.report(InvOracleEffects, "", "at the end: "+d)
		return
	}
	l.metricsAgree("at the end")
}

// metricsAgree compares the two sides' metrics (at the end, and after
// each prune, whose removed tasks leave their states' counts for the
// pruned ones): depths, outcome counts and the queue-wait and run-time
// distributions, which the queue keeps by triggers and the reference by
// counting.
func (l *lockstep) metricsAgree(when string) {
	var m model.Metrics
	var err error
	l.storage.Bypass(func() { m, err = l.Queue.Metrics(l.ctx) })
	if err != nil {
		l.report(InvReadable, "", err.Error())
		return
	}
	want, _ := l.ref.Metrics(l.ctx)
	if a, b := metricsText(m), metricsText(want); a != b {
		l.report(InvOracleReturns, "", "metrics "+when+": queue {"+a+"}, reference {"+b+"}")
		return
	}
	if !m.Reconciles() {
		l.report(InvOracleReturns, "", "metrics "+when+" do not reconcile: the depths and the tasks pruned are not the tasks submitted: {"+
			metricsText(m)+"}")
	}
}

func metricsText(m model.Metrics) string {
	var depth strings.Builder
	for _, s := range model.States() {
		fmt.Fprintf(&depth, "%s=%d ", s, m.Depth[s])
	}
	var byKind strings.Builder
	for _, kind := range slices.Sorted(maps.Keys(m.ByKind)) {
		fmt.Fprintf(&byKind, " kind[%s]=%+v", kind, m.ByKind[kind])
	}
	return fmt.Sprintf("depth %soldest=%s submitted=%d completions=%d failures=%d cancellations=%d retries=%d "+
		"lease_expiries=%d stale_writes=%d budget_exhausted=%d reviews=%d pruned=%d queue_wait=%v run_time=%v%s",
		depth.String(), m.OldestQueuedAge, m.Submitted, m.Completions, m.Failures, m.Cancellations, m.Retries,
		m.LeaseExpiries, m.StaleWrites, m.BudgetExhausted, m.Reviews, m.Pruned, m.QueueWait, m.RunTime, byKind.String())
}

// The worker-facing writes. Each simulated worker's queue is a
// faults.Queue over the lockstep, so duplicated and late deliveries are
// compared as well.

// The worker's Queue and the queue's WorkerWrites are one method set: each
// satisfies the other, so neither can drift.
var (
	_ worker.Queue       = (*lockstep)(nil)
	_ queue.WorkerWrites = worker.Queue(nil)
	_ worker.Queue       = queue.WorkerWrites(nil)
)

func claimName(write string, c model.Claim) string {
	return fmt.Sprintf("%s task=%s fence=%d owner=%s", write, c.TaskID, c.Fence, c.Owner)
}

// Claim claims on both sides; they must claim the same tasks in the same
// order under the same fences and leases.
func (l *lockstep) Claim(ctx context.Context, req model.ClaimRequest) ([]model.Claimed, error) {
	return run(l, op[[]model.Claimed]{name: fmt.Sprintf("claim worker=%s max=%d", req.Worker, req.Max),
		real:  func() ([]model.Claimed, error) { return l.Queue.Claim(ctx, req) },
		ref:   func(r *model.Reference) ([]model.Claimed, error) { return r.Claim(ctx, req) },
		same:  sameClaims,
		check: func(res []model.Claimed, err error) func() { return l.checkClaim(req, res, err) },
	})
}

// sameClaims compares the claims the two sides made: the same tasks in the
// same order under the same fences and leases, the rows as claimed.
func sameClaims(a, b []model.Claimed) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d tasks from the queue, %d from the reference", len(a), len(b))
	}
	for i := range a {
		if differ(a[i].Claim, b[i].Claim) != "" {
			return fmt.Sprintf("claim %d: queue %+v, reference %+v", i, a[i].Claim, b[i].Claim)
		}
		if d := rowDiff(a[i].Task, b[i].Task); d != "" {
			return fmt.Sprintf("claim %d: %s", i, d)
		}
	}
	return ""
}

// Heartbeat extends the lease on both sides.
func (l *lockstep) Heartbeat(ctx context.Context, c model.Claim, lease time.Duration) (model.HeartbeatResult, error) {
	return run(l, op[model.HeartbeatResult]{name: claimName("heartbeat", c), targets: []string{c.TaskID},
		real: func() (model.HeartbeatResult, error) { return l.Queue.Heartbeat(ctx, c, lease) },
		ref:  func(r *model.Reference) (model.HeartbeatResult, error) { return r.Heartbeat(ctx, c, lease) },
		same: func(a, b model.HeartbeatResult) string { return differ(a, b) },
	})
}

// CompleteStep charges the step on both sides.
func (l *lockstep) CompleteStep(ctx context.Context, w model.StepWrite) (model.StepResult, error) {
	return run(l, op[model.StepResult]{name: claimName("step", w.Claim) + fmt.Sprintf(" index=%d cost=%d", w.Index, w.Cost),
		targets: []string{w.Claim.TaskID},
		real:    func() (model.StepResult, error) { return l.Queue.CompleteStep(ctx, w) },
		ref:     func(r *model.Reference) (model.StepResult, error) { return r.CompleteStep(ctx, w) },
		same:    func(a, b model.StepResult) string { return differ(a, b) },
	})
}

// RecordIntent records the intent on both sides.
func (l *lockstep) RecordIntent(ctx context.Context, c model.Claim, step int) (model.IntentResult, error) {
	return run(l, op[model.IntentResult]{name: claimName("effect_intent", c) + fmt.Sprintf(" step=%d", step),
		targets: []string{c.TaskID}, effects: true,
		real: func() (model.IntentResult, error) { return l.Queue.RecordIntent(ctx, c, step) },
		ref:  func(r *model.Reference) (model.IntentResult, error) { return r.RecordIntent(ctx, c, step) },
		same: func(a, b model.IntentResult) string { return differ(a, b) },
	})
}

// RecordReceipt records the receipt on both sides.
func (l *lockstep) RecordReceipt(ctx context.Context, c model.Claim, opID, result string) error {
	_, err := run(l, op[none]{name: claimName("effect_receipt", c) + " op=" + opID, targets: []string{c.TaskID}, effects: true,
		real: func() (none, error) { return none{}, l.Queue.RecordReceipt(ctx, c, opID, result) },
		ref:  func(r *model.Reference) (none, error) { return none{}, r.RecordReceipt(ctx, c, opID, result) },
	})
	return err
}

// Pause parks the task on both sides.
func (l *lockstep) Pause(ctx context.Context, c model.Claim, step int, gate string) (model.State, error) {
	return run(l, op[model.State]{name: claimName("pause", c) + fmt.Sprintf(" step=%d gate=%s", step, gate),
		targets: []string{c.TaskID},
		real:    func() (model.State, error) { return l.Queue.Pause(ctx, c, step, gate) },
		ref:     func(r *model.Reference) (model.State, error) { return r.Pause(ctx, c, step, gate) },
		same:    func(a, b model.State) string { return differ(a, b) },
		check:   func(_ model.State, err error) func() { return l.noCharge("pause", c.TaskID, err) },
	})
}

// Complete completes the task on both sides.
func (l *lockstep) Complete(ctx context.Context, c model.Claim) error {
	_, err := run(l, op[none]{name: claimName("complete", c), targets: []string{c.TaskID}, completes: &c,
		real: func() (none, error) { return none{}, l.Queue.Complete(ctx, c) },
		ref:  func(r *model.Reference) (none, error) { return none{}, r.Complete(ctx, c) },
	})
	return err
}

// CompleteAndClaim completes the task and claims the next in one write on
// both sides; they must claim the same tasks as Claim must, the claim
// seeing the completion.
func (l *lockstep) CompleteAndClaim(ctx context.Context, c model.Claim, next model.ClaimRequest) ([]model.Claimed, error) {
	user := l.rows[c.TaskID].User
	res, err := run(l, op[[]model.Claimed]{name: claimName("complete_and_claim", c) + fmt.Sprintf(" worker=%s max=%d", next.Worker, next.Max),
		targets: []string{c.TaskID}, completes: &c, next: &next,
		real: func() ([]model.Claimed, error) { return l.Queue.CompleteAndClaim(ctx, c, next) },
		ref:  func(r *model.Reference) ([]model.Claimed, error) { return r.CompleteAndClaim(ctx, c, next) },
		same: sameClaims,
		check: func(res []model.Claimed, err error) func() {
			return l.checkClaimFreeing(next, res, err, user)
		},
	})
	if err == nil {
		l.cover.path(completeClaimPath(len(res)))
	}
	return res, err
}

// Fail fails the claim on both sides.
func (l *lockstep) Fail(ctx context.Context, c model.Claim, f model.Failure) (model.State, error) {
	return run(l, op[model.State]{name: claimName("fail", c) + fmt.Sprintf(" class=%s reason=%s", f.Class, f.Reason),
		targets: []string{c.TaskID}, effects: f.Class == model.Uncertain,
		real: func() (model.State, error) { return l.Queue.Fail(ctx, c, f) },
		ref:  func(r *model.Reference) (model.State, error) { return r.Fail(ctx, c, f) },
		same: func(a, b model.State) string { return differ(a, b) },
	})
}

// Release gives the claim back on both sides.
func (l *lockstep) Release(ctx context.Context, c model.Claim) (model.State, error) {
	return run(l, op[model.State]{name: claimName("release", c), targets: []string{c.TaskID},
		real:  func() (model.State, error) { return l.Queue.Release(ctx, c) },
		ref:   func(r *model.Reference) (model.State, error) { return r.Release(ctx, c) },
		same:  func(a, b model.State) string { return differ(a, b) },
		check: func(_ model.State, err error) func() { return l.noCharge("release", c.TaskID, err) },
	})
}

// AcknowledgeCancel ends the cancelled claim on both sides.
func (l *lockstep) AcknowledgeCancel(ctx context.Context, c model.Claim) error {
	_, err := run(l, op[none]{name: claimName("cancel_ack", c), targets: []string{c.TaskID},
		real: func() (none, error) { return none{}, l.Queue.AcknowledgeCancel(ctx, c) },
		ref:  func(r *model.Reference) (none, error) { return none{}, r.AcknowledgeCancel(ctx, c) },
	})
	return err
}

// The callers', approvers' and operators' writes.

// Submit submits on both sides; they must agree on the task ID and the
// replay flag.
func (l *lockstep) Submit(ctx context.Context, req model.SubmitRequest) (model.SubmitResult, error) {
	var targets []string
	if t, ok := l.byKey(req.User, req.Key); ok {
		targets = []string{t}
	}
	return run(l, op[model.SubmitResult]{name: fmt.Sprintf("submit user=%s key=%s", req.User, req.Key), targets: targets,
		real: func() (model.SubmitResult, error) { return l.Queue.Submit(ctx, req) },
		ref:  func(r *model.Reference) (model.SubmitResult, error) { return r.Submit(ctx, req) },
		same: func(a, b model.SubmitResult) string { return differ(a, b) },
		check: func(res model.SubmitResult, err error) func() {
			if err != nil || res.Replay {
				return nil
			}
			return l.checkDepth("submit")
		},
	})
}

// SubmitMany submits a batch on both sides; they must agree on every
// request's task ID and replay flag, or refuse the batch for the same
// reason.
func (l *lockstep) SubmitMany(ctx context.Context, reqs []model.SubmitRequest) ([]model.SubmitResult, error) {
	var targets []string
	for _, r := range reqs {
		if t, ok := l.byKey(r.User, r.Key); ok && !slices.Contains(targets, t) {
			targets = append(targets, t)
		}
	}
	return run(l, op[[]model.SubmitResult]{name: fmt.Sprintf("submit_many of %d", len(reqs)), targets: targets,
		real: func() ([]model.SubmitResult, error) { return l.Queue.SubmitMany(ctx, reqs) },
		ref:  func(r *model.Reference) ([]model.SubmitResult, error) { return r.SubmitMany(ctx, reqs) },
		same: func(a, b []model.SubmitResult) string { return differ(fmt.Sprint(a), fmt.Sprint(b)) },
		check: func(res []model.SubmitResult, err error) func() {
			if err != nil {
				return nil
			}
			return l.checkDepth("submit_many")
		},
	})
}

// Prune prunes on both sides (the request's defaults filled as the queue
// fills them); they must remove, keep and expire the same.
func (l *lockstep) Prune(ctx context.Context, req queue.PruneRequest) (queue.PruneResult, error) {
	spec := model.PruneSpec{OlderThan: req.OlderThan, KeepKeys: cmp.Or(req.KeepKeys, queue.DefaultKeepKeys),
		Batch: cmp.Or(req.Batch, queue.PruneBatchMax), DryRun: req.DryRun, Actor: req.Actor}
	return run(l, op[queue.PruneResult]{name: "prune " + model.FormatAge(req.OlderThan),
		real: func() (queue.PruneResult, error) { return l.Queue.Prune(ctx, req) },
		ref: func(r *model.Reference) (queue.PruneResult, error) {
			if err := req.Check(); err != nil {
				return queue.PruneResult{}, err
			}
			return r.Prune(ctx, spec)
		},
		same: func(a, b queue.PruneResult) string {
			return differ(model.DetailPruned(req.OlderThan, a)+fmt.Sprintf(" transactions=%d", a.Transactions),
				model.DetailPruned(req.OlderThan, b)+fmt.Sprintf(" transactions=%d", b.Transactions))
		},
		// The counters reconciled after the prune: the pruned tasks
		// counted as pruned, the rest by state, on both sides alike.
		check: func(queue.PruneResult, error) func() { return func() { l.metricsAgree("after a prune") } },
	})
}

// forget moves a task a prune removed out of the mirror: its last row
// stays readable by row, and no operation expects it any more.
func (l *lockstep) forget(id string) {
	t, ok := l.rows[id]
	if !ok {
		return
	}
	if l.gone == nil {
		l.gone = map[string]model.Task{}
	}
	l.gone[id] = t
	delete(l.rows, id)
	l.order = slices.DeleteFunc(l.order, func(x string) bool { return x == id })
}

// byKey finds the mirror's task of user and key.
func (l *lockstep) byKey(user, key string) (string, bool) {
	for _, id := range l.order {
		if t := l.rows[id]; t.User == user && t.Key == key {
			return id, true
		}
	}
	return "", false
}

// Cancel cancels on both sides; they must return the same row.
func (l *lockstep) Cancel(ctx context.Context, id, actor string) (model.Task, error) {
	return run(l, op[model.Task]{name: fmt.Sprintf("cancel task=%s actor=%s", id, actor), targets: []string{id},
		real: func() (model.Task, error) { return l.Queue.Cancel(ctx, id, actor) },
		ref:  func(r *model.Reference) (model.Task, error) { return r.Cancel(ctx, id, actor) },
		same: func(a, b model.Task) string { return rowDiff(a, b) },
	})
}

// Approve approves on both sides.
func (l *lockstep) Approve(ctx context.Context, id string, version int64, actor string) error {
	_, err := run(l, op[none]{name: fmt.Sprintf("approve task=%s version=%d", id, version), targets: []string{id},
		real: func() (none, error) { return none{}, l.Queue.Approve(ctx, id, version, actor) },
		ref:  func(r *model.Reference) (none, error) { return none{}, r.Approve(ctx, id, version, actor) },
	})
	return err
}

// Reject rejects on both sides.
func (l *lockstep) Reject(ctx context.Context, id string, version int64, actor string) error {
	_, err := run(l, op[none]{name: fmt.Sprintf("reject task=%s version=%d", id, version), targets: []string{id},
		real: func() (none, error) { return none{}, l.Queue.Reject(ctx, id, version, actor) },
		ref:  func(r *model.Reference) (none, error) { return none{}, r.Reject(ctx, id, version, actor) },
	})
	return err
}

// Requeue requeues from review on both sides.
func (l *lockstep) Requeue(ctx context.Context, id string, g model.Grant, actor string) error {
	_, err := run(l, op[none]{name: fmt.Sprintf("requeue task=%s grant=%d/%d", id, g.Cost, g.Steps), targets: []string{id},
		real: func() (none, error) { return none{}, l.Queue.Requeue(ctx, id, g, actor) },
		ref:  func(r *model.Reference) (none, error) { return none{}, r.Requeue(ctx, id, g, actor) },
	})
	return err
}

// Resolve resolves a parked task on both sides.
func (l *lockstep) Resolve(ctx context.Context, id string, to model.State, actor string) error {
	_, err := run(l, op[none]{name: fmt.Sprintf("resolve task=%s as=%s", id, to), targets: []string{id},
		real: func() (none, error) { return none{}, l.Queue.Resolve(ctx, id, to, actor) },
		ref:  func(r *model.Reference) (none, error) { return none{}, r.Resolve(ctx, id, to, actor) },
	})
	return err
}

// SettleEffect settles an uncertain effect on both sides.
func (l *lockstep) SettleEffect(ctx context.Context, opID string, applied bool, actor string) error {
	taskID, _, _ := strings.Cut(opID, ".s")
	_, err := run(l, op[none]{name: fmt.Sprintf("settle effect op=%s applied=%t", opID, applied), targets: []string{taskID}, effects: true,
		real: func() (none, error) { return none{}, l.Queue.SettleEffect(ctx, opID, applied, actor) },
		ref:  func(r *model.Reference) (none, error) { return none{}, r.SettleEffect(ctx, opID, applied, actor) },
	})
	return err
}

// Reap reaps on both sides; they must settle the same tasks.
func (l *lockstep) Reap(ctx context.Context) (model.ReapResult, error) {
	return run(l, op[model.ReapResult]{name: "reap",
		real: func() (model.ReapResult, error) { return l.Queue.Reap(ctx) },
		ref:  func(r *model.Reference) (model.ReapResult, error) { return r.Reap(ctx) },
		same: func(a, b model.ReapResult) string { return differ(a, b) },
	})
}

// EnqueueDue enqueues due schedule runs on both sides.
func (l *lockstep) EnqueueDue(ctx context.Context) (model.EnqueueResult, error) {
	return run(l, op[model.EnqueueResult]{name: "enqueue due",
		real: func() (model.EnqueueResult, error) { return l.Queue.EnqueueDue(ctx) },
		ref:  func(r *model.Reference) (model.EnqueueResult, error) { return r.EnqueueDue(ctx) },
		same: func(a, b model.EnqueueResult) string { return differ(a, b) },
		check: func(res model.EnqueueResult, err error) func() {
			if err != nil || res.Enqueued == 0 {
				return nil
			}
			return l.checkDepth("enqueue due")
		},
	})
}

// AddSchedule adds a schedule on both sides.
func (l *lockstep) AddSchedule(ctx context.Context, spec model.ScheduleSpec, actor string) (model.Schedule, error) {
	return run(l, op[model.Schedule]{name: fmt.Sprintf("add schedule user=%s period=%s", spec.User, spec.Period),
		real: func() (model.Schedule, error) { return l.Queue.AddSchedule(ctx, spec, actor) },
		ref:  func(r *model.Reference) (model.Schedule, error) { return r.AddSchedule(ctx, spec, actor) },
		same: func(a, b model.Schedule) string { return differ(a, b) },
	})
}

// RemoveSchedule removes a schedule on both sides.
func (l *lockstep) RemoveSchedule(ctx context.Context, id, actor string) error {
	_, err := run(l, op[none]{name: "remove schedule " + id,
		real: func() (none, error) { return none{}, l.Queue.RemoveSchedule(ctx, id, actor) },
		ref:  func(r *model.Reference) (none, error) { return none{}, r.RemoveSchedule(ctx, id, actor) },
	})
	return err
}

// SetLimits replaces the limits on both sides; the accepted ones are in
// force from now on.
func (l *lockstep) SetLimits(ctx context.Context, lim model.Limits, actor string) error {
	_, err := run(l, op[none]{name: "set limits " + model.DetailLimits(lim),
		real: func() (none, error) { return none{}, l.Queue.SetLimits(ctx, lim, actor) },
		ref:  func(r *model.Reference) (none, error) { return none{}, r.SetLimits(ctx, lim, actor) },
	})
	l.refreshLimits()
	return err
}

// SetUserLimit sets one user's overrides on both sides.
func (l *lockstep) SetUserLimit(ctx context.Context, u model.UserLimit, actor string) error {
	_, err := run(l, op[none]{name: "set user limit " + model.DetailUserLimit(u),
		real: func() (none, error) { return none{}, l.Queue.SetUserLimit(ctx, u, actor) },
		ref:  func(r *model.Reference) (none, error) { return none{}, r.SetUserLimit(ctx, u, actor) },
	})
	l.refreshLimits()
	return err
}

// refreshLimits reads the limits in force from the real queue.
func (l *lockstep) refreshLimits() {
	var limits model.Limits
	var users []model.UserLimit
	var err error
	l.storage.Bypass(func() { limits, users, err = l.Queue.Limits(l.ctx) })
	if err != nil {
		l.report(InvReadable, "", err.Error())
		return
	}
	l.limits, l.users = limits, map[string]model.UserLimit{}
	for _, u := range users {
		l.users[u.User] = u
	}
	l.limitsChanged(limits, users)
}

// none stands for the value of a write that returns only an error.
type none struct{}

// differ renders two returned values and both when they differ (times
// compare by their rendering, so a location pointer cannot differ).
func differ[T comparable](a, b T) string {
	if a == b {
		return ""
	}
	x, y := fmt.Sprintf("%+v", a), fmt.Sprintf("%+v", b)
	if x == y {
		return ""
	}
	return "queue " + x + ", reference " + y
}
