package command_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/command"
)

// drive steps w under the fake clock until the task is settled: waits
// are advanced, and a task queued for a retry is waited for.
func drive(t *testing.T, ctx context.Context, clock *clockwork.FakeClock, q *queue.Queue, w *worker.Worker, id string) model.Task {
	t.Helper()
	for range 500 {
		r := w.Step(ctx)
		require.Empty(t, r.Anomaly)
		if r.Action != worker.ActionIdle {
			continue
		}
		if len(w.Claims()) > 0 {
			clock.Advance(max(r.Wait, time.Millisecond))
			continue
		}
		task, err := q.Task(ctx, id)
		require.NoError(t, err)
		if task.State != model.Queued {
			return task
		}
		clock.Advance(max(task.RunAt.Sub(clock.Now()), r.Wait, time.Millisecond))
	}
	t.Fatal("the task never settled")
	return model.Task{}
}

// A command applies its effect (records its operation ID) and then, on
// its first attempt, exits 75. The second attempt finds the intent
// without a receipt: a dedup command runs again under the same operation
// ID and its service applies it once; a queryable one's reconcile
// command finds it applied, and the command is not run again; a none
// command's task goes to needs_review.
func TestLedgeredCommandAcrossAttempts(t *testing.T) {
	for _, tc := range []struct {
		service worker.ServiceKind
		state   model.State
		runs    int
		result  string
	}{
		{worker.Dedup, model.Completed, 2, "done"},
		{worker.Queryable, model.Completed, 1, "found"},
		{worker.Plain, model.NeedsReview, 1, ""},
	} {
		t.Run(string(tc.service), func(t *testing.T) {
			dir := t.TempDir()
			// The "service": applied holds each operation applied, once
			// (it deduplicates by operation ID); runs logs every run.
			run := script(t, dir, "run.sh", `echo "$LEASEHOLD_OPERATION_ID $LEASEHOLD_ATTEMPT" >> runs
grep -qx "$LEASEHOLD_OPERATION_ID" applied 2>/dev/null || echo "$LEASEHOLD_OPERATION_ID" >> applied
[ "$LEASEHOLD_ATTEMPT" = 1 ] && exit 75
echo done
`)
			check := script(t, dir, "check.sh", `grep -qx "$LEASEHOLD_OPERATION_ID" applied 2>/dev/null || exit 1
echo found
`)
			cfg := command.Config{Kind: "mail", Command: []string{"/bin/sh", run}, Dir: dir, Service: tc.service}
			if tc.service == worker.Queryable {
				cfg.Reconcile = []string{"/bin/sh", check}
			}
			ctx := context.Background()
			clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			cfg.Clock = clock
			h := handler(t, cfg)
			q, err := queue.Open(ctx, queue.Options{Path: queue.Memory, Clock: clock, IDs: model.NewSeededIDs(1)})
			require.NoError(t, err)
			defer q.Close()
			res, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: "k1", Payload: `{"to":"a@example.com"}`, CostBudget: 1, StepsMax: 1})
			require.NoError(t, err)
			w, err := worker.New(worker.Config{ID: "w1", Queue: q, Handler: h, Clock: clock,
				Lease: 2 * time.Second, Heartbeat: 500 * time.Millisecond})
			require.NoError(t, err, "a command handler needs no Service")

			task := drive(t, ctx, clock, q, w, res.TaskID)
			require.Equal(t, tc.state, task.State)
			op := model.OperationID(res.TaskID, 0)
			applied, err := os.ReadFile(filepath.Join(dir, "applied"))
			require.NoError(t, err)
			require.Equal(t, op+"\n", string(applied), "applied once")
			runs, err := os.ReadFile(filepath.Join(dir, "runs"))
			require.NoError(t, err)
			lines := strings.Split(strings.TrimSpace(string(runs)), "\n")
			require.Len(t, lines, tc.runs)
			for i, l := range lines {
				require.Equal(t, op+" "+string(rune('1'+i)), l, "the same operation ID on every attempt")
			}
			effects, err := q.Effects(ctx, res.TaskID)
			require.NoError(t, err)
			require.Len(t, effects, 1)
			require.Equal(t, tc.state == model.Completed, effects[0].Receipted())
			if tc.state == model.Completed {
				require.Equal(t, tc.result, task.Checkpoint)
				require.Equal(t, tc.result, effects[0].Result)
			} else {
				require.Equal(t, model.UncertainEffect, task.Reason)
			}
		})
	}
}
