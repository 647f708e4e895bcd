package queue

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// pgBaselineEpoch is when writeBaselineSchema's tasks were written.
var pgBaselineEpoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// writeBaselineSchema migrates the schema at url as a build at the
// baseline did, before migration 0002 gave tasks their kinds: the
// baseline migration, and that build's functions (version 3, kept in
// testdata), each recorded. It then writes through that build's
// statements: ana (running limit 1) with t_a1 claimed and t_a2 queued, bob
// with t_b1 queued and a schedule.
func writeBaselineSchema(ctx context.Context, url string) error {
	build := pgOldBuild{Migrations: 1, Functions: "pg-functions-v3.sql", FunctionsVersion: 3, At: pgBaselineEpoch}
	return writeOldPostgres(ctx, url, build, func(w pgOldWriter) []func() error {
		steps := []func() error{w.exec("INSERT INTO users (user_id, running_max) VALUES ('ana', 1)")}
		for _, task := range []struct{ id, user string }{{"t_a1", "ana"}, {"t_a2", "ana"}, {"t_b1", "bob"}} {
			steps = append(steps, w.submit(task.id, `SELECT outcome FROM submit_one($1, $2, $3, 'h', '{}', 0, $4, 0, $4, 10, 5, '', 0, $2, '', true)`,
				task.id, task.user, "k-"+task.id, w.now))
		}
		return append(steps, func() error {
			var id string
			return w.db.QueryRowContext(ctx, "SELECT id FROM claim_batch($1, 1, 'w1', $2)", w.now, w.now+60_000).Scan(&id)
		}, w.exec(`INSERT INTO schedules (id, user_id, payload, cost_budget, steps_max, priority, origin, period_ms, created_at)
			VALUES ('s_1', 'bob', '{}', 10, 5, 0, $1, 3600000, $1)`, w.now))
	})
}

// TestPostgresUpgradesBaselineToKinds opens, with this build, a schema a
// build at the baseline wrote: its tasks and schedule become synthetic,
// the counters agree with a recount, the per-user limit still holds, new
// tasks take their kinds, and the schema is then a fresh one's object for
// object.
func TestPostgresUpgradesBaselineToKinds(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.Fresh(t, writeBaselineSchema)
	clock := clockwork.NewFakeClockAt(pgBaselineEpoch.Add(time.Second))
	q, err := Open(ctx, Options{Path: dbURL, Clock: clock, IDs: model.NewSeededIDs(1), Migrate: MigrateAll})
	require.NoError(t, err)
	defer q.Close()
	applied, pending, err := Inspect(ctx, dbURL)
	require.NoError(t, err)
	require.Empty(t, pending)
	require.Len(t, applied, len(pinnedPostgresMigrations))
	require.NoError(t, q.CheckCounters(ctx))

	first, err := q.Task(ctx, "t_a1")
	require.NoError(t, err)
	require.Equal(t, model.Running, first.State)
	for _, id := range []string{"t_a1", "t_a2", "t_b1"} {
		task, err := q.Task(ctx, id)
		require.NoError(t, err)
		require.Equal(t, model.KindSynthetic, task.Kind, id)
	}
	schedules, err := q.Schedules(ctx)
	require.NoError(t, err)
	require.Len(t, schedules, 1)
	require.Equal(t, model.KindSynthetic, schedules[0].Kind)

	// ana runs t_a1 at her limit of one: only bob's task is claimable.
	claimed, err := q.Claim(ctx, model.ClaimRequest{Worker: "w2", Max: 2, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, "t_b1", claimed[0].Claim.TaskID)

	res, err := q.Submit(ctx, model.SubmitRequest{User: "bob", Key: "r1", Kind: "report", Payload: `{"day":1}`,
		CostBudget: 5, StepsMax: 1})
	require.NoError(t, err)
	task, err := q.Task(ctx, res.TaskID)
	require.NoError(t, err)
	require.Equal(t, "report", task.Kind)
	require.NoError(t, q.CheckCounters(ctx))
	require.Equal(t, describeSchema(ctx, t, pgtest.Fresh(t, migratePostgresURL)), describeSchema(ctx, t, dbURL))
}

// TestListAndTrailByKind: tasks keep the kind they were submitted with
// (synthetic when none is named), a page lists one kind's tasks by every
// way a page is read, and the trail names each event's task's kind.
func TestListAndTrailByKind(t *testing.T) {
	stores(t, func(t *testing.T, store string) {
		ctx := context.Background()
		q, _ := openPrunable(t, store)
		submit := func(user, key, kind string) string {
			res, err := q.Submit(ctx, model.SubmitRequest{User: user, Key: key, Kind: kind, Payload: `{"steps":[]}`,
				CostBudget: 5, StepsMax: 2})
			require.NoError(t, err)
			return res.TaskID
		}
		a1 := submit("ana", "a1", "report")
		a2 := submit("ana", "a2", "")
		b1 := submit("bob", "b1", "report")
		b2 := submit("bob", "b2", "email")
		kinds := map[string]string{a1: "report", a2: model.KindSynthetic, b1: "report", b2: "email"}
		for id, kind := range kinds {
			task, err := q.Task(ctx, id)
			require.NoError(t, err)
			require.Equal(t, kind, task.Kind, id)
		}
		for _, c := range []struct {
			name string
			f    PageFilter
			want []string
		}{
			{"every user", PageFilter{Kind: "report"}, []string{a1, b1}},
			{"one user", PageFilter{Kind: "report", User: "bob"}, []string{b1}},
			{"some users", PageFilter{Kind: "report", Users: []string{"ana"}}, []string{a1}},
			{"newest", PageFilter{Kind: "report", Newest: true}, []string{b1, a1}},
			{"one user newest", PageFilter{Kind: model.KindSynthetic, User: "ana", Newest: true}, []string{a2}},
			{"some users newest", PageFilter{Kind: "email", Users: []string{"ana", "bob"}, Newest: true}, []string{b2}},
			{"no such kind", PageFilter{Kind: "nothing"}, []string{}},
			{"every kind", PageFilter{}, []string{a1, a2, b1, b2}},
		} {
			page, err := q.ListPage(ctx, c.f)
			require.NoError(t, err, c.name)
			require.Equal(t, c.want, ids(page.Tasks), c.name)
		}
		_, err := q.ListPage(ctx, PageFilter{Kind: "Not A Kind"})
		require.ErrorIs(t, err, ErrInvalidInput)
		byKind, err := q.QueuedByKind(ctx)
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"report": 2, model.KindSynthetic: 1, "email": 1}, byKind)

		for _, f := range []EventFilter{{}, {Users: []string{"ana", "bob"}}, {TaskID: b2}} {
			events, err := q.EventsSince(ctx, f)
			require.NoError(t, err)
			require.NotEmpty(t, events)
			for _, e := range events {
				require.Equal(t, kinds[e.TaskID], e.TaskKind, "event %d of %s", e.Seq, e.TaskID)
			}
		}
	})
}

