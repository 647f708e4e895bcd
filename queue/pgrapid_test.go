package queue

import (
	"context"
	"flag"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/leasehold/leasehold/internal/pgtest"
)

// keepPristine saves, beside a freshly migrated schema, the rows its
// migrations seeded, so that resetPostgres can empty it quickly.
func keepPristine(ctx context.Context, url string) error {
	if err := migratePostgresURL(ctx, url); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE pristine_settings AS TABLE settings;
CREATE TABLE pristine_tallies AS SELECT name, n, sum_ms FROM tally_deltas`)
	return err
}

// resetPostgres empties a schema keepPristine set up, back to its state
// just after migrating (sequences restarted), far quicker than making a
// new one: rapid runs a hundred queues, one after another.
func resetPostgres(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `TRUNCATE effects, events, tasks, task_keys, idem_tombstones, schedules, users, user_deltas, tally_deltas, settings;
INSERT INTO settings SELECT * FROM pristine_settings;
INSERT INTO tally_deltas (name, n, sum_ms) SELECT name, n, sum_ms FROM pristine_tallies;
ALTER SEQUENCE tasks_seq RESTART;
ALTER SEQUENCE events_seq RESTART`)
	return err
}

// pgRapidChecks is how many checks TestRapidPostgresMatchesReference runs
// when neither RAPID_CHECKS nor -rapid.checks asks for a number: each
// check is a few hundred committed transactions on a server (about 3 s
// here), so make test runs a dozen and make rapid RAPID_CHECKS=N the rest.
const pgRapidChecks = "12"

// TestRapidPostgresMatchesReference is TestRapidQueueMatchesReference on
// the PostgreSQL store: the same random operations, every row, event and
// figure compared with the reference model after each one. Each check
// starts from an emptied schema.
func TestRapidPostgresMatchesReference(t *testing.T) {
	url := pgtest.Fresh(t, keepPristine)
	checks := flag.Lookup("rapid.checks")
	reduced := os.Getenv("RAPID_CHECKS") == "" && checks.Value.String() == checks.DefValue
	if reduced {
		require.NoError(t, flag.Set("rapid.checks", pgRapidChecks))
		t.Cleanup(func() { require.NoError(t, flag.Set("rapid.checks", checks.DefValue)) })
	}
	ctx := context.Background()
	counts := &actionCounts{ran: map[string]int{}, accepted: map[string]int{}}
	rapid.Check(t, func(t *rapid.T) {
		require.NoError(t, resetPostgres(ctx, url))
		m := newMachineAt(t, counts, url)
		defer m.q.Close()
		t.Repeat(m.actions(t))
	})
	if reduced {
		// A dozen checks agree with the reference but need not reach every
		// action's acceptance; TestRapidQueueMatchesReference, with the same
		// machine and a hundred checks, holds the machine to that.
		t.Logf("%s checks: the actions' coverage is checked only when RAPID_CHECKS or -rapid.checks is set", pgRapidChecks)
		return
	}
	reportCounts(t, counts, []string{"changed_payload", "reap", "enqueue_due"})
}
