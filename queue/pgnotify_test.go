package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue/internal/seam"
	sqlitestore "github.com/leasehold/leasehold/queue/internal/sqlite"
)

// The wake-ups of idle workers on PostgreSQL (pgnotify.go), against a real
// server: what sends a notification, and what the listener does when its
// connection is cut.

// wakeGuard bounds every wait of these tests for something the server or
// the listener does; it is a failure deadline, never a synchronisation.
const wakeGuard = 20 * time.Second

// logRecords is a slog handler that keeps every record and hands each to
// a channel, so a test can wait for a log line.
type logRecords struct {
	mu      sync.Mutex
	records []slog.Record
	seen    chan slog.Record
}

func newLogRecords() *logRecords { return &logRecords{seen: make(chan slog.Record, 64)} }

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.records = append(l.records, r)
	l.mu.Unlock()
	l.seen <- r
	return nil
}

// messages returns the messages logged so far at level.
func (l *logRecords) messages(level slog.Level) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.records {
		if r.Level == level {
			out = append(out, r.Message)
		}
	}
	return out
}

// await waits for a record whose message starts with prefix.
func (l *logRecords) await(t *testing.T, prefix string) slog.Record {
	t.Helper()
	deadline := time.After(wakeGuard)
	for {
		select {
		case r := <-l.seen:
			if strings.HasPrefix(r.Message, prefix) {
				return r
			}
		case <-deadline:
			t.Fatalf("no log line %q within %s", prefix, wakeGuard)
		}
	}
}

// awaitWake waits for a wake-up on ch.
func awaitWake(t *testing.T, ch <-chan struct{}, why string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wakeGuard):
		t.Fatalf("no wake-up within %s: %s", wakeGuard, why)
	}
}

// rawListener listens on ReadyChannel on a plain connection of the test's
// own and returns the payloads of the notifications in delivery (commit)
// order, one per call, leaving out those of other schemas (tests of other
// packages share the database).
type rawListener struct {
	t      *testing.T
	conn   *pgx.Conn
	schema string
}

func listenRaw(t *testing.T, url, schema string) *rawListener {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, "LISTEN "+ReadyChannel)
	require.NoError(t, err)
	return &rawListener{t: t, conn: conn, schema: schema}
}

func (l *rawListener) next() string {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wakeGuard)
	defer cancel()
	for {
		n, err := l.conn.WaitForNotification(ctx)
		require.NoError(l.t, err, "no notification within %s", wakeGuard)
		if n.Payload == l.schema || n.Payload == markerOf(l.schema) {
			return n.Payload
		}
	}
}

// markerOf is the payload of a test's marker notification (see marker).
func markerOf(schema string) string { return "marker " + schema }

// schemaOf returns the schema the fixture's queue works in.
func (f *pgFixture) schemaOf() string {
	f.t.Helper()
	var schema string
	require.NoError(f.t, f.db.QueryRowContext(f.ctx, "SELECT current_schema()").Scan(&schema))
	return schema
}

// marker sends a notification with the payload markerOf(schema) on ReadyChannel:
// notifications arrive in commit order, so everything a listener receives
// before it was sent by a transaction that committed before the marker.
func (f *pgFixture) marker() {
	f.t.Helper()
	_, err := f.db.ExecContext(f.ctx, "SELECT pg_notify($1, $2)", ReadyChannel, markerOf(f.schemaOf()))
	require.NoError(f.t, err)
}

// notifierStarted reports whether q's notifier has been signalled since
// the queue opened (its goroutine starts at the first signal).
func notifierStarted(q *Queue) bool {
	q.notify.mu.Lock()
	defer q.notify.mu.Unlock()
	return q.notify.kick != nil
}

