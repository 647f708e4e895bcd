// Package queuetest is the conformance suite of queue.Store: the outcomes
// the contract (DESIGN.md) promises, checked through the Store interface
// alone, so that every store runs the same checks: the SQLite queue, the
// reference model, and a PostgreSQL store when one follows.
//
// # Usage
//
// Call Exercise from a test with a function that opens a fresh, empty store
// on a fake clock:
//
//	func TestConformance(t *testing.T) {
//		queuetest.Exercise(t, func(t *testing.T) queuetest.Harness {
//			clock := clockwork.NewFakeClockAt(epoch)
//			store := open(t, clock) // closed by a t.Cleanup
//			return queuetest.Harness{Store: store, Clock: clock}
//		})
//	}
//
// Each subtest opens its own store. The store must start empty, with
// model.DefaultLimits, and read time only from the harness's clock; its
// retry backoff is Harness.Backoff (model.DefaultBackoff when zero). The
// suite advances the clock itself and never reads the wall clock.
package queuetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// Harness is one store under test and the clock it reads.
type Harness struct {
	Store queue.Store
	Clock *clockwork.FakeClock
	// Backoff is the store's retry policy; zero means model.DefaultBackoff.
	Backoff model.Backoff
}

// Exercise runs the conformance suite against stores made by open, one
// fresh store per subtest.
func Exercise(t *testing.T, open func(t *testing.T) Harness) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(begin(t, open)) })
	}
}

var cases = []struct {
	name string
	run  func(s *suite)
}{
	{"SubmitReplayConflict", testSubmitReplayConflict},
	{"SubmitValidation", testSubmitValidation},
	{"SubmitManyAllOrNothing", testSubmitManyAllOrNothing},
	{"SubmitManyReplays", testSubmitManyReplays},
	{"SubmitManyDepthCaps", testSubmitManyDepthCaps},
	{"ClaimOrder", testClaimOrder},
	{"ClaimRunAtInclusive", testClaimRunAtInclusive},
	{"ClaimBatch", testClaimBatch},
	{"ClaimBatchIdle", testClaimBatchIdle},
	{"FencingStaleFence", testFencingStaleFence},
	{"FencingExpiredLease", testFencingExpiredLease},
	{"FencingNotRunning", testFencingNotRunning},
	{"Heartbeat", testHeartbeat},
	{"StepCompareAndSet", testStepCompareAndSet},
	{"StepBudgetExhausted", testStepBudgetExhausted},
	{"StepLimitExhausted", testStepLimitExhausted},
	{"EffectsLedger", testEffectsLedger},
	{"EffectUncertain", testEffectUncertain},
	{"Approval", testApproval},
	{"ApprovalOutdatedVersion", testApprovalOutdatedVersion},
	{"Reject", testReject},
	{"CancelQueued", testCancelQueued},
	{"CancelRunning", testCancelRunning},
	{"CancelWaiting", testCancelWaiting},
	{"CancelRefused", testCancelRefused},
	{"TransientRetriesThenDeadLetter", testTransientRetries},
	{"PermanentFailure", testPermanentFailure},
	{"UncertainFailure", testUncertainFailure},
	{"Release", testRelease},
	{"ReapLeaseExpiry", testReapLeaseExpiry},
	{"ReapLastAttempt", testReapLastAttempt},
	{"ReapCancelRequested", testReapCancelRequested},
	{"DeadlineAtSubmit", testDeadlineAtSubmit},
	{"DeadlineQueued", testDeadlineQueued},
	{"DeadlineRunning", testDeadlineRunning},
	{"DeadlineWaiting", testDeadlineWaiting},
	{"Requeue", testRequeue},
	{"Resolve", testResolve},
	{"UserRunningLimit", testUserRunningLimit},
	{"DefaultRunningLimit", testDefaultRunningLimit},
	{"AdmissionDepth", testAdmissionDepth},
	{"AdmissionUserDepth", testAdmissionUserDepth},
	{"ScheduleRunsOnce", testScheduleRunsOnce},
	{"ScheduleCollapsesMissedRuns", testScheduleCollapses},
	{"ScheduleRemove", testScheduleRemove},
	{"MetricsReconcile", testMetricsReconcile},
}

// lease is the lease the suite claims under unless a test says otherwise.
const lease = 30 * time.Second

// suite is one subtest's store with helpers that fail the test on any
// unexpected error.
type suite struct {
	t       *testing.T
	ctx     context.Context
	store   queue.Store
	clock   *clockwork.FakeClock
	backoff model.Backoff
	keys    int
}

func begin(t *testing.T, open func(t *testing.T) Harness) *suite {
	t.Helper()
	h := open(t)
	require.NotNil(t, h.Store, "harness without a store")
	require.NotNil(t, h.Clock, "harness without a clock")
	s := &suite{t: t, ctx: context.Background(), store: h.Store, clock: h.Clock, backoff: h.Backoff}
	if s.backoff == (model.Backoff{}) {
		s.backoff = model.DefaultBackoff
	}
	tasks, err := s.store.List(s.ctx, model.ListFilter{})
	require.NoError(t, err)
	require.Empty(t, tasks, "the harness must open an empty store")
	return s
}

// now is the store's clock at the precision the queue stores.
func (s *suite) now() time.Time { return model.Truncate(s.clock.Now()) }

func (s *suite) advance(d time.Duration) { s.clock.Advance(d) }

// request is a valid request with a fresh key, changed by mods.
func (s *suite) request(mods ...func(*model.SubmitRequest)) model.SubmitRequest {
	s.keys++
	r := model.SubmitRequest{User: "ana", Key: fmt.Sprintf("key-%d", s.keys), Payload: `{"steps":[]}`,
		CostBudget: 10, StepsMax: 5}
	for _, m := range mods {
		m(&r)
	}
	return r
}

func (s *suite) submit(mods ...func(*model.SubmitRequest)) string {
	s.t.Helper()
	res, err := s.store.Submit(s.ctx, s.request(mods...))
	require.NoError(s.t, err)
	require.False(s.t, res.Replay)
	require.NotEmpty(s.t, res.TaskID)
	return res.TaskID
}

func (s *suite) claimN(worker string, max int, lease time.Duration) []model.Claimed {
	s.t.Helper()
	claimed, err := s.store.Claim(s.ctx, model.ClaimRequest{Worker: worker, Max: max, Lease: lease})
	require.NoError(s.t, err)
	return claimed
}

// claim claims exactly one task.
func (s *suite) claim(worker string) model.Claimed {
	s.t.Helper()
	claimed := s.claimN(worker, 1, lease)
	require.Len(s.t, claimed, 1, "expected a task to claim")
	return claimed[0]
}

func (s *suite) noClaim() {
	s.t.Helper()
	require.Empty(s.t, s.claimN("idle", 1, lease), "expected nothing to claim")
}

// running submits a task and claims it.
func (s *suite) running(mods ...func(*model.SubmitRequest)) (string, model.Claim) {
	s.t.Helper()
	id := s.submit(mods...)
	c := s.claim("w1")
	require.Equal(s.t, id, c.Claim.TaskID)
	return id, c.Claim
}

// waiting submits a task, claims it and pauses it at its first step.
func (s *suite) waiting(mods ...func(*model.SubmitRequest)) (string, model.Claim) {
	s.t.Helper()
	id, c := s.running(mods...)
	to, err := s.store.Pause(s.ctx, c, 0, "manager")
	require.NoError(s.t, err)
	require.Equal(s.t, model.WaitingForApproval, to)
	return id, c
}

// parked submits a task, claims it and fails it as uncertain, which parks
// it in needs_review.
func (s *suite) parked(mods ...func(*model.SubmitRequest)) (string, model.Claim) {
	s.t.Helper()
	id, c := s.running(mods...)
	to, err := s.store.Fail(s.ctx, c, model.Failure{Class: model.Uncertain, Message: "cannot tell"})
	require.NoError(s.t, err)
	require.Equal(s.t, model.NeedsReview, to)
	return id, c
}

func (s *suite) task(id string) model.Task {
	s.t.Helper()
	task, err := s.store.Task(s.ctx, id)
	require.NoError(s.t, err)
	return task
}

