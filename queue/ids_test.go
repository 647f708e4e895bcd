package queue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// switchIDs hands out UUID-shaped IDs, as a program's own IDSource might,
// or, while bad is set, IDs no command or route could name.
type switchIDs struct {
	mu  sync.Mutex
	n   int
	bad bool
}

func (s *switchIDs) NewID(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	if s.bad {
		return fmt.Sprintf("%stask %d", prefix, s.n)
	}
	return fmt.Sprintf("%s550e8400-e29b-41d4-a716-%012x", prefix, s.n)
}

func (s *switchIDs) setBad(bad bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bad = bad
}

// TestIDSourceTaskIDsFollowTheRule: the queue stores only task IDs that
// follow model.TaskIDRule, the rule the command line and the API hold IDs
// to. A UUID-shaped ID from the program's own source is stored and read
// back; an ID that breaks the rule is refused with ErrBadIDSource, by a
// lone submit (on PostgreSQL the one-statement submit) and by a batch,
// writing nothing; the queue goes on working.
func TestIDSourceTaskIDsFollowTheRule(t *testing.T) {
	for _, c := range []struct {
		store string
		path  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return queue.Memory }},
		{"postgres", func(t *testing.T) string { return pgtest.Fresh(t, migratePostgres) }},
	} {
		t.Run(c.store, func(t *testing.T) {
			ctx := context.Background()
			ids := &switchIDs{}
			q, err := queue.Open(ctx, queue.Options{Path: c.path(t), Clock: clockwork.NewFakeClockAt(conformanceEpoch), IDs: ids})
			require.NoError(t, err)
			t.Cleanup(func() { q.Close() })
			req := func(key string) model.SubmitRequest {
				return model.SubmitRequest{User: "ana", Key: key, Payload: `{"steps":[]}`, CostBudget: 1, StepsMax: 1}
			}

			ids.setBad(true)
			_, err = q.Submit(ctx, req("k1"))
			require.ErrorIs(t, err, queue.ErrBadIDSource)
			require.NotErrorIs(t, err, model.ErrInvalidInput)
			_, err = q.SubmitMany(ctx, []model.SubmitRequest{req("k1"), req("k2")})
			require.ErrorIs(t, err, queue.ErrBadIDSource)
			m, err := q.Metrics(ctx)
			require.NoError(t, err)
			require.Zero(t, m.Submitted, "nothing was written")
			events, err := q.Events(ctx, "")
			require.NoError(t, err)
			require.Empty(t, events)

			ids.setBad(false)
			res, err := q.Submit(ctx, req("k1"))
			require.NoError(t, err)
			require.Regexp(t, `^t_550e8400-e29b-41d4-a716-[0-9a-f]{12}$`, res.TaskID)
			require.NoError(t, model.CheckTaskID(res.TaskID))
			task, err := q.Task(ctx, res.TaskID)
			require.NoError(t, err)
			require.Equal(t, "k1", task.Key)
			many, err := q.SubmitMany(ctx, []model.SubmitRequest{req("k2"), req("k3")})
			require.NoError(t, err)
			require.Len(t, many, 2)
		})
	}
}
