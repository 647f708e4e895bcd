package worker_test

// A network partition between PostgreSQL and one of two workers, each
// worker on a "host" of its own: its own queue (connection pool and wake
// listener) reaching the server through a netcut proxy of its own, so its
// link can be cut without touching the other's. (The proxy stands in for
// network namespaces with veth pairs, which need root; the protocol sees
// the same thing: a TCP link that stops carrying bytes and later carries
// them late.)

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/netcut"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

// host is one machine of a partition test: a proxy for its link to the
// server and a queue that reaches the server through it.
type host struct {
	link *netcut.Proxy
	q    *queue.Queue
}

// newHost opens a queue on url through a proxy of its own, both closed
// when the test ends.
func newHost(t *testing.T, dbURL string, clock clockwork.Clock, seed uint64) *host {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	link, err := netcut.Listen(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { link.Close() })
	u.Host = link.Addr()
	return &host{link: link, q: openPostgres(t, u.String(), clock, seed)}
}

// cutAfterCall is the service as the cut-off worker reaches it: the first
// call that applies an operation cuts the worker's link to the database
// just after the service answers, so the worker's next write, the
// operation's receipt, is on the wire when the partition begins.
type cutAfterCall struct {
	worker.Service
	once sync.Once
	cut  func()
}

func (c *cutAfterCall) Call(ctx context.Context, call worker.Call) (string, error) {
	result, err := c.Service.Call(ctx, call)
	if err == nil {
		c.once.Do(c.cut)
	}
	return result, err
}

// traceLine renders an audit event for the partition trace, its time
// relative to the test's epoch.
func traceLine(e model.Event) string {
	line := fmt.Sprintf("t=+%dms %s by %s fence %d", e.At.Sub(epoch).Milliseconds(), e.Kind, e.Actor, e.Fence)
	if e.Detail != "" {
		line += " (" + e.Detail + ")"
	}
	return line
}

