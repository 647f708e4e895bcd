package sim

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/worker"
)

// Invariants the simulator checks beyond the model's.
const (
	InvAppliedOnce         = "effect-applied-once"
	InvReadable            = "state-readable"
	InvAttemptsAccounted   = "attempts-accounted"
	InvEffectWithinBudget  = "effect-within-budget"
	InvNoWorkAfterDeadline = "no-work-after-deadline"
	InvNoEarlyExpiry       = "no-early-expiry"
	// InvFollower: a follower reading the trail for some users gets each
	// of their events once, in order, and none of anyone else's.
	InvFollower = "follower-exactly-once"
)

// checker checks the invariants after every event, incrementally: it
// follows the audit trail from the last event it saw, re-reads only the
// tasks those events touched, and compares each with its previous
// snapshot. Accepted worker writes feed the claim history; the effect
// double's applications are counted as they happen.
type checker struct {
	w         *World
	lastSeq   int64
	tasks     map[string]model.Task
	accepted  []string
	known     map[string]bool
	trail     *model.EventChecker // steps charged once, operations receipted once
	history   *model.History
	limits    model.Limits
	overrides []model.UserLimit
	pending   *model.Violation
	charged   map[string]int // charged attempts per task since its last requeue, from the trail
	applied   int            // effect applications already checked
	plans     map[string][]worker.SyntheticStep
	runs      *model.ScheduleRunChecker
	commits   int64 // storage commits when last checked
	// moves holds, by task, the state changes the events of the current
	// check made, in order (a group commit makes several at once).
	moves map[string][]model.Event
	// only, when set, names the checks that report; every other is
	// switched off (Config.Only).
	only map[string]bool
	// oracle is the lockstep's first disagreement or broken stated
	// invariant, returned by the next check.
	oracle *model.Violation
	// group, during a group event, holds the actors' reports back until
	// the event ends (beginGroup, endGroup).
	group *groupFeed
}

// enabled reports whether the check named kind reports violations.
func (c *checker) enabled(kind string) bool { return c.only == nil || c.only[kind] }

// keep returns v if its check is switched on, nil otherwise.
func (c *checker) keep(v *model.Violation) *model.Violation {
	if v == nil || !c.enabled(v.Invariant) {
		return nil
	}
	return v
}

// keepFirst returns the first of vs whose check is switched on.
func (c *checker) keepFirst(vs []model.Violation) *model.Violation {
	for i := range vs {
		if c.enabled(vs[i].Invariant) {
			return &vs[i]
		}
	}
	return nil
}

// lockstepReport keeps the lockstep's first reported violation, when its
// check is switched on.
func (c *checker) lockstepReport(kind, taskID, detail string) {
	if c.oracle == nil && c.enabled(kind) {
		c.oracle = &model.Violation{Invariant: kind, TaskID: taskID, Detail: detail}
	}
}

func newChecker(w *World, only []string) *checker {
	c := &checker{w: w, tasks: map[string]model.Task{}, known: map[string]bool{}, trail: model.NewEventChecker(),
		history: model.NewHistory(), charged: map[string]int{},
		plans: map[string][]worker.SyntheticStep{}, runs: model.NewScheduleRunChecker()}
	if only != nil {
		c.only = map[string]bool{}
		for _, kind := range only {
			c.only[kind] = true
		}
	}
	c.limits, c.overrides, _ = w.q.Limits(w.ctx)
	return c
}

// limitsChanged takes in the limits now in force.
func (c *checker) limitsChanged(l model.Limits, overrides []model.UserLimit) {
	c.limits, c.overrides = l, overrides
}

// submitted records a task ID the queue accepted; it must never go missing.
func (c *checker) submitted(id string) {
	if !c.known[id] {
		c.known[id] = true
		c.accepted = append(c.accepted, id)
	}
}

// report records a worker's accepted writes in the claim history; a
// violation is kept for the next check to return. During a group event
// the report is held back and fed in the group's commit order
// (groupFeed).
func (c *checker) report(r worker.Report) {
	if c.group != nil {
		c.group.hold(r, c.w.clock.Now())
		return
	}
	c.accept(r, c.w.clock.Now())
}

