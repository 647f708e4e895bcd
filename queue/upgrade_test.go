package queue

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// TestUpgradeFromSchemaV2 upgrades a database written at schema version 2
// (testdata/schema-v2.db: a task in every state) and proves that nothing
// was lost and that the paused and running tasks resume.
func TestUpgradeFromSchemaV2(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "prod.db")
	b, err := os.ReadFile(filepath.Join("testdata", "schema-v2.db"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))

	applied, pending, err := Inspect(ctx, path)
	require.NoError(t, err)
	require.Len(t, applied, 2)
	require.NotEmpty(t, pending)

	// What the old database holds, read before the upgrade.
	raw, _, err := openRaw(path, true)
	require.NoError(t, err)
	texts, err := queries()
	require.NoError(t, err)
	// Version 2 has no attempts_failed; the upgrade starts it at each task's
	// attempts charged, which is what this reads in its place.
	columns, err := forSchemaOf(ctx, raw, texts["task_columns"])
	require.NoError(t, err)
	require.Contains(t, columns, "attempts_charged AS attempts_failed")
	rows, err := raw.Query("SELECT " + columns + " FROM tasks ORDER BY seq")
	require.NoError(t, err)
	before, err := scanTasks(rows)
	require.NoError(t, err)
	var eventsBefore int
	require.NoError(t, raw.QueryRow("SELECT COUNT(*) FROM events").Scan(&eventsBefore))
	require.NoError(t, raw.Close())
	states := tasksByState(t, before)

	// A build at this version refuses the old schema until it is migrated.
	clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 14, 0, 0, 0, time.UTC)) // the fixture's leases (an hour from 12:00) have run out
	_, err = Open(ctx, Options{Path: path, Clock: clock, IDs: model.NewSeededIDs(9)})
	require.ErrorIs(t, err, ErrSchemaOutdated)
	q, err := Open(ctx, Options{Path: path, Clock: clock, IDs: model.NewSeededIDs(9), Migrate: MigrateAll})
	require.NoError(t, err)
	defer q.Close()
	require.NoError(t, q.CheckCounters(ctx))

	requireUpgraded(ctx, t, q, before, eventsBefore)
	requireResumes(ctx, t, q, clock, states)
	// New events carry the scope column the upgrade added.
	_, err = q.Cancel(model.WithScope(ctx, model.ScopeSubmit), states[model.Queued].ID, "caller")
	require.Error(t, err, "the queued task has completed by now")
	require.NoError(t, q.RecordOperatorEvent(model.WithScope(ctx, model.ScopeOperate), model.EventMigrated, "ops", "test"))
	audit, err := q.Audit(ctx, AuditFilter{Actor: "ops"})
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, model.ScopeOperate, audit[0].Scope)
	require.NoError(t, q.CheckCounters(ctx))
}

// tasksByState returns an upgrade fixture's tasks by state, asserting it
// holds a task in every state.
func tasksByState(t *testing.T, tasks []model.Task) map[model.State]model.Task {
	t.Helper()
	states := map[model.State]model.Task{}
	for _, task := range tasks {
		states[task.State] = task
	}
	require.Len(t, states, len(model.States()), "the fixture holds a task in every state")
	return states
}

// requireUpgraded asserts that q, just upgraded, holds every task of
// before field by field, as many events as the old schema held
// (eventsBefore), and the uncertain effect of the task under review.
func requireUpgraded(ctx context.Context, t *testing.T, q *Queue, before []model.Task, eventsBefore int) {
	t.Helper()
	after, err := q.List(ctx, model.ListFilter{Limit: model.ListLimitMax})
	require.NoError(t, err)
	require.Equal(t, before, after, "every task, field by field, survives the upgrade")
	events, err := q.Events(ctx, "")
	require.NoError(t, err)
	require.Len(t, events, eventsBefore)
	// Each task's events are found by task after the upgrade (migration
	// 0008 links the events written before it to their tasks' seqs).
	for _, task := range before {
		var want []model.Event
		for _, e := range events {
			if e.TaskID == task.ID {
				want = append(want, e)
			}
		}
		require.NotEmpty(t, want, "task %s has events in the fixture", task.ID)
		got, err := q.Events(ctx, task.ID)
		require.NoError(t, err)
		require.Equal(t, want, got, "task %s", task.ID)
	}
	states := tasksByState(t, before)
	effects, err := q.Effects(ctx, states[model.NeedsReview].ID)
	require.NoError(t, err)
	require.Len(t, effects, 1, "the uncertain effect's intent survives")
	require.False(t, effects[0].Receipted())
}

// requireResumes asserts that the upgraded fixture's unfinished tasks
// (states, by state) resume on q and complete: the paused one after
// approval at its checkpoint, the running one (its lease run out on clock
// before the upgrade) reaped and at its checkpoint, the queued one from
// its start, and no other task is claimed.
func requireResumes(ctx context.Context, t *testing.T, q *Queue, clock *clockwork.FakeClock, states map[model.State]model.Task) {
	t.Helper()
	waiting := states[model.WaitingForApproval]
	require.NoError(t, q.Approve(ctx, waiting.ID, waiting.ApprovalVersion, "approver"))
	res, err := q.Reap(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Expired)
	clock.Advance(time.Hour) // past the backoff
	resumed := map[string]int{}
	for range len(states) {
		cs, err := q.Claim(ctx, model.ClaimRequest{Worker: "w-new", Max: 1, Lease: time.Minute})
		require.NoError(t, err)
		if len(cs) == 0 {
			break
		}
		c := cs[0]
		resumed[c.Task.ID] = c.Task.StepsUsed
		_, err = q.CompleteStep(ctx, model.StepWrite{Claim: c.Claim, Index: c.Task.StepsUsed, Cost: 1})
		require.NoError(t, err)
		require.NoError(t, q.Complete(ctx, c.Claim))
	}
	require.Len(t, resumed, 3, "the waiting, running and queued tasks, and no other")
	require.Equal(t, waiting.StepsUsed, resumed[waiting.ID], "the paused task resumes after its gate")
	running := states[model.Running]
	require.Equal(t, running.StepsUsed, resumed[running.ID], "the running task resumes at its checkpoint")
	require.Equal(t, 0, resumed[states[model.Queued].ID], "the queued task starts")
	for _, id := range []string{waiting.ID, running.ID, states[model.Queued].ID} {
		task, err := q.Task(ctx, id)
		require.NoError(t, err)
		require.Equal(t, model.Completed, task.State)
	}
	require.NoError(t, q.CheckCounters(ctx))
}
