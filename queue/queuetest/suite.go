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
