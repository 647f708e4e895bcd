package queue

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// pruneBenchTasks is how many completed tasks each BenchmarkPrune
// iteration prunes.
const pruneBenchTasks = 2000

// BenchmarkPrune prunes pruneBenchTasks completed tasks (each with its
// submitted, claimed and completed events) in batches of PruneBatchMax, on
// a SQLite file and, with a server, on PostgreSQL, and reports the rate.
func BenchmarkPrune(b *testing.B) {
	for _, store := range []string{"sqlite", "postgres"} {
		b.Run(store, func(b *testing.B) {
			ctx := context.Background()
			var path string
			if store == "postgres" {
				pgtest.ServerURL(b)
				path = pgtest.Fresh(b, migratePostgresURL)
			} else {
				path = filepath.Join(b.TempDir(), "prune.db")
			}
			clock := clockwork.NewFakeClockAt(epoch)
			q, err := Open(ctx, Options{Path: path, Clock: clock, IDs: model.NewSeededIDs(1), Synchronous: SynchronousFull})
			require.NoError(b, err)
			defer q.Close()
			var pruned, seconds float64
			for i := range b.N {
				b.StopTimer()
				fillCompleted(b, q, fmt.Sprintf("i%d-", i), pruneBenchTasks)
				_, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: fmt.Sprintf("i%d-newest", i), Payload: `{"steps":[]}`,
					CostBudget: 10, StepsMax: 5, RunAt: clock.Now().Add(10000 * time.Hour)}) // the newest task, which stays
				require.NoError(b, err)
				clock.Advance(48 * time.Hour)
				b.StartTimer()
				start := time.Now()
				res, err := q.Prune(ctx, PruneRequest{OlderThan: 24 * time.Hour, Actor: "bench"})
				seconds += time.Since(start).Seconds()
				require.NoError(b, err)
				require.Equal(b, int64(pruneBenchTasks), res.TaskCount())
				pruned += float64(res.TaskCount())
			}
			b.ReportMetric(pruned/seconds, "tasks/s")
			require.NoError(b, q.CheckCounters(ctx))
		})
	}
}

// fillCompleted submits n tasks under keys with prefix and completes them.
func fillCompleted(b *testing.B, q *Queue, prefix string, n int) {
	b.Helper()
	ctx := context.Background()
	for done := 0; done < n; {
		var reqs []model.SubmitRequest
		for k := 0; k < 500 && done+len(reqs) < n; k++ {
			reqs = append(reqs, model.SubmitRequest{User: "ana", Key: fmt.Sprintf("%s%d", prefix, done+len(reqs)),
				Payload: `{"steps":[]}`, CostBudget: 10, StepsMax: 5})
		}
		_, err := q.SubmitMany(ctx, reqs)
		require.NoError(b, err)
		for left := len(reqs); left > 0; {
			claimed, err := q.Claim(ctx, model.ClaimRequest{Worker: "w1", Max: 16, Lease: time.Minute})
			require.NoError(b, err)
			require.NotEmpty(b, claimed)
			for _, c := range claimed {
				require.NoError(b, q.Complete(ctx, c.Claim))
			}
			left -= len(claimed)
		}
		done += len(reqs)
	}
}
