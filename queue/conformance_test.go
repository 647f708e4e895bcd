package queue_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/queue/queuetest"
)

// conformanceEpoch is the fixed UTC instant the conformance suite's fake
// clocks start at.
var conformanceEpoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// openSQLite returns a harness opener for the SQLite queue at the path
// pathOf gives. After each subtest the counters the triggers keep are
// checked against a recount.
func openSQLite(pathOf func(t *testing.T) string) func(t *testing.T) queuetest.Harness {
	return func(t *testing.T) queuetest.Harness {
		ctx := context.Background()
		clock := clockwork.NewFakeClockAt(conformanceEpoch)
		q, err := queue.Open(ctx, queue.Options{Path: pathOf(t), Clock: clock, IDs: model.NewSeededIDs(1),
			Rand: rand.New(rand.NewPCG(1, 2))})
		require.NoError(t, err)
		t.Cleanup(func() {
			require.NoError(t, q.CheckCounters(ctx))
			require.NoError(t, q.Close())
		})
		return queuetest.Harness{Store: q, Clock: clock}
	}
}

func TestConformanceSQLiteMemory(t *testing.T) {
	queuetest.Exercise(t, openSQLite(func(*testing.T) string { return queue.Memory }))
}

func TestConformanceSQLiteFile(t *testing.T) {
	queuetest.Exercise(t, openSQLite(func(t *testing.T) string { return filepath.Join(t.TempDir(), "leasehold.db") }))
}

func TestConformanceReference(t *testing.T) {
	queuetest.Exercise(t, func(t *testing.T) queuetest.Harness {
		clock := clockwork.NewFakeClockAt(conformanceEpoch)
		ref := model.NewReference(model.ReferenceOptions{Clock: clock, IDs: model.NewSeededIDs(1),
			Rand: rand.New(rand.NewPCG(1, 2))})
		return queuetest.Harness{Store: refPruner{ref}, Clock: clock}
	})
}

// refPruner is the reference model with the queue's prune request: the
// request checked and its defaults filled as Prune does, then the
// reference's own prune.
type refPruner struct{ *model.Reference }

func (r refPruner) Prune(ctx context.Context, req queue.PruneRequest) (queue.PruneResult, error) {
	if err := req.Check(); err != nil {
		return queue.PruneResult{}, err
	}
	if req.KeepKeys == 0 {
		req.KeepKeys = queue.DefaultKeepKeys
	}
	if req.Batch == 0 {
		req.Batch = queue.PruneBatchMax
	}
	return r.Reference.Prune(ctx, model.PruneSpec{OlderThan: req.OlderThan, KeepKeys: req.KeepKeys,
		Batch: req.Batch, DryRun: req.DryRun, Actor: req.Actor})
}
