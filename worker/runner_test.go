package worker_test

// The live Runner's concurrency, under a fake clock. Each test runs in a
// testing/synctest bubble: synctest.Wait returns once every goroutine of
// the runners is durably blocked (on the fake clock's timers, its work
// channel, or a gated service call), so the test advances the clock only
// when everything due at the current time has been done. No test sleeps.
//
// Why not FakeClock.BlockUntilContext: it waits for at least n registered
// timers, and the claimer leaves the timer of its select registered when a
// freed slot or shutdown wakes it first, so the count cannot tell a blocked
// runner from a busy one.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/worker"
	"github.com/leasehold/leasehold/worker/workertest"
)

// tick is how far the tests advance the fake clock at a time.
const tick = 100 * time.Millisecond

// acceptance is one write the queue accepted, in the order it did.
type acceptance struct {
	taskID string
	fence  int64
	kind   string // as worker.Report.Write names it
}

// claimCall is one Claim the runner made.
type claimCall struct {
	at      time.Time
	max     int
	claimed int
	refused bool // the queue returned an error
}

// recordingQueue passes every call to the queue and records, under one
// lock held across the call, each write the queue accepted: their order is
// the order the queue accepted them in (the in-memory queue has a single
// connection, so this serialises nothing that was not serial already).
type recordingQueue struct {
	inner worker.Queue
	clock clockwork.Clock

	mu       sync.Mutex
	accepted []acceptance
	claims   []claimCall
	refills  []claimCall // CompleteAndClaim's, accepted or not
	each     []int       // the completions of each CompleteEachAndClaim
}

var (
	_ worker.Queue           = (*recordingQueue)(nil)
	_ worker.CompleteClaimer = (*recordingQueue)(nil)
)

func (q *recordingQueue) record(err error, kind string, c model.Claim) {
	if err == nil {
		q.accepted = append(q.accepted, acceptance{taskID: c.TaskID, fence: c.Fence, kind: kind})
	}
}

func (q *recordingQueue) Claim(ctx context.Context, req model.ClaimRequest) ([]model.Claimed, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	claimed, err := q.inner.Claim(ctx, req)
	q.claims = append(q.claims, claimCall{at: q.clock.Now(), max: req.Max, claimed: len(claimed), refused: err != nil})
	for _, c := range claimed {
		q.record(err, "claim", c.Claim)
	}
	return claimed, err
}

func (q *recordingQueue) Heartbeat(ctx context.Context, c model.Claim, lease time.Duration) (model.HeartbeatResult, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	res, err := q.inner.Heartbeat(ctx, c, lease)
	q.record(err, "heartbeat", c)
	return res, err
}

func (q *recordingQueue) CompleteStep(ctx context.Context, w model.StepWrite) (model.StepResult, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	res, err := q.inner.CompleteStep(ctx, w)
	q.record(err, "step", w.Claim)
	return res, err
}

func (q *recordingQueue) RecordIntent(ctx context.Context, c model.Claim, step int) (model.IntentResult, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	res, err := q.inner.RecordIntent(ctx, c, step)
	q.record(err, "effect_intent", c)
	return res, err
}

func (q *recordingQueue) RecordReceipt(ctx context.Context, c model.Claim, opID, result string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	err := q.inner.RecordReceipt(ctx, c, opID, result)
	q.record(err, "effect_receipt", c)
	return err
}

func (q *recordingQueue) Pause(ctx context.Context, c model.Claim, step int, gate string) (model.State, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	to, err := q.inner.Pause(ctx, c, step, gate)
	q.record(err, "pause", c)
	return to, err
}

func (q *recordingQueue) Complete(ctx context.Context, c model.Claim) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	err := q.inner.Complete(ctx, c)
	q.record(err, "complete", c)
	return err
}

// CompleteAndClaim passes to the queue's and records the completion, then
// each claim it made, in that order (the order the queue made them in, in
// one write).
func (q *recordingQueue) CompleteAndClaim(ctx context.Context, c model.Claim, next model.ClaimRequest) ([]model.Claimed, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	claimed, err := q.inner.(worker.CompleteClaimer).CompleteAndClaim(ctx, c, next)
	q.refills = append(q.refills, claimCall{at: q.clock.Now(), max: next.Max, claimed: len(claimed), refused: err != nil})
	q.record(err, "complete", c)
	for _, cl := range claimed {
		q.record(err, "claim", cl.Claim)
	}
	return claimed, err
}

func (q *recordingQueue) ClaimsOnCompletion() bool {
	return q.inner.(worker.CompleteClaimer).ClaimsOnCompletion()
}

func (q *recordingQueue) refillCalls() []claimCall {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]claimCall(nil), q.refills...)
}

func (q *recordingQueue) Fail(ctx context.Context, c model.Claim, f model.Failure) (model.State, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	to, err := q.inner.Fail(ctx, c, f)
	q.record(err, "fail", c)
	return to, err
}

func (q *recordingQueue) Release(ctx context.Context, c model.Claim) (model.State, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	to, err := q.inner.Release(ctx, c)
	q.record(err, "release", c)
	return to, err
}

func (q *recordingQueue) AcknowledgeCancel(ctx context.Context, c model.Claim) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	err := q.inner.AcknowledgeCancel(ctx, c)
	q.record(err, "cancel_ack", c)
	return err
}

