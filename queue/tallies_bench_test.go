package queue_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// eventsCountedWithoutKinds is events_counted as migration 0002 had it,
// before migration 0010 named each event's task kind in its count.
var eventsCountedWithoutKinds = []string{"DROP TRIGGER events_counted", `CREATE TRIGGER events_counted AFTER INSERT ON events
BEGIN
    INSERT INTO tallies (name, n)
    VALUES ('event:' || NEW.kind || ':' || NEW.from_state || ':' || NEW.to_state || ':' || NEW.reason, 1)
    ON CONFLICT (name) DO UPDATE SET n = n + 1;
END`}

// BenchmarkCountsByKind measures what counting events by their task's
// kind costs the hot path: intake (Queue.Submit, one commit a task) and
// work (Queue.CompleteAndClaim, the live worker's write) under NORMAL, on
// the schema as built and on a copy whose events_counted counts without
// kinds, in interleaved rounds in one process, each round alternating which
// goes first. It reports the CPU per task
// of each and the ratio of their rates (as built over without kinds, so
// below 1 is a cost). It enforces nothing.
func BenchmarkCountsByKind(b *testing.B) {
	const tasks = 1000
	ctx := context.Background()
	open := func(strip []string) *queue.Queue {
		q := benchOpen(b, filepath.Join(b.TempDir(), "bench.db"), queue.SynchronousNormal, clockwork.NewRealClock(), model.NewSeededIDs(1))
		for _, stmt := range strip {
			_, err := queue.DBOf(q).ExecContext(ctx, stmt)
			require.NoError(b, err, stmt)
		}
		return q
	}
	schemas := []struct {
		name string
		q    *queue.Queue
		next int
	}{{"as-built", open(nil), 0}, {"without-kinds", open(eventsCountedWithoutKinds), 0}}
	defer func() {
		for _, s := range schemas {
			s.q.Close()
		}
	}()
	kinds := []string{model.KindSynthetic, "report", "mail"}
	intake := func(i int) (time.Duration, time.Duration) {
		s := &schemas[i]
		cpu0 := processCPU()
		d := lap(b, func() {
			for range tasks {
				_, err := s.q.Submit(ctx, model.SubmitRequest{User: fmt.Sprintf("u%d", s.next/1000), Key: fmt.Sprintf("k%d", s.next),
					Kind: kinds[s.next%len(kinds)], Payload: `{}`, CostBudget: 1, StepsMax: 1})
				require.NoError(b, err)
				s.next++
			}
		})
		return d, processCPU() - cpu0
	}
	work := func(i int) (time.Duration, time.Duration) {
		q := schemas[i].q
		cpu0 := processCPU()
		d := lap(b, func() {
			req := model.ClaimRequest{Worker: "w1", Max: 1, Lease: 30 * time.Second}
			claimed, err := q.Claim(ctx, req)
			require.NoError(b, err)
			require.Len(b, claimed, 1)
			for done := 1; done < tasks; done++ {
				claimed, err = q.CompleteAndClaim(ctx, claimed[0].Claim, req)
				require.NoError(b, err)
				require.Len(b, claimed, 1)
			}
			require.NoError(b, q.Complete(ctx, claimed[0].Claim))
		})
		return d, processCPU() - cpu0
	}
	for i := range schemas {
		intake(i)
		work(i)
	}
	b.ResetTimer()
	for _, path := range []struct {
		name string
		run  func(int) (time.Duration, time.Duration)
	}{{"intake", intake}, {"work", work}} {
		var ratios []float64
		cpus := [2][]float64{}
		for round := range benchRounds {
			var rates [2]float64
			for j := range schemas {
				// Each round alternates which schema goes first, so neither
				// always runs on the caches the other warmed.
				i := (j + round) % len(schemas)
				d, cpu := path.run(i)
				rates[i] = float64(tasks) / d.Seconds()
				cpus[i] = append(cpus[i], float64(cpu.Microseconds())/float64(tasks))
			}
			ratios = append(ratios, rates[0]/rates[1])
		}
		b.ReportMetric(median(ratios), path.name+"-ratio")
		b.ReportMetric(median(cpus[0]), path.name+"-µs-cpu/task")
		b.ReportMetric(median(cpus[1]), path.name+"-without-kinds-µs-cpu/task")
		b.Logf("%s: as built %.1f µs CPU/task, without kinds %.1f; rate as built over without kinds %.3f (median of %d pairs: %s)",
			path.name, median(cpus[0]), median(cpus[1]), median(ratios), benchRounds, formatRatios(ratios))
	}
}
