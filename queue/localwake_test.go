package queue

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"modernc.org/sqlite"

	"github.com/leasehold/leasehold/faults/storagefault"
	"github.com/leasehold/leasehold/model"
)

// woken reports whether ch holds a wake-up, taking it.
func woken(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestWakeOnSQLiteIsInProcess: on SQLite, Wake's channel receives once a
// write of this process commits that made a task claimable now, grouped
// or not: a submit due now, and a batch (one wake-up for all of it). It
// receives nothing for a task due later, a replay, a refused submit, a
// write rolled back, or after the caller's context ended; a closed queue
// gives nil.
func TestWakeOnSQLiteIsInProcess(t *testing.T) {
	for _, ungrouped := range []bool{false, true} {
		t.Run(map[bool]string{false: "grouped", true: "ungrouped"}[ungrouped], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
				clock := clockwork.NewFakeClockAt(now)
				storage := storagefault.NewStorage(&sqlite.Driver{}, clock)
				q, err := Open(ctx, Options{Path: Memory, Clock: clock, IDs: model.NewSeededIDs(1),
					Ungrouped: ungrouped, Driver: storage})
				require.NoError(t, err)
				defer q.Close()
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				ch := q.Wake(wctx, nil)
				require.NotNil(t, ch)
				other := q.Wake(ctx, nil)
				require.False(t, woken(ch), "no wake-up before any write")

				req := model.SubmitRequest{User: "ana", Key: "k", Payload: `{}`, CostBudget: 10, StepsMax: 5}
				later := req
				later.Key, later.RunAt = "later", now.Add(time.Hour)
				_, err = q.Submit(ctx, later)
				require.NoError(t, err)
				require.False(t, woken(ch), "a task due later wakes no one")

				_, err = q.Submit(ctx, req)
				require.NoError(t, err)
				require.True(t, woken(ch), "a submit due now wakes, before Submit returns")
				require.True(t, woken(other), "every Wake channel is woken")

				res, err := q.Submit(ctx, req)
				require.NoError(t, err)
				require.True(t, res.Replay)
				require.False(t, woken(ch), "a replay writes no task")
				bad := req
				bad.Key, bad.Payload = "bad", "{"
				_, err = q.Submit(ctx, bad)
				require.ErrorIs(t, err, model.ErrInvalidInput)
				require.False(t, woken(ch), "a refused submit wakes no one")

				storage.Arm(storagefault.FailCommit)
				failed := req
				failed.Key = "failed"
				_, err = q.Submit(ctx, failed)
				require.Error(t, err)
				require.False(t, woken(ch), "a write rolled back wakes no one")

				var batch []model.SubmitRequest
				for i := range 3 {
					r := req
					r.Key = "batch" + string(rune('a'+i))
					batch = append(batch, r)
				}
				_, err = q.SubmitMany(ctx, batch)
				require.NoError(t, err)
				require.True(t, woken(ch), "a batch due now wakes")
				require.False(t, woken(ch), "once: wake-ups coalesce")

				cancel()
				synctest.Wait() // the channel is dropped once its context ends
				last := req
				last.Key = "last"
				_, err = q.Submit(ctx, last)
				require.NoError(t, err)
				require.False(t, woken(ch), "a channel whose context ended is not woken")
				require.True(t, woken(other))

				require.NoError(t, q.Close())
				require.Nil(t, q.Wake(ctx, nil), "a closed queue starts no wake-ups")
			})
		})
	}
}
