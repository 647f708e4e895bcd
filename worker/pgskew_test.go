package worker_test

// Two machines whose clocks disagree, against one PostgreSQL store. On
// PostgreSQL each machine's clock is the queue's clock for its own writes
// (DESIGN.md): a claim or heartbeat sets lease_until by the writer's
// clock, a fenced write is checked by the writer's clock, and the reaper
// expires leases by its own. docs/RUNBOOK.md ("Clocks on many machines")
// states the bound these tests check from both sides.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

// skewed is two machines on one PostgreSQL store: w1 on clock a, w2 on
// clock b, which runs skew ahead of a (behind, if negative). w2's machine
// also runs the reaper, as every live worker does. Time moves for both at
// once (tick), so the skew stays what it was.
type skewed struct {
	t      *testing.T
	a, b   *clockwork.FakeClock
	q1, q2 *queue.Queue
	w1, w2 *worker.Worker
	svc    *workertest.Service
	// reports are every report of both workers, in order.
	reports []worker.Report
}

// newSkewed opens the two machines' queues on a fresh schema, with a
// retry backoff short enough that a reaped task is due again within a
// tick, and workers with lease and heartbeat.
func newSkewed(t *testing.T, skew, lease, heartbeat time.Duration) *skewed {
	t.Helper()
	dbURL := pgtest.Fresh(t, migratePostgres)
	s := &skewed{t: t, a: clockwork.NewFakeClockAt(epoch), b: clockwork.NewFakeClockAt(epoch.Add(skew))}
	s.svc = workertest.NewService(worker.Dedup, s.a)
	open := func(clock clockwork.Clock, seed uint64) *queue.Queue {
		q, err := queue.Open(context.Background(), queue.Options{Path: dbURL, Clock: clock, IDs: model.NewSeededIDs(seed),
			Backoff: model.Backoff{Base: 10 * time.Millisecond, Max: time.Second}})
		require.NoError(t, err)
		t.Cleanup(func() { q.Close() })
		return q
	}
	s.q1, s.q2 = open(s.a, 1), open(s.b, 2)
	newWorker := func(id string, q *queue.Queue, clock clockwork.Clock) *worker.Worker {
		w, err := worker.New(worker.Config{ID: id, Queue: q, Handler: worker.Synthetic{}, Service: s.svc, Clock: clock,
			Lease: lease, Heartbeat: heartbeat, PollMin: 100 * time.Millisecond, PollMax: 100 * time.Millisecond})
		require.NoError(t, err)
		return w
	}
	s.w1, s.w2 = newWorker("w1", s.q1, s.a), newWorker("w2", s.q2, s.b)
	return s
}

// submit submits, from w1's machine, a task whose one step takes work.
func (s *skewed) submit(work time.Duration) string {
	s.t.Helper()
	res, err := s.q1.Submit(context.Background(), model.SubmitRequest{User: "ana", Key: "skew",
		Payload:    fmt.Sprintf(`{"steps":[{"cost":1,"effect":"charge"},{"cost":1,"duration_ms":%d}]}`, work.Milliseconds()),
		CostBudget: 10, StepsMax: 5})
	require.NoError(s.t, err)
	return res.TaskID
}

// settle steps w until it is idle.
func (s *skewed) settle(w *worker.Worker) {
	s.t.Helper()
	for range stepsMax {
		r := w.Step(context.Background())
		require.Empty(s.t, r.Anomaly, "anomaly: %s", r)
		if r.Action == worker.ActionIdle {
			return
		}
		s.reports = append(s.reports, r)
	}
	s.t.Fatalf("%s never idle", w.ID())
}

// tick moves both clocks by d, then lets w1 do what is due, w2's machine
// reap, and w2 do what is due.
func (s *skewed) tick(d time.Duration) {
	s.t.Helper()
	s.a.Advance(d)
	s.b.Advance(d)
	s.settle(s.w1)
	_, err := s.q2.Reap(context.Background())
	require.NoError(s.t, err)
	s.settle(s.w2)
}

// runUntil ticks until the task is settled or limit has passed.
func (s *skewed) runUntil(id string, tick, limit time.Duration) model.Task {
	s.t.Helper()
	s.settle(s.w1) // w1 claims first
	for elapsed := time.Duration(0); elapsed < limit; elapsed += tick {
		task, err := s.q1.Task(context.Background(), id)
		require.NoError(s.t, err)
		if task.State.Terminal() {
			return task
		}
		s.tick(tick)
	}
	s.t.Fatalf("task %s not settled within %s", id, limit)
	return model.Task{}
}

// events returns the task's trail and its lines for a trace (times by the
// clock of the machine that wrote each).
func (s *skewed) events(id string) ([]model.Event, string) {
	s.t.Helper()
	events, err := s.q1.Events(context.Background(), id)
	require.NoError(s.t, err)
	var lines []string
	for _, e := range events {
		lines = append(lines, traceLine(e))
	}
	return events, strings.Join(lines, "\n")
}

