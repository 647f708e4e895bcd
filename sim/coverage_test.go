package sim

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
)

// Every cell a scenario declares names something the simulator can
// reach, once: a misspelt cell would fail every sweep, a repeated one
// says nothing.
func TestDeclaredCellsAreKnown(t *testing.T) {
	for _, name := range scenarios.Names() {
		sc, err := scenarios.Get(name)
		require.NoError(t, err)
		require.NotEmpty(t, sc.Covers, "scenario %s declares no coverage cells", name)
		seen := map[scenarios.Cell]bool{}
		for _, cell := range sc.Covers {
			require.True(t, KnownCell(cell), "scenario %s declares %s, which names nothing the simulator reaches", name, cell)
			require.False(t, seen[cell], "scenario %s declares %s twice", name, cell)
			seen[cell] = true
		}
	}
	require.False(t, KnownCell(scenarios.FaultCell("crash", "teatime")))
	require.False(t, KnownCell(scenarios.TransitionCell(model.Completed, model.EventClaimed, model.Running)))
	require.False(t, KnownCell(scenarios.RefusalCell("rude")))
	for _, row := range transitionEvents {
		require.True(t, model.Allows(row.from, row.action, row.to), "%s -%s-> %s is not a row of the state machine", row.from, row.kind, row.to)
	}
}

// The sometimes rule: a declared cell no seed reached fails a sweep of at
// least 200 seeds, and is only reported by a shorter one.
func TestCoverageRule(t *testing.T) {
	sc := scenarios.Scenario{Name: "toy", Covers: []scenarios.Cell{
		scenarios.RefusalCell(RefusalStaleClaim), scenarios.FaultCell(FaultCrash, "send")}}
	seed := Coverage{Seeds: 1, Cells: map[scenarios.Cell]int{scenarios.RefusalCell(RefusalStaleClaim): 1}}
	var short, long Coverage
	for range scenarios.CoverageSeedsMin - 1 {
		short.Add(seed)
	}
	long.Add(short)
	long.Add(seed)
	require.Equal(t, []scenarios.Cell{scenarios.FaultCell(FaultCrash, "send")}, short.Unreached(sc))
	require.Nil(t, short.Missing(sc), "199 seeds report coverage but never fail on it")
	require.Contains(t, short.Table(sc), "declared, unreached")
	require.Equal(t, []scenarios.Cell{scenarios.FaultCell(FaultCrash, "send")}, long.Missing(sc))
	require.Contains(t, long.Table(sc), "declared, MISSING")
	require.Contains(t, long.MissingSummary(sc), "fault crash@send")
	require.Equal(t, 200, long.Cells[scenarios.RefusalCell(RefusalStaleClaim)])

	long.Add(Coverage{Seeds: 1, Cells: map[scenarios.Cell]int{scenarios.FaultCell(FaultCrash, "send"): 1}})
	require.Empty(t, long.Missing(sc))
	require.Empty(t, long.MissingSummary(sc))

	// The map travels as JSON (a sweep's children print it) and reads back.
	b, err := json.Marshal(long)
	require.NoError(t, err)
	require.Contains(t, string(b), `"refusal stale_claim":200`)
	var back Coverage
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, long, back)
}

// A run's coverage comes from its audit trail and from what its actors
// met: the transitions the trail records, the refusals, the faults where
// they hit.
func TestRunCoverage(t *testing.T) {
	r := Run(Config{Scenario: scenarios.Boundaries(), Seed: 3})
	require.True(t, r.Pass, r.Summary())
	require.Equal(t, 1, r.Coverage.Seeds)
	for _, cell := range []scenarios.Cell{
		scenarios.TransitionCell(model.Queued, model.EventClaimed, model.Running),
		scenarios.TransitionCell(model.WaitingForApproval, model.EventRejected, model.Cancelled),
		scenarios.TransitionCell(model.Running, model.EventDeadLettered, model.NeedsReview),
		scenarios.TransitionCell(model.NeedsReview, model.EventResolved, model.Failed),
	} {
		require.Equal(t, 1, r.Coverage.Cells[cell], "%s", cell)
	}
	for cell := range r.Coverage.Cells {
		require.True(t, KnownCell(cell), "the run reached %s, which no scenario could declare", cell)
	}
}

// newTestWorld builds a world for a scenario with no faults and no
// automatic submits.
func newTestWorld(t *testing.T, sc scenarios.Scenario) *World {
	t.Helper()
	w, err := newWorld(sc, 1, FaultMix{ServiceKind: worker.Plain}, worldOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, w.close()) })
	return w
}

// submitAll submits every scenario task and returns their IDs.
func submitAll(t *testing.T, w *World) []string {
	t.Helper()
	var ids []string
	for _, ts := range w.tasks {
		out := w.script(ts)
		require.Contains(t, out, "replay=false", out)
		ids = append(ids, ts.id)
	}
	require.Nil(t, w.checker.check())
	return ids
}

// The careless client writes under its real claim without the worker's
// pre-checks, so the queue's refusal is what stops it: its third step
// would overspend and is refused, and the task is failed by the queue.
func TestCarelessClientMeetsTheQueuesRefusal(t *testing.T) {
	sc := scenarios.Boundaries()
	budget := sc.Tasks[6]
	require.Equal(t, "careless-budget", budget.Name)
	sc.Tasks = []scenarios.Task{budget}
	w := newTestWorld(t, sc)
	id := submitAll(t, w)[0]
	var outs []string
	for range 4 {
		outs = append(outs, w.carelessAct())
		require.Nil(t, w.checker.check())
	}
	require.Contains(t, outs[0], "claimed "+id)
	require.Contains(t, outs[1], "step 0 cost 3")
	require.Contains(t, outs[2], "step 1 cost 3")
	require.Contains(t, outs[3], "refused")
	require.Contains(t, outs[3], model.ErrBudgetExhausted.Error())
	task, err := w.task(id)
	require.NoError(t, err)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.BudgetExhausted, task.Reason)
	require.Equal(t, int64(6), task.CostUsed, "the refused step charged nothing")
	require.True(t, w.cover.cells[scenarios.RefusalCell(RefusalBudget)])
}

