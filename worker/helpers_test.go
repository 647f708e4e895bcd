package worker_test

// The worker's tests drive a real in-memory queue under a fake clock and
// step workers one action at a time, as the simulator does. They live in
// package worker_test because faults, whose injectors they use, imports
// worker.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/worker"
)

// epoch is where every test's fake clock starts.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The lease and heartbeat most tests run under: short enough that a stall
// loses the lease after a few clock advances.
const (
	testLease     = 2 * time.Second
	testHeartbeat = 500 * time.Millisecond
)

// stepsMax bounds every stepping loop of a test.
const stepsMax = 500

// bundle is one test's queue, clock and (when opened through it) storage
// fault injector.
type bundle struct {
	t       *testing.T
	ctx     context.Context
	clock   *clockwork.FakeClock
	q       *queue.Queue
	storage *faults.Storage // nil unless setupStorage opened the queue
	keys    int
}

// setup opens an in-memory queue on a fake clock at epoch.
func setup(t *testing.T) *bundle {
	t.Helper()
	return open(t, clockwork.NewFakeClockAt(epoch), nil)
}

// setupStorage opens the queue through a faults.Storage wrapping the SQLite
// driver, with no busy timeout, as the simulator does.
func setupStorage(t *testing.T) *bundle {
	t.Helper()
	clock := clockwork.NewFakeClockAt(epoch)
	return open(t, clock, faults.NewStorage(&sqlite.Driver{}, clock))
}

// open opens the in-memory queue on clock, through storage when it is not
// nil; when the test ends it clears every fault, checks the queue's
// counters and closes it.
func open(t *testing.T, clock *clockwork.FakeClock, storage *faults.Storage) *bundle {
	t.Helper()
	ctx := context.Background()
	opts := queue.Options{Path: queue.Memory, Clock: clock, IDs: model.NewSeededIDs(1)}
	if storage != nil {
		opts.Driver, opts.BusyTimeout = storage, queue.NoBusyTimeout
	}
	q, err := queue.Open(ctx, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		if storage != nil {
			storage.Disarm()
			storage.SetUnavailable(false)
		}
		require.NoError(t, q.CheckCounters(ctx))
		require.NoError(t, q.Close())
	})
	return &bundle{t: t, ctx: ctx, clock: clock, q: q, storage: storage}
}

// submit submits a synthetic task for user ana and returns its ID.
func (b *bundle) submit(payload string, costBudget int64, stepsMax int) string {
	b.t.Helper()
	return b.submitRequest(model.SubmitRequest{User: "ana", Payload: payload, CostBudget: costBudget, StepsMax: stepsMax})
}

// submitRequest submits req under a fresh idempotency key.
func (b *bundle) submitRequest(req model.SubmitRequest) string {
	b.t.Helper()
	b.keys++
	req.Key = fmt.Sprintf("key-%d", b.keys)
	res, err := b.q.Submit(b.ctx, req)
	require.NoError(b.t, err)
	require.False(b.t, res.Replay)
	return res.TaskID
}

func (b *bundle) task(id string) model.Task {
	b.t.Helper()
	task, err := b.q.Task(b.ctx, id)
	require.NoError(b.t, err)
	return task
}

func (b *bundle) events(id string) []model.Event {
	b.t.Helper()
	evs, err := b.q.Events(b.ctx, id)
	require.NoError(b.t, err)
	return evs
}

// kinds returns the kinds of the task's events in order.
func (b *bundle) kinds(id string) []model.EventKind {
	b.t.Helper()
	var out []model.EventKind
	for _, e := range b.events(id) {
		out = append(out, e.Kind)
	}
	return out
}

