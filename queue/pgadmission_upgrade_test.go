package queue

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// writeKindsSchema migrates the schema at url as a build at schema
// version 2 did, before migration 0003 (admission by slots): migrations
// 0001 and 0002, and that build's functions (version 4, kept in
// testdata), each recorded. It then submits through that build's
// submit_one, under admission's one exclusive lock: ana's t_a1 and t_a2,
// bob's t_b1.
func writeKindsSchema(ctx context.Context, url string) error {
	build := pgOldBuild{Migrations: 2, Functions: "pg-functions-v4.sql", FunctionsVersion: 4, At: pgBaselineEpoch}
	return writeOldPostgres(ctx, url, build, func(w pgOldWriter) []func() error {
		var steps []func() error
		for _, task := range []struct{ id, user string }{{"t_a1", "ana"}, {"t_a2", "ana"}, {"t_b1", "bob"}} {
			steps = append(steps, w.submit(task.id, `SELECT outcome FROM submit_one($1, $2, $3, 'h', 'report', '{}', 0, $4, 0, $4, 10, 5, '', 0, $2, '', true)`,
				task.id, task.user, "k-"+task.id, w.now))
		}
		return steps
	})
}

// TestPostgresUpgradesKindsToAdmissionSlots opens, with this build, a
// schema a build at schema version 2 wrote: migration 0003 gives it its
// slots' size, the counters agree with a recount, the caps hold on the
// tasks it wrote (a submit far from them is admitted, one at the global
// cap refused with the exact count), and the schema is then a fresh
// one's object for object.
func TestPostgresUpgradesKindsToAdmissionSlots(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.Fresh(t, writeKindsSchema)
	clock := clockwork.NewFakeClockAt(pgBaselineEpoch.Add(time.Second))
	q, err := Open(ctx, Options{Path: dbURL, Clock: clock, IDs: model.NewSeededIDs(1), Migrate: MigrateAll})
	require.NoError(t, err)
	defer q.Close()
	applied, pending, err := Inspect(ctx, dbURL)
	require.NoError(t, err)
	require.Empty(t, pending)
	require.Len(t, applied, len(pinnedPostgresMigrations))
	require.Equal(t, "0003_admission_slots.sql", applied[2].Name)
	var slotTasks int
	require.NoError(t, q.db.QueryRowContext(ctx, "SELECT value FROM settings WHERE key = 'admission_slot_tasks'").Scan(&slotTasks))
	require.Equal(t, 64, slotTasks)
	require.NoError(t, q.CheckCounters(ctx))

	submit := func(user, key string) error {
		_, err := q.Submit(ctx, model.SubmitRequest{User: user, Key: key, Payload: `{}`, CostBudget: 5, StepsMax: 1})
		return err
	}
	require.NoError(t, submit("ana", "a3"), "far from the caps")
	limits, _, err := q.Limits(ctx)
	require.NoError(t, err)
	limits.DepthMax = 5
	require.NoError(t, q.SetLimits(ctx, limits, "test"))
	require.NoError(t, submit("bob", "b2"), "the fifth task")
	err = submit("bob", "b3")
	require.ErrorIs(t, err, ErrQueueFull)
	require.Contains(t, err.Error(), "5 active tasks (limit 5)")
	require.NoError(t, q.CheckCounters(ctx))
	require.Equal(t, describeSchema(ctx, t, pgtest.Fresh(t, migratePostgresURL)), describeSchema(ctx, t, dbURL))
}
