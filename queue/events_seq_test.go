package queue

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// Every path that writes an event in the SQLite store (a submit, a bulk
// submit, a claim, a batched completion, a stale write, an operator
// event) links it to its task's seq (migration 0008), and reading one
// task's events, which goes by that seq, returns exactly the events that
// name the task, in order.
func TestEventsLinkedToTheirTasks(t *testing.T) {
	g := setupGroup(t)
	single := g.submit()
	results, err := g.q.SubmitMany(g.ctx, []model.SubmitRequest{
		{User: "bob", Key: "bulk-1", Payload: `{"steps":[]}`, CostBudget: 1, StepsMax: 1},
		{User: "bob", Key: "bulk-2", Payload: `{"steps":[]}`, CostBudget: 1, StepsMax: 1},
	})
	require.NoError(t, err)
	require.Len(t, results, 2)
	claimed := g.claimFor("w1", 2, testLease)
	require.Len(t, claimed, 2)
	var ops []func() error
	for _, c := range claimed {
		ops = append(ops, func() error {
			_, err := g.q.CompleteAndClaim(g.ctx, c.Claim, model.ClaimRequest{Worker: "w2", Max: 1, Lease: testLease})
			return err
		})
	}
	for _, err := range g.inGroup(nil, ops...) {
		require.NoError(t, err)
	}
	require.Equal(t, int64(2), g.q.stats.batched.Load(), "the completions' events went in one statement")
	stale := claimed[0].Claim
	require.ErrorIs(t, g.q.Complete(g.ctx, stale), ErrStaleClaim)
	require.NoError(t, g.q.RecordOperatorEvent(g.ctx, model.EventMigrated, "ops", "test"))

	var unlinked, linked, named int
	require.NoError(t, g.q.db.QueryRowContext(g.ctx, `SELECT
		(SELECT COUNT(*) FROM events e WHERE e.task_seq != COALESCE((SELECT t.seq FROM tasks t WHERE t.id = e.task_id), 0)),
		(SELECT COUNT(*) FROM events WHERE task_seq != 0),
		(SELECT COUNT(*) FROM events WHERE task_id != '')`).Scan(&unlinked, &linked, &named))
	require.Zero(t, unlinked, "an event's task_seq is its task's seq")
	require.Equal(t, named, linked, "every event that names a task is linked to it")

	all := g.events("")
	byTask := map[string][]model.Event{}
	for _, e := range all {
		if e.TaskID != "" {
			byTask[e.TaskID] = append(byTask[e.TaskID], e)
		}
	}
	require.Len(t, byTask, 3)
	require.Contains(t, byTask, single)
	for id, want := range byTask {
		require.Equal(t, want, g.events(id), "task %s", id)
		audit, err := g.q.Audit(g.ctx, AuditFilter{TaskID: id})
		require.NoError(t, err)
		require.Equal(t, want, audit, "task %s", id)
		var kinds []model.EventKind
		for _, e := range want {
			kinds = append(kinds, e.Kind)
		}
		require.Equal(t, model.EventSubmitted, kinds[0], "task %s: %v", id, kinds)
	}
	require.Empty(t, g.events("t_no_such_task"))
}