// accept records the writes r reports, made at the queue's time at.
func (c *checker) accept(r worker.Report, at time.Time) {
	if r.Write == "heartbeat" && r.StorageError {
		// The heartbeat may have been applied (an ambiguous commit).
		c.history.MayExtend(r.TaskID, r.Fence, model.Truncate(at).Add(c.w.sc.Lease))
	}
	if !r.Accepted || r.Write == "" || c.pending != nil {
		return
	}
	if r.Write == "claim" {
		for _, cl := range r.Claims {
			if v := c.keep(c.history.Accept(model.AcceptedWrite{TaskID: cl.TaskID, Fence: cl.Fence, Kind: "claim", At: at,
				Owner: r.Worker, LeaseUntil: cl.LeaseUntil})); v != nil {
				c.pending = v
				return
			}
		}
		return
	}
	if c.pending = c.keep(c.history.Accept(model.AcceptedWrite{TaskID: r.TaskID, Fence: r.Fence, Kind: string(r.Write), At: at,
		Owner: r.Worker, LeaseUntil: r.LeaseUntil})); c.pending != nil {
		return
	}
	// A completion that claimed the slot's next task in the same write.
	for _, cl := range r.Claims {
		if c.pending = c.keep(c.history.Accept(model.AcceptedWrite{TaskID: cl.TaskID, Fence: cl.Fence, Kind: "claim", At: at,
			Owner: r.Worker, LeaseUntil: cl.LeaseUntil})); c.pending != nil {
			return
		}
	}
}

// check reads what the last event changed and checks every invariant on it.
func (c *checker) check() *model.Violation {
	if c.oracle != nil {
		return c.oracle
	}
	if c.pending != nil {
		return c.pending
	}
	commits := c.w.storage.Commits()
	if commits == c.commits {
		return c.applications() // nothing was written; only the service can have changed
	}
	c.commits = commits
	var events []model.Event
	var err error
	if c.w.q.ref != nil {
		events = c.w.q.takeEvents() // the lockstep has read them already
	} else {
		c.w.storage.Bypass(func() { events, err = c.w.q.EventsAfter(c.w.ctx, c.lastSeq, model.ListLimitMax) })
	}
	if err != nil {
		return c.keep(&model.Violation{Invariant: InvReadable, Detail: err.Error()})
	}
	if len(events) == 0 {
		return c.applications() // a commit with no event (an empty poll) changes no task
	}
	touched, v := c.checkEvents(events)
	if v != nil {
		return v
	}
	c.moves = movesOf(events)
	claimedUsers, v := c.checkTouched(touched)
	if v != nil {
		return v
	}
	if v := c.userLimits(claimedUsers); v != nil {
		return v
	}
	return c.applications()
}

// checkEvents checks each new event of the trail in turn, and returns the IDs
// of the tasks they touched, each once in the order first touched.
func (c *checker) checkEvents(events []model.Event) ([]string, *model.Violation) {
	var touched []string
	seen := map[string]bool{}
	for _, e := range events {
		c.lastSeq = e.Seq
		if e.TaskID == "" {
			continue
		}
		c.w.timelineEvent(e)
		if v := c.keep(c.event(e)); v != nil {
			return nil, v
		}
		if !seen[e.TaskID] {
			seen[e.TaskID] = true
			touched = append(touched, e.TaskID)
		}
		if e.Kind == model.EventSubmitted {
			c.submitted(e.TaskID)
		}
	}
	return touched, nil
}

// checkTouched reads each touched task and checks it: the task invariants, the
// attempts its trail charged, and its change since the last check (or,
// first seen, its run against the others). It returns the users of the
// tasks that have just been claimed, for the user limits.
func (c *checker) checkTouched(ids []string) (map[string]bool, *model.Violation) {
	claimedUsers := map[string]bool{}
	for _, id := range ids {
		t, err := c.w.task(id)
		if err != nil {
			if v := c.keep(&model.Violation{Invariant: model.InvTaskKept, TaskID: id, Detail: err.Error()}); v != nil {
				return nil, v
			}
			continue
		}
		if v := c.keepFirst(model.CheckTask(t)); v != nil {
			return nil, v
		}
		if t.AttemptsCharged != c.charged[id] {
			if v := c.keep(&model.Violation{Invariant: InvAttemptsAccounted, TaskID: id,
				Detail: fmt.Sprintf("attempts_charged %d, but the trail shows %d charged attempts since the last requeue", t.AttemptsCharged, c.charged[id])}); v != nil {
				return nil, v
			}
		}
		before, seen := c.tasks[id]
		if !seen {
			if v := c.keep(c.runs.Check(t)); v != nil {
				return nil, v
			}
		} else if v := c.keepFirst(throughTrail(model.CheckChange(before, t), before.State, t.State, c.moves[id])); v != nil {
			return nil, v
		}
		if t.State == model.Running && (!seen || before.State != model.Running) {
			claimedUsers[t.User] = true
		}
		c.tasks[id] = t
	}
	return claimedUsers, nil
}

