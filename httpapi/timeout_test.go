package httpapi

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// TestLongLivedRoutesOutliveTheServersTimeouts runs the real server on a
// loopback listener with its request timeout and write timeout made short
// through WithTimeouts (the only real durations here; the wait's own
// length and the ping interval are on the fake clock). A long-poll and an
// event stream are opened; then ordinary writes, each stuck behind a lock
// another connection holds on the database, are answered 503 timeout (as
// JSON, as documented), each only after the request timeout has passed,
// until both long-lived requests have been open longer than the request
// timeout and the write timeout. The lock released, the first write's
// cancel commits: the long-poll answers it and the stream delivers its
// event, both written well past the write deadline an ordinary response
// would have had.
func TestLongLivedRoutesOutliveTheServersTimeouts(t *testing.T) {
	short := DefaultTimeouts()
	// The write timeout leaves an ordinary route's 503 a quarter second to
	// be written after its request timeout, so a loaded machine does not
	// cut the answer off.
	short.Request, short.Write = 150*time.Millisecond, 400*time.Millisecond
	a := setupAPIWith(t, func(o *Options) { o.Timeouts = short }, func(o *queue.Options) {
		o.BusyTimeout = 10 * time.Second // a write waits on the lock far past the request timeout
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a safety net
	defer cancel()
	id := a.submit(t, "carol", "long", nil)
	c := a.clientFor(t, secretRoot)
	before, err := c.Task(ctx, id)
	require.NoError(t, err)

	type answer struct {
		task client.Task
		err  error
	}
	waited := make(chan answer, 1)
	go func() {
		task, err := c.WaitTask(ctx, id, before.LastEventSeq, 30*time.Second)
		waited <- answer{task, err}
	}()
	require.NoError(t, a.clock.BlockUntilContext(ctx, 2)) // the wait's timeout and the queue's poll
	stream := a.openStream(t, secretRoot, nil, "?after="+strconv.FormatInt(before.LastEventSeq, 10))
	opened := time.Now()

	db, err := sql.Open("sqlite", a.path)
	require.NoError(t, err)
	defer db.Close()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN EXCLUSIVE")
	require.NoError(t, err)
	for attempts := 0; time.Since(opened) <= max(short.Request, short.Write); attempts++ {
		require.Less(t, attempts, 20, "twenty writes did not outlast the timeouts")
		start := time.Now()
		status, _, body := a.do(t, http.MethodPost, "/v1/tasks/"+id+"/cancel", secretSubmit, "")
		require.Equal(t, http.StatusServiceUnavailable, status, "%s", body)
		require.JSONEq(t, `{"error":"request timed out","code":"timeout"}`, string(body))
		require.GreaterOrEqual(t, time.Since(start), short.Request, "an ordinary route answers at its request timeout")
	}
	require.Greater(t, time.Since(opened), max(short.Request, short.Write), "both long-lived requests have outlived both timeouts")
	select {
	case got := <-waited:
		t.Fatalf("the long-poll answered before any change: %+v", got)
	default:
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)

	// The timed-out cancel still runs to its end (a write is never left
	// half-decided), and its change is what the long-lived requests see.
	got := <-waited
	require.NoError(t, got.err)
	require.Equal(t, model.Cancelled, got.task.State)
	require.Greater(t, got.task.LastEventSeq, before.LastEventSeq)
	e := stream.next(t, false)
	require.Equal(t, "event", e.kind)
	var ev client.Event
	require.NoError(t, json.Unmarshal([]byte(e.data), &ev))
	require.Equal(t, model.EventCancelled, ev.Kind)
	require.Equal(t, id, ev.TaskID)
	require.Equal(t, got.task.LastEventSeq, ev.Seq)

	// The stream is still open: the next ping comes at the fake clock's
	// ping interval, long after the write deadline.
	require.NoError(t, a.clock.BlockUntilContext(ctx, 2)) // the ping timer and the queue's poll
	a.clock.Advance(PingInterval)
	require.Equal(t, sseEvent{comment: "ping"}, stream.next(t, true))
	// And an ordinary read on a connection of its own is answered as ever.
	require.Equal(t, "cancelled", a.task(t, id)["state"])
}

// TestNewRefusesBadOptions: a negative timeout, a missing queue or no
// token is refused by New, naming it, before anything is served; a zero
// timeout (which http.Server would read as none) is the default's.
func TestNewRefusesBadOptions(t *testing.T) {
	q, err := queue.Open(context.Background(), queue.Options{Path: filepath.Join(t.TempDir(), "o.db"),
		Clock: clockwork.NewFakeClockAt(apiEpoch), IDs: model.NewSeededIDs(1)})
	require.NoError(t, err)
	defer q.Close()
	tokens, err := ParseTokens(testTokens, false)
	require.NoError(t, err)
	bad := Timeouts{Write: -time.Second}
	_, err = New(Options{Queue: q, Tokens: tokens, Timeouts: bad})
	require.ErrorContains(t, err, "Timeouts.Write must not be negative")
	_, err = New(Options{Tokens: tokens})
	require.ErrorContains(t, err, "Options.Queue is required")
	_, err = New(Options{Queue: q})
	require.ErrorContains(t, err, "Options.Tokens is required")
	_, err = New(Options{Queue: q, Tokens: tokens, StreamsPerToken: -1})
	require.ErrorContains(t, err, "StreamsPerToken must not be negative")

	s, err := New(Options{Queue: q, Tokens: tokens, Timeouts: Timeouts{Request: time.Second}})
	require.NoError(t, err)
	want := DefaultTimeouts()
	want.Request = time.Second
	require.Equal(t, want, s.timeouts)
}
