package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
)

// The task-kind cells: a claim of any valid kind's name and the fixed
// names are known, anything else is a typo; each reads back from its
// String form.
func TestTaskKindCells(t *testing.T) {
	for _, name := range []string{scenarios.ClaimedKind("render"), scenarios.ClaimedKind(model.KindSynthetic),
		scenarios.KindIdleOthersQueued, scenarios.KindClaimSeveral} {
		cell := scenarios.TaskKindCell(name)
		require.True(t, KnownCell(cell), "%s", cell)
		back, err := scenarios.ParseCell(cell.String())
		require.NoError(t, err)
		require.Equal(t, cell, back)
	}
	for _, name := range []string{scenarios.ClaimedKind(""), scenarios.ClaimedKind("Render!"), "idle"} {
		require.False(t, KnownCell(scenarios.TaskKindCell(name)), "%s", name)
	}
}

// In the long-running scenario each worker serves its own kinds and
// claims only them: with only render tasks queued, w1 (relay and
// synthetic) claims nothing, which is the idle cell, and leaves them to
// w0, which claims both. Each task is stored with the kind its request
// named.
func TestWorkersClaimOnlyTheirKinds(t *testing.T) {
	w := newTestWorld(t, scenarios.LongRunning())
	require.Equal(t, []string{"render", "synthetic"}, w.sc.Served(0))
	_, ok := w.workers[0].w.Config().Handler.(worker.Kinds)
	require.True(t, ok, "a worker given kinds runs a registry of them")
	var render []string
	for _, ts := range w.tasks {
		if ts.spec.Request.Kind != scenarios.KindRender {
			continue
		}
		require.Contains(t, w.script(ts), "replay=false")
		render = append(render, ts.id)
	}
	require.Len(t, render, 2)
	require.Nil(t, w.checker.check())

	out := w.step(1)
	require.Contains(t, out, "nothing due", out)
	require.True(t, w.cover.cells[scenarios.TaskKindCell(scenarios.KindIdleOthersQueued)])
	for _, id := range render {
		task, err := w.task(id)
		require.NoError(t, err)
		require.Equal(t, model.Queued, task.State)
		require.Equal(t, scenarios.KindRender, task.Kind)
	}

	out = w.step(0)
	require.Contains(t, out, "2 claimed", out)
	require.Nil(t, w.checker.check())
	require.True(t, w.cover.cells[scenarios.TaskKindCell(scenarios.ClaimedKind(scenarios.KindRender))])
	for _, id := range render {
		task, err := w.task(id)
		require.NoError(t, err)
		require.Equal(t, model.Running, task.State)
		require.Equal(t, "w0", task.Owner)
	}
}

// The lockstep's kind check reports a claim that took a task of a kind
// it does not name, and a worker's claim of a kind the scenario does not
// give it.
func TestClaimKindsChecked(t *testing.T) {
	var reported []string
	l := &lockstep{rows: map[string]model.Task{"t1": {ID: "t1", Kind: "render", State: model.Queued}},
		served: map[string][]string{"w1": {"relay"}}, cover: &recorder{},
		report: func(kind, taskID, detail string) { reported = append(reported, kind+" "+taskID+": "+detail) }}
	res := []model.Claimed{{Claim: model.Claim{TaskID: "t1"}}}
	l.checkKinds(model.ClaimRequest{Worker: "w1", Kinds: []string{"relay"}}, res, Epoch)
	require.Equal(t, []string{
		InvClaimKinds + " t1: claim by w1 naming kinds [relay] took a task of kind render",
		InvClaimKinds + " t1: worker w1 serving [relay] claimed a task of kind render",
	}, reported)
	reported = nil
	l.checkKinds(model.ClaimRequest{Worker: "careless"}, res, Epoch)
	require.Empty(t, reported, "a claim naming every kind, by no worker of the scenario, may take any")
}