func (s *suite) events(id string) []model.Event {
	s.t.Helper()
	events, err := s.store.Events(s.ctx, id)
	require.NoError(s.t, err)
	return events
}

func (s *suite) lastEvent(id string) model.Event {
	s.t.Helper()
	events := s.events(id)
	require.NotEmpty(s.t, events)
	return events[len(events)-1]
}

// kinds lists the kinds of a task's events in order.
func (s *suite) kinds(id string) []model.EventKind {
	s.t.Helper()
	var out []model.EventKind
	for _, e := range s.events(id) {
		out = append(out, e.Kind)
	}
	return out
}

func (s *suite) effects(id string) []model.Effect {
	s.t.Helper()
	effects, err := s.store.Effects(s.ctx, id)
	require.NoError(s.t, err)
	return effects
}

func (s *suite) metrics() model.Metrics {
	s.t.Helper()
	m, err := s.store.Metrics(s.ctx)
	require.NoError(s.t, err)
	require.True(s.t, m.Reconciles(), "depths do not account for every submitted task: %+v", m)
	return m
}

func (s *suite) limits() model.Limits {
	s.t.Helper()
	l, _, err := s.store.Limits(s.ctx)
	require.NoError(s.t, err)
	return l
}

func (s *suite) setLimits(change func(*model.Limits)) {
	s.t.Helper()
	l := s.limits()
	change(&l)
	require.NoError(s.t, s.store.SetLimits(s.ctx, l, "ops"))
}

func (s *suite) count(f model.ListFilter) int {
	s.t.Helper()
	f.Limit = model.ListLimitMax
	tasks, err := s.store.List(s.ctx, f)
	require.NoError(s.t, err)
	return len(tasks)
}

// requireInvalid checks that err is a validation error naming field.
func (s *suite) requireInvalid(err error, field string) {
	s.t.Helper()
	require.ErrorIs(s.t, err, model.ErrInvalidInput)
	var v *model.ValidationError
	require.True(s.t, errors.As(err, &v), "want a *model.ValidationError, got %T: %v", err, err)
	require.Equal(s.t, field, v.Field, "the error names the field: %v", err)
}

// requireStale checks a write refused as stale: ErrStaleClaim, the task
// exactly as it was, and the refusal recorded as a stale_write event of the
// refused claim.
func (s *suite) requireStale(id string, c model.Claim, write string, err error, before model.Task) {
	s.t.Helper()
	require.ErrorIs(s.t, err, model.ErrStaleClaim, "%s under fence %d", write, c.Fence)
	require.Equal(s.t, before, s.task(id), "a stale %s changed the task", write)
	e := s.lastEvent(id)
	require.Equal(s.t, model.EventStaleWrite, e.Kind, "a stale %s is recorded", write)
	require.Equal(s.t, c.Fence, e.Fence)
	require.Equal(s.t, c.Attempt, e.Attempt)
	require.Equal(s.t, before.State, e.From)
	require.Equal(s.t, before.State, e.To)
	require.Equal(s.t, c.Owner, e.Actor)
	require.Equal(s.t, s.now(), e.At)
	require.True(s.t, strings.HasPrefix(e.Detail, write+": "), "detail %q names the write %s", e.Detail, write)
}

// workerWrites are every fenced worker write, each made under claim c.
func (s *suite) workerWrites() []struct {
	name  string
	write func(c model.Claim) error
} {
	return []struct {
		name  string
		write func(c model.Claim) error
	}{
		{"heartbeat", func(c model.Claim) error { _, err := s.store.Heartbeat(s.ctx, c, lease); return err }},
		{"step", func(c model.Claim) error {
			_, err := s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
			return err
		}},
		{"effect_intent", func(c model.Claim) error { _, err := s.store.RecordIntent(s.ctx, c, 0); return err }},
		{"effect_receipt", func(c model.Claim) error {
			return s.store.RecordReceipt(s.ctx, c, model.OperationID(c.TaskID, 0), "ok")
		}},
		{"pause", func(c model.Claim) error { _, err := s.store.Pause(s.ctx, c, 0, "manager"); return err }},
		{"complete", func(c model.Claim) error { return s.store.Complete(s.ctx, c) }},
		{"fail", func(c model.Claim) error {
			_, err := s.store.Fail(s.ctx, c, model.Failure{Class: model.Permanent})
			return err
		}},
		{"release", func(c model.Claim) error { _, err := s.store.Release(s.ctx, c); return err }},
		{"cancel_ack", func(c model.Claim) error { return s.store.AcknowledgeCancel(s.ctx, c) }},
	}
}

// Intake.

func testSubmitReplayConflict(s *suite) {
	t := s.t
	req := s.request(func(r *model.SubmitRequest) { r.Payload = `{ "b": [1, 2], "a": "x" }` })
	res, err := s.store.Submit(s.ctx, req)
	require.NoError(t, err)
	require.False(t, res.Replay)
	id := res.TaskID
	task := s.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, model.NoReason, task.Reason)
	require.Equal(t, "ana", task.User)
	require.Equal(t, req.Key, task.Key)
	require.Equal(t, `{"a":"x","b":[1,2]}`, task.Payload, "the payload is stored in canonical form")
	require.Equal(t, s.now(), task.RunAt, "no run_at means now")
	require.Equal(t, s.now(), task.CreatedAt)
	require.Zero(t, task.Version)
	require.Zero(t, task.Attempt)
	require.Equal(t, s.limits().AttemptsMax, task.AttemptsMax)
	require.Equal(t, []model.EventKind{model.EventSubmitted}, s.kinds(id))
	submitted := s.lastEvent(id)
	require.Equal(t, model.Queued, submitted.To)
	require.Equal(t, "ana", submitted.Actor)

	// An exact replay, even spelled differently and later, returns the
	// original task and writes nothing.
	s.advance(time.Minute)
	replay := req
	replay.Payload = `{"a":"x","b":[1,2]}`
	res, err = s.store.Submit(s.ctx, replay)
	require.NoError(t, err)
	require.Equal(t, model.SubmitResult{TaskID: id, Replay: true}, res)
	require.Equal(t, task, s.task(id))
	require.Len(t, s.events(id), 1)

	// The same key with a different request is a conflict, and the original
	// is untouched.
	changed := req
	changed.CostBudget++
	_, err = s.store.Submit(s.ctx, changed)
	require.ErrorIs(t, err, model.ErrIdempotencyConflict)
	require.Equal(t, task, s.task(id))
	require.Len(t, s.events(id), 1)
	require.Equal(t, 1, s.count(model.ListFilter{}))

	// Keys are unique per user: another user may use the same one.
	other := req
	other.User = "bob"
	res, err = s.store.Submit(s.ctx, other)
	require.NoError(t, err)
	require.False(t, res.Replay)
	require.NotEqual(t, id, res.TaskID)
	require.EqualValues(t, 2, s.metrics().Submitted)
}

func testSubmitValidation(s *suite) {
	t := s.t
	for _, c := range []struct {
		field string
		mod   func(*model.SubmitRequest)
	}{
		{"user", func(r *model.SubmitRequest) { r.User = "" }},
		{"user", func(r *model.SubmitRequest) { r.User = "a b" }},
		{"key", func(r *model.SubmitRequest) { r.Key = strings.Repeat("k", model.KeyLengthMax+1) }},
		{"payload", func(r *model.SubmitRequest) { r.Payload = `{"a":` }},
		{"payload", func(r *model.SubmitRequest) { r.Payload = `[1]` }},
		{"cost_budget", func(r *model.SubmitRequest) { r.CostBudget = 0 }},
		{"steps_max", func(r *model.SubmitRequest) { r.StepsMax = model.StepsMaxLimit + 1 }},
		{"priority", func(r *model.SubmitRequest) { r.Priority = model.PriorityMax + 1 }},
		{"deadline", func(r *model.SubmitRequest) { r.Deadline = s.now().Add(-time.Second) }},
		{"deadline", func(r *model.SubmitRequest) { r.RunAt, r.Deadline = s.now().Add(time.Hour), s.now().Add(time.Minute) }},
	} {
		_, err := s.store.Submit(s.ctx, s.request(c.mod))
		s.requireInvalid(err, c.field)
	}
	require.Zero(t, s.count(model.ListFilter{}), "a refused request writes nothing")
	require.Zero(t, s.metrics().Submitted)
}

