package sim

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
)

// Coverage is a coverage map: for each cell (a transition of the state
// machine, a class of refusal, a fault kind at a phase), how many seeds
// reached it. A run's coverage has Seeds 1 and a 1 in each cell it
// reached; Add merges runs and sweeps.
type Coverage struct {
	Seeds int                    `json:"seeds"`
	Cells map[scenarios.Cell]int `json:"cells"`
}

// CheckCoverage names the coverage rule among the checks a test may leave
// on alone (Config.Only): with every per-seed check off, a sweep of at
// least scenarios.CoverageSeedsMin seeds still fails on a declared cell no
// seed reached.
const CheckCoverage = "coverage"

// Add merges o into c.
func (c *Coverage) Add(o Coverage) {
	if c.Cells == nil {
		c.Cells = map[scenarios.Cell]int{}
	}
	c.Seeds += o.Seeds
	for cell, n := range o.Cells {
		c.Cells[cell] += n
	}
}

// Enforced reports whether the sweep is long enough for its declared cells
// to be required (scenarios.CoverageSeedsMin seeds or more).
func (c Coverage) Enforced() bool { return c.Seeds >= scenarios.CoverageSeedsMin }

// Unreached returns the cells sc declares that no seed reached, in
// declaration order.
func (c Coverage) Unreached(sc scenarios.Scenario) []scenarios.Cell {
	var out []scenarios.Cell
	for _, cell := range sc.Covers {
		if c.Cells[cell] == 0 {
			out = append(out, cell)
		}
	}
	return out
}

// Missing returns the declared cells no seed reached when the sweep is
// long enough to require them (a "sometimes" assertion), and nil for a
// shorter sweep, which reports its coverage but never fails on it.
func (c Coverage) Missing(sc scenarios.Scenario) []scenarios.Cell {
	if !c.Enforced() {
		return nil
	}
	return c.Unreached(sc)
}

// MissingSummary says which declared cells a long enough sweep missed,
// on one line; empty when none.
func (c Coverage) MissingSummary(sc scenarios.Scenario) string {
	missing := c.Missing(sc)
	if len(missing) == 0 {
		return ""
	}
	names := make([]string, len(missing))
	for i, cell := range missing {
		names[i] = cell.String()
	}
	return fmt.Sprintf("coverage: %d of %d seeds of %s reached none of: %s", c.Seeds, c.Seeds, sc.Name, strings.Join(names, "; "))
}

// CoverageRow is one row of a coverage table.
type CoverageRow struct {
	Cell     scenarios.Cell `json:"cell"`
	Seeds    int            `json:"seeds"`
	Declared bool           `json:"declared"`
}

// Rows lists the table of c for sc: every transition of the state machine
// and every refusal class (reached or not), then every fault cell reached
// or declared, and any other cell reached; declared cells are marked.
func (c Coverage) Rows(sc scenarios.Scenario) []CoverageRow {
	declared := map[scenarios.Cell]bool{}
	for _, cell := range sc.Covers {
		declared[cell] = true
	}
	var rows []CoverageRow
	listed := map[scenarios.Cell]bool{}
	add := func(cell scenarios.Cell) {
		if !listed[cell] {
			listed[cell] = true
			rows = append(rows, CoverageRow{Cell: cell, Seeds: c.Cells[cell], Declared: declared[cell]})
		}
	}
	for _, t := range transitionEvents {
		add(scenarios.TransitionCell(t.from, t.kind, t.to))
	}
	for _, r := range RefusalClasses() {
		add(scenarios.RefusalCell(r))
	}
	var rest []scenarios.Cell
	for cell := range c.Cells {
		rest = append(rest, cell)
	}
	rest = append(rest, sc.Covers...)
	sort.Slice(rest, func(i, j int) bool { return rest[i].String() < rest[j].String() })
	for _, cell := range rest {
		add(cell)
	}
	return rows
}