// A clock advance onto a boundary lands exactly on it (or 1 ms before),
// and the queue's lease check is inclusive: the careless client (which
// skips the worker's own lease check) has its step accepted 1 ms before
// lease_until and refused as stale at exactly lease_until.
func TestAdvanceToLandsOnTheBoundary(t *testing.T) {
	sc := scenarios.Boundaries()
	sc.Tasks = []scenarios.Task{sc.Tasks[6]}
	w := newTestWorld(t, sc)
	id := submitAll(t, w)[0]
	require.Contains(t, w.carelessAct(), "claimed "+id)
	task, err := w.task(id)
	require.NoError(t, err)
	require.Equal(t, "no-op: no deadline ahead", w.advanceTo(Event{Kind: EvAdvanceTo, Name: BoundaryDeadline}))
	require.Contains(t, w.advanceTo(Event{Kind: EvAdvanceTo, Name: BoundaryLease, Delay: time.Millisecond}), id)
	require.Equal(t, task.LeaseUntil.Add(-time.Millisecond), w.clock.Now())
	require.Contains(t, w.carelessAct(), "step 0 cost 3 task="+id+" fence=1 -> accepted")
	require.Contains(t, w.advanceTo(Event{Kind: EvAdvanceTo, Name: BoundaryLease}), id)
	require.Equal(t, task.LeaseUntil, w.clock.Now())
	out := w.carelessAct()
	require.Contains(t, out, "step 1 cost 3")
	require.Contains(t, out, model.ErrStaleClaim.Error())
	require.Nil(t, w.checker.check())
	require.Equal(t, "no-op: no lease_until ahead", w.advanceTo(Event{Kind: EvAdvanceTo, Name: BoundaryLease}))
}

// A graceful shutdown goes through the worker's own path: it releases its
// claim without charging an attempt, exits once drained, and a restart
// starts a new worker.
func TestShutdownReleasesAndExits(t *testing.T) {
	sc := scenarios.LateResult()
	w := newTestWorld(t, sc)
	id := submitAll(t, w)[0]
	require.Contains(t, w.step(0), "claimed="+id)
	require.Contains(t, w.shutdown(0), "draining 1 claims")
	require.Equal(t, "no-op: shutting down already", w.shutdown(0))
	out := w.step(0)
	require.Contains(t, out, "release")
	require.Contains(t, out, "drained and exited")
	require.Nil(t, w.checker.check())
	task, err := w.task(id)
	require.NoError(t, err)
	require.Equal(t, model.Queued, task.State)
	require.Zero(t, task.AttemptsCharged, "a release charges no attempt")
	require.Equal(t, "no-op: shut down", w.step(0))
	require.Equal(t, "restarted after its shutdown", w.restart(0))
	require.Contains(t, w.step(0), "claimed="+id)
}

// The operator's depth probe sets the cap one above the active tasks:
// the first probe submit fits, the second is refused as queue full, and
// the cap holds until the limits are restored.
func TestDepthProbeJustUnderAndOver(t *testing.T) {
	w := newTestWorld(t, scenarios.LateResult())
	submitAll(t, w)
	out := w.limit(LimitDepth)
	require.Contains(t, out, "depth_max 2: ok")
	require.Contains(t, out, "probe-1 accepted")
	require.Contains(t, out, "probe-2 refused")
	require.Contains(t, out, model.ErrQueueFull.Error())
	require.Nil(t, w.checker.check())
	require.Equal(t, 2, w.checker.limits.DepthMax, "the checker follows the limits in force")
	require.Contains(t, w.probeSubmit(probePayload), "refused")
	require.Equal(t, "restored", w.restoreLimits())
	require.Equal(t, w.base, w.checker.limits)
	require.Contains(t, w.probeSubmit(probePayload), "accepted")
	require.Equal(t, "no-op: limits unchanged", w.restoreLimits())
}

// The claim-batch probe asks for one task more than the stored batch (a
// bad request, refused) and then the batch itself, and releases what it
// got; the grant probe requeues over the maxima (refused) and at them.
func TestClaimBatchAndGrantProbes(t *testing.T) {
	w := newTestWorld(t, scenarios.Portfolio())
	submitAll(t, w)
	out := w.limit(LimitClaimBatch)
	require.Contains(t, out, "claim_batch_max 1: ok")
	require.Contains(t, out, "claim 2: "+`max: must be between 1 and 1, got 2`)
	require.Contains(t, out, "claim 1: 1 claimed")
	require.Equal(t, 1, strings.Count(out, "released to queued"), out)
	require.Nil(t, w.checker.check())

	out = w.limit(LimitGrant)
	require.Contains(t, out, "grant maxima cost 6 steps 2: ok")
	require.Contains(t, out, "grant cost 7 steps 2: grant_cost: ")
	require.Contains(t, out, fmt.Sprintf("grant cost 6 steps 2: requeue task %s", w.tasks[0].id))
	require.Contains(t, out, model.ErrInvalidTransition.Error())
	require.Nil(t, w.checker.check())
	l, _, err := w.readLimits()
	require.NoError(t, err)
	require.Equal(t, w.base.GrantCostMax, l.GrantCostMax, "the grant maxima are put back at once")
}