// eventsOf returns the task's events of one kind.
func (b *bundle) eventsOf(id string, kind model.EventKind) []model.Event {
	b.t.Helper()
	var out []model.Event
	for _, e := range b.events(id) {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// newWorker returns a worker named id on the bundle's queue with the
// synthetic handler, the test lease and heartbeat, and short backoffs;
// edit adjusts the config before New.
func (b *bundle) newWorker(id string, svc worker.Service, edit ...func(*worker.Config)) *worker.Worker {
	b.t.Helper()
	cfg := worker.Config{ID: id, Queue: b.q, Handler: worker.Synthetic{}, Service: svc, Clock: b.clock,
		Lease: testLease, Heartbeat: testHeartbeat,
		PollMin: 100 * time.Millisecond, PollMax: time.Second,
		StorageBackoffMin: 100 * time.Millisecond, StorageBackoffMax: 400 * time.Millisecond}
	for _, e := range edit {
		e(&cfg)
	}
	w, err := worker.New(cfg)
	require.NoError(b.t, err)
	return w
}

// run steps w until it is idle holding no claims (or drained), advancing
// the fake clock by the wait of each idle report while it holds claims. It
// fails the test if maxSteps steps are not enough, if an idle worker that
// holds claims asks for no wait (it would spin), or on any anomaly.
func (b *bundle) run(w *worker.Worker, maxSteps int) []worker.Report {
	b.t.Helper()
	var out []worker.Report
	for range maxSteps {
		r := b.step(w)
		out = append(out, r)
		if r.Action != worker.ActionIdle {
			continue
		}
		if w.Drained() || len(w.Claims()) == 0 {
			return out
		}
		require.Positive(b.t, r.Wait, "idle while holding %v with no wait: %s", w.Claims(), r)
		b.clock.Advance(r.Wait)
	}
	b.t.Fatalf("worker %s still busy after %d steps; last reports:\n%s", w.ID(), maxSteps, lastReports(out, 10))
	return nil
}

// stepUntil steps w (advancing the clock on idle waits) until a report
// satisfies done, and returns that report.
func (b *bundle) stepUntil(w *worker.Worker, done func(worker.Report) bool) worker.Report {
	b.t.Helper()
	var out []worker.Report
	for range stepsMax {
		r := b.step(w)
		out = append(out, r)
		if done(r) {
			return r
		}
		if r.Action == worker.ActionIdle {
			require.Positive(b.t, r.Wait, "idle with no wait before the awaited report: %s", r)
			b.clock.Advance(r.Wait)
		}
	}
	b.t.Fatalf("worker %s never made the awaited report; last reports:\n%s", w.ID(), lastReports(out, 10))
	return worker.Report{}
}

// step steps w once and fails the test on an anomaly.
func (b *bundle) step(w *worker.Worker) worker.Report {
	b.t.Helper()
	r := w.Step(b.ctx)
	require.Empty(b.t, r.Anomaly, "anomaly: %s", r)
	return r
}

// expire advances the clock past a lease taken now, reaps, and advances to
// when the requeued task id is due again.
func (b *bundle) expire(id string) {
	b.t.Helper()
	b.clock.Advance(testLease + time.Millisecond)
	res, err := b.q.Reap(b.ctx)
	require.NoError(b.t, err)
	require.Equal(b.t, 1, res.Expired)
	b.untilDue(id)
}

// untilDue advances the clock to the queued task's run_at.
func (b *bundle) untilDue(id string) {
	b.t.Helper()
	task := b.task(id)
	require.Equal(b.t, model.Queued, task.State)
	if wait := task.RunAt.Sub(b.clock.Now()); wait > 0 {
		b.clock.Advance(wait)
	}
}

func is(action worker.Action, outcome string) func(worker.Report) bool {
	return func(r worker.Report) bool { return r.Action == action && (outcome == "" || r.Outcome == outcome) }
}

func lastReports(rs []worker.Report, n int) string {
	var b strings.Builder
	for _, r := range rs[max(0, len(rs)-n):] {
		b.WriteString(r.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// count returns how many reports satisfy match.
func count(rs []worker.Report, match func(worker.Report) bool) int {
	n := 0
	for _, r := range rs {
		if match(r) {
			n++
		}
	}
	return n
}

// effectPayload is the design's example without the gate and the failure:
// step 1 makes a "charge" effect.
const effectPayload = `{"steps":[{"cost":2},{"cost":5,"effect":"charge"},{"cost":1}]}`
