package queue

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// TestPostgresReapSkipsRowsAnotherSessionHolds: the reaper passes over a
// task whose row another session holds (a worker's session stuck inside a
// transaction, say) instead of waiting for it: with a lock_timeout of
// 200 ms, the pass used to fail with lock_not_available (55P03) and reap
// nothing, and without one it waited as long as the holder. It settles
// every other expired lease and passed deadline, and the held ones once
// the holder lets go.
func TestPostgresReapSkipsRowsAnotherSessionHolds(t *testing.T) {
	f := freshPostgres(t)
	clock := clockwork.NewFakeClockAt(epoch)
	q, err := Open(f.ctx, Options{Path: f.url, Clock: clock, IDs: model.NewSeededIDs(5), BusyTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	defer q.Close()
	var running, late []string
	for i := range 3 {
		res, err := q.Submit(f.ctx, model.SubmitRequest{User: "ana", Key: fmt.Sprintf("r%d", i), Payload: `{}`, CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
		running = append(running, res.TaskID)
	}
	claimed, err := q.Claim(f.ctx, model.ClaimRequest{Worker: "w1", Max: 3, Lease: 30 * time.Second})
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	for i := range 2 {
		res, err := q.Submit(f.ctx, model.SubmitRequest{User: "bo", Key: fmt.Sprintf("d%d", i), Payload: `{}`, CostBudget: 1, StepsMax: 1,
			Deadline: clock.Now().Add(time.Minute)})
		require.NoError(t, err)
		late = append(late, res.TaskID)
	}
	clock.Advance(2 * time.Minute)

	holder, err := pgx.Connect(f.ctx, f.url)
	require.NoError(t, err)
	defer holder.Close(f.ctx)
	tx, err := holder.Begin(f.ctx)
	require.NoError(t, err)
	held, err := tx.Exec(f.ctx, "SELECT 1 FROM tasks WHERE id = $1 OR id = $2 FOR UPDATE", running[1], late[0])
	require.NoError(t, err)
	require.Equal(t, int64(2), held.RowsAffected())

	reaped, err := q.Reap(f.ctx)
	require.NoError(t, err, "the reaper does not wait for the held rows")
	require.Equal(t, model.ReapResult{Expired: 2, Deadlines: 1}, reaped)
	for id, want := range map[string]model.State{running[0]: model.Queued, running[1]: model.Running, running[2]: model.Queued,
		late[0]: model.Queued, late[1]: model.Failed} {
		task, err := q.Task(f.ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, task.State, id)
	}

	require.NoError(t, tx.Rollback(f.ctx))
	reaped, err = q.Reap(f.ctx)
	require.NoError(t, err)
	require.Equal(t, model.ReapResult{Expired: 1, Deadlines: 1}, reaped, "the rows let go are reaped by the next pass")
}
