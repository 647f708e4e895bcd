package worker_test

// The live Runner on PostgreSQL, woken by LISTEN/NOTIFY: against a real
// server, so not in a synctest bubble (a goroutine waiting on a socket is
// not durably blocked); the fake clock still holds all of the runner's
// time, and every wait is on a report, a log line or the clock's timers.

import (
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver of the test's own connection
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

// pgGuard bounds every wait of these tests: a failure deadline, never a
// synchronisation.
const pgGuard = 20 * time.Second

// migratePostgres is the pgtest.Setup of the worker's PostgreSQL tests.
func migratePostgres(ctx context.Context, url string) error {
	q, err := queue.Open(ctx, queue.Options{Path: url, Clock: clockwork.NewFakeClockAt(epoch), IDs: model.NewSeededIDs(1)})
	if err != nil {
		return err
	}
	return q.Close()
}

// openPostgres opens a queue on url, closed when the test ends.
func openPostgres(t *testing.T, url string, clock clockwork.Clock, seed uint64) *queue.Queue {
	t.Helper()
	q, err := queue.Open(context.Background(), queue.Options{Path: url, Clock: clock, IDs: model.NewSeededIDs(seed)})
	require.NoError(t, err)
	t.Cleanup(func() { q.Close() })
	return q
}

// logLines is a slog handler that keeps every record and hands each to a
// channel, so a test can wait for a log line.
type logLines struct {
	mu      sync.Mutex
	records []slog.Record
	seen    chan slog.Record
}

func newLogLines() *logLines { return &logLines{seen: make(chan slog.Record, 256)} }

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logLines) WithGroup(string) slog.Handler            { return l }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.records = append(l.records, r)
	l.mu.Unlock()
	select {
	case l.seen <- r:
	default: // nobody is waiting for this many lines
	}
	return nil
}

// count returns how many records so far have a message starting with prefix.
func (l *logLines) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.records {
		if strings.HasPrefix(r.Message, prefix) {
			n++
		}
	}
	return n
}

// await waits for a record whose message starts with prefix.
func (l *logLines) await(t *testing.T, prefix string) {
	t.Helper()
	deadline := time.After(pgGuard)
	for {
		select {
		case r := <-l.seen:
			if strings.HasPrefix(r.Message, prefix) {
				return
			}
		case <-deadline:
			t.Fatalf("no log line %q within %s", prefix, pgGuard)
		}
	}
}

// pgRunner is a Runner on a PostgreSQL queue whose reports a test reads in
// order.
type pgRunner struct {
	t       *testing.T
	reports chan worker.Report
	logs    *logLines
	clock   *idleClock
	claims  int64 // claim reports next has read
}

// idleClock is the runner's clock: the test's fake clock, but it tells
// the test of each timer the runner sets (an idle wait of the claimer,
// in these tests, whose tasks never sleep and which run no housekeeper),
// tagged with how many claim reports preceded it, so that the test moves
// the clock only once the runner waits for its next poll. (Counting the
// fake clock's waiters would tell less: it cannot say which claim a wait
// follows.)
type idleClock struct {
	*clockwork.FakeClock
	claims atomic.Int64 // claim reports the runner has made
	waits  chan int64   // the claims made before each timer the runner set, in order
}

func (c *idleClock) NewTimer(d time.Duration) clockwork.Timer {
	t := c.FakeClock.NewTimer(d)
	select {
	case c.waits <- c.claims.Load():
	default: // far more waits than any test reads
	}
	return t
}

// startPostgresRunner runs a one-slot Runner named id on q, idle polling
// at pollMax from the start (PollMin = PollMax), with no housekeeper.
func startPostgresRunner(t *testing.T, q *queue.Queue, clock *clockwork.FakeClock, id string, pollMax time.Duration) *pgRunner {
	t.Helper()
	ic := &idleClock{FakeClock: clock, waits: make(chan int64, 1024)}
	pr := &pgRunner{t: t, reports: make(chan worker.Report, 1024), logs: newLogLines(), clock: ic}
	cfg := worker.Config{ID: id, Queue: q, Handler: worker.Synthetic{}, Service: workertest.NewService(worker.Dedup, clock),
		Clock: ic, Logger: slog.New(pr.logs), Lease: 30 * time.Second, PollMin: pollMax, PollMax: pollMax}
	onReport := func(rep worker.Report) {
		if rep.Action == worker.ActionClaim {
			ic.claims.Add(1)
		}
		pr.reports <- rep
	}
	r, err := worker.NewRunner(cfg, worker.RunOptions{OnReport: onReport})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return pr
}

// next returns the next report that satisfies match.
func (pr *pgRunner) next(match func(worker.Report) bool, what string) worker.Report {
	pr.t.Helper()
	deadline := time.After(pgGuard)
	for {
		select {
		case rep := <-pr.reports:
			require.Empty(pr.t, rep.Anomaly, "anomaly: %s", rep)
			if rep.Action == worker.ActionClaim {
				pr.claims++
			}
			if match(rep) {
				return rep
			}
		case <-deadline:
			pr.t.Fatalf("no report within %s: %s", pgGuard, what)
		}
	}
}