// TestWaitTask: the library's long-poll returns the task once it has an
// event past the sequence number given (at once when it has), with its
// latest event's number; it returns the context's error when the context
// ends first, and refuses a task that does not exist.
func TestWaitTask(t *testing.T) {
	b := setup(t)
	id := b.submit()
	task, seq, err := b.q.WaitTask(b.ctx, id, 0)
	require.NoError(t, err)
	require.Equal(t, model.Queued, task.State)
	require.Positive(t, seq)

	ended, cancel := context.WithCancel(b.ctx)
	cancel()
	_, _, err = b.q.WaitTask(ended, id, seq)
	require.ErrorIs(t, err, context.Canceled, "nothing past seq: it waits until the context ends")

	done := make(chan error, 1)
	var waited model.Task
	var waitedSeq int64
	go func() {
		var err error
		waited, waitedSeq, err = b.q.WaitTask(b.ctx, id, seq)
		done <- err
	}()
	c := b.claim("w1")
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("WaitTask did not return after the task was claimed")
	}
	require.Equal(t, model.Running, waited.State)
	require.Equal(t, c.Claim.Fence, waited.Version)
	require.Greater(t, waitedSeq, seq)

	_, _, err = b.q.WaitTask(b.ctx, "t_nosuchtask", 0)
	require.ErrorIs(t, err, ErrNotFound)
	_, _, err = b.q.WaitTask(b.ctx, id, -1)
	require.ErrorIs(t, err, ErrInvalidInput)
}

// TestKindsThroughBatchesAndSchedules: a batch's tasks keep each its own
// kind, and a schedule's runs take the schedule's kind, on both stores.
func TestKindsThroughBatchesAndSchedules(t *testing.T) {
	stores(t, func(t *testing.T, store string) {
		ctx := context.Background()
		q, clock := openPrunable(t, store)
		var reqs []model.SubmitRequest
		for i, kind := range []string{"report", "", "email"} {
			reqs = append(reqs, model.SubmitRequest{User: "ana", Key: fmt.Sprintf("b%d", i), Kind: kind, Payload: `{"steps":[]}`,
				CostBudget: 5, StepsMax: 2})
		}
		results, err := q.SubmitMany(ctx, reqs)
		require.NoError(t, err)
		for i, want := range []string{"report", model.KindSynthetic, "email"} {
			task, err := q.Task(ctx, results[i].TaskID)
			require.NoError(t, err)
			require.Equal(t, want, task.Kind)
		}
		again, err := q.SubmitMany(ctx, reqs)
		require.NoError(t, err)
		for i := range again {
			require.True(t, again[i].Replay, "the same batch again replays, kinds and all")
		}

		s, err := q.AddSchedule(ctx, model.ScheduleSpec{User: "bob", Kind: "report", Payload: `{"day":1}`, CostBudget: 5,
			StepsMax: 1, Origin: clock.Now(), Period: time.Hour}, "ops")
		require.NoError(t, err)
		require.Equal(t, "report", s.Kind)
		schedules, err := q.Schedules(ctx)
		require.NoError(t, err)
		require.Equal(t, "report", schedules[0].Kind)
		res, err := q.EnqueueDue(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Enqueued)
		page, err := q.ListPage(ctx, PageFilter{ScheduleID: s.ID})
		require.NoError(t, err)
		require.Len(t, page.Tasks, 1)
		require.Equal(t, "report", page.Tasks[0].Kind, "a schedule's run takes the schedule's kind")
	})
}