// Claims.

func testClaimOrder(s *suite) {
	t := s.t
	low := s.submit(func(r *model.SubmitRequest) { r.Priority = -1 })
	first := s.submit()
	high := s.submit(func(r *model.SubmitRequest) { r.Priority = 5 })
	second := s.submit()
	earlier := s.submit(func(r *model.SubmitRequest) { r.RunAt = s.now().Add(-time.Minute) })
	s.advance(time.Second)
	// Priority first, then run_at, then submission order.
	want := []string{high, earlier, first, second, low}
	claimed := s.claimN("w1", len(want), lease)
	var got []string
	for _, c := range claimed {
		got = append(got, c.Claim.TaskID)
	}
	require.Equal(t, want, got)
	for _, c := range claimed {
		require.Equal(t, s.task(c.Claim.TaskID), c.Task, "the claim returns the task as claimed")
		require.Equal(t, model.Running, c.Task.State)
		require.EqualValues(t, 1, c.Claim.Fence)
		require.Equal(t, 1, c.Claim.Attempt)
		require.Equal(t, "w1", c.Claim.Owner)
		require.Equal(t, s.now().Add(lease), c.Claim.LeaseUntil)
		require.Equal(t, c.Claim.LeaseUntil, c.Task.LeaseUntil)
		e := s.lastEvent(c.Claim.TaskID)
		require.Equal(t, model.EventClaimed, e.Kind)
		require.Equal(t, model.Queued, e.From)
		require.Equal(t, model.Running, e.To)
		require.EqualValues(t, 1, e.Fence)
		require.Equal(t, "w1", e.Actor)
	}
	s.noClaim()
}

func testClaimRunAtInclusive(s *suite) {
	t := s.t
	id := s.submit(func(r *model.SubmitRequest) { r.RunAt = s.now().Add(time.Second) })
	s.noClaim()
	s.advance(time.Second - time.Millisecond)
	s.noClaim()
	s.advance(time.Millisecond)
	require.Equal(t, s.task(id).RunAt, s.now())
	require.Equal(t, id, s.claim("w1").Claim.TaskID, "a task is due when the clock reaches run_at")
}

func testClaimBatch(s *suite) {
	t := s.t
	limits := s.limits()
	for range limits.ClaimBatchMax + 1 {
		s.submit()
	}
	_, err := s.store.Claim(s.ctx, model.ClaimRequest{Worker: "w1", Max: limits.ClaimBatchMax + 1, Lease: lease})
	s.requireInvalid(err, "max")
	_, err = s.store.Claim(s.ctx, model.ClaimRequest{Worker: "w1", Max: 1, Lease: model.LeaseMin - time.Millisecond})
	s.requireInvalid(err, "lease")
	_, err = s.store.Claim(s.ctx, model.ClaimRequest{Worker: "", Max: 1, Lease: lease})
	s.requireInvalid(err, "worker")
	require.Len(t, s.claimN("w1", limits.ClaimBatchMax, lease), limits.ClaimBatchMax)
	require.Len(t, s.claimN("w2", limits.ClaimBatchMax, lease), 1, "a batch takes what there is")
	require.Empty(t, s.claimN("w3", limits.ClaimBatchMax, lease))
}

// testClaimBatchIdle: the batch is checked against model.ClaimBatchLimit
// on every poll, but against the stored limit only when there is a task to
// claim, so that an idle poll need not read the limits.
func testClaimBatchIdle(s *suite) {
	t := s.t
	s.setLimits(func(l *model.Limits) { l.ClaimBatchMax = 2 })
	_, err := s.store.Claim(s.ctx, model.ClaimRequest{Worker: "w1", Max: model.ClaimBatchLimit + 1, Lease: lease})
	s.requireInvalid(err, "max")
	require.Empty(t, s.claimN("w1", 3, lease), "idle: answered without the stored limit")
	id := s.submit()
	_, err = s.store.Claim(s.ctx, model.ClaimRequest{Worker: "w1", Max: 3, Lease: lease})
	s.requireInvalid(err, "max")
	require.Equal(t, model.Queued, s.task(id).State, "a refused batch claims nothing")
	require.Len(t, s.claimN("w1", 2, lease), 1)
}

// Fencing.

func testFencingStaleFence(s *suite) {
	t := s.t
	id, old := s.running()
	to, err := s.store.Release(s.ctx, old)
	require.NoError(t, err)
	require.Equal(t, model.Queued, to)
	current := s.claim("w2").Claim
	require.Equal(t, old.Fence+1, current.Fence, "each claim increments the fence")
	_, err = s.store.Cancel(s.ctx, id, "caller") // lets cancel_ack reach its fence check
	require.NoError(t, err)
	for _, w := range s.workerWrites() {
		before := s.task(id)
		s.requireStale(id, old, w.name, w.write(old), before)
	}
	// The current claim is still valid.
	_, err = s.store.Heartbeat(s.ctx, current, lease)
	require.NoError(t, err)
	require.NoError(t, s.store.AcknowledgeCancel(s.ctx, current))
	require.EqualValues(t, len(s.workerWrites()), s.metrics().StaleWrites)
}

func testFencingExpiredLease(s *suite) {
	t := s.t
	id, c := s.running()
	s.advance(lease - time.Millisecond)
	_, err := s.store.Heartbeat(s.ctx, c, time.Second)
	require.NoError(t, err, "a lease is valid until its last millisecond")
	s.advance(time.Second)
	require.Equal(t, s.now(), s.task(id).LeaseUntil)
	for _, w := range s.workerWrites() {
		before := s.task(id)
		require.Equal(t, model.Running, before.State, "only the reaper settles an expired claim")
		s.requireStale(id, c, w.name, w.write(c), before)
	}
}

func testFencingNotRunning(s *suite) {
	t := s.t
	id, c := s.running()
	require.NoError(t, s.store.Complete(s.ctx, c))
	for _, w := range s.workerWrites() {
		before := s.task(id)
		require.Equal(t, model.Completed, before.State)
		s.requireStale(id, c, w.name, w.write(c), before)
	}
	waitingID, waitingClaim := s.waiting()
	before := s.task(waitingID)
	s.requireStale(waitingID, waitingClaim, "complete", s.store.Complete(s.ctx, waitingClaim), before)

	missing := model.Claim{TaskID: "t_missing", Fence: 1, Owner: "w1", Attempt: 1}
	require.ErrorIs(t, s.store.Complete(s.ctx, missing), model.ErrNotFound)
}

// Heartbeat.

func testHeartbeat(s *suite) {
	t := s.t
	id, c := s.running()
	s.advance(10 * time.Second)
	hb, err := s.store.Heartbeat(s.ctx, c, time.Minute)
	require.NoError(t, err)
	require.Equal(t, model.HeartbeatResult{LeaseUntil: s.now().Add(time.Minute)}, hb)
	task := s.task(id)
	require.Equal(t, hb.LeaseUntil, task.LeaseUntil)
	require.Equal(t, s.now(), task.HeartbeatAt)
	require.Equal(t, c.Fence, task.Version, "a heartbeat is not a new claim")

	s.advance(lease) // past the original lease, within the extended one
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
	require.NoError(t, err)

	_, err = s.store.Heartbeat(s.ctx, c, model.LeaseMax+time.Millisecond)
	s.requireInvalid(err, "lease")

	cancelled, err := s.store.Cancel(s.ctx, id, "caller")
	require.NoError(t, err)
	require.Equal(t, model.Running, cancelled.State)
	require.True(t, cancelled.CancelRequested)
	hb, err = s.store.Heartbeat(s.ctx, c, time.Minute)
	require.NoError(t, err)
	require.True(t, hb.CancelRequested, "a heartbeat reports requested cancellation")
	step, err := s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 1, Cost: 1})
	require.NoError(t, err)
	require.True(t, step.CancelRequested, "so does a step reply")
}

// Steps.