// Table renders the coverage table of c for sc, one cell a line.
func (c Coverage) Table(sc scenarios.Scenario) string {
	var b strings.Builder
	unreached := c.Unreached(sc)
	rule := "reported only: the rule needs a sweep of at least " + fmt.Sprint(scenarios.CoverageSeedsMin) + " seeds"
	if c.Enforced() {
		rule = "every declared cell must be reached"
	}
	fmt.Fprintf(&b, "coverage: scenario %s, %d seeds; %d cells declared, %d unreached (%s)\n",
		sc.Name, c.Seeds, len(sc.Covers), len(unreached), rule)
	for _, r := range c.Rows(sc) {
		mark := ""
		switch {
		case r.Declared && r.Seeds == 0 && c.Enforced():
			mark = "declared, MISSING"
		case r.Declared && r.Seeds == 0:
			mark = "declared, unreached"
		case r.Declared:
			mark = "declared"
		}
		fmt.Fprintf(&b, "  %-10s %-52s %6d  %s\n", r.Cell.Kind, r.Cell.Name, r.Seeds, mark)
	}
	return b.String()
}

// transitionEvents lists each row of the state machine (DESIGN.md's table,
// model.Transitions) with the event kind the queue records it under: a row
// recorded under two kinds (a transient failure and a lease expiry both
// requeue) has a line for each, so the map tells the paths apart.
var transitionEvents = []struct {
	from   model.State
	kind   model.EventKind
	to     model.State
	action model.Action
}{
	{model.Queued, model.EventClaimed, model.Running, model.ActClaim},
	{model.Queued, model.EventCancelled, model.Cancelled, model.ActCancel},
	{model.Running, model.EventCompleted, model.Completed, model.ActComplete},
	{model.Running, model.EventFailed, model.Failed, model.ActFail},
	{model.Running, model.EventRetry, model.Queued, model.ActRetry},
	{model.Running, model.EventLeaseExpired, model.Queued, model.ActRetry},
	{model.Running, model.EventDeadLettered, model.NeedsReview, model.ActDeadLetter},
	{model.Running, model.EventLeaseExpired, model.NeedsReview, model.ActDeadLetter},
	{model.Running, model.EventUncertain, model.NeedsReview, model.ActUncertain},
	{model.Running, model.EventPaused, model.WaitingForApproval, model.ActPause},
	{model.Running, model.EventReleased, model.Queued, model.ActRelease},
	{model.Running, model.EventCancelled, model.Cancelled, model.ActObserveCancel},
	{model.Running, model.EventLeaseExpired, model.Cancelled, model.ActObserveCancel},
	{model.WaitingForApproval, model.EventApproved, model.Queued, model.ActApprove},
	{model.WaitingForApproval, model.EventRejected, model.Cancelled, model.ActReject},
	{model.WaitingForApproval, model.EventCancelled, model.Cancelled, model.ActCancel},
	{model.Queued, model.EventDeadline, model.Failed, model.ActDeadline},
	{model.Running, model.EventDeadline, model.Failed, model.ActDeadline},
	{model.WaitingForApproval, model.EventDeadline, model.Failed, model.ActDeadline},
	{model.NeedsReview, model.EventRequeued, model.Queued, model.ActRequeue},
	{model.NeedsReview, model.EventResolved, model.Completed, model.ActResolve},
	{model.NeedsReview, model.EventResolved, model.Failed, model.ActResolve},
	{model.NeedsReview, model.EventResolved, model.Cancelled, model.ActResolve},
}

// transitionCell returns the transition cell an audit event records, if
// it records a change of state.
func transitionCell(e model.Event) (scenarios.Cell, bool) {
	if e.TaskID == "" || e.From == "" || e.From == e.To {
		return scenarios.Cell{}, false
	}
	return scenarios.TransitionCell(e.From, e.Kind, e.To), true
}

// Refusal classes: what an operation's refusal says, whoever made it (a
// worker, a caller, the operator, the careless client, a late delivery).
const (
	RefusalStaleClaim      = "stale_claim"      // a write under a fence that is not current, or after the lease
	RefusalBudget          = "budget"           // a step that would overspend (the task is failed)
	RefusalSteps           = "steps"            // a step past the step limit (the task is failed)
	RefusalDeadline        = "deadline"         // a write after the deadline (the task is failed)
	RefusalQueueFull       = "queue_full"       // a submit beyond a depth cap
	RefusalConflict        = "conflict"         // an idempotency key reused with another request
	RefusalStepConflict    = "step_conflict"    // a step or pause naming another index
	RefusalVersionMismatch = "version_mismatch" // an approval naming another version
	RefusalNotAllowed      = "not_allowed"      // the task's state does not allow the action
	RefusalBadInput        = "bad_input"        // a request out of range (a claim batch or a grant over its maximum, ...)
	RefusalNotFound        = "not_found"        // no such task or operation
	RefusalReceipted       = "receipted"        // a second, different receipt
	RefusalStaleFence      = "stale_fence"      // the fenced service refused an older claim's call
)

