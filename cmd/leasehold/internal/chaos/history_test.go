package chaos

// The checker must see what a bug would do: a history of claims and fenced
// writes passes as it is, and fails with one stale write planted in it;
// the judge counts each kind of violation planted in a lane's evidence.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker/workertest"
)

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// trail builds events of one task, one millisecond apart, numbered in order.
type trail struct {
	events []model.Event
}

func (t *trail) add(ms int64, kind model.EventKind, actor string, fence int64, from, to model.State) {
	t.events = append(t.events, model.Event{Seq: int64(len(t.events) + 1), TaskID: "t_1", Kind: kind, Actor: actor, Fence: fence,
		Attempt: int(fence), From: from, To: to, At: epoch.Add(time.Duration(ms) * time.Millisecond)})
}

// takeover is a clean history: w1 claims, runs a step, stalls; the reaper
// requeues the task, w2 claims it and completes it; w1's late write is
// refused.
func takeover() *trail {
	t := &trail{}
	t.add(0, model.EventSubmitted, callerActor, 0, "", model.Queued)
	t.add(10, model.EventClaimed, "w1", 1, model.Queued, model.Running)
	t.add(20, model.EventStep, "w1", 1, model.Running, model.Running)
	t.add(30, model.EventEffectIntent, "w1", 1, model.Running, model.Running)
	t.add(2100, model.EventLeaseExpired, model.ReaperActor, 1, model.Running, model.Queued)
	t.add(2200, model.EventClaimed, "w2", 2, model.Queued, model.Running)
	t.add(2300, model.EventEffectReceipt, "w2", 2, model.Running, model.Running)
	t.add(2400, model.EventStaleWrite, "w1", 1, model.Running, model.Running)
	t.add(2500, model.EventStep, "w2", 2, model.Running, model.Running)
	t.add(2600, model.EventCompleted, "w2", 2, model.Running, model.Completed)
	return t
}

var workers = []string{"w1", "w2"}

func TestLinearizableHistoryPasses(t *testing.T) {
	t.Parallel()
	h := takeover()
	require.Equal(t, PorcupineOK, CheckLinearizable(History(entries(h.events, workers))))
	require.Empty(t, replay(entries(h.events, workers)))
}

// One stale write planted: w1's late step accepted under fence 1 after w2
// claimed the task with fence 2. Porcupine finds no order of the
// operations that the register allows, and the replay names the write.
func TestOneStaleWritePlantedIsFlagged(t *testing.T) {
	t.Parallel()
	h := takeover()
	h.add(2450, model.EventStep, "w1", 1, model.Running, model.Running)
	require.Equal(t, PorcupineIllegal, CheckLinearizable(History(entries(h.events, workers))))
	bad := replay(entries(h.events, workers))
	require.Len(t, bad, 1)
	require.Equal(t, "w1", bad[0].Event.Actor)
	require.Equal(t, int64(1), bad[0].Event.Fence)

	// The same stale write made by the current owner's name under the old
	// fence, or under the current fence by another worker, is flagged too.
	for _, plant := range []struct {
		actor string
		fence int64
	}{{"w2", 1}, {"w1", 2}} {
		h := takeover()
		h.add(2450, model.EventStep, plant.actor, plant.fence, model.Running, model.Running)
		require.Equal(t, PorcupineIllegal, CheckLinearizable(History(entries(h.events, workers))), "%+v", plant)
	}
}

// A claim that skips a fence, or claims a task that is not queued, breaks
// the register.
func TestClaimsMustFollowTheRegister(t *testing.T) {
	t.Parallel()
	skip := &trail{}
	skip.add(0, model.EventSubmitted, callerActor, 0, "", model.Queued)
	skip.add(10, model.EventClaimed, "w1", 2, model.Queued, model.Running)
	require.Equal(t, PorcupineIllegal, CheckLinearizable(History(entries(skip.events, workers))))

	twice := &trail{}
	twice.add(0, model.EventSubmitted, callerActor, 0, "", model.Queued)
	twice.add(10, model.EventClaimed, "w1", 1, model.Queued, model.Running)
	twice.add(20, model.EventClaimed, "w2", 2, model.Queued, model.Running)
	require.Equal(t, PorcupineIllegal, CheckLinearizable(History(entries(twice.events, workers))))
	require.Len(t, replay(entries(twice.events, workers)), 1)
}