// TestPostgresNotifiesAfterClaimableCommits: a commit that makes tasks
// claimable now is followed by one notification however many it makes,
// with its schema as the payload; one that makes none claimable yet (a
// task due later, a refused submit, a claim) asks for none. The write's
// own transaction sends none: the notifier does, after the commit.
func TestPostgresNotifiesAfterClaimableCommits(t *testing.T) {
	f := freshPostgres(t)
	schema := f.schemaOf()
	raw := listenRaw(t, f.url, schema)
	marker := markerOf(schema)
	later := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) // past the fixture clock's now

	// Due later: nothing asks for a notification, and the transaction
	// sends none (it would arrive before the marker).
	_, err := f.q.Submit(f.ctx, model.SubmitRequest{User: "ana", Key: "later", Payload: `{}`, CostBudget: 10, StepsMax: 5, RunAt: later})
	require.NoError(t, err)
	// Refused: nothing written, nothing sent.
	_, err = f.q.Submit(f.ctx, model.SubmitRequest{User: "ana", Key: "later", Payload: `{"changed":1}`, CostBudget: 10, StepsMax: 5, RunAt: later})
	require.ErrorIs(t, err, model.ErrIdempotencyConflict)
	require.False(t, notifierStarted(f.q), "a write that made nothing claimable now signalled the notifier")
	f.marker()
	require.Equal(t, marker, raw.next(), "a write that made nothing claimable now notified")

	// Ten tasks in one transaction, a commit of the usual way: one
	// notification, and no other once it has arrived.
	var reqs []model.SubmitRequest
	for i := range 10 {
		reqs = append(reqs, model.SubmitRequest{User: "ana", Key: fmt.Sprintf("now-%d", i), Payload: `{}`, CostBudget: 10, StepsMax: 5})
	}
	_, err = f.q.SubmitMany(f.ctx, reqs)
	require.NoError(t, err)
	require.Equal(t, schema, raw.next(), "the batch's notification names the queue's schema")
	f.marker()
	require.Equal(t, marker, raw.next(), "a batch of ten sent more than one notification")

	// A claim makes nothing claimable; a release does (past the notifier's
	// least interval: TestPostgresNotifierSpacesItsNotifications).
	clock := f.q.clock.(*clockwork.FakeClock)
	clock.Advance(WakeNotifyEvery)
	claimed, err := f.q.Claim(f.ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	f.marker()
	require.Equal(t, marker, raw.next(), "a claim notified")
	to, err := f.q.Release(f.ctx, claimed[0].Claim)
	require.NoError(t, err)
	require.Equal(t, model.Queued, to)
	require.Equal(t, schema, raw.next(), "a release did not notify")

	// A lone submit (one statement that commits itself) is followed by one.
	clock.Advance(WakeNotifyEvery)
	_, err = f.q.Submit(f.ctx, model.SubmitRequest{User: "ana", Key: "lone", Payload: `{}`, CostBudget: 10, StepsMax: 5})
	require.NoError(t, err)
	require.Equal(t, schema, raw.next(), "a lone submit did not notify")
	f.marker()
	require.Equal(t, marker, raw.next(), "a lone submit sent more than one notification")
}