func (q *recordingQueue) acceptedWrites() []acceptance {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]acceptance(nil), q.accepted...)
}

func (q *recordingQueue) claimCalls() []claimCall {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]claimCall(nil), q.claims...)
}

// liveService holds calls to the service double at a gate.
// With a gate, calls wait for the gate to close before they apply the
// operation (an effect held in flight); with gateFirst, only the first.
type liveService struct {
	gate      chan struct{} // nil: no wait
	gateFirst bool

	mu       sync.Mutex
	inner    *workertest.Service
	inFlight int // calls waiting at the gate
	held     int // calls held at the gate so far
}

var _ worker.Service = (*liveService)(nil)

func newLiveService(kind worker.ServiceKind, gate chan struct{}) *liveService {
	return &liveService{gate: gate, inner: workertest.NewService(kind, clockwork.NewFakeClockAt(epoch))}
}

func (s *liveService) Kind() worker.ServiceKind { return s.inner.Kind() }

func (s *liveService) Call(ctx context.Context, c worker.Call) (string, error) {
	s.mu.Lock()
	hold := s.gate != nil && (!s.gateFirst || s.held == 0)
	if hold {
		s.held++
	}
	s.mu.Unlock()
	if hold {
		s.mu.Lock()
		s.inFlight++
		s.mu.Unlock()
		<-s.gate
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inner.Call(ctx, c)
}

func (s *liveService) Status(ctx context.Context, opID string, fence int64) (bool, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inner.Status(ctx, opID, fence)
}

func (s *liveService) Applications(opID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inner.Applications(opID)
}

func (s *liveService) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inner.CallCount()
}

func (s *liveService) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

// stamped is a report and the fake time it was made at.
type stamped struct {
	worker.Report
	at time.Time
}

// live is one test's runners over the bundle's queue, seen through a
// recordingQueue, and every report they made.
type live struct {
	b *bundle
	q *recordingQueue

	mu      sync.Mutex
	reports []stamped
}

func newLive(b *bundle) *live {
	return &live{b: b, q: &recordingQueue{inner: b.q, clock: b.clock}}
}

// liveRunner is one running Runner.
type liveRunner struct {
	id     string
	r      *worker.Runner
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned err
	err    error
}

// start runs a Runner named id with the test lease and heartbeat, short
// polling, the queue as its housekeeper, and edit applied to its config.
// The runner is stopped when the test ends, before the queue is closed.
func (l *live) start(id string, svc worker.Service, edit ...func(*worker.Config, *worker.RunOptions)) *liveRunner {
	l.b.t.Helper()
	cfg := worker.Config{ID: id, Queue: l.q, Handler: worker.Synthetic{}, Service: svc, Clock: l.b.clock,
		Lease: testLease, Heartbeat: testHeartbeat, PollMin: tick, PollMax: time.Second,
		StorageBackoffMin: tick, StorageBackoffMax: 400 * time.Millisecond}
	opts := worker.RunOptions{Housekeeper: l.b.q, OnReport: func(r worker.Report) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.reports = append(l.reports, stamped{Report: r, at: l.b.clock.Now()})
	}}
	for _, e := range edit {
		e(&cfg, &opts)
	}
	r, err := worker.NewRunner(cfg, opts)
	require.NoError(l.b.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	lr := &liveRunner{id: id, r: r, cancel: cancel, done: make(chan struct{})}
	go func() {
		lr.err = r.Run(ctx)
		close(lr.done)
	}()
	l.b.t.Cleanup(func() {
		cancel()
		<-lr.done
	})
	return lr
}

// stop cancels the runner's context and waits for Run to return; a runner
// that needed the clock to move to finish would deadlock the bubble, which
// synctest reports.
func (lr *liveRunner) stop(t *testing.T) {
	t.Helper()
	lr.cancel()
	<-lr.done
	require.NoError(t, lr.err, "Run returns nil after a graceful shutdown")
	require.Empty(t, lr.r.Claims(), "a stopped runner holds nothing")
}

// drain cancels the runner's context and drives the clock until Run has
// returned, for runners whose runs under way must end before they can
// release (a shutdown lets them, within the grace); then it checks what
// stop does.
func (l *live) drain(lr *liveRunner, ticksMax int) {
	l.b.t.Helper()
	lr.cancel()
	l.drive(ticksMax, nil, lr.returned)
	lr.stop(l.b.t)
}

// returned reports whether Run has returned (without waiting).
func (lr *liveRunner) returned() bool {
	select {
	case <-lr.done:
		return true
	default:
		return false
	}
}

// drive waits for the runners to block, calls each (which may fail the
// test or act on the queue) and checks until; until it holds, it advances
// the clock by one tick, at most ticksMax times.
func (l *live) drive(ticksMax int, each func(), until func() bool) {
	l.b.t.Helper()
	for range ticksMax {
		synctest.Wait()
		if each != nil {
			each()
		}
		if until() {
			return
		}
		l.b.clock.Advance(tick)
	}
	l.b.t.Fatalf("not done after %d ticks (%s); last reports:\n%s", ticksMax, time.Duration(ticksMax)*tick, l.lastReports(10))
}

func (l *live) lastReports(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []worker.Report
	for _, r := range l.reports[max(0, len(l.reports)-n):] {
		out = append(out, r.Report)
	}
	return lastReports(out, n)
}