// applications checks each effect applied since the last check: no
// operation applied twice, and none made for a step the task's budget
// cannot pay for. It runs after every event, whether or not the queue
// changed: an effect can be applied in a step whose queue write failed.
func (c *checker) applications() *model.Violation {
	ops, total := c.w.service.ApplicationsSince(c.applied)
	c.applied = total
	for _, op := range ops {
		if c.w.service.Applications(op) > 1 && c.enabled(InvAppliedOnce) {
			return &model.Violation{Invariant: InvAppliedOnce, Detail: fmt.Sprintf("operation %s applied more than once", op)}
		}
		taskID, stepText, ok := strings.Cut(op, ".s")
		step, err := strconv.Atoi(stepText)
		t, seen := c.tasks[taskID]
		if !c.enabled(InvEffectWithinBudget) {
			continue
		}
		if !ok || err != nil || !seen {
			return &model.Violation{Invariant: InvEffectWithinBudget, TaskID: taskID, Detail: "applied operation of an unknown task step: " + op}
		}
		if step < t.StepsUsed {
			continue // charged already, within the budget the task invariants check
		}
		plan, ok := c.plans[taskID]
		if !ok {
			plan, _ = worker.ParseSynthetic(t.Payload)
			c.plans[taskID] = plan
		}
		if step >= len(plan) {
			return &model.Violation{Invariant: InvEffectWithinBudget, TaskID: taskID, Detail: "applied operation beyond the task's steps: " + op}
		}
		if t.CostUsed+plan[step].Cost > t.CostBudget {
			return &model.Violation{Invariant: InvEffectWithinBudget, TaskID: taskID,
				Detail: fmt.Sprintf("%s applied with %d of %d spent and the step costing %d", op, t.CostUsed, t.CostBudget, plan[step].Cost)}
		}
	}
	return nil
}

// event checks one audit event: no step index charged twice, no operation
// receipted twice, no step charged after the task's deadline; and it counts
// charged attempts.
func (c *checker) event(e model.Event) *model.Violation {
	switch e.Kind {
	case model.EventRetry, model.EventDeadLettered:
		c.charged[e.TaskID]++
	case model.EventLeaseExpired:
		if e.To != model.Cancelled {
			c.charged[e.TaskID]++
		}
	case model.EventRequeued:
		c.charged[e.TaskID] = 0
	}
	if e.Kind == model.EventLeaseExpired {
		if lease, ok := c.history.LeaseUntil(e.TaskID, e.Fence); ok && e.At.Before(lease) {
			return &model.Violation{Invariant: InvNoEarlyExpiry, TaskID: e.TaskID,
				Detail: fmt.Sprintf("claim %d expired at %s, but its lease ran until %s", e.Fence, e.At.Format(time.RFC3339Nano), lease.Format(time.RFC3339Nano))}
		}
	}
	if e.Kind == model.EventStep {
		if t, ok := c.tasks[e.TaskID]; ok && t.PastDeadline(e.At) {
			return &model.Violation{Invariant: InvNoWorkAfterDeadline, TaskID: e.TaskID,
				Detail: fmt.Sprintf("%s charged at %s, after the deadline %s", e.Detail, e.At.Format(time.RFC3339Nano), t.Deadline.Format(time.RFC3339Nano))}
		}
	}
	return c.trail.Check(e)
}

// userLimits checks the users who just claimed against their limits.
func (c *checker) userLimits(users map[string]bool) *model.Violation {
	if len(users) == 0 {
		return nil
	}
	var mine []model.Task
	for _, t := range c.tasks {
		if t.State == model.Running && users[t.User] {
			mine = append(mine, t)
		}
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i].Seq < mine[j].Seq })
	return c.keepFirst(model.CheckUserLimits(mine, c.limits, c.overrides))
}

