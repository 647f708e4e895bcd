package queue

import (
	"context"
	"fmt"
)

// Health reports whether the queue can take writes now: it runs a write
// transaction that changes nothing. It fails while storage is unavailable
// (another connection holds an exclusive lock, the disk errors) for longer
// than the busy timeout.
func (q *Queue) Health(ctx context.Context) error {
	if err := q.write(ctx, "health", func(t *txn) error {
		_, err := t.exec("health")
		return err
	}); err != nil {
		return fmt.Errorf("queue: unhealthy: %w", err)
	}
	return nil
}