func testStepCompareAndSet(s *suite) {
	t := s.t
	id, c := s.running(func(r *model.SubmitRequest) { r.CostBudget, r.StepsMax = 10, 5 })
	res, err := s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 4, Checkpoint: `{"at":1}`})
	require.NoError(t, err)
	require.False(t, res.Replayed)
	task := s.task(id)
	require.Equal(t, 1, task.StepsUsed)
	require.EqualValues(t, 4, task.CostUsed)
	require.Equal(t, `{"at":1}`, task.Checkpoint)

	// A retry of the step just completed (its commit's reply was lost) is
	// recognised and not charged again.
	res, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 4, Checkpoint: `{"at":1}`})
	require.NoError(t, err)
	require.True(t, res.Replayed)
	require.Equal(t, task, s.task(id))

	// Skipping ahead is a conflict and changes nothing.
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 2, Cost: 1})
	require.ErrorIs(t, err, model.ErrStepConflict)
	require.Equal(t, task, s.task(id))

	// Spending the budget exactly is allowed.
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 1, Cost: 6})
	require.NoError(t, err)
	task = s.task(id)
	require.Equal(t, 2, task.StepsUsed)
	require.EqualValues(t, 10, task.CostUsed)

	steps := 0
	for _, e := range s.events(id) {
		if e.Kind == model.EventStep {
			steps++
			require.Equal(t, c.Fence, e.Fence)
		}
	}
	require.Equal(t, 2, steps, "each step is recorded once")
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: -1})
	s.requireInvalid(err, "index")
}

func testStepBudgetExhausted(s *suite) {
	t := s.t
	id, c := s.running(func(r *model.SubmitRequest) { r.CostBudget = 5 })
	_, err := s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 3})
	require.NoError(t, err)
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 1, Cost: 3})
	require.ErrorIs(t, err, model.ErrBudgetExhausted)
	task := s.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.BudgetExhausted, task.Reason)
	require.EqualValues(t, 3, task.CostUsed, "the refused step is not charged")
	require.Empty(t, task.Owner)
	e := s.lastEvent(id)
	require.Equal(t, model.EventFailed, e.Kind)
	require.Equal(t, model.BudgetExhausted, e.Reason)
	m := s.metrics()
	require.EqualValues(t, 1, m.BudgetExhausted)
	require.EqualValues(t, 1, m.Failures)
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 1, Cost: 1})
	require.ErrorIs(t, err, model.ErrStaleClaim, "the claim ended with the task")
}

func testStepLimitExhausted(s *suite) {
	t := s.t
	id, c := s.running(func(r *model.SubmitRequest) { r.StepsMax = 1 })
	_, err := s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
	require.NoError(t, err)
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 1, Cost: 1})
	require.ErrorIs(t, err, model.ErrStepsExhausted)
	task := s.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.StepsExhausted, task.Reason)
	require.Equal(t, 1, task.StepsUsed)
}

// Effects ledger.

func testEffectsLedger(s *suite) {
	t := s.t
	id, c := s.running()
	op := model.OperationID(id, 0)
	intent, err := s.store.RecordIntent(s.ctx, c, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentResult{OpID: op, Status: model.IntentRecorded}, intent)
	again, err := s.store.RecordIntent(s.ctx, c, 0)
	require.NoError(t, err)
	require.Equal(t, intent, again, "a repeated intent under the same claim is still recorded")
	effects := s.effects(id)
	require.Len(t, effects, 1)
	require.Equal(t, model.Effect{OpID: op, TaskID: id, Step: 0, IntentFence: c.Fence, IntentAt: s.now()}, effects[0])
	require.False(t, effects[0].Receipted())

	require.ErrorIs(t, s.store.RecordReceipt(s.ctx, c, model.OperationID(id, 3), "ok"), model.ErrNotFound,
		"no receipt without an intent")
	s.advance(time.Second)
	require.NoError(t, s.store.RecordReceipt(s.ctx, c, op, "charged 5"))
	require.NoError(t, s.store.RecordReceipt(s.ctx, c, op, "charged 5"), "the same receipt again is accepted")
	require.ErrorIs(t, s.store.RecordReceipt(s.ctx, c, op, "charged 6"), model.ErrEffectReceipted)
	effects = s.effects(id)
	require.Len(t, effects, 1)
	require.Equal(t, c.Fence, effects[0].ReceiptFence)
	require.Equal(t, s.now(), effects[0].ReceiptAt)
	require.Equal(t, "charged 5", effects[0].Result)

	receipts := 0
	for _, e := range s.events(id) {
		if e.Kind == model.EventEffectReceipt {
			receipts++
			require.Equal(t, op, e.OpID)
		}
	}
	require.Equal(t, 1, receipts)

	// A later claim of the task finds the receipt: the operation is never
	// called again.
	_, err = s.store.Release(s.ctx, c)
	require.NoError(t, err)
	next := s.claim("w2").Claim
	receipted, err := s.store.RecordIntent(s.ctx, next, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentResult{OpID: op, Status: model.IntentReceipted, Result: "charged 5"}, receipted)
	require.Equal(t, effects, s.effects(id))
}

func testEffectUncertain(s *suite) {
	t := s.t
	id, c := s.running()
	op := model.OperationID(id, 0)
	_, err := s.store.RecordIntent(s.ctx, c, 0)
	require.NoError(t, err)
	// The worker dies between intent and receipt; its lease runs out.
	s.advance(lease)
	_, err = s.store.Reap(s.ctx)
	require.NoError(t, err)
	s.advance(s.backoff.Max)
	next := s.claim("w2").Claim
	uncertain, err := s.store.RecordIntent(s.ctx, next, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentResult{OpID: op, Status: model.IntentUncertain}, uncertain,
		"an intent without a receipt from an earlier claim is uncertain")
	require.Equal(t, c.Fence, s.effects(id)[0].IntentFence, "the earlier intent is kept")
	require.ErrorIs(t, s.store.RecordReceipt(s.ctx, c, op, "late"), model.ErrStaleClaim,
		"the old claim cannot record the receipt")

	// The service cannot say: the task goes to review.
	to, err := s.store.Fail(s.ctx, next, model.Failure{Class: model.Uncertain, OpID: op, Message: "no answer"})
	require.NoError(t, err)
	require.Equal(t, model.NeedsReview, to)
	task := s.task(id)
	require.Equal(t, model.UncertainEffect, task.Reason)
	require.Equal(t, "no answer", task.LastError)
	e := s.lastEvent(id)
	require.Equal(t, model.EventUncertain, e.Kind)
	require.Equal(t, op, e.Detail)

	// An operator who finds it was not applied removes the intent, and the
	// step makes the effect afresh after a requeue.
	require.NoError(t, s.store.SettleEffect(s.ctx, op, false, "ops"))
	require.Empty(t, s.effects(id))
	require.ErrorIs(t, s.store.SettleEffect(s.ctx, op, true, "ops"), model.ErrNotFound)
	require.NoError(t, s.store.Requeue(s.ctx, id, model.Grant{}, "ops"))
	third := s.claim("w3").Claim
	fresh, err := s.store.RecordIntent(s.ctx, third, 0)
	require.NoError(t, err)
	require.Equal(t, model.IntentRecorded, fresh.Status)
	require.Equal(t, third.Fence, s.effects(id)[0].IntentFence)
}

// Approval.

