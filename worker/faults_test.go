package worker_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

// While storage is down the worker reports storage errors and backs off;
// while its heartbeats fail it claims nothing new; when storage returns it
// carries on under the same claim and then claims the waiting task. Every
// storage error's log record says so in a field of its own.
func TestStorageOutage(t *testing.T) {
	b := setupStorage(t)
	long := b.submit(`{"steps":[{"cost":1},{"cost":1,"duration_ms":6000},{"cost":1}]}`, 10, 5)
	later := b.submitRequest(model.SubmitRequest{User: "ana", Payload: `{"steps":[{"cost":1}]}`, CostBudget: 10, StepsMax: 5,
		RunAt: epoch.Add(2 * time.Second)})
	var logs bytes.Buffer
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock), func(c *worker.Config) {
		c.Concurrency, c.Lease, c.Heartbeat = 2, 10*time.Second, time.Second
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	b.stepUntil(w, func(r worker.Report) bool { return r.Action == worker.ActionHeartbeat && r.Accepted })
	require.Equal(t, epoch.Add(time.Second), b.clock.Now())

	outageEnd := epoch.Add(3500 * time.Millisecond)
	b.storage.SetUnavailableUntil(outageEnd)
	reports := b.run(w, stepsMax)

	// Heartbeats failed, backing off, and the first one after the outage
	// succeeded; no claim was tried in between.
	var failed []string
	failing := false
	for _, r := range reports {
		switch {
		case r.Action == worker.ActionHeartbeat && r.StorageError:
			require.ErrorIs(t, r.Err, faults.ErrInjected)
			require.False(t, r.Accepted)
			failed = append(failed, r.Outcome)
			failing = true
		case r.Action == worker.ActionHeartbeat && r.Accepted:
			failing = false
		case r.Action == worker.ActionClaim:
			require.False(t, failing, "claimed while heartbeats were failing: %s", r)
		}
	}
	require.Equal(t, []string{"storage error; retry in 100ms", "storage error; retry in 200ms",
		"storage error; retry in 400ms", "storage error; retry in 400ms", "storage error; retry in 400ms"}, failed,
		"heartbeats at 2s, 2.1s, 2.3s, 2.7s and 3.1s fail; the one at 3.5s succeeds")
	require.Positive(t, b.storage.Counts().Unavailable)

	// Claims tried before any heartbeat failed were refused as storage
	// errors too, and backed off.
	storageErrors := 0
	for _, r := range reports {
		if r.StorageError {
			storageErrors++
		}
		if r.Action == worker.ActionClaim && r.StorageError {
			require.ErrorIs(t, r.Err, faults.ErrInjected)
			require.Contains(t, r.Outcome, "storage error; retry in ")
		}
	}
	logged := 0
	for sc := bufio.NewScanner(&logs); sc.Scan(); {
		var rec struct {
			Msg          string `json:"msg"`
			StorageError bool   `json:"storage_error"`
			Error        string `json:"error"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec))
		if rec.StorageError {
			logged++
			require.Contains(t, rec.Error, "storage unavailable", "%s", sc.Bytes())
		}
	}
	require.Equal(t, storageErrors, logged, "one log record marked storage_error per storage error reported")

	task := b.task(long)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, int64(1), task.Version, "the lease outlived the outage: one claim did it all")
	require.Equal(t, int64(3), task.CostUsed)
	require.Empty(t, b.eventsOf(long, model.EventStaleWrite))

	task = b.task(later)
	require.Equal(t, model.Completed, task.State)
	require.False(t, task.ClaimedAt.Before(outageEnd), "the waiting task was claimed only after storage returned")
}

// A commit that applies but reports failure is retried by the worker and
// recognised by the queue: the step is charged once, the intent recorded
// once, the receipt once, and the effect applied once.
func TestAmbiguousCommitIsRetriedAndChargedOnce(t *testing.T) {
	for _, tc := range []struct {
		write  string
		before func(worker.Report) bool // the report after which the write is next
		replay string                   // the retry's report
	}{
		{"step", func(r worker.Report) bool { return len(r.Claims) == 1 }, "step 0 cost 2 (replayed)"},
		{"effect_intent", is(worker.ActionStep, "step 0 cost 2"), string(model.IntentRecorded)},
		{"effect_receipt", is(worker.ActionCall, "applied"), ""},
	} {
		t.Run(tc.write, func(t *testing.T) {
			b := setupStorage(t)
			id := b.submit(effectPayload, 10, 5)
			op := model.OperationID(id, 1)
			svc := workertest.NewService(worker.Plain, b.clock)
			w := b.newWorker("w1", svc)
			b.stepUntil(w, tc.before)

			b.storage.Arm(faults.AmbiguousCommit)
			r := b.step(w)
			require.Equal(t, tc.write, string(r.Write))
			require.True(t, r.StorageError)
			require.ErrorIs(t, r.Err, faults.ErrInjected)
			require.Equal(t, 1, b.storage.Counts().AmbiguousCommit)

			reports := b.run(w, stepsMax)
			retry := reports[0]
			for _, r := range reports {
				if string(r.Write) == tc.write {
					retry = r
					break
				}
			}
			require.Equal(t, tc.write, string(retry.Write), "the write was retried")
			require.True(t, retry.Accepted, "the retry is accepted: %s", retry)
			if tc.replay != "" {
				require.Equal(t, tc.replay, retry.Outcome)
			}

			task := b.task(id)
			require.Equal(t, model.Completed, task.State)
			require.Equal(t, int64(8), task.CostUsed, "charged once")
			require.Equal(t, 3, task.StepsUsed)
			require.Equal(t, int64(1), task.Version)
			require.Len(t, b.eventsOf(id, model.EventStep), 3)
			require.Len(t, b.eventsOf(id, model.EventEffectIntent), 1)
			require.Len(t, b.eventsOf(id, model.EventEffectReceipt), 1)
			require.Empty(t, b.eventsOf(id, model.EventStaleWrite))
			require.Equal(t, 1, svc.Applications(op))
			require.Len(t, svc.Calls(), 1, "a plain service is never called twice")
		})
	}
}

// A completion delivered twice: the task stays completed, the second
// delivery is refused and recorded as a stale write, nothing else changes.
func TestDuplicateCompleteDelivery(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1},{"cost":2}]}`, 10, 5)
	fq := faults.NewQueue(b.q)
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock), func(c *worker.Config) { c.Queue = fq })
	b.stepUntil(w, is(worker.ActionStep, "step 1 cost 2"))
	fq.ArmDuplicate()
	reports := b.run(w, stepsMax)
	require.Equal(t, 1, count(reports, is(worker.ActionComplete, "completed")))

	require.Equal(t, faults.QueueCounts{Duplicated: 1, SecondRefused: 1}, fq.Counts())
	d, ok := fq.Last()
	require.True(t, ok)
	require.Equal(t, model.WriteComplete, d.Write)
	require.Equal(t, int64(1), d.Fence)
	require.ErrorIs(t, d.Err, model.ErrStaleClaim)

	task := b.task(id)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, model.NoReason, task.Reason)
	require.Equal(t, int64(1), task.Version)
	require.Equal(t, int64(3), task.CostUsed)
	require.Equal(t, 2, task.StepsUsed)
	require.Zero(t, task.AttemptsCharged)
	require.Equal(t, []model.EventKind{model.EventSubmitted, model.EventClaimed, model.EventStep, model.EventStep,
		model.EventCompleted, model.EventStaleWrite}, b.kinds(id))
	stale := b.eventsOf(id, model.EventStaleWrite)[0]
	require.Equal(t, int64(1), stale.Fence)
	require.Equal(t, model.Completed, stale.From)
	require.Equal(t, model.Completed, stale.To)
	require.Contains(t, stale.Detail, "complete: task is completed")
}

// A step write delivered twice is recognised as a replay: charged once.
func TestDuplicateStepDelivery(t *testing.T) {
	b := setup(t)
	id := b.submit(`{"steps":[{"cost":1},{"cost":2}]}`, 10, 5)
	fq := faults.NewQueue(b.q)
	w := b.newWorker("w1", workertest.NewService(worker.Dedup, b.clock), func(c *worker.Config) { c.Queue = fq })
	b.stepUntil(w, func(r worker.Report) bool { return len(r.Claims) == 1 })
	fq.ArmDuplicate()
	b.run(w, stepsMax)

	d, ok := fq.Last()
	require.True(t, ok)
	require.Equal(t, model.WriteStep, d.Write)
	require.NoError(t, d.Err, "the second delivery is a replay, not an error")
	task := b.task(id)
	require.Equal(t, model.Completed, task.State)
	require.Equal(t, int64(3), task.CostUsed)
	require.Len(t, b.eventsOf(id, model.EventStep), 2)
}