func (l *live) allReports() []stamped {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]stamped(nil), l.reports...)
}

// all reports whether every task is in want.
func (l *live) all(ids []string, want model.State) bool {
	for _, id := range ids {
		if l.b.task(id).State != want {
			return false
		}
	}
	return true
}

// checkReports fails the test on any anomaly and checks the single-claim
// invariant with model.History: it feeds History the accepted writes the
// runners reported, in the order the queue accepted them, and checks that
// the reports and the queue agree on what was accepted. It returns the
// owners of each task's claims, by fence.
func (l *live) checkReports() map[string]map[int64]string {
	t := l.b.t
	t.Helper()
	reported := map[acceptance][]model.AcceptedWrite{}
	owners := map[string]map[int64]string{}
	for _, r := range l.allReports() {
		require.Empty(t, r.Anomaly, "anomaly: %s", r.Report)
		if !r.Accepted || r.Write == "" || r.Err != nil {
			continue
		}
		if r.Write != "claim" {
			key := acceptance{taskID: r.TaskID, fence: r.Fence, kind: string(r.Write)}
			reported[key] = append(reported[key], model.AcceptedWrite{TaskID: r.TaskID, Fence: r.Fence, Kind: string(r.Write),
				At: r.at, Owner: r.Worker, LeaseUntil: r.LeaseUntil})
		}
		// A claim's report lists what it claimed; so does a completion's
		// that claimed the slot's next task in the same write.
		for _, c := range r.Claims {
			require.Equal(t, r.Worker, c.Owner)
			key := acceptance{taskID: c.TaskID, fence: c.Fence, kind: "claim"}
			reported[key] = append(reported[key], model.AcceptedWrite{TaskID: c.TaskID, Fence: c.Fence, Kind: "claim",
				At: r.at, Owner: r.Worker, LeaseUntil: c.LeaseUntil})
			if owners[c.TaskID] == nil {
				owners[c.TaskID] = map[int64]string{}
			}
			owners[c.TaskID][c.Fence] = c.Owner
		}
	}
	h := model.NewHistory()
	latest := map[string]int64{}
	for i, a := range l.q.acceptedWrites() {
		writes := reported[a]
		require.NotEmpty(t, writes, "write %d the queue accepted (%+v) was not reported as accepted", i, a)
		w := writes[0]
		reported[a] = writes[1:]
		if a.kind == "claim" {
			require.Greater(t, a.fence, latest[a.taskID], "each claim of %s has a higher fence than the last", a.taskID)
			latest[a.taskID] = a.fence
		}
		if v := h.Accept(w); v != nil {
			t.Fatalf("single-claim invariant broken at write %d: %s", i, v)
		}
	}
	for a, rest := range reported {
		require.Empty(t, rest, "reported as accepted but not accepted by the queue: %+v", a)
	}
	return owners
}

// Three slots run four tasks (durations longer than the lease, an effect
// each): every task completes under its first claim, heartbeats keep every
// lease (the housekeeper's reaper never finds one expired), every effect is
// applied exactly once, and at most three tasks are held at once.
func TestRunnerRunsTasksConcurrently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		var ids []string
		for i := range 4 {
			ids = append(ids, b.submit(fmt.Sprintf(`{"steps":[{"cost":1,"duration_ms":1500},{"cost":2,"effect":"charge-%d"},{"cost":1,"duration_ms":1500}]}`, i), 10, 5))
		}
		svc := newLiveService(worker.Dedup, nil)
		lr := l.start("w1", svc, func(c *worker.Config, _ *worker.RunOptions) { c.Concurrency = 3 })

		heldMax := 0
		l.drive(200, func() {
			held := len(lr.r.Claims())
			require.LessOrEqual(t, held, 3, "never more claims than slots")
			heldMax = max(heldMax, held)
		}, func() bool { return l.all(ids, model.Completed) })
		require.Equal(t, 3, heldMax, "three slots ran at once")
		require.Equal(t, epoch.Add(6*time.Second), b.clock.Now(), "two rounds of 3s each: the fourth task waited for a slot")
		lr.stop(t)

		for _, id := range ids {
			task := b.task(id)
			require.Equal(t, int64(1), task.Version, "%s ran under one claim", id)
			require.Zero(t, task.AttemptsCharged)
			require.Equal(t, int64(4), task.CostUsed)
			require.Equal(t, 1, svc.Applications(model.OperationID(id, 1)), "%s's effect applied once", id)
			require.Empty(t, b.eventsOf(id, model.EventLeaseExpired))
			require.Empty(t, b.eventsOf(id, model.EventStaleWrite))
		}
		require.Equal(t, 4, svc.calls(), "one call per effect")
		beats := map[string]int{}
		for _, r := range l.allReports() {
			if r.Action == worker.ActionHeartbeat {
				require.True(t, r.Accepted, "every heartbeat accepted: %s", r.Report)
				require.Equal(t, r.at.Add(testLease), r.LeaseUntil, "a heartbeat extends the lease from now")
				beats[r.TaskID]++
			}
		}
		for _, id := range ids {
			require.GreaterOrEqual(t, beats[id], 5, "%s's 3s of work outlasted its 2s lease on heartbeats", id)
		}
		l.checkReports()
	})
}