func testApproval(s *suite) {
	t := s.t
	id, c := s.running()
	_, err := s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1, Checkpoint: `{"done":1}`})
	require.NoError(t, err)
	_, err = s.store.Pause(s.ctx, c, 2, "manager")
	require.ErrorIs(t, err, model.ErrStepConflict, "the gate must be the next step")
	_, err = s.store.Pause(s.ctx, c, 1, "bad gate!")
	s.requireInvalid(err, "gate")
	s.advance(time.Second)
	to, err := s.store.Pause(s.ctx, c, 1, "manager")
	require.NoError(t, err)
	require.Equal(t, model.WaitingForApproval, to)
	task := s.task(id)
	require.Equal(t, model.WaitingForApproval, task.State)
	require.Equal(t, "manager", task.ApprovalGate)
	require.Equal(t, c.Fence, task.ApprovalVersion)
	require.Equal(t, 2, task.StepsUsed, "the gate counts as a step")
	require.Empty(t, task.Owner, "the lease is released")
	require.True(t, task.LeaseUntil.IsZero())
	e := s.lastEvent(id)
	require.Equal(t, model.EventPaused, e.Kind)
	require.Equal(t, model.DetailPause("manager", c.Fence), e.Detail)
	s.noClaim()

	require.ErrorIs(t, s.store.Approve(s.ctx, id, c.Fence+1, "boss"), model.ErrVersionMismatch)
	require.Equal(t, task, s.task(id))
	require.NoError(t, s.store.Approve(s.ctx, id, c.Fence, "boss"))
	task = s.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, "boss", task.ApprovedBy)
	require.Equal(t, s.now(), task.RunAt)
	require.ErrorIs(t, s.store.Approve(s.ctx, id, c.Fence, "boss"), model.ErrInvalidTransition)

	resumed := s.claim("w2")
	require.Equal(t, c.Fence+1, resumed.Claim.Fence)
	require.Equal(t, 2, resumed.Task.StepsUsed, "the task resumes after its gate")
	require.Equal(t, `{"done":1}`, resumed.Task.Checkpoint)
	require.Zero(t, resumed.Task.AttemptsCharged, "a pause is not charged")
}

func testApprovalOutdatedVersion(s *suite) {
	t := s.t
	id, first := s.waiting()
	require.NoError(t, s.store.Approve(s.ctx, id, first.Fence, "boss"))
	second := s.claim("w2").Claim
	_, err := s.store.Pause(s.ctx, second, 1, "manager")
	require.NoError(t, err)
	before := s.task(id)
	require.Equal(t, second.Fence, before.ApprovalVersion)
	require.ErrorIs(t, s.store.Approve(s.ctx, id, first.Fence, "boss"), model.ErrVersionMismatch,
		"an approval of the earlier pause does not approve this one")
	require.Equal(t, before, s.task(id))
	require.NoError(t, s.store.Approve(s.ctx, id, second.Fence, "boss"))
}

func testReject(s *suite) {
	t := s.t
	id, c := s.waiting()
	require.NoError(t, s.store.Reject(s.ctx, id, "boss"))
	task := s.task(id)
	require.Equal(t, model.Cancelled, task.State)
	require.Equal(t, model.ApprovalRejected, task.Reason)
	require.Equal(t, "boss", task.CancelledBy)
	e := s.lastEvent(id)
	require.Equal(t, model.EventRejected, e.Kind)
	require.Equal(t, model.DetailPause("manager", c.Fence), e.Detail)
	require.ErrorIs(t, s.store.Reject(s.ctx, id, "boss"), model.ErrInvalidTransition)
	require.ErrorIs(t, s.store.Approve(s.ctx, id, c.Fence, "boss"), model.ErrInvalidTransition)
}

// Cancellation.

func testCancelQueued(s *suite) {
	t := s.t
	id := s.submit()
	task, err := s.store.Cancel(s.ctx, id, "caller")
	require.NoError(t, err)
	require.Equal(t, model.Cancelled, task.State)
	require.Equal(t, model.CancelledByCaller, task.Reason)
	require.Equal(t, "caller", task.CancelledBy)
	require.Equal(t, task, s.task(id))
	s.noClaim()
	// Cancelling again changes nothing.
	events := s.events(id)
	again, err := s.store.Cancel(s.ctx, id, "someone")
	require.NoError(t, err)
	require.Equal(t, task, again)
	require.Equal(t, events, s.events(id))
	_, err = s.store.Cancel(s.ctx, "t_missing", "caller")
	require.ErrorIs(t, err, model.ErrNotFound)
}

func testCancelRunning(s *suite) {
	t := s.t
	id, c := s.running()
	require.ErrorIs(t, s.store.AcknowledgeCancel(s.ctx, c), model.ErrInvalidTransition,
		"nothing to acknowledge before a cancel")
	task, err := s.store.Cancel(s.ctx, id, "caller")
	require.NoError(t, err)
	require.Equal(t, model.Running, task.State, "cancelling a running task only requests it")
	require.True(t, task.CancelRequested)
	require.Equal(t, "caller", task.CancelledBy)
	require.Equal(t, model.EventCancelRequested, s.lastEvent(id).Kind)
	events := s.events(id)
	_, err = s.store.Cancel(s.ctx, id, "caller")
	require.NoError(t, err)
	require.Equal(t, events, s.events(id), "a second request records nothing")

	require.NoError(t, s.store.AcknowledgeCancel(s.ctx, c))
	task = s.task(id)
	require.Equal(t, model.Cancelled, task.State)
	require.Equal(t, model.CancelledByCaller, task.Reason)
	require.Equal(t, "caller", task.CancelledBy)

	// A worker that releases a task whose cancellation was requested
	// cancels it.
	other, oc := s.running()
	_, err = s.store.Cancel(s.ctx, other, "caller")
	require.NoError(t, err)
	to, err := s.store.Release(s.ctx, oc)
	require.NoError(t, err)
	require.Equal(t, model.Cancelled, to)
	// So does one that reaches its gate.
	gated, gc := s.running()
	_, err = s.store.Cancel(s.ctx, gated, "caller")
	require.NoError(t, err)
	to, err = s.store.Pause(s.ctx, gc, 0, "manager")
	require.NoError(t, err)
	require.Equal(t, model.Cancelled, to)
}

func testCancelWaiting(s *suite) {
	t := s.t
	id, _ := s.waiting()
	task, err := s.store.Cancel(s.ctx, id, "caller")
	require.NoError(t, err)
	require.Equal(t, model.Cancelled, task.State)
	require.Equal(t, model.CancelledByCaller, task.Reason)
	require.Equal(t, "caller", task.CancelledBy)
}

func testCancelRefused(s *suite) {
	t := s.t
	done, c := s.running()
	require.NoError(t, s.store.Complete(s.ctx, c))
	parked, _ := s.parked()
	for _, id := range []string{done, parked} {
		before := s.task(id)
		_, err := s.store.Cancel(s.ctx, id, "caller")
		require.ErrorIs(t, err, model.ErrInvalidTransition, "cancel a %s task", before.State)
		require.Equal(t, before, s.task(id))
	}
	_, err := s.store.Cancel(s.ctx, done, "")
	s.requireInvalid(err, "actor")
}

// Failures and retries.

// requireBackoff checks that a task requeued after its charged-th charged
// attempt is due between half and all of the capped exponential delay.
func (s *suite) requireBackoff(task model.Task, charged int) {
	s.t.Helper()
	full := s.backoff.Base
	for i := 1; i < charged && full < s.backoff.Max; i++ {
		full *= 2
	}
	full = min(full, s.backoff.Max)
	delay := task.RunAt.Sub(s.now())
	require.GreaterOrEqual(s.t, delay, full/2, "backoff after attempt %d", charged)
	require.LessOrEqual(s.t, delay, full, "backoff after attempt %d", charged)
}

