package queue_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/queue/queuetest"
)

// migratePostgres is the pgtest.Setup of the PostgreSQL suites: Open
// migrates the new schema.
func migratePostgres(ctx context.Context, url string) error {
	q, err := queue.Open(ctx, queue.Options{Path: url, Clock: clockwork.NewFakeClockAt(conformanceEpoch),
		IDs: model.NewSeededIDs(1)})
	if err != nil {
		return err
	}
	return q.Close()
}

// openPostgres returns a harness opener for a PostgreSQL queue on a fresh
// schema per subtest. After each subtest the counters the triggers keep
// are checked against a recount.
//
// Each subtest has a schema and a clock of its own, so subtests run in
// parallel: the suite's time is the server's commit latency, not CPU.
func openPostgres(t *testing.T) queuetest.Harness {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.Fresh(t, migratePostgres)
	clock := clockwork.NewFakeClockAt(conformanceEpoch)
	q, err := queue.Open(ctx, queue.Options{Path: url, Clock: clock, IDs: model.NewSeededIDs(1),
		Rand: rand.New(rand.NewPCG(1, 2))})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, q.CheckCounters(ctx))
		require.NoError(t, q.Close())
	})
	return queuetest.Harness{Store: q, Clock: clock}
}

func TestConformancePostgres(t *testing.T) {
	pgtest.ServerURL(t)
	queuetest.Exercise(t, openPostgres)
}
