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

// pgClaimBenchTasks is how many tasks BenchmarkPostgresClaimUnanalysed
// loads at once into a new schema: the case that once took 8 s a claim.
const pgClaimBenchTasks = 3000

// BenchmarkPostgresClaimUnanalysed prices a claim on a schema that took
// pgClaimBenchTasks tasks in one bulk load and was never analysed (the
// planner then plans from guesses), and the same claims once the schema is
// analysed, in the same run: ms/claim+complete-unanalysed and ms/claim+complete-analysed.
// Run it with LEASEHOLD_TEST_POSTGRES set:
//
//	go test -run '^$' -bench PostgresClaimUnanalysed -benchtime 200x ./queue
func BenchmarkPostgresClaimUnanalysed(b *testing.B) {
	url := pgtest.Fresh(b, migratePostgresURL)
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	q, err := Open(ctx, Options{Path: url, Clock: clock, IDs: model.NewSeededIDs(1)})
	require.NoError(b, err)
	defer q.Close()
	limits, _, err := q.Limits(ctx)
	require.NoError(b, err)
	limits.UserRunningMax = 50
	require.NoError(b, q.SetLimits(ctx, limits, "bench"))
	for start := 0; start < pgClaimBenchTasks; start += 500 {
		var reqs []model.SubmitRequest
		for i := start; i < start+500; i++ {
			reqs = append(reqs, model.SubmitRequest{User: fmt.Sprintf("u%d", i%4), Key: fmt.Sprintf("k%d", i),
				Payload: `{"n":1}`, CostBudget: 10, StepsMax: 10})
		}
		_, err := q.SubmitMany(ctx, reqs)
		require.NoError(b, err)
	}
	claims := min(b.N, pgClaimBenchTasks/2)
	claimAll := func(worker string) time.Duration {
		return lapOf(b, func() {
			for i := range claims {
				got, err := q.Claim(ctx, model.ClaimRequest{Worker: fmt.Sprintf("%s-%d", worker, i), Max: 1, Lease: time.Minute})
				require.NoError(b, err)
				require.Len(b, got, 1)
				require.NoError(b, q.Complete(ctx, got[0].Claim))
			}
		})
	}
	b.ResetTimer()
	unanalysed := claimAll("cold")
	b.StopTimer()
	_, err = DBOf(q).ExecContext(ctx, "ANALYZE")
	require.NoError(b, err)
	b.StartTimer()
	analysed := claimAll("warm")
	perClaim := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(claims) }
	b.ReportMetric(perClaim(unanalysed), "ms/claim+complete-unanalysed")
	b.ReportMetric(perClaim(analysed), "ms/claim+complete-analysed")
	b.ReportMetric(0, "ns/op")
}

// lapOf returns how long fn took by the benchmark's timer.
func lapOf(b *testing.B, fn func()) time.Duration {
	before := b.Elapsed()
	fn()
	return b.Elapsed() - before
}