// idle waits until the runner waits for its next poll after the last
// claim report next has read.
func (pr *pgRunner) idle() {
	pr.t.Helper()
	deadline := time.After(pgGuard)
	for {
		select {
		case claims := <-pr.clock.waits:
			if claims == pr.claims {
				return
			}
		case <-deadline:
			pr.t.Fatalf("the runner did not wait for its next poll within %s", pgGuard)
		}
	}
}

func nothingDue(r worker.Report) bool {
	return r.Action == worker.ActionClaim && r.Accepted && len(r.Claims) == 0
}

func claimedTask(id string) func(worker.Report) bool {
	return func(r worker.Report) bool {
		return r.Action == worker.ActionClaim && len(r.Claims) == 1 && r.Claims[0].TaskID == id
	}
}

func completedTask(id string) func(worker.Report) bool {
	return func(r worker.Report) bool { return r.Action == worker.ActionComplete && r.TaskID == id && r.Accepted }
}

// listening waits until the runner's wake listener is up: the runner's
// first claim finds nothing, and the listener's first connection wakes it
// for a second, with the clock still where it was.
func (pr *pgRunner) listening() {
	pr.t.Helper()
	pr.next(nothingDue, "the first claim")
	pr.next(nothingDue, "the claim woken by the listener's connection")
}

// submitOn submits a one-step task on q (another machine's queue) and
// returns its ID.
func submitOn(t *testing.T, q *queue.Queue, key string) string {
	t.Helper()
	res, err := q.Submit(context.Background(), model.SubmitRequest{User: "ana", Key: key,
		Payload: `{"steps":[{"cost":1}]}`, CostBudget: 10, StepsMax: 5})
	require.NoError(t, err)
	return res.TaskID
}

// TestPostgresIdleRunnerWokenBeforePollMax: a runner idle at PollMax (a
// minute) claims a task submitted from another machine's queue without
// the fake clock moving at all: the notification woke it, not its poll.
func TestPostgresIdleRunnerWokenBeforePollMax(t *testing.T) {
	url := pgtest.Fresh(t, migratePostgres)
	clock := clockwork.NewFakeClockAt(epoch)
	q := openPostgres(t, url, clock, 1)
	other := openPostgres(t, url, clock, 2)
	pr := startPostgresRunner(t, q, clock, "w1", time.Minute)
	pr.listening()

	id := submitOn(t, other, "wake-me")
	rep := pr.next(claimedTask(id), "the claim of the submitted task")
	require.Equal(t, epoch, clock.Now(), "the clock moved: the poll, not the wake-up, would have claimed it")
	require.Equal(t, int64(1), rep.Claims[0].Fence)
	pr.next(completedTask(id), "the task's completion")
}

// TestPostgresRunnerPollsWhileListenerIsLost: when the server terminates
// the runner's listening connection, the runner falls back to polling (a
// task submitted meanwhile is claimed at PollMax, before the listener is
// back), and the listener reconnects after WakeRetryMin, logging the loss
// once and its return.
func TestPostgresRunnerPollsWhileListenerIsLost(t *testing.T) {
	url := pgtest.Fresh(t, migratePostgres)
	clock := clockwork.NewFakeClockAt(epoch)
	q := openPostgres(t, url, clock, 1)
	other := openPostgres(t, url, clock, 2)
	const pollMax = 500 * time.Millisecond
	require.Less(t, pollMax, queue.WakeRetryMin, "the poll must come before the reconnection")
	pr := startPostgresRunner(t, q, clock, "w1", pollMax)
	pr.listening()

	// A connection of the test's own, in the queue's schema, ends the
	// listener's.
	admin, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer admin.Close()
	var schema string
	require.NoError(t, admin.QueryRowContext(context.Background(), "SELECT current_schema()").Scan(&schema))
	var terminated int
	require.NoError(t, admin.QueryRowContext(context.Background(),
		`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		 WHERE datname = current_database() AND application_name = $1`, "leasehold wake "+schema).Scan(&terminated))
	require.Equal(t, 1, terminated, "exactly one listening connection for this schema")
	pr.logs.await(t, "wake listener lost")

	id := submitOn(t, other, "poll-me") // its notification reaches nobody
	pr.idle()
	clock.Advance(pollMax)
	rep := pr.next(func(r worker.Report) bool { return r.Action == worker.ActionClaim }, "the poll's claim")
	require.Len(t, rep.Claims, 1, "the idle runner's poll, at PollMax, claims the task")
	require.Equal(t, id, rep.Claims[0].TaskID)
	require.Equal(t, epoch.Add(pollMax), clock.Now())
	require.Equal(t, 0, pr.logs.count("wake listener back"), "the listener came back before the poll")
	pr.next(completedTask(id), "the task's completion")

	clock.Advance(queue.WakeRetryMin)
	pr.logs.await(t, "wake listener back")
	require.Equal(t, 1, pr.logs.count("wake listener lost"), "the loss is logged once")
}