// Shutdown: Run returns only after the effect in flight is finished
// (intent, call, receipt, step) and then released, and after the run under
// way (a 5s step's) has ended and its step is committed, within the grace;
// released tasks are queued again without an attempt charged.
func TestRunnerShutdownFinishesTheEffectInFlightThenReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		effect := b.submitRequest(model.SubmitRequest{User: "ana", Priority: 10, CostBudget: 10, StepsMax: 5,
			Payload: `{"steps":[{"cost":1},{"cost":2,"effect":"charge"},{"cost":1}]}`})
		slow := b.submitRequest(model.SubmitRequest{User: "bo", CostBudget: 10, StepsMax: 5,
			Payload: `{"steps":[{"cost":1,"duration_ms":5000},{"cost":1}]}`})
		gate := make(chan struct{})
		svc := newLiveService(worker.Fenced, gate)
		lr := l.start("w1", svc, func(c *worker.Config, o *worker.RunOptions) {
			c.Concurrency = 2
			o.ShutdownGrace = 10 * time.Second
		})

		synctest.Wait()
		require.Equal(t, 1, svc.waiting(), "the effect's call is in flight")
		require.Len(t, lr.r.Claims(), 2)
		op := model.OperationID(effect, 1)
		require.Equal(t, []model.EventKind{model.EventSubmitted, model.EventClaimed, model.EventStep, model.EventEffectIntent},
			b.kinds(effect), "intent recorded before the call")

		lr.cancel()
		synctest.Wait()
		require.False(t, lr.returned(), "Run waits for the effect in flight")
		require.Equal(t, model.Running, b.task(effect).State)
		require.Equal(t, model.Running, b.task(slow).State, "the run under way goes on")
		require.Len(t, lr.r.Claims(), 2)

		close(gate)
		synctest.Wait()
		require.False(t, lr.returned(), "Run waits for the run under way")
		require.Equal(t, model.Queued, b.task(effect).State, "the effect was finished and its claim released")
		require.Equal(t, epoch, b.clock.Now())
		l.drive(60, nil, lr.returned)
		require.Equal(t, epoch.Add(5*time.Second), b.clock.Now(), "Run returned once the 5s run had ended")
		lr.stop(t)

		task := b.task(effect)
		require.Equal(t, model.Queued, task.State)
		require.Zero(t, task.AttemptsCharged, "a graceful release is not charged")
		require.Equal(t, 2, task.StepsUsed, "the effect's step was committed before the release")
		require.Equal(t, int64(3), task.CostUsed)
		require.Equal(t, 1, svc.Applications(op))
		require.Equal(t, []model.EventKind{model.EventSubmitted, model.EventClaimed, model.EventStep, model.EventEffectIntent,
			model.EventEffectReceipt, model.EventStep, model.EventReleased}, b.kinds(effect))
		effects, err := b.q.Effects(b.ctx, effect)
		require.NoError(t, err)
		require.Len(t, effects, 1)
		require.True(t, effects[0].Receipted())

		slowTask := b.task(slow)
		require.Zero(t, slowTask.AttemptsCharged)
		require.Equal(t, 1, slowTask.StepsUsed, "the run under way was committed, and nothing after it")
		require.Equal(t, []model.EventKind{model.EventSubmitted, model.EventClaimed, model.EventStep, model.EventReleased}, b.kinds(slow))
		l.checkReports()

		// The next runner resumes both from their checkpoints and never
		// calls the receipted operation again.
		next := l.start("w2", svc, func(c *worker.Config, _ *worker.RunOptions) { c.Concurrency = 2 })
		l.drive(100, nil, func() bool { return l.all([]string{effect, slow}, model.Completed) })
		next.stop(t)
		require.Equal(t, 1, svc.Applications(op))
		require.Equal(t, 1, svc.calls())
		require.Equal(t, int64(2), b.task(effect).Version)
		l.checkReports()
	})
}

// plainQueue is a worker.Queue without CompleteAndClaim: a runner over it
// claims only through its claimer.
type plainQueue struct{ worker.Queue }

// The claimer asks for nothing while every slot is busy, however often its
// poll timer fires, and claims again the moment a slot frees (woken by the
// slot, not by its next poll: the slot frees at 3.3s, between polls). The
// queue is seen without CompleteAndClaim, so that the slot frees instead
// of claiming its next task itself (see
// TestRunnerSlotClaimsItsNextTaskAsItCompletes).
func TestRunnerClaimsNothingWhileEverySlotIsBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		submit := func(priority int, ms int) string {
			return b.submitRequest(model.SubmitRequest{User: "ana", Priority: priority, CostBudget: 10, StepsMax: 5,
				Payload: fmt.Sprintf(`{"steps":[{"cost":1,"duration_ms":%d}]}`, ms)})
		}
		first := submit(10, 3250)
		second := submit(5, 6000)
		waiting := submit(0, 1000)
		lr := l.start("w1", newLiveService(worker.Dedup, nil), func(c *worker.Config, _ *worker.RunOptions) {
			c.Concurrency = 2
			c.Queue = plainQueue{c.Queue}
		})

		synctest.Wait()
		require.Equal(t, []claimCall{{at: epoch, max: 2, claimed: 2}}, l.q.claimCalls())
		// Busy for 3.3s: the claimer's 1s poll fires three times meanwhile.
		l.drive(100, func() {
			if b.task(first).State == model.Running {
				require.Len(t, l.q.claimCalls(), 1, "no claim while every slot is busy (at %s)", b.clock.Now().Sub(epoch))
				require.Equal(t, model.Queued, b.task(waiting).State)
			}
		}, func() bool { return b.task(first).State == model.Completed })
		done := b.eventsOf(first, model.EventCompleted)[0].At
		require.Equal(t, epoch.Add(3300*time.Millisecond), done, "the first tick past the step's 3.25s")

		calls := l.q.claimCalls()
		require.Len(t, calls, 2)
		require.Equal(t, claimCall{at: done, max: 1, claimed: 1}, calls[1], "claimed for the one free slot when it freed")
		require.Equal(t, model.Running, b.task(waiting).State)
		require.Equal(t, done, b.eventsOf(waiting, model.EventClaimed)[0].At)
		require.Equal(t, model.Running, b.task(second).State)

		l.drive(100, nil, func() bool { return l.all([]string{first, second, waiting}, model.Completed) })
		lr.stop(t)
		require.Equal(t, epoch.Add(6*time.Second), b.eventsOf(second, model.EventCompleted)[0].At)
		l.checkReports()
	})
}

