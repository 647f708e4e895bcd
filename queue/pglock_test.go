package queue

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// TestPostgresBusyTimeoutIsLockTimeout: on PostgreSQL, BusyTimeout bounds
// how long a write waits for a lock another connection holds (a backup, a
// migration, an operator's LOCK TABLE): past it the write fails as busy,
// not applied, and nothing is written; once the lock is gone the same
// submit is stored, not taken for a replay.
func TestPostgresBusyTimeoutIsLockTimeout(t *testing.T) {
	f := freshPostgres(t)
	q, err := Open(f.ctx, Options{Path: f.url, Clock: clockwork.NewFakeClockAt(time.UnixMilli(1000)), IDs: model.NewSeededIDs(3),
		BusyTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	defer q.Close()
	require.Contains(t, q.Pragmas(), "lock_timeout=200ms")

	ctx := context.Background()
	conn, err := f.db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN")
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "LOCK TABLE tasks IN EXCLUSIVE MODE")
	require.NoError(t, err)
	req := model.SubmitRequest{User: "ana", Key: "locked", Payload: `{}`, CostBudget: 10, StepsMax: 5}
	_, err = q.Submit(ctx, req)
	require.Error(t, err)
	require.Equal(t, ClassBusy, ClassOf(err), "a lock held past the busy timeout is busy: %v", err)
	require.ErrorIs(t, err, ErrNotApplied)
	_, err = conn.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)

	res, err := q.Submit(ctx, req)
	require.NoError(t, err)
	require.False(t, res.Replay, "the refused submit wrote nothing")
}
