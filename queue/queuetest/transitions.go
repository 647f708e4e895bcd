package queuetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// transitionCase drives one row of model.Transitions() through a store:
// prepare leaves a task in the row's From state, act performs the action.
type transitionCase struct {
	prepare func(s *suite) (string, model.Claim)
	act     func(s *suite, id string, c model.Claim)
}

func queuedTask(s *suite) (string, model.Claim)  { return s.submit(), model.Claim{} }
func runningTask(s *suite) (string, model.Claim) { return s.running() }
func waitingTask(s *suite) (string, model.Claim) { return s.waiting() }
func parkedTask(s *suite) (string, model.Claim)  { return s.parked() }

// dueIn sets a deadline d after now.
func (s *suite) dueIn(d time.Duration) func(*model.SubmitRequest) {
	return func(r *model.SubmitRequest) { r.Deadline = s.now().Add(d) }
}

func failWith(f model.Failure) func(s *suite, id string, c model.Claim) {
	return func(s *suite, _ string, c model.Claim) {
		_, err := s.store.Fail(s.ctx, c, f)
		require.NoError(s.t, err)
	}
}

func resolveAs(to model.State) func(s *suite, id string, c model.Claim) {
	return func(s *suite, id string, _ model.Claim) {
		require.NoError(s.t, s.store.Resolve(s.ctx, id, to, "ops"))
	}
}

func passDeadline(s *suite, _ string, _ model.Claim) {
	s.advance(10*time.Second + time.Millisecond)
	res, err := s.store.Reap(s.ctx)
	require.NoError(s.t, err)
	require.Equal(s.t, 1, res.Deadlines)
}

var transitionCases = map[model.Transition]transitionCase{
	{From: model.Queued, Action: model.ActClaim, To: model.Running}: {queuedTask,
		func(s *suite, id string, _ model.Claim) { require.Equal(s.t, id, s.claim("w2").Claim.TaskID) }},
	{From: model.Queued, Action: model.ActCancel, To: model.Cancelled}: {queuedTask,
		func(s *suite, id string, _ model.Claim) {
			_, err := s.store.Cancel(s.ctx, id, "caller")
			require.NoError(s.t, err)
		}},
	{From: model.Running, Action: model.ActComplete, To: model.Completed}: {runningTask,
		func(s *suite, _ string, c model.Claim) { require.NoError(s.t, s.store.Complete(s.ctx, c)) }},
	{From: model.Running, Action: model.ActFail, To: model.Failed}: {runningTask,
		failWith(model.Failure{Class: model.Permanent})},
	{From: model.Running, Action: model.ActRetry, To: model.Queued, Charged: true}: {runningTask,
		failWith(model.Failure{Class: model.Transient})},
	{From: model.Running, Action: model.ActDeadLetter, To: model.NeedsReview, Charged: true}: {
		func(s *suite) (string, model.Claim) {
			s.setLimits(func(l *model.Limits) { l.AttemptsMax = 1 })
			return s.running()
		},
		failWith(model.Failure{Class: model.Transient})},
	{From: model.Running, Action: model.ActUncertain, To: model.NeedsReview}: {runningTask,
		failWith(model.Failure{Class: model.Uncertain, OpID: "op"})},
	{From: model.Running, Action: model.ActPause, To: model.WaitingForApproval}: {runningTask,
		func(s *suite, _ string, c model.Claim) {
			_, err := s.store.Pause(s.ctx, c, 0, "manager")
			require.NoError(s.t, err)
		}},
	{From: model.Running, Action: model.ActRelease, To: model.Queued}: {runningTask,
		func(s *suite, _ string, c model.Claim) {
			_, err := s.store.Release(s.ctx, c)
			require.NoError(s.t, err)
		}},
	{From: model.Running, Action: model.ActObserveCancel, To: model.Cancelled}: {runningTask,
		func(s *suite, id string, c model.Claim) {
			_, err := s.store.Cancel(s.ctx, id, "caller")
			require.NoError(s.t, err)
			require.NoError(s.t, s.store.AcknowledgeCancel(s.ctx, c))
		}},
	{From: model.WaitingForApproval, Action: model.ActApprove, To: model.Queued}: {waitingTask,
		func(s *suite, id string, _ model.Claim) {
			require.NoError(s.t, s.store.Approve(s.ctx, id, s.task(id).ApprovalVersion, "boss"))
		}},
	{From: model.WaitingForApproval, Action: model.ActReject, To: model.Cancelled}: {waitingTask,
		func(s *suite, id string, _ model.Claim) {
			require.NoError(s.t, s.store.Reject(s.ctx, id, s.task(id).ApprovalVersion, "boss"))
		}},
	{From: model.WaitingForApproval, Action: model.ActCancel, To: model.Cancelled}: {waitingTask,
		func(s *suite, id string, _ model.Claim) {
			_, err := s.store.Cancel(s.ctx, id, "caller")
			require.NoError(s.t, err)
		}},
	{From: model.Queued, Action: model.ActDeadline, To: model.Failed}: {
		func(s *suite) (string, model.Claim) { return s.submit(s.dueIn(10 * time.Second)), model.Claim{} },
		passDeadline},
	{From: model.Running, Action: model.ActDeadline, To: model.Failed}: {
		func(s *suite) (string, model.Claim) { return s.running(s.dueIn(10 * time.Second)) },
		passDeadline},
	{From: model.WaitingForApproval, Action: model.ActDeadline, To: model.Failed}: {
		func(s *suite) (string, model.Claim) { return s.waiting(s.dueIn(10 * time.Second)) },
		passDeadline},
	{From: model.NeedsReview, Action: model.ActRequeue, To: model.Queued}: {parkedTask,
		func(s *suite, id string, _ model.Claim) {
			require.NoError(s.t, s.store.Requeue(s.ctx, id, model.Grant{Cost: 5, Steps: 2}, "ops"))
		}},
	{From: model.NeedsReview, Action: model.ActResolve, To: model.Completed}: {parkedTask, resolveAs(model.Completed)},
	{From: model.NeedsReview, Action: model.ActResolve, To: model.Failed}:    {parkedTask, resolveAs(model.Failed)},
	{From: model.NeedsReview, Action: model.ActResolve, To: model.Cancelled}: {parkedTask, resolveAs(model.Cancelled)},
}