// RefusalClasses lists the refusal classes in a fixed order.
func RefusalClasses() []string {
	return []string{RefusalStaleClaim, RefusalBudget, RefusalSteps, RefusalDeadline, RefusalQueueFull, RefusalConflict,
		RefusalStepConflict, RefusalVersionMismatch, RefusalNotAllowed, RefusalBadInput, RefusalNotFound, RefusalReceipted,
		RefusalStaleFence}
}

// refusalClasses maps each sentinel to its class, checked in order.
var refusalClasses = []struct {
	err   error
	class string
}{
	{model.ErrStaleClaim, RefusalStaleClaim},
	{model.ErrBudgetExhausted, RefusalBudget},
	{model.ErrStepsExhausted, RefusalSteps},
	{model.ErrDeadlineExceeded, RefusalDeadline},
	{model.ErrQueueFull, RefusalQueueFull},
	{model.ErrIdempotencyConflict, RefusalConflict},
	{model.ErrStepConflict, RefusalStepConflict},
	{model.ErrVersionMismatch, RefusalVersionMismatch},
	{model.ErrInvalidTransition, RefusalNotAllowed},
	{model.ErrInvalidInput, RefusalBadInput},
	{model.ErrNotFound, RefusalNotFound},
	{model.ErrEffectReceipted, RefusalReceipted},
	{worker.ErrStaleFence, RefusalStaleFence},
}

// RefusalClass returns the class of a refusal, or "" for no error and for
// an error that is not a refusal (storage trouble, an injected fault).
func RefusalClass(err error) string {
	if err == nil {
		return ""
	}
	for _, r := range refusalClasses {
		if errors.Is(err, r.err) {
			return r.class
		}
	}
	return ""
}

// Fault kinds a coverage map pairs with phases, besides the storage
// faults (faults.StorageFaults, and "unavailable" for an outage window's
// refusals).
const (
	FaultCrash          = "crash"
	FaultStall          = "stall"
	FaultShutdown       = "shutdown"
	FaultCrashAfterCall = "crash_after_call"
	FaultDuplicate      = "duplicate"
	FaultRedeliver      = "redeliver"
	FaultLoseResponse   = "lose_response"
	FaultUnavailable    = "unavailable"
)

// FaultKinds lists every fault kind a coverage map names.
func FaultKinds() []string {
	out := []string{FaultCrash, FaultStall, FaultShutdown, FaultCrashAfterCall, FaultDuplicate, FaultRedeliver,
		FaultLoseResponse, FaultUnavailable}
	for _, f := range faults.StorageFaults() {
		out = append(out, string(f))
	}
	return out
}

// PhaseIdle is the phase of a worker that holds no claim. PhaseRun is the
// slot phase while a step's run is under way (worker.Slot.Phase "work"):
// a storage fault that hits a heartbeat made then is recorded at it as
// well as at the heartbeat.
const (
	PhaseIdle = "idle"
	PhaseRun  = "work"
)

// Operations of the world that a storage fault can hit, as fault cells
// name them (a worker's step is named by its action).
const (
	OpReap     = "reap"
	OpEnqueue  = "enqueue_due"
	OpCaller   = "caller"
	OpCareless = "careless"
	OpOperator = "operator"
	OpBatch    = "batch"
	OpFollow   = "follow"
	OpGroup    = "group"
)

