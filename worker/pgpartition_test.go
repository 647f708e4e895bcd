package worker_test

// A network partition between PostgreSQL and one of two workers, each
// worker on a "host" of its own: its own queue (connection pool and wake
// listener) reaching the server through a netcut proxy of its own, so its
// link can be cut without touching the other's. (The proxy stands in for
// network namespaces with veth pairs, which need root; the protocol sees
// the same thing: a TCP link that stops carrying bytes and later carries
// them late.)

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	return newHostAs(t, dbURL, clock, seed, "", queue.Options{})
}

// newHostAs is newHost with the queue's sessions named app in
// pg_stat_activity (application_name), if app is given, and with the
// BusyTimeout of o.
func newHostAs(t *testing.T, dbURL string, clock clockwork.Clock, seed uint64, app string, o queue.Options) *host {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	link, err := netcut.Listen(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { link.Close() })
	u.Host = link.Addr()
	if app != "" {
		v := u.Query()
		v.Set("application_name", app)
		u.RawQuery = v.Encode()
	}
	q, err := queue.Open(context.Background(), queue.Options{Path: u.String(), Clock: clock, IDs: model.NewSeededIDs(seed),
		BusyTimeout: o.BusyTimeout})
	require.NoError(t, err)
	t.Cleanup(func() {
		link.Restore() // a group waiting on a cut link would keep Close waiting
		q.Close()
	})
	return &host{link: link, q: q}
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
		return findEvent(t, events, trace, what, match)
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

// findEvent returns the index of the first of events that match
// accepts, or fails the test naming what and showing the trace.
func findEvent(t *testing.T, events []model.Event, trace []string, what string, match func(model.Event) bool) int {
	t.Helper()
	for i, e := range events {
		if match(e) {
			return i
		}
	}
	t.Fatalf("no %s in the trail:\n%s", what, strings.Join(trace, "\n"))
	return -1
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

// inTransactionUpdate recognises the server's answer to an UPDATE that
// changed a row inside a transaction: its CommandComplete ("UPDATE 1")
// and the ReadyForQuery after it, whose status 'T' says a transaction is
// open.
func inTransactionUpdate(chunk []byte) bool {
	return bytes.Contains(chunk, []byte("UPDATE 1\x00")) && bytes.HasSuffix(chunk, []byte{'Z', 0, 0, 0, 5, 'T'})
}

// adminSession is a connection of the test's own to the server, never
// cut, that reads pg_stat_activity and waits for rows; its statements
// give up after pgGuard (a failure deadline).
func adminSession(t *testing.T, dbURL string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(context.Background(), fmt.Sprintf("SET statement_timeout = %d", pgGuard.Milliseconds()))
	require.NoError(t, err)
	return conn
}

// idleInTransaction returns how many sessions named app are idle inside a
// transaction, and when the oldest became so (the server's clock, as
// text; "" if none).
func idleInTransaction(t *testing.T, admin *pgx.Conn, app string) (int, string) {
	t.Helper()
	var n int
	var since string
	require.NoError(t, admin.QueryRow(context.Background(), `SELECT COUNT(*), COALESCE(MIN(state_change)::TEXT, '')
FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle in transaction'`, app).Scan(&n, &since))
	return n, since
}

// applyFirstStep does what a worker's slot does for a task's first step,
// an effect: intent, call, receipt, step; each write must be accepted.
func applyFirstStep(t *testing.T, q *queue.Queue, svc worker.Service, c model.Claim) string {
	t.Helper()
	ctx := context.Background()
	intent, err := q.RecordIntent(ctx, c, 0)
	require.NoError(t, err)
	result, err := svc.Call(ctx, worker.Call{OpID: intent.OpID, TaskID: c.TaskID, Effect: "charge", Fence: c.Fence})
	require.NoError(t, err)
	require.NoError(t, q.RecordReceipt(ctx, c, intent.OpID, result))
	_, err = q.CompleteStep(ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
	require.NoError(t, err)
	return intent.OpID
}

// TestPostgresPartitionInsideAWriteTransaction: worker w1's link to
// PostgreSQL is cut inside one of its write transactions, just after the
// server ran the transaction's UPDATE of task T (a heartbeat) and before
// its answer reached w1. The server's session for w1 is left idle in
// transaction, holding T's row. Meanwhile w1's heartbeat for its other
// task U waits behind that group (w1's process commits its writes in
// groups). The lease runs out, and w2, on another host with a lock
// timeout of 300 ms, goes on working: its reaper skips T's held row and
// requeues U, and it completes its own ten tasks and U while w1's session
// still holds T. The server ends that session once it has been idle in
// its transaction for the store's default timeout (5 s), which releases
// T; w2 reaps and completes it. When w1's link comes back its transaction
// is gone (not applied) and its late heartbeat for U is refused by the
// fence. Each effect was applied once.
//
// Before the store's idle-in-transaction timeout and the reaper's SKIP
// LOCKED, w2's reap failed with lock_not_available (55P03) for as long as
// w1's session lived (the server keeps it until TCP gives up), so U was
// never reaped either.
func TestPostgresPartitionInsideAWriteTransaction(t *testing.T) {
	ctx := context.Background()
	dbURL := pgtest.Fresh(t, migratePostgres)
	clock := clockwork.NewFakeClockAt(epoch)
	operator := openPostgres(t, dbURL, clock, 9) // reads the trail; never cut
	admin := adminSession(t, dbURL)
	const app1 = "w1_host"
	h1 := newHostAs(t, dbURL, clock, 1, app1, queue.Options{})
	h2 := newHostAs(t, dbURL, clock, 2, "w2_host", queue.Options{BusyTimeout: 300 * time.Millisecond})
	svc := workertest.NewService(worker.Dedup, clock)
	const lease = 30 * time.Second
	require.GreaterOrEqual(t, lease, h1.q.LeaseMin())

	var trace []string
	mark := func(format string, args ...any) {
		trace = append(trace, fmt.Sprintf("t=+%dms ", clock.Since(epoch).Milliseconds())+fmt.Sprintf(format, args...))
	}
	settings, err := h1.q.SessionSettings(ctx)
	require.NoError(t, err)
	require.Contains(t, settings, "idle_in_transaction_session_timeout=5s")
	require.Contains(t, settings, "statement_timeout=0")
	require.Contains(t, settings, "idle_session_timeout=0")
	mark("w1's sessions, read back from the server through its link: %s", strings.Join(settings, " "))

	payload := `{"steps":[{"cost":1,"effect":"charge"},{"cost":1}]}`
	submit := func(user, key, payload string) string {
		res, err := operator.Submit(ctx, model.SubmitRequest{User: user, Key: key, Payload: payload, CostBudget: 10, StepsMax: 5})
		require.NoError(t, err)
		return res.TaskID
	}
	taskT, taskU := submit("ana", "held", payload), submit("ana", "behind", payload)
	claimed, err := h1.q.Claim(ctx, model.ClaimRequest{Worker: "w1", Max: 2, Lease: lease})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	claims := map[string]model.Claim{}
	for _, c := range claimed {
		claims[c.Claim.TaskID] = c.Claim
	}
	opT, opU := applyFirstStep(t, h1.q, svc, claims[taskT]), applyFirstStep(t, h1.q, svc, claims[taskU])
	var own []string
	for i := range 10 {
		own = append(own, submit("bo", fmt.Sprintf("own%d", i), `{"steps":[{"cost":1}]}`))
	}

	// The cut: inside w1's heartbeat transaction for T, after its UPDATE.
	h1.link.CutAt(netcut.ToClient, inTransactionUpdate)
	heartbeatT := make(chan error, 1)
	go func() { _, err := h1.q.Heartbeat(ctx, claims[taskT], lease); heartbeatT <- err }()
	select {
	case <-h1.link.Held():
	case <-time.After(pgGuard):
		t.Fatalf("w1's heartbeat transaction was not cut within %s", pgGuard)
	}
	stuck, since := idleInTransaction(t, admin, app1)
	require.Equal(t, 1, stuck, "w1's session is idle in its transaction")
	mark("cut: w1's link, inside its heartbeat transaction for T: the server ran the UPDATE of T's row; its answer is held; w1's session is idle in transaction")
	heartbeatU := make(chan error, 1)
	go func() { _, err := h1.q.Heartbeat(ctx, claims[taskU], lease); heartbeatU <- err }()
	mark("w1's heartbeat for U (fence %d) waits behind that group", claims[taskU].Fence)

	// The leases run out; w2 works on.
	clock.Advance(lease + time.Millisecond)
	reaped, err := h2.q.Reap(ctx)
	require.NoError(t, err, "w2's reaper does not wait for T's held row")
	require.Equal(t, model.ReapResult{Expired: 1}, reaped, "U is requeued; T, held, is skipped")
	mark("w2's reaper: U's lease expired and requeued; T's row, held by w1's session, skipped")
	w2, err := worker.New(worker.Config{ID: "w2", Queue: h2.q, Handler: worker.Synthetic{}, Service: svc, Clock: clock,
		Lease: lease, Heartbeat: 10 * time.Second, PollMin: 500 * time.Millisecond, PollMax: 500 * time.Millisecond})
	require.NoError(t, err)
	completedBy := func(r worker.Report) bool { return r.Action == worker.ActionComplete && r.Accepted }
	var w2Reports []worker.Report
	reaps := 1
	stepUntil := func(done func() bool) {
		t.Helper()
		for range stepsMax {
			if done() {
				return
			}
			r := w2.Step(ctx)
			require.Empty(t, r.Anomaly, "anomaly: %s", r)
			w2Reports = append(w2Reports, r)
			if r.Action == worker.ActionIdle {
				require.Positive(t, r.Wait)
				clock.Advance(r.Wait)
				_, err := h2.q.Reap(ctx)
				require.NoError(t, err, "w2's reaper while T is held")
				reaps++
			}
		}
		t.Fatalf("w2 did not finish within %d steps; its reports:\n%s", stepsMax, lastReports(w2Reports, 20))
	}
	stepUntil(func() bool { return count(w2Reports, completedBy) == len(own)+1 })
	stuck, _ = idleInTransaction(t, admin, app1)
	require.Equal(t, 1, stuck, "w2 completed them while w1's session still held T")
	for _, id := range append([]string{taskU}, own...) {
		task, err := operator.Task(ctx, id)
		require.NoError(t, err)
		require.Equal(t, model.Completed, task.State, id)
	}
	task, err := operator.Task(ctx, taskT)
	require.NoError(t, err)
	require.Equal(t, model.Running, task.State, "T is still w1's, its lease past")
	mark("during the cut: w2 completed %d tasks (its own %d and U, taken over under fence 2) in %d steps, its reaper ran %d times "+
		"(none waited), all while w1's session held T", len(own)+1, len(own), len(w2Reports), reaps)

	// The server ends w1's session: T's row is free. The wait is the
	// server's: it returns when the row's lock goes, and says how long
	// w1's session had been idle in its transaction.
	var idleMs float64
	require.NoError(t, admin.QueryRow(ctx, `WITH locked AS (SELECT id FROM tasks WHERE id = $1 FOR UPDATE)
SELECT EXTRACT(EPOCH FROM clock_timestamp() - $2::TIMESTAMPTZ) * 1000 FROM locked`, taskT, since).Scan(&idleMs))
	stuck, _ = idleInTransaction(t, admin, app1)
	require.Zero(t, stuck)
	require.GreaterOrEqual(t, idleMs, float64(queue.PostgresIdleInTransactionTimeout.Milliseconds()))
	mark("the server ended w1's session after %.0f ms idle in its transaction (idle_in_transaction_session_timeout 5 s): T's row is free", idleMs)

	reaped, err = h2.q.Reap(ctx)
	require.NoError(t, err)
	require.Equal(t, model.ReapResult{Expired: 1}, reaped)
	mark("w2's reaper: T's lease expired, requeued")
	stepUntil(func() bool {
		task, err := operator.Task(ctx, taskT)
		require.NoError(t, err)
		return task.State == model.Completed
	})
	mark("w2 took T over (fence 2) and completed it")

	// The link comes back: w1's transaction is gone, and its late
	// heartbeat for U is refused by the fence.
	h1.link.Restore()
	mark("restore: w1's link")
	for _, wait := range []struct {
		ch   chan error
		what string
	}{{heartbeatT, "w1's heartbeat for T"}, {heartbeatU, "w1's heartbeat for U"}} {
		select {
		case err := <-wait.ch:
			switch wait.ch {
			case heartbeatT:
				require.Error(t, err, "the heartbeat's transaction was ended by the server")
				require.Equal(t, queue.ClassConnection, queue.ClassOf(err), "%v", err)
				mark("%s: not applied (%s)", wait.what, queue.ClassOf(err))
			case heartbeatU:
				require.ErrorIs(t, err, model.ErrStaleClaim)
				mark("%s: refused, stale", wait.what)
			}
		case <-time.After(pgGuard):
			t.Fatalf("%s did not return within %s of the restore", wait.what, pgGuard)
		}
	}

	for _, id := range []string{taskT, taskU} {
		evs, err := operator.Events(ctx, id)
		require.NoError(t, err)
		trace = append(trace, "-- trail of "+map[string]string{taskT: "T", taskU: "U"}[id])
		for _, e := range evs {
			trace = append(trace, traceLine(e))
		}
	}
	t.Logf("partition inside a write transaction (test marks, then T's and U's audit trails):\n%s", strings.Join(trace, "\n"))

	evsT, err := operator.Events(ctx, taskT)
	require.NoError(t, err)
	find := func(evs []model.Event, what string, match func(model.Event) bool) int {
		t.Helper()
		return findEvent(t, evs, trace, what, match)
	}
	expiry := find(evsT, "T's expiry", func(e model.Event) bool { return e.Kind == model.EventLeaseExpired })
	takeover := find(evsT, "T's takeover", func(e model.Event) bool { return e.Kind == model.EventClaimed && e.Actor == "w2" && e.Fence == 2 })
	done := find(evsT, "T's completion", func(e model.Event) bool { return e.Kind == model.EventCompleted && e.Actor == "w2" })
	require.Less(t, expiry, takeover)
	require.Less(t, takeover, done)
	require.Zero(t, countEvents(evsT, model.EventStaleWrite), "w1's heartbeat for T never reached the fence: its transaction was rolled back")
	evsU, err := operator.Events(ctx, taskU)
	require.NoError(t, err)
	completedU := find(evsU, "U's completion", func(e model.Event) bool { return e.Kind == model.EventCompleted && e.Actor == "w2" })
	refused := find(evsU, "w1's refused heartbeat", func(e model.Event) bool { return e.Kind == model.EventStaleWrite && e.Actor == "w1" })
	require.Less(t, completedU, refused, "w1's heartbeat for U arrived after w2 completed U")
	require.Equal(t, int64(1), evsU[refused].Fence)
	require.True(t, strings.HasPrefix(evsU[refused].Detail, string(model.WriteHeartbeat)+": "), evsU[refused].Detail)

	for _, op := range []string{opT, opU} {
		require.Equal(t, 1, svc.Applications(op), "%s applied once", op)
	}
	for _, id := range []string{taskT, taskU} {
		effects, err := operator.Effects(ctx, id)
		require.NoError(t, err)
		require.Len(t, effects, 1, "one receipt in the ledger for %s", id)
	}
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