// The housekeeper reaps the expired lease of a claimant that died, and the
// runner takes the task over under a new fence; the dead claimant's late
// write is refused.
func TestRunnerHousekeeperReapsAndTakesOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		id := b.submit(`{"steps":[{"cost":1},{"cost":1,"duration_ms":1000}]}`, 10, 5)
		claimed, err := b.q.Claim(b.ctx, model.ClaimRequest{Worker: "dead", Max: 1, Lease: testLease})
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		dead := claimed[0].Claim

		lr := l.start("w1", newLiveService(worker.Dedup, nil))
		l.drive(300, func() {
			if b.clock.Now().Before(dead.LeaseUntil) {
				require.Equal(t, model.Running, b.task(id).State, "the lease holds until it runs out")
				require.Empty(t, lr.r.Claims())
			}
		}, func() bool { return b.task(id).State == model.Completed })
		lr.stop(t)

		task := b.task(id)
		require.Equal(t, int64(2), task.Version, "the runner's claim is the second")
		require.Equal(t, 1, task.AttemptsCharged, "the expired lease charged an attempt")
		expired := b.eventsOf(id, model.EventLeaseExpired)
		require.Len(t, expired, 1)
		require.Equal(t, int64(1), expired[0].Fence)
		require.False(t, expired[0].At.Before(dead.LeaseUntil), "reaped no earlier than the lease's end")
		require.Less(t, expired[0].At.Sub(dead.LeaseUntil), testHeartbeat+tick, "reaped within a housekeeping interval")
		claims := b.eventsOf(id, model.EventClaimed)
		require.Len(t, claims, 2)
		require.Equal(t, "w1", claims[1].Actor)
		require.Equal(t, int64(2), claims[1].Fence)
		require.False(t, claims[1].At.Before(expired[0].At))

		require.ErrorIs(t, b.q.Complete(b.ctx, dead), model.ErrStaleClaim)
		require.Equal(t, model.Completed, b.task(id).State)
		l.checkReports()
	})
}