// Phases lists every phase a fault cell may name: a worker slot's phases
// (worker.Slot.Phase), idle, a worker's actions and writes, and the
// world's operations (a late redelivery among them).
func Phases() []string {
	out := []string{"next", "work", "intent", "call", "send", "reconcile", "receipt", "commit", "uncertain", "fail",
		"release", "done", PhaseIdle}
	for _, a := range []worker.Action{worker.ActionClaim, worker.ActionRun, worker.ActionHeartbeat, worker.ActionIntent, worker.ActionCheckLease,
		worker.ActionCall, worker.ActionReconcile, worker.ActionReceipt, worker.ActionStep, worker.ActionPause,
		worker.ActionComplete, worker.ActionFail, worker.ActionCancel, worker.ActionRelease} {
		out = append(out, string(a))
	}
	for _, write := range faults.Writes {
		if !slices.Contains(out, string(write)) {
			out = append(out, string(write))
		}
	}
	out = append(out, OpReap, OpEnqueue, OpCaller, OpCareless, OpOperator, FaultRedeliver, OpBatch, OpFollow, OpGroup)
	return append(out, FusedStatements()...)
}

// KnownCell reports whether cell names something the simulator can reach:
// a row of the state machine under its event kind, a refusal class, or a
// fault kind at a known phase. A scenario declaring any other cell has a
// typo that would fail every sweep.
func KnownCell(cell scenarios.Cell) bool {
	switch cell.Kind {
	case scenarios.CellTransition:
		for _, t := range transitionEvents {
			if scenarios.TransitionCell(t.from, t.kind, t.to) == cell {
				return true
			}
		}
	case scenarios.CellRefusal:
		return slices.Contains(RefusalClasses(), cell.Name)
	case scenarios.CellFault:
		kind, phase, _ := strings.Cut(cell.Name, "@")
		return slices.Contains(FaultKinds(), kind) && slices.Contains(Phases(), phase)
	case scenarios.CellRun:
		return slices.Contains(RunOutcomes(), cell.Name)
	case scenarios.CellPath:
		return knownPath(cell.Name)
	case scenarios.CellTaskKind:
		return knownTaskKindCell(cell.Name)
	}
	return false
}

// recorder collects the cells one run reaches; trailSeq is how far the
// audit trail's transitions have been taken in (coverTrail).
type recorder struct {
	cells    map[scenarios.Cell]bool
	trailSeq int64
}

// coverTrail takes in the transitions and stale-write refusals of the
// audit trail since the last call: at the end of the run, and before a
// prune removes the events of the tasks it prunes.
func (w *World) coverTrail() error {
	for {
		var events []model.Event
		var err error
		w.storage.Bypass(func() { events, err = w.q.EventsAfter(w.ctx, w.cover.trailSeq, model.ListLimitMax) })
		if err != nil {
			return fmt.Errorf("coverage: read the audit trail: %w", err)
		}
		for _, e := range events {
			w.cover.trailSeq = e.Seq
			if cell, ok := transitionCell(e); ok {
				w.cover.add(cell)
			}
			if e.Kind == model.EventStaleWrite {
				w.cover.add(scenarios.RefusalCell(RefusalStaleClaim))
			}
		}
		if len(events) < model.ListLimitMax {
			return nil
		}
	}
}

func (r *recorder) add(cell scenarios.Cell) {
	if r.cells == nil {
		r.cells = map[scenarios.Cell]bool{}
	}
	r.cells[cell] = true
}

// refusal records the class of err, if it is a refusal.
func (r *recorder) refusal(err error) {
	if class := RefusalClass(err); class != "" {
		r.add(scenarios.RefusalCell(class))
	}
}

// fault records a fault kind at each of phases, or at idle when there are
// none.
func (r *recorder) fault(kind string, phases ...string) {
	if len(phases) == 0 {
		phases = []string{PhaseIdle}
	}
	for _, p := range phases {
		r.add(scenarios.FaultCell(kind, p))
	}
}

// coverage returns the run's coverage: the cells recorded as the run went,
// and the transitions and stale-write refusals of the whole audit trail.
func (w *World) coverage() (Coverage, error) {
	if err := w.coverTrail(); err != nil {
		return Coverage{}, err
	}
	c := Coverage{Seeds: 1, Cells: map[scenarios.Cell]int{}}
	for cell := range w.cover.cells {
		c.Cells[cell] = 1
	}
	return c, nil
}