// exerciseTransitions drives every row of the state machine through a
// fresh store each (subtests Transition/FROM/ACTION/TO) and checks that
// the task moved from From to To, the audit event says so, the attempt
// was charged exactly when the row says, and the task keeps its
// invariants. Every row has a case and every case is a row.
func exerciseTransitions(t *testing.T, open func(t *testing.T) Harness) {
	t.Helper()
	covered := map[model.Transition]bool{}
	for _, tr := range model.Transitions() {
		covered[tr] = true
		name := fmt.Sprintf("Transition/%s/%s/%s", tr.From, tr.Action, tr.To)
		tc, ok := transitionCases[tr]
		require.True(t, ok, "no case drives transition %s", name)
		t.Run(name, func(t *testing.T) { testTransition(begin(t, open), tr, tc) })
	}
	for tr := range transitionCases {
		require.True(t, covered[tr], "transition case %v is not in model.Transitions()", tr)
	}
}

func testTransition(s *suite, tr model.Transition, tc transitionCase) {
	t := s.t
	id, c := tc.prepare(s)
	before := s.task(id)
	require.Equal(t, tr.From, before.State)
	tc.act(s, id, c)
	after := s.task(id)
	require.Equal(t, tr.To, after.State)
	require.Empty(t, model.CheckTask(after))
	require.Empty(t, model.CheckChange(before, after))
	charged := 0
	if tr.Charged {
		charged = 1
	}
	if tr.Action != model.ActRequeue {
		require.Equal(t, before.AttemptsCharged+charged, after.AttemptsCharged)
	}
	last := s.lastEvent(id)
	require.Equal(t, tr.From, last.From)
	require.Equal(t, tr.To, last.To)
	require.Equal(t, after.Reason, last.Reason)
	s.metrics() // reconciles
}