func testTransientRetries(s *suite) {
	t := s.t
	id, c := s.running()
	attemptsMax := s.limits().AttemptsMax
	require.Greater(t, attemptsMax, 1)
	for charged := 1; charged < attemptsMax; charged++ {
		to, err := s.store.Fail(s.ctx, c, model.Failure{Class: model.Transient, Message: "timeout"})
		require.NoError(t, err)
		require.Equal(t, model.Queued, to)
		task := s.task(id)
		require.Equal(t, charged, task.AttemptsCharged)
		require.Equal(t, "timeout", task.LastError)
		s.requireBackoff(task, charged)
		e := s.lastEvent(id)
		require.Equal(t, model.EventRetry, e.Kind)
		require.Equal(t, model.DetailRetry(charged, attemptsMax, task.RunAt.Sub(s.now())), e.Detail)
		// Not due before the backoff has passed, due when it has.
		s.advance(task.RunAt.Sub(s.now()) - time.Millisecond)
		s.noClaim()
		s.advance(time.Millisecond)
		next := s.claim("w1")
		require.Equal(t, c.Fence+1, next.Claim.Fence)
		require.Equal(t, charged+1, next.Claim.Attempt)
		c = next.Claim
	}
	to, err := s.store.Fail(s.ctx, c, model.Failure{Class: model.Transient})
	require.NoError(t, err)
	require.Equal(t, model.NeedsReview, to, "the last attempt dead-letters the task")
	task := s.task(id)
	require.Equal(t, model.AttemptsExhausted, task.Reason)
	require.Equal(t, attemptsMax, task.AttemptsCharged)
	dead := s.lastEvent(id)
	require.Equal(t, model.EventDeadLettered, dead.Kind)
	require.Equal(t, fmt.Sprintf("attempt %d of %d charged; no attempts left, to review", attemptsMax, attemptsMax), dead.Detail,
		"a dead-lettering names no retry delay")
	require.Equal(t, attemptsMax, task.AttemptsFailed, "every charged attempt is a failure of the task")
	m := s.metrics()
	require.EqualValues(t, attemptsMax-1, m.Retries)
	require.EqualValues(t, 1, m.Reviews)
	require.EqualValues(t, 1, m.Depth[model.NeedsReview])

	// A requeue zeroes the charged attempts but not the failures: the
	// handler still sees how often the task has failed.
	require.NoError(t, s.store.Requeue(s.ctx, id, model.Grant{}, "ops"))
	task = s.task(id)
	require.Zero(t, task.AttemptsCharged)
	require.Equal(t, attemptsMax, task.AttemptsFailed)
	next := s.claim("w1")
	require.Equal(t, attemptsMax, next.Task.AttemptsFailed, "the claim carries the failures to the handler")
	_, err = s.store.Fail(s.ctx, next.Claim, model.Failure{Class: model.Transient})
	require.NoError(t, err)
	task = s.task(id)
	require.Equal(t, 1, task.AttemptsCharged)
	require.Equal(t, attemptsMax+1, task.AttemptsFailed)
}

func testPermanentFailure(s *suite) {
	t := s.t
	id, c := s.running()
	_, err := s.store.Fail(s.ctx, c, model.Failure{Class: "flaky"})
	s.requireInvalid(err, "class")
	_, err = s.store.Fail(s.ctx, c, model.Failure{Class: model.Permanent, Reason: model.OperatorResolved})
	s.requireInvalid(err, "reason")
	to, err := s.store.Fail(s.ctx, c, model.Failure{Class: model.Permanent, Message: strings.Repeat("x", model.ErrorMessageMax+10)})
	require.NoError(t, err)
	require.Equal(t, model.Failed, to)
	task := s.task(id)
	require.Equal(t, model.PermanentError, task.Reason)
	require.Len(t, task.LastError, model.ErrorMessageMax, "the message is bounded")
	require.Zero(t, task.AttemptsCharged, "a permanent failure is not retried")

	other, oc := s.running()
	_, err = s.store.Fail(s.ctx, oc, model.Failure{Class: model.Permanent, Reason: model.BudgetExhausted})
	require.NoError(t, err)
	require.Equal(t, model.BudgetExhausted, s.task(other).Reason)
}

func testUncertainFailure(s *suite) {
	t := s.t
	id, _ := s.parked()
	task := s.task(id)
	require.Equal(t, model.NeedsReview, task.State)
	require.Equal(t, model.UncertainEffect, task.Reason)
	require.Zero(t, task.AttemptsCharged)
	require.Equal(t, model.EventUncertain, s.lastEvent(id).Kind)
	s.noClaim()
	require.EqualValues(t, 1, s.metrics().Reviews)
}

// Release.

func testRelease(s *suite) {
	t := s.t
	id, c := s.running()
	_, err := s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 2, Checkpoint: `{"at":1}`})
	require.NoError(t, err)
	s.advance(time.Second)
	to, err := s.store.Release(s.ctx, c)
	require.NoError(t, err)
	require.Equal(t, model.Queued, to)
	task := s.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Zero(t, task.AttemptsCharged, "a release is not charged")
	require.Equal(t, `{"at":1}`, task.Checkpoint)
	require.Equal(t, 1, task.StepsUsed)
	require.Equal(t, s.now(), task.RunAt, "due at once")
	require.Equal(t, c.Fence, task.Version)
	require.Equal(t, model.EventReleased, s.lastEvent(id).Kind)
	next := s.claim("w2")
	require.Equal(t, c.Fence+1, next.Claim.Fence)
	require.Equal(t, 1, next.Task.StepsUsed)
}

// Reaping.

func testReapLeaseExpiry(s *suite) {
	t := s.t
	id, c := s.running()
	s.advance(lease - time.Millisecond)
	res, err := s.store.Reap(s.ctx)
	require.NoError(t, err)
	require.Equal(t, model.ReapResult{}, res)
	s.advance(time.Millisecond)
	res, err = s.store.Reap(s.ctx)
	require.NoError(t, err)
	require.Equal(t, model.ReapResult{Expired: 1}, res)
	task := s.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, 1, task.AttemptsCharged, "an expiry is charged")
	require.Equal(t, 1, task.AttemptsFailed, "an expiry is a failed attempt")
	s.requireBackoff(task, 1)
	e := s.lastEvent(id)
	require.Equal(t, model.EventLeaseExpired, e.Kind)
	require.Equal(t, model.Running, e.From)
	require.Equal(t, model.Queued, e.To)
	require.Equal(t, model.ReaperActor, e.Actor)
	require.Equal(t, c.Fence, e.Fence)
	m := s.metrics()
	require.EqualValues(t, 1, m.LeaseExpiries)
	require.EqualValues(t, 1, m.Retries)

	before := s.task(id)
	s.requireStale(id, c, "complete", s.store.Complete(s.ctx, c), before)
	res, err = s.store.Reap(s.ctx)
	require.NoError(t, err)
	require.Equal(t, model.ReapResult{}, res, "nothing left to reap")
}

func testReapLastAttempt(s *suite) {
	t := s.t
	s.setLimits(func(l *model.Limits) { l.AttemptsMax = 1 })
	id, _ := s.running()
	s.advance(lease)
	res, err := s.store.Reap(s.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Expired)
	task := s.task(id)
	require.Equal(t, model.NeedsReview, task.State)
	require.Equal(t, model.AttemptsExhausted, task.Reason)
	e := s.lastEvent(id)
	require.Equal(t, model.EventLeaseExpired, e.Kind)
	require.Equal(t, model.NeedsReview, e.To)
}

func testReapCancelRequested(s *suite) {
	t := s.t
	id, _ := s.running()
	_, err := s.store.Cancel(s.ctx, id, "caller")
	require.NoError(t, err)
	s.advance(lease)
	_, err = s.store.Reap(s.ctx)
	require.NoError(t, err)
	task := s.task(id)
	require.Equal(t, model.Cancelled, task.State)
	require.Equal(t, model.CancelledByCaller, task.Reason)
	require.Zero(t, task.AttemptsCharged)
	require.Equal(t, model.EventLeaseExpired, s.lastEvent(id).Kind)
}

// Deadlines.

// testDeadlineAtSubmit: a deadline passes only once the clock is beyond
// it, at submit as at claim: a task whose deadline is now is accepted and
// claimable; one whose deadline is a millisecond ago is refused.
func testDeadlineAtSubmit(s *suite) {
	t := s.t
	_, err := s.store.Submit(s.ctx, s.request(func(r *model.SubmitRequest) { r.Deadline = s.now().Add(-time.Millisecond) }))
	s.requireInvalid(err, "deadline")
	id := s.submit(func(r *model.SubmitRequest) { r.Deadline = s.now() })
	require.Equal(t, s.now(), s.task(id).Deadline)
	res, err := s.store.Reap(s.ctx)
	require.NoError(t, err)
	require.Equal(t, model.ReapResult{}, res, "not past its deadline yet")
	require.Equal(t, id, s.claim("w1").Claim.TaskID)
}

