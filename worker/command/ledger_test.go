package command_test

import (
	"context"
	"os"
	"os/exec"
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

// A fenced command: the service it calls keeps the highest fence it has
// seen for each operation and refuses a lower one, and the reconcile
// command registers the asker's fence. An intent left by a claim that
// crashed before running is asked about (registering fence 2), found not
// applied, and run again under fence 2; the crashed claim's run, arriving
// late under fence 1, is refused. Applied once.
func TestFencedCommandRunsAgainWhenNotApplied(t *testing.T) {
	dir := t.TempDir()
	run := script(t, dir, "run.sh", `op=$LEASEHOLD_OPERATION_ID
seen=$(grep "^$op " fences 2>/dev/null | cut -d' ' -f2 | sort -n | tail -1)
if [ -n "$seen" ] && [ "$seen" -gt "$LEASEHOLD_FENCE" ]; then exit 75; fi
echo "$op $LEASEHOLD_FENCE" >> fences
grep -qx "$op" applied 2>/dev/null || echo "$op" >> applied
echo "done under $LEASEHOLD_FENCE"
`)
	check := script(t, dir, "check.sh", `echo "$LEASEHOLD_OPERATION_ID $LEASEHOLD_FENCE" >> fences
grep -qx "$LEASEHOLD_OPERATION_ID" applied 2>/dev/null || exit 1
echo found
`)
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := handler(t, command.Config{Kind: "mail", Command: []string{"/bin/sh", run}, Dir: dir, Service: worker.Fenced,
		Reconcile: []string{"/bin/sh", check}, Clock: clock})
	q, err := queue.Open(ctx, queue.Options{Path: queue.Memory, Clock: clock, IDs: model.NewSeededIDs(1)})
	require.NoError(t, err)
	defer q.Close()
	res, err := q.Submit(ctx, model.SubmitRequest{User: "ana", Key: "k1", Payload: `{}`, CostBudget: 1, StepsMax: 1})
	require.NoError(t, err)
	newWorker := func(id string) *worker.Worker {
		w, err := worker.New(worker.Config{ID: id, Queue: q, Handler: h, Clock: clock, Lease: 2 * time.Second, Heartbeat: 500 * time.Millisecond})
		require.NoError(t, err)
		return w
	}
	a := newWorker("w1")
	for range 50 {
		if r := a.Step(ctx); r.Action == worker.ActionIntent {
			break
		}
	}
	effects, err := q.Effects(ctx, res.TaskID)
	require.NoError(t, err)
	require.Len(t, effects, 1, "the crashed claim recorded its intent")
	clock.Advance(3 * time.Second)
	reaped, err := q.Reap(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, reaped.Expired)

	task := drive(t, ctx, clock, q, newWorker("w2"), res.TaskID)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, "done under 2", task.Checkpoint)
	op := model.OperationID(res.TaskID, 0)

	late := exec.Command("/bin/sh", run)
	late.Dir, late.Env = dir, []string{"PATH=/usr/bin:/bin", "LEASEHOLD_OPERATION_ID=" + op, "LEASEHOLD_FENCE=1"}
	err = late.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, command.ExitTransient, exit.ExitCode(), "the late run under fence 1 is refused")
	applied, err := os.ReadFile(filepath.Join(dir, "applied"))
	require.NoError(t, err)
	require.Equal(t, op+"\n", string(applied), "applied once")
}
