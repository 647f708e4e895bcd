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
	"testing"

	"github.com/jonboulle/clockwork"

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
	exerciseTransitions(t, open)
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
	{"ClaimPastTasksNotDue", testClaimPastTasksNotDue},
	{"ClaimBatch", testClaimBatch},
	{"ClaimBatchIdle", testClaimBatchIdle},
	{"CompleteAndClaim", testCompleteAndClaim},
	{"FollowUsers", testFollowUsers},
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
	{"RejectOutdatedVersion", testRejectOutdatedVersion},
	{"CancelQueued", testCancelQueued},
	{"CancelRunning", testCancelRunning},
	{"CancelWaiting", testCancelWaiting},
	{"CancelRefused", testCancelRefused},
	{"TransientRetriesThenDeadLetter", testTransientRetries},
	{"CompletionClearsLastError", testCompletionClearsLastError},
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
	{"RunningRoomAtTheBatch", testRunningRoomAtTheBatch},
	{"AdmissionDepth", testAdmissionDepth},
	{"AdmissionUserDepth", testAdmissionUserDepth},
	{"ScheduleRunsOnce", testScheduleRunsOnce},
	{"ScheduleCollapsesMissedRuns", testScheduleCollapses},
	{"ScheduleRemove", testScheduleRemove},
	{"MetricsReconcile", testMetricsReconcile},
	{"PruneTerminalOnly", testPruneTerminalOnly},
	{"PruneAgeBoundary", testPruneAgeBoundary},
	{"PruneKeepsUnreceiptedEffects", testPruneKeepsUnreceiptedEffects},
	{"PruneKeptOnce", testPruneKeptOnce},
	{"PruneTombstones", testPruneTombstones},
	{"PruneBatches", testPruneBatches},
	{"PruneDryRun", testPruneDryRun},
	{"PruneValidation", testPruneValidation},
	{"PruneFollower", testPruneFollower},
	{"PruneDue", testPruneDue},
	{"PruneNeverReusesSequence", testPruneNeverReusesSequence},
}