func testDeadlineQueued(s *suite) {
	t := s.t
	id := s.submit(func(r *model.SubmitRequest) { r.Deadline = s.now().Add(10 * time.Second) })
	late := s.submit(func(r *model.SubmitRequest) {
		r.RunAt, r.Deadline = s.now().Add(time.Minute), s.now().Add(time.Minute+time.Second)
	})
	s.advance(10*time.Second + time.Millisecond)
	s.noClaim()
	res, err := s.store.Reap(s.ctx)
	require.NoError(t, err)
	require.Equal(t, model.ReapResult{Deadlines: 1}, res)
	task := s.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.DeadlineExceeded, task.Reason)
	e := s.lastEvent(id)
	require.Equal(t, model.EventDeadline, e.Kind)
	require.Equal(t, model.ReaperActor, e.Actor)
	require.Equal(t, model.Queued, s.task(late).State)

	// A task is claimable up to and including its deadline.
	s.advance(time.Minute + time.Second - 10*time.Second - time.Millisecond)
	require.Equal(t, s.task(late).Deadline, s.now())
	require.Equal(t, late, s.claim("w1").Claim.TaskID)
}

func testDeadlineRunning(s *suite) {
	t := s.t
	id, c := s.running(func(r *model.SubmitRequest) { r.Deadline = s.now().Add(10 * time.Second) })
	s.advance(10 * time.Second)
	_, err := s.store.Heartbeat(s.ctx, c, lease)
	require.NoError(t, err, "writes are accepted up to the deadline")
	s.advance(time.Millisecond)
	_, err = s.store.CompleteStep(s.ctx, model.StepWrite{Claim: c, Index: 0, Cost: 1})
	require.ErrorIs(t, err, model.ErrDeadlineExceeded)
	task := s.task(id)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.DeadlineExceeded, task.Reason)
	require.Zero(t, task.StepsUsed)
	require.Equal(t, model.EventDeadline, s.lastEvent(id).Kind)
}

func testDeadlineWaiting(s *suite) {
	t := s.t
	id, _ := s.waiting(func(r *model.SubmitRequest) { r.Deadline = s.now().Add(time.Minute) })
	s.advance(time.Minute + time.Millisecond)
	res, err := s.store.Reap(s.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Deadlines)
	require.Equal(t, model.Failed, s.task(id).State)
	require.Equal(t, model.DeadlineExceeded, s.task(id).Reason)
}

// Operators.

func testRequeue(s *suite) {
	t := s.t
	limits := s.limits()
	id, _ := s.parked(func(r *model.SubmitRequest) { r.CostBudget, r.StepsMax = 10, 5 })
	before := s.task(id)
	s.requireInvalid(s.store.Requeue(s.ctx, id, model.Grant{Cost: limits.GrantCostMax + 1}, "ops"), "grant_cost")
	s.requireInvalid(s.store.Requeue(s.ctx, id, model.Grant{Steps: limits.GrantStepsMax + 1}, "ops"), "grant_steps")
	s.requireInvalid(s.store.Requeue(s.ctx, id, model.Grant{Cost: -1}, "ops"), "grant_cost")
	require.Equal(t, before, s.task(id), "a refused grant changes nothing")

	s.advance(time.Second)
	g := model.Grant{Cost: 7, Steps: 2}
	require.NoError(t, s.store.Requeue(s.ctx, id, g, "ops"))
	task := s.task(id)
	require.Equal(t, model.Queued, task.State)
	require.Equal(t, model.NoReason, task.Reason)
	require.EqualValues(t, 17, task.CostBudget)
	require.Equal(t, 7, task.StepsMax)
	require.Zero(t, task.AttemptsCharged, "a requeue grants a fresh set of attempts")
	require.Equal(t, s.now(), task.RunAt)
	e := s.lastEvent(id)
	require.Equal(t, model.EventRequeued, e.Kind)
	require.Equal(t, model.DetailGrant(g), e.Detail)
	require.Equal(t, "ops", e.Actor)
	require.ErrorIs(t, s.store.Requeue(s.ctx, id, g, "ops"), model.ErrInvalidTransition)
	require.Equal(t, id, s.claim("w1").Claim.TaskID)
}

func testResolve(s *suite) {
	t := s.t
	for _, to := range []model.State{model.Completed, model.Failed, model.Cancelled} {
		id, _ := s.parked()
		s.requireInvalid(s.store.Resolve(s.ctx, id, model.Queued, "ops"), "as")
		require.NoError(t, s.store.Resolve(s.ctx, id, to, "ops"))
		task := s.task(id)
		require.Equal(t, to, task.State)
		require.Equal(t, model.OperatorResolved, task.Reason)
		if to == model.Cancelled {
			require.Equal(t, "ops", task.CancelledBy)
		}
		e := s.lastEvent(id)
		require.Equal(t, model.EventResolved, e.Kind)
		require.Equal(t, model.NeedsReview, e.From)
		require.ErrorIs(t, s.store.Resolve(s.ctx, id, to, "ops"), model.ErrInvalidTransition)
	}
	queued := s.submit()
	require.ErrorIs(t, s.store.Resolve(s.ctx, queued, model.Completed, "ops"), model.ErrInvalidTransition)
	require.ErrorIs(t, s.store.Resolve(s.ctx, "t_missing", model.Completed, "ops"), model.ErrNotFound)
}

// Limits and admission.

func testUserRunningLimit(s *suite) {
	t := s.t
	require.NoError(t, s.store.SetUserLimit(s.ctx, model.UserLimit{User: "ana", RunningMax: 1, DepthMax: model.Inherit}, "ops"))
	_, users, err := s.store.Limits(s.ctx)
	require.NoError(t, err)
	require.Equal(t, []model.UserLimit{{User: "ana", RunningMax: 1, DepthMax: model.Inherit}}, users)
	a1 := s.submit()
	a2 := s.submit()
	b1 := s.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	claimed := s.claimN("w1", 3, lease)
	require.Len(t, claimed, 2, "ana's second task waits for her first")
	require.Equal(t, a1, claimed[0].Claim.TaskID)
	require.Equal(t, b1, claimed[1].Claim.TaskID)
	s.noClaim()
	require.NoError(t, s.store.Complete(s.ctx, claimed[0].Claim))
	require.Equal(t, a2, s.claim("w1").Claim.TaskID, "below the limit again")

	// Removing the limit frees the user at once.
	a3 := s.submit()
	s.noClaim()
	require.NoError(t, s.store.SetUserLimit(s.ctx, model.UserLimit{User: "ana", RunningMax: model.Inherit, DepthMax: model.Inherit}, "ops"))
	require.Equal(t, a3, s.claim("w1").Claim.TaskID)
}

func testDefaultRunningLimit(s *suite) {
	t := s.t
	s.setLimits(func(l *model.Limits) { l.UserRunningMax = 1 })
	a1 := s.submit()
	s.submit()
	b1 := s.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	claimed := s.claimN("w1", 3, lease)
	require.Len(t, claimed, 2)
	require.Equal(t, a1, claimed[0].Claim.TaskID)
	require.Equal(t, b1, claimed[1].Claim.TaskID)
	// An override above the default lets a user run more.
	require.NoError(t, s.store.SetUserLimit(s.ctx, model.UserLimit{User: "ana", RunningMax: 2, DepthMax: model.Inherit}, "ops"))
	require.Len(t, s.claimN("w1", 3, lease), 1)
}

func testAdmissionDepth(s *suite) {
	t := s.t
	s.setLimits(func(l *model.Limits) { l.DepthMax = 2 })
	first := s.request()
	res, err := s.store.Submit(s.ctx, first)
	require.NoError(t, err)
	s.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	_, err = s.store.Submit(s.ctx, s.request(func(r *model.SubmitRequest) { r.User = "cy" }))
	require.ErrorIs(t, err, model.ErrQueueFull)
	require.Equal(t, 2, s.count(model.ListFilter{}), "nothing refused is written")
	require.EqualValues(t, 2, s.metrics().Submitted)
	replay, err := s.store.Submit(s.ctx, first)
	require.NoError(t, err, "a replay is not a new task")
	require.Equal(t, model.SubmitResult{TaskID: res.TaskID, Replay: true}, replay)

	// Running and waiting tasks count; settled ones do not.
	c := s.claim("w1")
	_, err = s.store.Submit(s.ctx, s.request())
	require.ErrorIs(t, err, model.ErrQueueFull)
	require.NoError(t, s.store.Complete(s.ctx, c.Claim))
	s.submit()
}