// TestPostgresPartitionFencesTheCutOffWorker: worker w1, a live Runner,
// claims a task, calls the service for its effect, and loses its link to
// PostgreSQL with the effect's receipt on the wire. Its lease expires;
// w2, on another host, reaps the task, takes it over under a new fence,
// reconciles the effect with the service (which applied it once) and
// completes it. When w1's link comes back its late receipt is refused by
// the fence (a stale_write event in the trail) and w1 drops the claim; the
// service's record shows the effect applied once.
func TestPostgresPartitionFencesTheCutOffWorker(t *testing.T) {
	dbURL := pgtest.Fresh(t, migratePostgres)
	clock := clockwork.NewFakeClockAt(epoch)
	operator := openPostgres(t, dbURL, clock, 9) // reads the trail; never cut
	h1 := newHost(t, dbURL, clock, 1)
	h2 := newHost(t, dbURL, clock, 2)
	svc := workertest.NewService(worker.Dedup, clock)
	// Leases in the fake clock's time: at least the queue's LeaseMin (its
	// idle-in-transaction timeout plus its TCP user timeout), as a live
	// worker's must be.
	const lease, heartbeat = 30 * time.Second, 10 * time.Second

	res, err := operator.Submit(context.Background(), model.SubmitRequest{User: "ana", Key: "partition",
		Payload: `{"steps":[{"cost":1,"effect":"charge"},{"cost":1}]}`, CostBudget: 10, StepsMax: 5})
	require.NoError(t, err)
	id := res.TaskID
	var trace []string
	mark := func(format string, args ...any) {
		trace = append(trace, fmt.Sprintf("t=+%dms ", clock.Since(epoch).Milliseconds())+fmt.Sprintf(format, args...))
	}

	// w1 claims at once, records the intent, calls the service and, as the
	// service answers, loses its link; its receipt waits on the cut link.
	pr := &pgRunner{t: t, reports: make(chan worker.Report, 1024), logs: newLogLines()}
	cut := &cutAfterCall{Service: svc, cut: func() { h1.link.Cut() }}
	cfg := worker.Config{ID: "w1", Queue: h1.q, Handler: worker.Synthetic{}, Service: cut, Clock: clock,
		Logger: slog.New(pr.logs), Lease: lease, Heartbeat: heartbeat, PollMin: 500 * time.Millisecond, PollMax: 500 * time.Millisecond}
	runner, err := worker.NewRunner(cfg, worker.RunOptions{OnReport: func(rep worker.Report) { pr.reports <- rep }})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	claimed := pr.next(claimedTask(id), "w1's claim")
	require.Equal(t, int64(1), claimed.Claims[0].Fence)
	call := pr.next(func(r worker.Report) bool { return r.Action == worker.ActionCall }, "w1's call of the service")
	require.Equal(t, "applied", call.Outcome)
	opID := call.OpID
	mark("cut: w1's link to PostgreSQL, just after the service applied %s for fence 1", opID)
	select {
	case <-h1.link.Held():
	case <-time.After(pgGuard):
		t.Fatalf("w1 sent nothing across the cut within %s", pgGuard)
	}
	mark("w1's effect receipt for %s is on the cut link", opID)

	// w2's host: the lease runs out by its clock, its reaper requeues the
	// task, and w2 takes it over when it is due.
	w2, err := worker.New(worker.Config{ID: "w2", Queue: h2.q, Handler: worker.Synthetic{}, Service: svc, Clock: clock,
		Lease: lease, Heartbeat: heartbeat, PollMin: 500 * time.Millisecond, PollMax: 500 * time.Millisecond})
	require.NoError(t, err)
	clock.Advance(lease + time.Millisecond)
	reaped, err := h2.q.Reap(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, reaped.Expired, "w2's reaper finds w1's lease expired")
	task, err := operator.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, model.Queued, task.State)
	clock.Advance(task.RunAt.Sub(clock.Now()))
	var w2Reports []worker.Report
	for range stepsMax {
		r := w2.Step(context.Background())
		require.Empty(t, r.Anomaly, "anomaly: %s", r)
		w2Reports = append(w2Reports, r)
		if r.Action == worker.ActionComplete && r.Accepted {
			break
		}
		if r.Action == worker.ActionIdle {
			require.Positive(t, r.Wait)
			clock.Advance(r.Wait)
		}
	}
	require.Equal(t, 1, count(w2Reports, func(r worker.Report) bool { return r.Action == worker.ActionComplete && r.Accepted }),
		"w2 completes the task; its reports:\n%s", lastReports(w2Reports, 20))

	// The link comes back: w1's receipt arrives after the takeover and is
	// refused by the fence.
	mark("restore: w1's link")
	h1.link.Restore()
	stale := pr.next(func(r worker.Report) bool { return r.TaskID == id && r.Outcome == "stale claim dropped" }, "w1's late write refused")
	require.Equal(t, worker.ActionReceipt, stale.Action)
	require.ErrorIs(t, stale.Err, model.ErrStaleClaim)

	events, err := operator.Events(context.Background(), id)
	require.NoError(t, err)
	for _, e := range events {
		trace = append(trace, traceLine(e))
	}
	t.Logf("partition trace (test marks, then the task's audit trail):\n%s", strings.Join(trace, "\n"))

	// The trail: w1's claim and intent; the expiry; w2's claim under fence
	// 2, its receipt and completion; then w1's refused receipt under fence 1.
	find := func(match func(model.Event) bool, what string) int {
		t.Helper()
		for i, e := range events {
			if match(e) {
				return i
			}
		}
		t.Fatalf("no %s in the trail:\n%s", what, strings.Join(trace, "\n"))
		return -1
	}
	claim1 := find(func(e model.Event) bool { return e.Kind == model.EventClaimed && e.Actor == "w1" && e.Fence == 1 }, "claim by w1")
	intent1 := find(func(e model.Event) bool { return e.Kind == model.EventEffectIntent && e.Actor == "w1" }, "intent by w1")
	expiry := find(func(e model.Event) bool { return e.Kind == model.EventLeaseExpired }, "lease expiry")
	claim2 := find(func(e model.Event) bool { return e.Kind == model.EventClaimed && e.Actor == "w2" && e.Fence == 2 }, "takeover by w2")
	receipt2 := find(func(e model.Event) bool { return e.Kind == model.EventEffectReceipt && e.Actor == "w2" }, "receipt by w2")
	completed := find(func(e model.Event) bool { return e.Kind == model.EventCompleted && e.Actor == "w2" }, "completion by w2")
	refused := find(func(e model.Event) bool { return e.Kind == model.EventStaleWrite && e.Actor == "w1" }, "stale write by w1")
	require.Less(t, claim1, intent1)
	require.Less(t, intent1, expiry)
	require.Less(t, expiry, claim2)
	require.Less(t, claim2, receipt2)
	require.Less(t, receipt2, completed)
	require.Less(t, completed, refused, "w1's receipt arrives after the takeover")
	require.Equal(t, int64(1), events[refused].Fence)
	require.True(t, strings.HasPrefix(events[refused].Detail, string(model.WriteReceipt)+": "), events[refused].Detail)
	require.Equal(t, 1, countEvents(events, model.EventStaleWrite), "one late write, one refusal")
	require.Zero(t, countEvents(events[refused+1:], model.EventCompleted), "nothing after the refusal changes the task")

	// The effect: applied once by the service, one receipt in the ledger.
	require.Equal(t, 1, svc.Applications(opID), "the service applied the effect once")
	var calls []string
	for _, r := range svc.Records() {
		calls = append(calls, fmt.Sprintf("%s fence %d: %s", r.OpID, r.Fence, r.Outcome))
	}
	require.Equal(t, []string{opID + " fence 1: applied", opID + " fence 2: deduplicated"}, calls,
		"w1 applied the effect; w2, reconciling, was answered from the service's record")
	effects, err := operator.Effects(context.Background(), id)
	require.NoError(t, err)
	require.Len(t, effects, 1)
	require.Equal(t, opID, effects[0].OpID)
	task, err = operator.Task(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, model.Completed, task.State)
}

