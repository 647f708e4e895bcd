package queuetest

import (
	"fmt"
	"strings"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

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

	// The reasons a worker may give, each kept (none is a permanent error)
	// on the task and its failed event.
	for _, r := range []struct{ given, want model.Reason }{
		{model.NoReason, model.PermanentError},
		{model.PermanentError, model.PermanentError},
		{model.BudgetExhausted, model.BudgetExhausted},
		{model.StepsExhausted, model.StepsExhausted},
		{model.DeadlineExceeded, model.DeadlineExceeded},
	} {
		other, oc := s.running()
		to, err := s.store.Fail(s.ctx, oc, model.Failure{Class: model.Permanent, Reason: r.given, Message: "boom"})
		require.NoError(t, err)
		require.Equal(t, model.Failed, to)
		task := s.task(other)
		require.Equal(t, r.want, task.Reason, "given %q", r.given)
		require.Equal(t, "boom", task.LastError)
		e := s.lastEvent(other)
		require.Equal(t, model.EventFailed, e.Kind)
		require.Equal(t, r.want, e.Reason)
	}
	// The reasons only the queue or an operator gives are refused, and
	// the refusal writes nothing.
	refused, rc := s.running()
	before, events := s.task(refused), s.events("")
	for _, bad := range []model.Reason{model.OperatorResolved, model.CancelledByCaller, model.AttemptsExhausted, "nonsense"} {
		_, err := s.store.Fail(s.ctx, rc, model.Failure{Class: model.Permanent, Reason: bad})
		s.requireInvalid(err, "reason")
	}
	require.Equal(t, before, s.task(refused))
	require.Equal(t, events, s.events(""))
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
	require.Empty(t, task.Owner)
	require.Equal(t, model.EventReleased, s.lastEvent(id).Kind)
	require.Zero(t, s.metrics().Retries, "a release is no retry")
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
	require.Empty(t, task.Owner)
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
	require.Equal(t, 1, task.AttemptsCharged)
	e := s.lastEvent(id)
	require.Equal(t, model.EventLeaseExpired, e.Kind)
	require.Equal(t, model.NeedsReview, e.To)
	m := s.metrics()
	require.EqualValues(t, 1, m.LeaseExpiries)
	require.Zero(t, m.Retries)
	require.EqualValues(t, 1, m.Reviews)
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
	require.Equal(t, "caller", task.CancelledBy)
	require.Zero(t, task.AttemptsCharged)
	require.Equal(t, model.EventLeaseExpired, s.lastEvent(id).Kind)
}

// testCompletionClearsLastError: a task that failed transiently keeps the
// failure's message while it is queued, running or in review, and loses
// it when it completes, by Complete, by CompleteAndClaim (where the store
// has it) or by an operator's resolve as completed; a resolve as failed
// keeps it.
func testCompletionClearsLastError(s *suite) {
	t := s.t
	failOnce := func() (string, model.Claim) {
		t.Helper()
		id, c := s.running()
		to, err := s.store.Fail(s.ctx, c, model.Failure{Class: model.Transient, Message: "connection reset"})
		require.NoError(t, err)
		require.Equal(t, model.Queued, to)
		s.advance(s.task(id).RunAt.Sub(s.now()))
		again := s.claim("w1")
		require.Equal(t, id, again.Claim.TaskID)
		require.Equal(t, "connection reset", s.task(id).LastError, "a running task keeps its last failure")
		return id, again.Claim
	}
	id, c := failOnce()
	require.NoError(t, s.store.Complete(s.ctx, c))
	require.Equal(t, model.Completed, s.task(id).State)
	require.Empty(t, s.task(id).LastError, "Complete clears it")

	if cc, ok := s.store.(completeClaimer); ok {
		id, c := failOnce()
		_, err := cc.CompleteAndClaim(s.ctx, c, model.ClaimRequest{Worker: "w1", Max: 1, Lease: lease})
		require.NoError(t, err)
		require.Equal(t, model.Completed, s.task(id).State)
		require.Empty(t, s.task(id).LastError, "CompleteAndClaim clears it")
	}

	for _, as := range []model.State{model.Completed, model.Failed} {
		id, c := s.running()
		to, err := s.store.Fail(s.ctx, c, model.Failure{Class: model.Uncertain, OpID: model.OperationID(id, 0), Message: "lost response"})
		require.NoError(t, err)
		require.Equal(t, model.NeedsReview, to)
		require.NoError(t, s.store.Resolve(s.ctx, id, as, "ops"))
		want := "lost response"
		if as == model.Completed {
			want = ""
		}
		require.Equal(t, want, s.task(id).LastError, "resolved as %s", as)
	}
}