func testAdmissionUserDepth(s *suite) {
	t := s.t
	s.setLimits(func(l *model.Limits) { l.UserDepthMax = 1 })
	s.submit()
	_, err := s.store.Submit(s.ctx, s.request())
	require.ErrorIs(t, err, model.ErrQueueFull)
	s.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	require.NoError(t, s.store.SetUserLimit(s.ctx, model.UserLimit{User: "ana", RunningMax: model.Inherit, DepthMax: 2}, "ops"))
	s.submit()
	require.Equal(t, 3, s.count(model.ListFilter{}))
	require.Equal(t, 2, s.count(model.ListFilter{User: "ana"}))
}

// Schedules.

func (s *suite) addSchedule(origin time.Time, period time.Duration) model.Schedule {
	s.t.Helper()
	sched, err := s.store.AddSchedule(s.ctx, model.ScheduleSpec{User: "ana", Payload: `{"report":"daily"}`,
		CostBudget: 5, StepsMax: 3, Origin: origin, Period: period}, "ops")
	require.NoError(s.t, err)
	require.EqualValues(s.t, -1, sched.LastRun)
	return sched
}

func (s *suite) enqueueDue() model.EnqueueResult {
	s.t.Helper()
	res, err := s.store.EnqueueDue(s.ctx)
	require.NoError(s.t, err)
	return res
}

// runs returns the tasks of a schedule in submission order.
func (s *suite) runs(id string) []model.Task {
	s.t.Helper()
	tasks, err := s.store.List(s.ctx, model.ListFilter{Limit: model.ListLimitMax})
	require.NoError(s.t, err)
	var out []model.Task
	for _, task := range tasks {
		if task.ScheduleID == id {
			out = append(out, task)
		}
	}
	return out
}

func testScheduleRunsOnce(s *suite) {
	t := s.t
	_, err := s.store.AddSchedule(s.ctx, model.ScheduleSpec{User: "ana", Payload: `{}`, CostBudget: 5, StepsMax: 3,
		Origin: s.now(), Period: model.PeriodMin - time.Millisecond}, "ops")
	s.requireInvalid(err, "period")

	origin := s.now().Add(time.Minute)
	sched := s.addSchedule(origin, time.Hour)
	require.Equal(t, model.EnqueueResult{}, s.enqueueDue(), "nothing is due before the origin")
	s.advance(time.Minute)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, s.enqueueDue(), "run 0 is due at the origin")
	require.Equal(t, model.EnqueueResult{}, s.enqueueDue(), "a run is enqueued at most once")
	s.advance(time.Hour - time.Millisecond)
	require.Equal(t, model.EnqueueResult{}, s.enqueueDue())
	s.advance(time.Millisecond)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, s.enqueueDue())
	require.Equal(t, model.EnqueueResult{}, s.enqueueDue())

	runs := s.runs(sched.ID)
	require.Len(t, runs, 2)
	for k, task := range runs {
		require.EqualValues(t, k, task.ScheduleRun)
		require.Equal(t, origin.Add(time.Duration(k)*time.Hour), task.RunAt, "run k is due at origin + k·period")
		require.Equal(t, model.RunKey(sched.ID, int64(k)), task.Key)
		require.Equal(t, `{"report":"daily"}`, task.Payload)
		require.Equal(t, "schedule:"+sched.ID, s.events(task.ID)[0].Actor)
	}
	schedules, err := s.store.Schedules(s.ctx)
	require.NoError(t, err)
	require.Len(t, schedules, 1)
	require.EqualValues(t, 1, schedules[0].LastRun)
}

func testScheduleCollapses(s *suite) {
	t := s.t
	origin := s.now()
	sched := s.addSchedule(origin, time.Minute)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, s.enqueueDue())
	// Downtime: runs 1 to 10 are missed; only the latest due, run 10, is
	// enqueued, and the nine before it are collapsed into it.
	s.advance(10*time.Minute + 30*time.Second)
	require.Equal(t, model.EnqueueResult{Enqueued: 1, Collapsed: 9}, s.enqueueDue())
	require.Equal(t, model.EnqueueResult{}, s.enqueueDue())
	runs := s.runs(sched.ID)
	require.Len(t, runs, 2)
	require.EqualValues(t, 10, runs[1].ScheduleRun)
	require.Equal(t, origin.Add(10*time.Minute), runs[1].RunAt, "anchored at the origin, not at the restart")
	s.advance(30 * time.Second)
	require.Equal(t, model.EnqueueResult{Enqueued: 1}, s.enqueueDue())
	require.EqualValues(t, 11, s.runs(sched.ID)[2].ScheduleRun)
}

func testScheduleRemove(s *suite) {
	t := s.t
	sched := s.addSchedule(s.now(), time.Minute)
	require.Equal(t, 1, s.enqueueDue().Enqueued)
	require.NoError(t, s.store.RemoveSchedule(s.ctx, sched.ID, "ops"))
	require.ErrorIs(t, s.store.RemoveSchedule(s.ctx, sched.ID, "ops"), model.ErrNotFound)
	s.advance(time.Hour)
	require.Equal(t, model.EnqueueResult{}, s.enqueueDue())
	require.Len(t, s.runs(sched.ID), 1, "runs already enqueued stay")
	schedules, err := s.store.Schedules(s.ctx)
	require.NoError(t, err)
	require.Empty(t, schedules)
}

// Metrics.

func testMetricsReconcile(s *suite) {
	t := s.t
	m := s.metrics()
	for _, state := range model.States() {
		n, ok := m.Depth[state]
		require.True(t, ok, "a depth for every state, %s included", state)
		require.Zero(t, n)
	}

	done := s.submit()
	failed := s.submit()
	retried := s.submit()
	cancelled := s.submit()
	s.submit() // stays queued
	s.advance(2 * time.Second)
	claimed := s.claimN("w1", 3, lease)
	require.Len(t, claimed, 3)
	require.Equal(t, []string{done, failed, retried},
		[]string{claimed[0].Claim.TaskID, claimed[1].Claim.TaskID, claimed[2].Claim.TaskID})
	s.advance(300 * time.Millisecond)
	require.NoError(t, s.store.Complete(s.ctx, claimed[0].Claim))
	_, err := s.store.Fail(s.ctx, claimed[1].Claim, model.Failure{Class: model.Permanent})
	require.NoError(t, err)
	_, err = s.store.Fail(s.ctx, claimed[2].Claim, model.Failure{Class: model.Transient})
	require.NoError(t, err)
	_, err = s.store.Cancel(s.ctx, cancelled, "caller")
	require.NoError(t, err)
	require.ErrorIs(t, s.store.Complete(s.ctx, claimed[0].Claim), model.ErrStaleClaim)

	m = s.metrics()
	require.Equal(t, map[model.State]int64{model.Queued: 2, model.Running: 0, model.WaitingForApproval: 0,
		model.NeedsReview: 0, model.Completed: 1, model.Failed: 1, model.Cancelled: 1}, m.Depth)
	require.EqualValues(t, 5, m.Submitted)
	require.EqualValues(t, 1, m.Completions)
	require.EqualValues(t, 1, m.Failures)
	require.EqualValues(t, 1, m.Cancellations)
	require.EqualValues(t, 1, m.Retries)
	require.EqualValues(t, 1, m.StaleWrites)
	require.Zero(t, m.LeaseExpiries)
	require.Zero(t, m.Reviews)

	// Queue wait and run time are separate distributions: three claims
	// that each waited 2s, and three claims that each ran 300ms.
	wait := model.NewHistogram()
	for range 3 {
		wait.Observe(2 * time.Second)
	}
	require.Equal(t, wait, m.QueueWait)
	run := model.NewHistogram()
	for range 3 {
		run.Observe(300 * time.Millisecond)
	}
	require.Equal(t, run, m.RunTime)
	// The oldest due queued task has waited since its submission; the one
	// in backoff is not due yet.
	require.Equal(t, 2300*time.Millisecond, m.OldestQueuedAge)
}