// snapshot returns the latest snapshot of every task seen, in submission
// order.
func (c *checker) snapshot() []model.Task {
	out := make([]model.Task, 0, len(c.tasks))
	for _, t := range c.tasks {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

// final checks what only the end can show: every accepted task is still
// there and the counters agree with the tasks.
func (c *checker) final() *model.Violation {
	for _, id := range c.accepted {
		if _, err := c.w.task(id); err != nil {
			if v := c.keep(&model.Violation{Invariant: model.InvTaskKept, TaskID: id, Detail: err.Error()}); v != nil {
				return v
			}
		}
	}
	var err error
	c.w.storage.Bypass(func() { err = c.w.q.CheckCounters(c.w.ctx) })
	if err != nil {
		if v := c.keep(&model.Violation{Invariant: "counters-agree", Detail: err.Error()}); v != nil {
			return v
		}
	}
	c.w.q.final()
	return c.oracle
}

// movesOf returns, by task, the events among events that change a task's
// state, in order.
func movesOf(events []model.Event) map[string][]model.Event {
	out := map[string][]model.Event{}
	for _, e := range events {
		if e.TaskID != "" && e.From != e.To {
			out[e.TaskID] = append(out[e.TaskID], e)
		}
	}
	return out
}

// throughTrail drops a transition violation of a task that went from one
// state to another in several moves since the last check (a group commit
// carrying several writes of the task), when the trail shows those moves
// chained from the first state to the last; each move was checked as an
// event (checkEvents).
func throughTrail(vs []model.Violation, from, to model.State, moves []model.Event) []model.Violation {
	if len(moves) < 2 || moves[0].From != from || moves[len(moves)-1].To != to {
		return vs
	}
	for i := 1; i < len(moves); i++ {
		if moves[i].From != moves[i-1].To {
			return vs
		}
	}
	out := vs[:0]
	for _, v := range vs {
		if v.Invariant != model.InvTransition {
			out = append(out, v)
		}
	}
	return out
}

// groupFeed orders the reports of a group event's actors by where the
// group committed the writes they report. An actor reports once its
// operation returns, which may be rounds after its write committed (a
// duplicated delivery is held for a later round before the first
// delivery's outcome comes back), while another actor, carrying on in
// between, reports a write committed after it: a draining worker's
// release of a task, then the claim that took the task once released.
// The claim history must see the release first. The reports are not
// sorted by fence, which would hide a stale write a group accepted.
//
// Only one actor runs at a time (world_groups.go): the world names it
// (actor) before it lets the actor run, and gives each write that
// arrives while it runs to it (own). A report stands at the first write
// of its actor, committed since the actor's previous report, that was
// applied (answered success or a refusal; a run the queue made again
// after a conflict was not), else at the last such write; a report with
// no committed write stands after every write committed so far. So an
// actor that reports reports every write it makes (a claim that took
// nothing too), after the write and any delivery of it again, before
// its next write.
type groupFeed struct {
	actor   int
	owner   map[*queue.HeldWrite]int
	written map[int][]committedWrite // by actor: committed, not reported yet, in commit order
	commits int
	reports []heldReport
}

// committedWrite is one write a group event committed: its place in the
// event's commit order, the queue's time then, and whether its operation
// ended there (applied).
type committedWrite struct {
	at      int
	time    time.Time
	applied bool
}

// heldReport is a report held back, with the place and time of the write
// it reports.
type heldReport struct {
	at   int
	time time.Time
	r    worker.Report
}

// beginGroup holds reports back until endGroup and returns the feed the
// group event tells of its actors and commits.
func (c *checker) beginGroup() *groupFeed {
	c.group = &groupFeed{owner: map[*queue.HeldWrite]int{}, written: map[int][]committedWrite{}}
	return c.group
}

// endGroup feeds the reports held back, in the group's commit order (a
// report's place; reports of one place in the order they came).
func (c *checker) endGroup() {
	g := c.group
	c.group = nil
	sort.SliceStable(g.reports, func(i, j int) bool { return g.reports[i].at < g.reports[j].at })
	for _, h := range g.reports {
		c.accept(h.r, h.time)
	}
}

// own gives the actor running now every write of pending no actor owns
// yet: those that arrived while it ran.
func (g *groupFeed) own(pending []*queue.HeldWrite) {
	for _, w := range pending {
		if _, ok := g.owner[w]; !ok {
			g.owner[w] = g.actor
		}
	}
}

// committed notes order, a group just committed at the queue's time now,
// in its commit order, with each member's outcome (errs). Places are
// even; a report with no write of its own takes the odd place after the
// writes committed before it.
func (g *groupFeed) committed(order []*queue.HeldWrite, errs []error, now time.Time) {
	for i, w := range order {
		actor := g.owner[w]
		g.written[actor] = append(g.written[actor], committedWrite{at: 2 * g.commits, time: now,
			applied: errs[i] == nil || RefusalClass(errs[i]) != ""})
		g.commits++
	}
}

// heldOutcomes returns the outcome of each write of order, a committed group.
func heldOutcomes(order []*queue.HeldWrite) []error {
	errs := make([]error, len(order))
	for i, w := range order {
		errs[i] = w.Err()
	}
	return errs
}

// hold keeps r, reported by the actor running now at the queue's time now,
// at the place of the write it reports.
func (g *groupFeed) hold(r worker.Report, now time.Time) {
	h := heldReport{at: 2*g.commits - 1, time: now, r: r}
	if written := g.written[g.actor]; len(written) > 0 {
		pick := written[len(written)-1]
		for _, w := range written {
			if w.applied {
				pick = w
				break
			}
		}
		h.at, h.time = pick.at, pick.time
		delete(g.written, g.actor)
	}
	g.reports = append(g.reports, h)
}