// TestPostgresWokenWorkerFindsTheTask: a worker of another queue woken by
// a submit's notification claims the task at once, since the notification
// is sent after the commit; each submit after a wake-up wakes it again,
// whether it commits alone (fused) or in a transaction of the usual way.
func TestPostgresWokenWorkerFindsTheTask(t *testing.T) {
	f := freshPostgres(t)
	other, err := Open(f.ctx, Options{Path: f.url, Clock: f.q.clock, IDs: model.NewSeededIDs(2)})
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	unfused, err := Open(f.ctx, Options{Path: f.url, Clock: f.q.clock, IDs: model.NewSeededIDs(3), Unfused: true})
	require.NoError(t, err)
	t.Cleanup(func() { unfused.Close() })
	ctx, cancel := context.WithCancel(f.ctx)
	t.Cleanup(cancel)
	wake := other.Wake(ctx, nil)
	require.NotNil(t, wake)
	awaitWake(t, wake, "the listener's first connection")

	clock := f.q.clock.(*clockwork.FakeClock)
	for i := range 6 {
		writer := f.q
		if i%2 == 1 {
			writer = unfused
		}
		clock.Advance(WakeNotifyEvery) // past each notifier's least interval
		res, err := writer.Submit(f.ctx, model.SubmitRequest{User: "ana", Key: fmt.Sprintf("k%d", i), Payload: `{}`, CostBudget: 10, StepsMax: 5})
		require.NoError(t, err)
		awaitWake(t, wake, fmt.Sprintf("submit %d", i))
		claimed, err := other.Claim(f.ctx, model.ClaimRequest{Worker: "w1", Max: 2, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, claimed, 1, "submit %d: the woken worker found no task", i)
		require.Equal(t, res.TaskID, claimed[0].Task.ID)
	}
}

// TestPostgresNotifierSpacesItsNotifications: the first ready commit is
// notified at once; the ready commits within WakeNotifyEvery of that
// notification leave one more, sent when the interval has passed on the
// queue's clock and not before, however many they are.
func TestPostgresNotifierSpacesItsNotifications(t *testing.T) {
	f := freshPostgres(t)
	schema := f.schemaOf()
	raw := listenRaw(t, f.url, schema)
	marker := markerOf(schema)
	clock := f.q.clock.(*clockwork.FakeClock)
	submit := func(key string) {
		t.Helper()
		_, err := f.q.Submit(f.ctx, model.SubmitRequest{User: "ana", Key: key, Payload: `{}`, CostBudget: 10, StepsMax: 5})
		require.NoError(t, err)
	}

	submit("first")
	require.Equal(t, schema, raw.next(), "the first ready commit was not notified at once")
	for i := range 5 {
		submit(fmt.Sprintf("soon-%d", i))
	}
	// The notifier waits on the clock for the rest of the interval.
	require.NoError(t, clock.BlockUntilContext(f.ctx, 1))
	f.marker()
	require.Equal(t, marker, raw.next(), "a commit within the interval was notified before it passed")
	clock.Advance(WakeNotifyEvery)
	require.Equal(t, schema, raw.next(), "the commits within the interval were not notified once it passed")
	f.marker()
	require.Equal(t, marker, raw.next(), "five commits within the interval sent more than one notification")
}

// TestPostgresWakeListenerReconnects: Wake wakes on a commit by another
// connection; when the server terminates its connection, it logs the loss
// once, wakes nothing while away, reconnects after WakeRetryMin on the
// queue's clock, wakes once for what it may have missed, and wakes again
// for the next commit.
func TestPostgresWakeListenerReconnects(t *testing.T) {
	f := freshPostgres(t)
	clock := f.q.clock.(*clockwork.FakeClock)
	other, err := Open(f.ctx, Options{Path: f.url, Clock: clock, IDs: model.NewSeededIDs(2)})
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	logs := newLogRecords()
	ctx, cancel := context.WithCancel(f.ctx)
	t.Cleanup(cancel)

	wake := f.q.Wake(ctx, slog.New(logs))
	require.NotNil(t, wake)
	awaitWake(t, wake, "the listener's first connection")

	submit := func(key string) {
		t.Helper()
		_, err := other.Submit(f.ctx, model.SubmitRequest{User: "ana", Key: key, Payload: `{}`, CostBudget: 10, StepsMax: 5})
		require.NoError(t, err)
	}
	submit("a")
	awaitWake(t, wake, "a submit committed on another connection")

	var terminated int
	require.NoError(t, f.db.QueryRowContext(f.ctx,
		`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		 WHERE datname = current_database() AND application_name = $1`, "leasehold wake "+f.schemaOf()).Scan(&terminated))
	require.Equal(t, 1, terminated, "exactly one listener connection for this schema")
	lost := logs.await(t, "wake listener lost")
	require.Equal(t, slog.LevelWarn, lost.Level)

	submit("b") // lost: nobody listens
	select {
	case <-wake:
		t.Fatal("woken while the listener was away")
	default:
	}
	start := clock.Now()
	clock.Advance(WakeRetryMin)
	logs.await(t, "wake listener back")
	awaitWake(t, wake, "the reconnection, for what was missed")
	require.Equal(t, start.Add(WakeRetryMin), clock.Now())

	clock.Advance(WakeNotifyEvery) // past the notifier's least interval since b's
	submit("c")
	awaitWake(t, wake, "a submit after the reconnection")
	require.Equal(t, []string{"wake listener lost; idle workers poll until it is back"}, logs.messages(slog.LevelWarn),
		"the loss is logged once")
	cancel()
}

// failingNotifier is SQLite's store with a wake-up notification that
// always fails, standing in for a pg_notify the server refuses; each try
// is reported on calls.
type failingNotifier struct {
	sqlitestore.Store
	calls chan struct{}
}

func (f failingNotifier) NotifyReady(seam.Querier) error {
	f.calls <- struct{}{}
	return errors.New("notify refused")
}

// Listen is never called: the test asks for no wake-ups.
func (failingNotifier) Listen(context.Context, seam.Runner, seam.ConnectParams) (seam.Listener, error) {
	return nil, errors.New("no listener")
}

// Capabilities are SQLite's, with this notification.
func (f failingNotifier) Capabilities() capabilities {
	c := f.Store.Capabilities()
	c.Notify = f
	return c
}

// TestFailedNotifyKeepsTheWrite: the notification is sent after the
// write committed, so when it fails the write stays committed and its
// caller is told success (a retry is a replay); the failure is logged
// as a warning, and the next commit that makes a task claimable
// is followed by another try.
func TestFailedNotifyKeepsTheWrite(t *testing.T) {
	ctx := context.Background()
	q, err := Open(ctx, Options{Path: Memory, Clock: clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), IDs: model.NewSeededIDs(1)})
	require.NoError(t, err)
	defer q.Close()
	req := model.SubmitRequest{User: "ana", Key: "k", Payload: `{}`, CostBudget: 10, StepsMax: 5}
	next := req
	next.Key = "k2"

	failing := failingNotifier{calls: make(chan struct{}, 4)}
	q.store = failing
	logs := newLogRecords()
	q.notify.mu.Lock()
	q.notify.off, q.notify.log = false, slog.New(logs)
	q.notify.mu.Unlock()

	res, err := q.Submit(ctx, req)
	require.NoError(t, err, "the write committed before the notification")
	require.False(t, res.Replay)
	awaitWake(t, failing.calls, "the first submit's notification")
	warned := logs.await(t, "wake-up notification failed")
	require.Equal(t, slog.LevelWarn, warned.Level)

	again, err := q.Submit(ctx, req)
	require.NoError(t, err)
	require.True(t, again.Replay, "the submit whose notification failed was not stored")
	require.Equal(t, res.TaskID, again.TaskID)

	q.clock.(*clockwork.FakeClock).Advance(WakeNotifyEvery) // past the notifier's least interval
	_, err = q.Submit(ctx, next)
	require.NoError(t, err)
	awaitWake(t, failing.calls, "the next submit's notification")
	require.NoError(t, q.CheckCounters(ctx))
}

// TestCloseStopsTheWakeListener: Close ends the listeners Wake started
// (their context need not end), and a closed queue starts none.
func TestCloseStopsTheWakeListener(t *testing.T) {
	f := freshPostgres(t)
	q, err := Open(f.ctx, Options{Path: f.url, Clock: f.q.clock, IDs: model.NewSeededIDs(4)})
	require.NoError(t, err)
	logs := newLogRecords()
	wake := q.Wake(context.Background(), slog.New(logs))
	awaitWake(t, wake, "the listener's first connection")
	require.NoError(t, q.Close())
	logs.await(t, "wake listener stopped")
	require.Nil(t, q.Wake(context.Background(), nil))
}