// Two runners share one queue. One claims first, the other next; the first
// is stopped mid-run, its released tasks are taken over by the second, and
// it is started again. A transient failure and an approval gate make more
// claims. At every quiet moment the two hold disjoint tasks, every write
// the queue accepted passes model.History, and every effect is applied
// once.
func TestTwoRunnersNeverHoldTheSameTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		submit := func(priority int, payload string) string {
			return b.submitRequest(model.SubmitRequest{User: "ana", Priority: priority, CostBudget: 20, StepsMax: 10, Payload: payload})
		}
		ids := []string{
			submit(50, `{"steps":[{"cost":1,"duration_ms":1200},{"cost":2,"effect":"charge"},{"cost":1,"duration_ms":1200}]}`),
			submit(40, `{"steps":[{"cost":1,"duration_ms":1500},{"cost":2,"effect":"ship"},{"cost":1,"duration_ms":1000}]}`),
			submit(30, `{"steps":[{"cost":1,"fail":"transient","times":1},{"cost":1,"duration_ms":800}]}`),
			submit(20, `{"steps":[{"cost":1},{"approval":"manager"},{"cost":1,"effect":"email"}]}`),
			submit(10, `{"steps":[{"cost":1,"duration_ms":2500}]}`),
		}
		svc := newLiveService(worker.Fenced, nil)
		two := func(c *worker.Config, _ *worker.RunOptions) { c.Concurrency = 2 }
		three := func(c *worker.Config, _ *worker.RunOptions) { c.Concurrency = 3 }

		w1 := l.start("w1", svc, two)
		synctest.Wait()
		require.Len(t, w1.r.Claims(), 2, "w1 claimed first")
		w2 := l.start("w2", svc, three)
		runners := []*liveRunner{w1, w2}

		// Every quiet moment: no task held by both; approve a waiting task.
		approved := false
		each := func() {
			held := map[string]string{}
			for _, lr := range runners {
				for _, c := range lr.r.Claims() {
					other, ok := held[c.TaskID]
					require.False(t, ok, "%s held by %s and %s at once", c.TaskID, other, lr.id)
					held[c.TaskID] = lr.id
				}
			}
			if task := b.task(ids[3]); task.State == model.WaitingForApproval && !approved {
				require.NoError(t, b.q.Approve(b.ctx, task.ID, task.ApprovalVersion, "boss"))
				approved = true
			}
		}

		// Stop w1 a second in, holding claims; w2 alone takes them over.
		l.drive(20, each, func() bool { return !b.clock.Now().Before(epoch.Add(time.Second)) })
		released := w1.r.Claims()
		require.NotEmpty(t, released, "w1 holds work when stopped")
		l.drain(w1, 20)
		for _, c := range released {
			var fences []int64
			for _, e := range b.eventsOf(c.TaskID, model.EventReleased) {
				fences = append(fences, e.Fence)
			}
			require.Equal(t, []int64{c.Fence}, fences, "w1 released %s", c.TaskID)
		}
		runners = []*liveRunner{w2}
		claimAfter := func(c model.Claim) (model.Event, bool) {
			for _, e := range b.eventsOf(c.TaskID, model.EventClaimed) {
				if e.Fence > c.Fence {
					return e, true
				}
			}
			return model.Event{}, false
		}
		l.drive(200, each, func() bool {
			for _, c := range released {
				if _, ok := claimAfter(c); !ok {
					return false
				}
			}
			return true
		})
		for _, c := range released {
			next, _ := claimAfter(c)
			require.Equal(t, "w2", next.Actor, "w2 took over %s", c.TaskID)
			require.Equal(t, c.Fence+1, next.Fence)
		}

		// w1 again, alongside w2, until everything is done.
		w1 = l.start("w1", svc, two)
		runners = []*liveRunner{w1, w2}
		l.drive(300, each, func() bool { return l.all(ids, model.Completed) })
		w1.stop(t)
		w2.stop(t)

		require.True(t, approved)
		owners := l.checkReports()
		for _, c := range released {
			require.Equal(t, "w1", owners[c.TaskID][c.Fence])
			require.Equal(t, "w2", owners[c.TaskID][c.Fence+1])
		}
		require.GreaterOrEqual(t, b.task(ids[2]).Version, int64(2), "the transient failure was retried under a new claim")
		require.Equal(t, 1, b.task(ids[2]).AttemptsCharged)
		require.GreaterOrEqual(t, b.task(ids[3]).Version, int64(2), "the approved task resumed under a new claim")
		for _, op := range []string{model.OperationID(ids[0], 1), model.OperationID(ids[1], 1), model.OperationID(ids[3], 2)} {
			require.Equal(t, 1, svc.Applications(op), "%s applied once", op)
		}
		for _, id := range ids {
			require.Empty(t, b.eventsOf(id, model.EventLeaseExpired), "%s: heartbeats kept every lease", id)
			require.Empty(t, b.eventsOf(id, model.EventStaleWrite), "%s: no write under an old fence", id)
		}
	})
}

// A slot stalls inside an effect call (no heartbeats while it waits) past
// its lease. Another runner's housekeeper reaps the lease and that runner
// takes the task over and settles the effect; the stalled call then
// returns, while the new claim is still at work on the next step. For
// every kind of service the operation is applied exactly once, the stalled
// claim makes no late write (its lease has run out by its own clock, so it
// drops the claim; a fenced service refuses its late call first), and the task
// ends as the kind's guarantee says: completed where the service
// deduplicates or fences, needs_review where it can only answer or neither.
func TestRunnerTakeoverOfAStalledEffectCall(t *testing.T) {
	cases := []struct {
		kind       worker.ServiceKind
		end        model.State
		lateRefuse string // the stalled slot's last outcome
		staleWrite bool   // the late receipt reached the queue and was refused
	}{
		{worker.Dedup, model.Completed, "lease expired locally; claim dropped", false},
		{worker.Fenced, model.Completed, "refused: stale fence; claim dropped", false},
		{worker.Queryable, model.NeedsReview, "lease expired locally; claim dropped", false},
		{worker.Plain, model.NeedsReview, "lease expired locally; claim dropped", false},
	}
	for _, c := range cases {
		t.Run(string(c.kind), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := setup(t)
				l := newLive(b)
				id := b.submit(`{"steps":[{"cost":1,"effect":"charge"},{"cost":1,"duration_ms":3000}]}`, 10, 5)
				op := model.OperationID(id, 0)
				gate := make(chan struct{})
				svc := newLiveService(c.kind, gate)
				svc.gateFirst = true

				w1 := l.start("w1", svc)
				synctest.Wait()
				require.Equal(t, 1, svc.waiting(), "w1's call is in flight")
				w2 := l.start("w2", svc)
				// Until w2 has parked the task, or receipted the effect and
				// gone on to the next step.
				l.drive(100, nil, func() bool {
					task := b.task(id)
					return task.State == model.NeedsReview || task.State == model.Running && task.StepsUsed == 1
				})
				require.Equal(t, 1, svc.waiting(), "w1's call is still stalled")
				require.Equal(t, []model.Claim{{TaskID: id, Fence: 1, Owner: "w1", Attempt: 1, LeaseUntil: epoch.Add(testLease)}},
					w1.r.Claims(), "w1 still thinks it holds the task")
				require.Len(t, b.eventsOf(id, model.EventLeaseExpired), 1)
				require.Equal(t, "w2", b.eventsOf(id, model.EventClaimed)[1].Actor)
				if c.end == model.Completed {
					require.Equal(t, 1, svc.Applications(op), "w2 applied it")
					require.Equal(t, []model.Claim{{TaskID: id, Fence: 2, Owner: "w2", Attempt: 2, LeaseUntil: b.clock.Now().Add(testLease)}},
						w2.r.Claims(), "w2 holds the task, at work on its next step")
				} else {
					require.Equal(t, c.end, b.task(id).State)
					require.Zero(t, svc.Applications(op), "w2 did not call: w1 might still")
				}

				before := b.task(id)
				close(gate)
				synctest.Wait()
				l.checkReports() // nothing of w1's accepted after w2's claim
				require.Empty(t, w1.r.Claims(), "w1 dropped its stale claim")
				require.Equal(t, 1, svc.Applications(op), "applied exactly once")
				after := b.task(id)
				require.Equal(t, []any{before.State, before.Version, before.StepsUsed, before.CostUsed},
					[]any{after.State, after.Version, after.StepsUsed, after.CostUsed}, "the late call changed nothing in the task")
				l.drive(100, nil, func() bool { return b.task(id).State == c.end })
				var last worker.Report
				for _, r := range l.allReports() {
					if r.Worker == "w1" && r.TaskID == id {
						last = r.Report
					}
				}
				require.Equal(t, c.lateRefuse, last.Outcome, "w1's last word: %s", last)
				stale := b.eventsOf(id, model.EventStaleWrite)
				if c.staleWrite {
					require.Len(t, stale, 1)
					require.Equal(t, int64(1), stale[0].Fence)
				} else {
					require.Empty(t, stale)
				}
				w1.stop(t)
				w2.stop(t)
				l.checkReports()
			})
		})
	}
}