// countEvents returns how many of events are of kind.
func countEvents(events []model.Event, kind model.EventKind) int {
	n := 0
	for _, e := range events {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// TestPostgresRunnerRefusesALeaseUnderTheMinimum: a live worker over
// PostgreSQL refuses a lease shorter than its queue's LeaseMin (the
// idle-in-transaction timeout plus the TCP user timeout: 25 s by
// default), naming the lease; the minimum itself is accepted, and a
// queue with shorter settings in its URL allows a shorter lease.
func TestPostgresRunnerRefusesALeaseUnderTheMinimum(t *testing.T) {
	dbURL := pgtest.Fresh(t, migratePostgres)
	clock := clockwork.NewFakeClockAt(epoch)
	q := openPostgres(t, dbURL, clock, 1)
	require.Equal(t, 25*time.Second, q.LeaseMin())
	cfg := worker.Config{ID: "w1", Queue: q, Handler: worker.Synthetic{}, Service: workertest.NewService(worker.Dedup, clock),
		Clock: clock, Lease: 24 * time.Second}
	_, err := worker.NewRunner(cfg, worker.RunOptions{})
	require.ErrorIs(t, err, model.ErrInvalidInput)
	var ve *model.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "lease", ve.Field)
	require.Contains(t, ve.Problem, "24s is shorter than the queue's minimum lease 25s")
	cfg.Lease = 25 * time.Second
	_, err = worker.NewRunner(cfg, worker.RunOptions{})
	require.NoError(t, err)

	// A wrapper that hides the queue: the housekeeper (the queue) states it.
	cfg.Lease, cfg.Queue = 24*time.Second, struct{ worker.Queue }{q}
	_, err = worker.NewRunner(cfg, worker.RunOptions{Housekeeper: q})
	require.ErrorIs(t, err, model.ErrInvalidInput)

	short := openPostgres(t, dbURL+"&idle_in_transaction_session_timeout=500&tcp_user_timeout=1000", clock, 2)
	require.Equal(t, 1500*time.Millisecond, short.LeaseMin())
	cfg.Queue, cfg.Lease = short, 2*time.Second
	_, err = worker.NewRunner(cfg, worker.RunOptions{})
	require.NoError(t, err)
}
