package queue_test

import (
	"context"
	"regexp"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// EngineVersion names the store's engine and the version the server (or
// the embedded library) reports, and fails once the queue is closed.
func TestEngineVersion(t *testing.T) {
	for _, c := range []struct {
		store string
		path  func(t *testing.T) string
		want  *regexp.Regexp
	}{
		{"sqlite", func(t *testing.T) string { return queue.Memory }, regexp.MustCompile(`^SQLite 3\.\d+\.\d+$`)},
		{"postgres", func(t *testing.T) string { return pgtest.Fresh(t, migratePostgres) }, regexp.MustCompile(`^PostgreSQL \d+(\.\d+)?`)},
	} {
		t.Run(c.store, func(t *testing.T) {
			ctx := context.Background()
			q, err := queue.Open(ctx, queue.Options{Path: c.path(t), Clock: clockwork.NewFakeClockAt(conformanceEpoch), IDs: model.NewSeededIDs(1)})
			require.NoError(t, err)
			v, err := q.EngineVersion(ctx)
			require.NoError(t, err)
			require.Regexp(t, c.want, v)
			require.NoError(t, q.Close())
			_, err = q.EngineVersion(ctx)
			require.ErrorIs(t, err, queue.ErrClosed)
		})
	}
}