// When the queue refuses a batch above its claim_batch_max, the runner
// halves the batch it asked for (not its configured batch) and asks again
// at once; it never asks for more than that from then on.
func TestRunnerHalvesTheBatchItAskedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		long := `{"steps":[{"cost":1,"duration_ms":3000}]}`
		held := []string{b.submit(long, 10, 5), b.submit(long, 10, 5)}
		lr := l.start("w1", newLiveService(worker.Dedup, nil), func(c *worker.Config, _ *worker.RunOptions) { c.Concurrency = 4 })
		synctest.Wait()
		require.Equal(t, []claimCall{{at: epoch, max: 4, claimed: 2}, {at: epoch, max: 2}}, l.q.claimCalls(),
			"two claimed, then a poll for the two free slots")

		limits := model.DefaultLimits
		limits.ClaimBatchMax = 1
		require.NoError(t, b.q.SetLimits(b.ctx, limits, "ops"))
		id := b.submit(`{"steps":[{"cost":1}]}`, 10, 5)
		l.drive(100, nil, func() bool { return l.all(append(held, id), model.Completed) })
		lr.stop(t)

		calls := l.q.claimCalls()[2:]
		require.Equal(t, []claimCall{{at: epoch.Add(tick), max: 2, refused: true}, {at: epoch.Add(tick), max: 1, claimed: 1}}, calls[:2],
			"the refused batch of 2 (capped by the free slots, not the configured 4) is halved to 1")
		for _, c := range calls[1:] {
			require.Equal(t, 1, c.max, "never above the learnt limit again: %+v", c)
			require.False(t, c.refused)
		}
		halved := 0
		for _, r := range l.allReports() {
			if r.Action == worker.ActionClaim && r.Outcome == "batch of 2 above the queue's limit; now 1" {
				requireField(t, r.Err, "max")
				halved++
			}
		}
		require.Equal(t, 1, halved, "the refusal is reported")
		l.checkReports()
	})
}

// refusingQueue refuses the first claim with err and forwards the rest.
type refusingQueue struct {
	worker.Queue
	err     error
	refused bool
}

func (q *refusingQueue) CompleteAndClaim(ctx context.Context, c model.Claim, next model.ClaimRequest) ([]model.Claimed, error) {
	return q.Queue.(worker.CompleteClaimer).CompleteAndClaim(ctx, c, next)
}

func (q *refusingQueue) ClaimsOnCompletion() bool {
	return q.Queue.(worker.CompleteClaimer).ClaimsOnCompletion()
}

func (q *refusingQueue) Claim(ctx context.Context, req model.ClaimRequest) ([]model.Claimed, error) {
	if !q.refused {
		q.refused = true
		return nil, q.err
	}
	return q.Queue.Claim(ctx, req)
}

// A claim refused as invalid input for another reason than the batch size
// is an anomaly: the runner reports it, keeps its batch and waits PollMax
// before asking again.
func TestRunnerDoesNotHalveOnOtherInvalidInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		refusal := &model.ValidationError{Field: "lease", Problem: "out of range"}
		l.q.inner = &refusingQueue{Queue: b.q, err: refusal}
		id := b.submit(`{"steps":[{"cost":1}]}`, 10, 5)
		lr := l.start("w1", newLiveService(worker.Dedup, nil), func(c *worker.Config, _ *worker.RunOptions) { c.Concurrency = 2 })
		l.drive(100, nil, func() bool { return b.task(id).State == model.Completed })
		lr.stop(t)

		calls := l.q.claimCalls()
		require.Equal(t, []claimCall{{at: epoch, max: 2, refused: true}, {at: epoch.Add(time.Second), max: 2, claimed: 1}}, calls[:2],
			"the same batch again, after PollMax")
		reports := l.allReports()
		require.Equal(t, worker.ActionClaim, reports[0].Action)
		require.Equal(t, refusal.Error(), reports[0].Anomaly)
	})
}