// requireOneWriterAtATime checks the trail: every write it accepted under
// a claim came from the claim current at the time, so no two claimants'
// accepted writes interleave, and every refused write is recorded as a
// stale write of an older fence.
func requireOneWriterAtATime(t *testing.T, events []model.Event, trace string) {
	t.Helper()
	var current int64
	for _, e := range events {
		switch e.Kind {
		case model.EventClaimed:
			require.Greater(t, e.Fence, current, "claims under increasing fences:\n%s", trace)
			current = e.Fence
		case model.EventStaleWrite:
			require.Less(t, e.Fence, current, "a refused write is an older claim's:\n%s", trace)
		case model.EventStep, model.EventEffectIntent, model.EventEffectReceipt, model.EventCompleted:
			require.Equal(t, current, e.Fence, "an accepted write under a claim not current:\n%s", trace)
		}
	}
}

// TestPostgresSkewPastTheBoundIsFenced: w2's clock runs 2 s ahead of w1's,
// with a 3 s lease and heartbeats every 1.5 s: past the bound (lease >
// skew + heartbeat interval + a heartbeat's commit time). So w2's reaper
// expires w1's lease while w1, heartbeating on time, still holds it by
// its own clock; w2 takes the task over under fence 2, and w1's next
// heartbeat, made before its lease ends by its clock, is refused by the
// fence and recorded as a stale write. w2 completes the task; the effect
// is applied once.
func TestPostgresSkewPastTheBoundIsFenced(t *testing.T) {
	const skew, lease, heartbeat = 2 * time.Second, 3 * time.Second, 1500 * time.Millisecond
	s := newSkewed(t, skew, lease, heartbeat)
	id := s.submit(5 * time.Second)
	task := s.runUntil(id, 100*time.Millisecond, time.Minute)
	require.Equal(t, model.Completed, task.State)
	events, trace := s.events(id)
	t.Logf("trail, each time by its writer's clock (w2's runs %s ahead):\n%s", skew, trace)
	requireOneWriterAtATime(t, events, trace)

	expiries := countEvents(events, model.EventLeaseExpired)
	require.Equal(t, 1, expiries, "w2's reaper expires w1's lease once:\n%s", trace)
	var refused *worker.Report
	var leaseHeld time.Time // w1's lease by its own view, when the refused write was made
	for i, r := range s.reports {
		if r.Worker != "w1" {
			continue
		}
		if r.Action == worker.ActionClaim && len(r.Claims) == 1 {
			leaseHeld = r.Claims[0].LeaseUntil
		}
		if r.Action == worker.ActionHeartbeat && r.Accepted {
			leaseHeld = r.LeaseUntil
		}
		if r.Outcome == "stale claim dropped" {
			refused = &s.reports[i]
			break
		}
	}
	require.NotNil(t, refused, "w1 made a write after the takeover")
	require.Equal(t, worker.ActionHeartbeat, refused.Action)
	require.ErrorIs(t, refused.Err, model.ErrStaleClaim)
	var stale []model.Event
	for _, e := range events {
		if e.Kind == model.EventStaleWrite {
			stale = append(stale, e)
		}
	}
	require.Len(t, stale, 1, trace)
	require.Equal(t, "w1", stale[0].Actor)
	require.Equal(t, int64(1), stale[0].Fence)
	require.True(t, stale[0].At.Before(leaseHeld),
		"w1 wrote at %s by its clock, inside the lease it held until %s: the fence, not the clock, refused it", stale[0].At, leaseHeld)
	require.Equal(t, "w2", lastActor(events, model.EventCompleted))
	require.Equal(t, 1, s.svc.Applications(lastOp(events)), "the effect applied once")
}

// TestPostgresSkewWithinTheBoundKeepsOneClaimant: with a 10 s lease and
// heartbeats every 2 s, clocks up to 2 s apart either way never cost a
// worker that heartbeats on time its lease: over a 30 s step, the other
// machine's reaper expires nothing, its worker claims nothing, and no
// write is refused; one claimant writes throughout.
func TestPostgresSkewWithinTheBoundKeepsOneClaimant(t *testing.T) {
	const lease, heartbeat = 10 * time.Second, 2 * time.Second
	for _, skew := range []time.Duration{2 * time.Second, -2 * time.Second, 500 * time.Millisecond} {
		t.Run(fmt.Sprintf("w2_ahead_%s", skew), func(t *testing.T) {
			require.Less(t, skew.Abs()+heartbeat, lease, "within the bound")
			s := newSkewed(t, skew, lease, heartbeat)
			id := s.submit(30 * time.Second)
			task := s.runUntil(id, 250*time.Millisecond, 2*time.Minute)
			require.Equal(t, model.Completed, task.State)
			events, trace := s.events(id)
			requireOneWriterAtATime(t, events, trace)
			require.Zero(t, countEvents(events, model.EventLeaseExpired), trace)
			require.Zero(t, countEvents(events, model.EventStaleWrite), trace)
			require.Equal(t, 1, countEvents(events, model.EventClaimed), trace)
			require.Equal(t, "w1", lastActor(events, model.EventCompleted))
			require.Positive(t, count(s.reports, func(r worker.Report) bool {
				return r.Worker == "w1" && r.Action == worker.ActionHeartbeat && r.Accepted
			}), "w1 heartbeated through the step")
		})
	}
}

// lastActor returns the actor of the last event of kind.
func lastActor(events []model.Event, kind model.EventKind) string {
	actor := ""
	for _, e := range events {
		if e.Kind == kind {
			actor = e.Actor
		}
	}
	return actor
}

// lastOp returns the operation of the last effect intent.
func lastOp(events []model.Event) string {
	op := ""
	for _, e := range events {
		if e.Kind == model.EventEffectIntent {
			op = e.OpID
		}
	}
	return op
}
