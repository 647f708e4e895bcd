package queue

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// pgKindsEpoch is when writeTrailSchema's tasks were written.
var pgKindsEpoch = time.Date(2026, 4, 1, 9, 0, 0, 0, time.UTC)

// writeTrailSchema migrates the schema at url as a build at schema version
// 2 did, before migrations 0003 (admission slots) and 0004 (task trails):
// migrations 0001 and 0002 and that build's functions (version 4, kept in testdata), each
// recorded. It then writes through that build's functions and statements:
// t_a, t_b and t_c submitted (ana, bob, bob); t_a and t_b claimed by w1
// (claim_batch, the claimed events inserted after it); t_a completed by
// complete_and_claim, which claims t_c for w1; an event of t_b's written
// alone, and an event of the queue's own (with no task).
func writeTrailSchema(ctx context.Context, url string) error {
	build := pgOldBuild{Migrations: 2, Functions: "pg-functions-v4.sql", FunctionsVersion: 4, At: pgKindsEpoch}
	return writeOldPostgres(ctx, url, build, func(w pgOldWriter) []func() error {
		now := w.now
		lease := now + time.Hour.Milliseconds()
		var steps []func() error
		for _, task := range []struct{ id, user string }{{"t_a", "ana"}, {"t_b", "bob"}, {"t_c", "bob"}} {
			steps = append(steps, w.submit(task.id, `SELECT outcome FROM submit_one($1, $2, $3, 'h', 'synthetic', '{}', 0, $4, 0, $4, 10, 5, '', 0, $2, '', true)`,
				task.id, task.user, "k-"+task.id, now))
		}
		const claimedEvent = `INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
		SELECT id, 'claimed', 1, 1, '', 'queued', 'running', '', 'w1', $1, '', '' FROM tasks WHERE state = 'running' ORDER BY seq`
		return append(steps,
			w.exec("SELECT id FROM claim_batch($1, 2, 'w1', $2, NULL)", now, lease),
			w.exec(claimedEvent, now),
			w.exec(`SELECT id FROM complete_and_claim($1, $2, $3, 1, 'w1', $4, '', NULL)`,
				fmt.Sprintf(`[["t_a", 1, %d]]`, now+10),
				fmt.Sprintf(`[["t_a", "completed", 1, 1, "", "running", "completed", "", "w1", %d, "", ""]]`, now+10),
				now+10, lease+10),
			w.exec(`INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
			VALUES ('t_b', 'heartbeat', 1, 1, '', 'running', 'running', '', 'w1', $1, '', ''),
			       ('', 'pruned', 0, 0, '', '', '', '', 'ops', $1, '', '')`, now+20))
	})
}

// trailEvent is what a test compares of an event.
type trailEvent struct {
	Seq  int64
	Kind string
}

// eventsByTaskID reads, from the events table itself, each task's events
// in seq order (” for the queue's own).
func eventsByTaskID(ctx context.Context, t *testing.T, raw *sql.DB) map[string][]trailEvent {
	t.Helper()
	rows, err := raw.QueryContext(ctx, "SELECT task_id, seq, kind FROM events ORDER BY seq")
	require.NoError(t, err)
	defer rows.Close()
	out := map[string][]trailEvent{}
	for rows.Next() {
		var id string
		var e trailEvent
		require.NoError(t, rows.Scan(&id, &e.Seq, &e.Kind))
		out[id] = append(out[id], e)
	}
	require.NoError(t, rows.Err())
	return out
}

func trailOf(events []model.Event) []trailEvent {
	out := []trailEvent{}
	for _, e := range events {
		out = append(out, trailEvent{Seq: e.Seq, Kind: string(e.Kind)})
	}
	return out
}