// Over a queue with CompleteAndClaim, a slot completing its task claims
// its next one in the same write and runs it without going idle: after the
// claimer's first batch, every task is claimed by the completion before
// it, in one transaction (the claimed event follows that completion's in
// the trail, at the same time). A slot whose completion finds nothing
// frees, and the claimer polls for it again.
func TestRunnerSlotClaimsItsNextTaskAsItCompletes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		var ids []string
		for range 5 {
			ids = append(ids, b.submit(`{"steps":[{"cost":1,"duration_ms":1000}]}`, 10, 5))
		}
		lr := l.start("w1", newLiveService(worker.Dedup, nil), func(c *worker.Config, _ *worker.RunOptions) { c.Concurrency = 2 })
		l.drive(100, func() {
			require.LessOrEqual(t, len(lr.r.Claims()), 2, "never more claims than slots")
		}, func() bool { return l.all(ids, model.Completed) })
		lr.stop(t)

		claims := l.q.claimCalls()
		require.Equal(t, claimCall{at: epoch, max: 2, claimed: 2}, claims[0])
		for _, c := range claims[1:] {
			require.Zero(t, c.claimed, "after the first batch the claimer finds nothing: %+v", c)
		}
		refilled := 0
		for _, c := range l.q.refillCalls() {
			require.Equal(t, 1, c.max)
			require.False(t, c.refused)
			refilled += c.claimed
		}
		require.Equal(t, 3, refilled, "the other three tasks were claimed by completions")
		require.Equal(t, epoch.Add(3*time.Second), b.eventsOf(ids[4], model.EventCompleted)[0].At,
			"three rounds of 1s: no slot waited for the claimer")

		trail, err := b.q.EventsAfter(b.ctx, 0, model.ListLimitMax)
		require.NoError(t, err)
		for _, id := range ids {
			require.Equal(t, int64(1), b.task(id).Version, "%s ran under one claim", id)
		}
		for i, e := range trail {
			if e.Kind != model.EventClaimed || i == 0 || trail[i-1].Kind != model.EventCompleted {
				continue
			}
			refilled--
			require.Equal(t, trail[i-1].At, e.At, "claimed in the completion's write: %+v", e)
			require.Equal(t, "w1", e.Actor)
		}
		require.Zero(t, refilled, "each refilled claim follows the completion that made it")
		l.checkReports()
	})
}

// A slot claims its next task with its completion only while the worker's
// cost capacity allows it: with a capacity of one task's budget, the slot
// completing while the other still holds a task frees instead, and claims
// resume (by the claimer or the last completion) once the budget held is
// below the capacity.
func TestRunnerRefillKeepsTheCostCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		short := b.submit(`{"steps":[{"cost":1,"duration_ms":1000}]}`, 10, 5)
		long := b.submit(`{"steps":[{"cost":1,"duration_ms":2000}]}`, 10, 5)
		last := b.submit(`{"steps":[{"cost":1,"duration_ms":1000}]}`, 10, 5)
		lr := l.start("w1", newLiveService(worker.Dedup, nil), func(c *worker.Config, _ *worker.RunOptions) {
			c.Concurrency, c.CostCapacity = 2, 10
		})
		// The claimer's first batch takes both (nothing held yet: below the
		// capacity), and then nothing while 10 or more is held.
		l.drive(100, func() {
			if b.task(long).State == model.Running {
				require.Equal(t, model.Queued, b.task(last).State, "nothing claimed while %s's budget is held", long)
			}
		}, func() bool { return l.all([]string{short, long, last}, model.Completed) })
		lr.stop(t)
		calls := l.q.refillCalls()
		require.NotEmpty(t, calls)
		require.Equal(t, epoch.Add(2*time.Second), calls[0].at, "the short task's completion claimed nothing: %+v", calls)
		require.Equal(t, 1, calls[0].claimed, "the long task's completion claimed the last task")
		l.checkReports()
	})
}

// declinedRefills is a queue whose CompleteAndClaim the runner is told not
// to use (as on PostgreSQL, where completing and claiming in one write can
// deadlock with another such write).
type declinedRefills struct{ *recordingQueue }

func (declinedRefills) ClaimsOnCompletion() bool { return false }

// A runner over a queue that declines claims on completion completes with
// Complete and claims through its claimer only.
func TestRunnerClaimsApartWhereTheQueueDeclines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t)
		l := newLive(b)
		var ids []string
		for range 4 {
			ids = append(ids, b.submit(`{"steps":[{"cost":1,"duration_ms":1000}]}`, 10, 5))
		}
		lr := l.start("w1", newLiveService(worker.Dedup, nil), func(c *worker.Config, _ *worker.RunOptions) {
			c.Concurrency = 2
			c.Queue = declinedRefills{l.q}
		})
		l.drive(100, nil, func() bool { return l.all(ids, model.Completed) })
		lr.stop(t)
		require.Empty(t, l.q.refillCalls(), "no CompleteAndClaim")
		claimed := 0
		for _, c := range l.q.claimCalls() {
			claimed += c.claimed
		}
		require.Equal(t, 4, claimed, "every task claimed by the claimer")
		l.checkReports()
	})
}
