package queue_test

import (
	"context"
	"flag"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/queue/queuetest"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/transcripts from the SQLite queue")

// transcriptBackoff is the retry policy the transcripts run under: a
// charged attempt waits between 5s and 10s, doubling up to 40s.
var transcriptBackoff = model.Backoff{Base: 10 * time.Second, Max: 40 * time.Second}

// transcriptStores are the stores every transcript runs against, each
// opened fresh on a fake clock with seeded IDs and a keyed random source,
// so that a backoff's jitter is the same draw in every store.
var transcriptStores = []struct {
	name string
	open func(t *testing.T) queuetest.Harness
}{
	{"SQLiteMemory", func(t *testing.T) queuetest.Harness { return openTranscriptQueue(t, queue.Memory) }},
	{"SQLiteFile", func(t *testing.T) queuetest.Harness {
		return openTranscriptQueue(t, filepath.Join(t.TempDir(), "leasehold.db"))
	}},
	{"Postgres", func(t *testing.T) queuetest.Harness {
		url := pgtest.Fresh(t, migratePostgres)
		return openTranscriptQueue(t, url)
	}},
	{"Reference", func(t *testing.T) queuetest.Harness {
		clock := clockwork.NewFakeClockAt(conformanceEpoch)
		ref := model.NewReference(model.ReferenceOptions{Clock: clock, IDs: model.NewSeededIDs(1),
			Rand: model.NewDerivedRand(1), Backoff: transcriptBackoff})
		return queuetest.Harness{Store: ref, Clock: clock, Backoff: transcriptBackoff}
	}},
}

// openTranscriptQueue opens the queue at path (a SQLite path, or a
// PostgreSQL URL) for a transcript.
func openTranscriptQueue(t *testing.T, path string) queuetest.Harness {
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(conformanceEpoch)
	q, err := queue.Open(ctx, queue.Options{Path: path, Clock: clock, IDs: model.NewSeededIDs(1),
		Rand: model.NewDerivedRand(1), Backoff: transcriptBackoff})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, q.CheckCounters(ctx))
		require.NoError(t, q.Close())
	})
	return queuetest.Harness{Store: q, Clock: clock, Backoff: transcriptBackoff}
}

// TestTranscripts runs every script in testdata/transcripts against every
// store. With -rewrite the SQLite queue rewrites the expected output and
// the other stores are checked against what it wrote.
func TestTranscripts(t *testing.T) {
	for _, path := range queuetest.Transcripts(t, filepath.Join("testdata", "transcripts")) {
		name := strings.TrimSuffix(filepath.Base(path), ".txt")
		t.Run(name, func(t *testing.T) {
			for i, s := range transcriptStores {
				t.Run(s.name, func(t *testing.T) {
					queuetest.RunTranscript(t, path, s.open(t), *rewrite && i == 0)
				})
			}
		})
	}
}