// requireTrails checks that every task's events, read by every reader of
// one task's events (Events, Audit, EventsSince naming the task), are
// exactly the events table's rows of that task in seq order, and that the
// task's trail holds exactly their seqs.
func requireTrails(ctx context.Context, t *testing.T, q *Queue, raw *sql.DB, ids ...string) {
	t.Helper()
	want := eventsByTaskID(ctx, t, raw)
	for _, id := range ids {
		events, err := q.Events(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want[id], trailOf(events), "Events(%s)", id)
		audit, err := q.Audit(ctx, AuditFilter{TaskID: id})
		require.NoError(t, err)
		require.Equal(t, want[id], trailOf(audit), "Audit(%s)", id)
		since, err := q.EventsSince(ctx, EventFilter{TaskID: id, Limit: 100})
		require.NoError(t, err)
		got := []trailEvent{}
		for _, e := range since {
			got = append(got, trailEvent{Seq: e.Seq, Kind: string(e.Kind)})
		}
		require.Equal(t, want[id], got, "EventsSince(%s)", id)
		trail := []int64{}
		rows, err := raw.QueryContext(ctx, "SELECT unnest(trail) FROM tasks WHERE id = $1", id)
		require.NoError(t, err)
		for rows.Next() {
			var s int64
			require.NoError(t, rows.Scan(&s))
			trail = append(trail, s)
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
		seqs := []int64{}
		for _, e := range want[id] {
			seqs = append(seqs, e.Seq)
		}
		require.ElementsMatch(t, seqs, trail, "trail of %s", id)
	}
}

// TestPostgresUpgradesToTaskTrails opens, with this build, a schema a
// build at version 2 wrote (migration 0004 gives each task its trail and
// drops events_task): every task's trail holds exactly its events, each
// reader of a task's events sees them in seq order, new events of every
// writer join the trail, a prune removes the pruned task's events and no
// other, and the schema is then a fresh one's object for object.
func TestPostgresUpgradesToTaskTrails(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.Fresh(t, writeTrailSchema)
	raw, err := sql.Open("pgx", dbURL)
	require.NoError(t, err)
	defer raw.Close()
	before := eventsByTaskID(ctx, t, raw)
	require.Len(t, before["t_a"], 3, "submitted, claimed, completed")
	require.Len(t, before["t_b"], 3, "submitted, claimed, heartbeat")
	require.Len(t, before["t_c"], 2, "submitted, claimed")
	require.Len(t, before[""], 1)

	clock := clockwork.NewFakeClockAt(pgKindsEpoch.Add(time.Second))
	q, err := Open(ctx, Options{Path: dbURL, Clock: clock, IDs: model.NewSeededIDs(3), Migrate: MigrateAll})
	require.NoError(t, err)
	defer q.Close()
	_, pending, err := Inspect(ctx, dbURL)
	require.NoError(t, err)
	require.Empty(t, pending)
	require.NoError(t, q.CheckCounters(ctx))
	require.Equal(t, before, eventsByTaskID(ctx, t, raw), "the upgrade changes no event")
	requireTrails(ctx, t, q, raw, "t_a", "t_b", "t_c")
	require.Equal(t, describeSchema(ctx, t, pgtest.Fresh(t, migratePostgresURL)), describeSchema(ctx, t, dbURL))

	// The upgraded tasks' new events join their trails: t_b completed
	// alone, t_c completed with a claim of a new task in the same write.
	tasks := map[string]model.Task{}
	for _, id := range []string{"t_b", "t_c"} {
		task, err := q.Task(ctx, id)
		require.NoError(t, err)
		tasks[id] = task
	}
	claimOf := func(task model.Task) model.Claim {
		return model.Claim{TaskID: task.ID, Owner: task.Owner, Fence: task.Version, Attempt: int(task.Version),
			LeaseUntil: task.LeaseUntil}
	}
	require.NoError(t, q.Complete(ctx, claimOf(tasks["t_b"])))
	res, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: "k-t_d", Payload: `{}`, CostBudget: 5, StepsMax: 2})
	require.NoError(t, err)
	claimed, err := q.CompleteAndClaim(ctx, claimOf(tasks["t_c"]), model.ClaimRequest{Worker: "w2", Max: 1, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, res.TaskID, claimed[0].Claim.TaskID)
	// A stale write's refusal is an event of its own, of the task.
	require.ErrorIs(t, q.Complete(ctx, claimOf(tasks["t_c"])), ErrStaleClaim)
	requireTrails(ctx, t, q, raw, "t_a", "t_b", "t_c", res.TaskID)
	after := eventsByTaskID(ctx, t, raw)
	require.Equal(t, "completed", after["t_b"][len(after["t_b"])-1].Kind)
	require.Len(t, after[res.TaskID], 2, "submitted, claimed")

	// A prune removes t_a's events with it and leaves every other event:
	// t_a, settled before the cutoff, goes; t_b and t_c, settled a
	// second after the epoch, after it.
	pruned, err := q.Prune(ctx, PruneRequest{OlderThan: 500 * time.Millisecond, Actor: "ops"})
	require.NoError(t, err)
	require.Equal(t, int64(1), pruned.Tasks[model.Completed])
	require.Equal(t, int64(len(before["t_a"])), pruned.Events)
	left := eventsByTaskID(ctx, t, raw)
	require.NotContains(t, left, "t_a")
	for _, id := range []string{"t_b", "t_c", res.TaskID} {
		require.Equal(t, after[id], left[id], id)
	}
	require.Len(t, left[""], len(after[""])+1, "the prune's own event")
	requireTrails(ctx, t, q, raw, "t_b", "t_c", res.TaskID)
	require.NoError(t, q.CheckCounters(ctx))
}
