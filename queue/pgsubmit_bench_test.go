package queue

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// Rounds and sizes of BenchmarkPostgresSubmitAmongTallies.
const (
	pgTallyBenchRows    = 10000 // rows of other names waiting for compaction
	pgTallyBenchRounds  = 5
	pgTallyBenchSubmits = 200 // lone submits a round
)

// BenchmarkPostgresSubmitAmongTallies prices a lone submit (submit_one) on
// two schemas in the same run, in alternating rounds: one whose
// tally_deltas holds only what the submits add, and one that also holds
// pgTallyBenchRows rows of other names, as fused groups leave them between
// housekeeping's compactions. A submit reads the queue's active count from
// the active states' rows alone (pre-fold version 20), so the two should cost
// the same: ratio-among-tallies near 1 (2.03, rounds 1.67-2.44, when the
// count read the whole table). Run it with LEASEHOLD_TEST_POSTGRES set:
//
//	go test -run '^$' -bench PostgresSubmitAmongTallies -benchtime 1x ./queue
func BenchmarkPostgresSubmitAmongTallies(b *testing.B) {
	ctx := context.Background()
	open := func(rows int) *Queue {
		url := pgtest.Fresh(b, migratePostgresURL)
		q, err := Open(ctx, Options{Path: url, Clock: clockwork.NewFakeClockAt(time.UnixMilli(1000)), IDs: model.NewSeededIDs(1)})
		require.NoError(b, err)
		b.Cleanup(func() { q.Close() })
		_, err = DBOf(q).ExecContext(ctx, `INSERT INTO tally_deltas (name, n)
		    SELECT 'event:completed:running:completed:', 0 FROM generate_series(1, $1::INTEGER)`, rows)
		require.NoError(b, err)
		return q
	}
	plain, among := open(0), open(pgTallyBenchRows)
	next := 0
	round := func(q *Queue) float64 {
		d := lapOf(b, func() {
			for range pgTallyBenchSubmits {
				_, err := q.Submit(ctx, model.SubmitRequest{User: fmt.Sprintf("u%d", next%4), Key: fmt.Sprintf("k%d", next),
					Payload: `{}`, CostBudget: 1, StepsMax: 1})
				require.NoError(b, err)
				next++
			}
		})
		return float64(d.Microseconds()) / 1000 / pgTallyBenchSubmits
	}
	var plainMs, amongMs, ratios []float64
	b.ResetTimer()
	for range pgTallyBenchRounds {
		p, a := round(plain), round(among)
		plainMs, amongMs, ratios = append(plainMs, p), append(amongMs, a), append(ratios, a/p)
	}
	b.StopTimer()
	median := func(v []float64) float64 { // bench_test.go's is in queue_test
		s := slices.Clone(v)
		slices.Sort(s)
		return s[len(s)/2]
	}
	b.ReportMetric(median(plainMs), "ms/submit")
	b.ReportMetric(median(amongMs), "ms/submit-among-tallies")
	b.ReportMetric(median(ratios), "ratio-among-tallies")
	b.ReportMetric(0, "ns/op")
	b.Logf("submit among %d rows of other names against none: ratios %.2f (%d rounds of %d submits)",
		pgTallyBenchRows, ratios, pgTallyBenchRounds, pgTallyBenchSubmits)
}