// Events of one millisecond are concurrent for porcupine: a step and the
// completion committed in the same millisecond pass in either order of
// the trail.
func TestEventsOfOneMillisecondAreConcurrent(t *testing.T) {
	t.Parallel()
	h := &trail{}
	h.add(0, model.EventSubmitted, callerActor, 0, "", model.Queued)
	h.add(10, model.EventClaimed, "w1", 1, model.Queued, model.Running)
	h.add(20, model.EventCompleted, "w1", 1, model.Running, model.Completed)
	h.add(20, model.EventStep, "w1", 1, model.Running, model.Running)
	require.Equal(t, PorcupineOK, CheckLinearizable(History(entries(h.events, workers))))
}

func TestJudgeCountsEachViolation(t *testing.T) {
	t.Parallel()
	clean := evidence{
		Workers:  workers,
		Accepted: []string{"t_1"},
		Tasks:    []model.Task{{ID: "t_1", State: model.Completed, CostBudget: 5, CostUsed: 3, StepsMax: 3, StepsUsed: 2}},
		Events:   takeover().events,
		Effects:  []model.Effect{{OpID: "t_1.s1", TaskID: "t_1", Step: 1, IntentFence: 1}},
		Applied:  map[string]int{"t_1.s1": 1},
	}
	f := judge(clean)
	require.Zero(t, f.Lost+f.Duplicated+f.Unexpected+f.StaleAccepted+f.Overspent, "%+v", f)

	planted := clean
	planted.Accepted = []string{"t_1", "t_gone"}
	planted.Tasks = []model.Task{{ID: "t_1", State: model.Running, CostBudget: 5, CostUsed: 6, StepsMax: 3, StepsUsed: 2}}
	planted.Applied = map[string]int{"t_1.s1": 2, "t_1.s9": 1}
	stale := takeover()
	stale.add(2450, model.EventStep, "w1", 1, model.Running, model.Running)
	planted.Events = stale.events
	f = judge(planted)
	require.Equal(t, 2, f.Lost, "one missing, one still running: %v", f.Details)
	require.Equal(t, 1, f.Duplicated, f.Details)
	require.Equal(t, 1, f.Unexpected, f.Details)
	require.Equal(t, 1, f.StaleAccepted, f.Details)
	require.Equal(t, 1, f.Overspent, f.Details)
	require.Len(t, f.Details, 6)

	// An effect applied for the step a budget refused is overspending too.
	limited := clean
	limited.Tasks = []model.Task{{ID: "t_1", State: model.Failed, Reason: model.BudgetExhausted, CostBudget: 5, CostUsed: 3, StepsMax: 3, StepsUsed: 1}}
	f = judge(limited)
	require.Equal(t, 1, f.Overspent, f.Details)
	limited.Applied = map[string]int{}
	limited.Effects = []model.Effect{{OpID: "t_1.s1", TaskID: "t_1", Step: 1, IntentFence: 1}}
	f = judge(limited)
	require.Zero(t, f.Overspent, "an intent alone, never applied, spends nothing: %v", f.Details)
}

// A call is late when a newer claim of its task committed before the
// service answered it; the count goes by the service's answer.
func TestLateCallsAreThoseUnderAReplacedFence(t *testing.T) {
	t.Parallel()
	h := takeover() // w2 claims fence 2 at 2200 ms
	effects := []model.Effect{{OpID: "t_1.s1", TaskID: "t_1", Step: 1, IntentFence: 1}}
	at := func(ms int64) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }
	calls := []workertest.CallRecord{
		{OpID: "t_1.s1", Fence: 1, Outcome: workertest.Applied, At: at(40)},             // in time
		{OpID: "t_1.s1", Fence: 1, Outcome: workertest.RefusedStaleFence, At: at(2200)}, // same millisecond as the claim: not late
		{OpID: "t_1.s1", Fence: 1, Outcome: workertest.RefusedStaleFence, At: at(2250)}, // late
		{OpID: "t_1.s1", Fence: 2, Outcome: workertest.Deduplicated, At: at(2300)},      // the new claim's own
		{OpID: "t_1.s1", Fence: 1, Outcome: workertest.Deduplicated, At: at(2700)},      // late
	}
	require.Equal(t, map[string]int{string(workertest.RefusedStaleFence): 1, string(workertest.Deduplicated): 1}, lateCalls(calls, h.events, effects))
}
