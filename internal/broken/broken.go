// Package broken is the one switch for the named broken variants. Each
// variant removes one safety mechanism from the production code, so that
// the simulator's tests can show the harness catches its absence
// (sim/broken_test.go). Production code names a variant where the
// mechanism is, through Pick (a Go value) or a placeholder in its SQL
// (queue's loader fills {broken:VARIANT|safe|broken}); it has no branch of
// its own for a variant.
//
// Without the leasehold_broken build tag, Built is false, On is false for
// every variant, and Pick returns its safe value: the compiler removes the
// switch. With the tag, the LEASEHOLD_BROKEN environment variable (a
// comma-separated list of variant names) switches variants on.
package broken

import (
	"fmt"
	"os"
	"strings"
)

// Variant names one broken variant.
type Variant int

// The broken variants, each the safety mechanism it removes.
const (
	// CompleteWithoutFence: Complete is accepted from any claim of a
	// running task, current or not.
	CompleteWithoutFence Variant = iota + 1
	// WriteAfterLeaseExpiry: fenced writes no longer check the lease.
	WriteAfterLeaseExpiry
	// NoUserLimit: claims ignore the per-user running limit.
	NoUserLimit
	// NoBudgetCheck: the worker runs a step that passes the cost budget.
	NoBudgetCheck
	// StepCASSkipped: a step write is taken as the next step whatever
	// index it names.
	StepCASSkipped
	// WorkerIgnoresReceipts: the worker calls again an operation whose
	// receipt is recorded.
	WorkerIgnoresReceipts
	// ReaperNotCharging: a lease expiry charges no attempt.
	ReaperNotCharging
	// ApprovalNotBound: an approval of any version is accepted.
	ApprovalNotBound
	// ReaperRequeuesCancelled: an expired task whose cancellation was
	// requested is requeued, not cancelled.
	ReaperRequeuesCancelled
	// ChangedRequestReplayed: a changed request under a used key is taken
	// as a replay.
	ChangedRequestReplayed
	// HeartbeatHidesCancel: a heartbeat does not report a requested
	// cancellation.
	HeartbeatHidesCancel
	// EventWrongReason: a task failed for its budget is recorded with the
	// reason permanent_error.
	EventWrongReason
	// RetryWithoutBackoff: a retried task is due at once.
	RetryWithoutBackoff
	// ReceiptNotStored: a receipt is acknowledged but not written.
	ReceiptNotStored
	// ClaimPastDeadline: claims take tasks past their deadline.
	ClaimPastDeadline
	// ClaimExclusiveRunAt: a task is not claimable at exactly its run_at.
	ClaimExclusiveRunAt
	// WorkerIgnoresCancel: the worker goes on after a cancellation is
	// reported.
	WorkerIgnoresCancel
	// DepthCapOffByOne: admission lets a user one task past its depth cap.
	DepthCapOffByOne
	// PauseChargesAttempt: pausing at an approval gate charges an attempt.
	PauseChargesAttempt
	// ReleaseChargesAttempt: a released claim charges an attempt.
	ReleaseChargesAttempt
	// RequeueGrantUnbounded: an operator's requeue grant ignores the
	// configured maximum.
	RequeueGrantUnbounded
	// WriteAtLeaseUntil: the lease check is inclusive, so a write at
	// exactly lease_until, when the lease has run out, is accepted.
	WriteAtLeaseUntil
	// ReleaseRecordedAsRetry: a graceful release is recorded as a retry.
	ReleaseRecordedAsRetry
	// NoHeartbeatDuringRun: a slot stops heartbeating while its handler's
	// run is under way, so a run longer than the lease loses its claim.
	NoHeartbeatDuringRun
	// BatchChangedReplayed: a batch submit answers a changed request under
	// a used key (an earlier request's of the batch, or a stored task's)
	// as a replay.
	BatchChangedReplayed
	// StepLimitOffByOne: the queue accepts a step one past the task's
	// step limit.
	StepLimitOffByOne
	// FollowerSkipsMark: a read of the trail for some users leaves out
	// the event at the mark it says it looked through.
	FollowerSkipsMark
	// CompleteClaimWhenStale: a complete-and-claim whose completion is
	// refused as stale still makes its claim.
	CompleteClaimWhenStale
	// ClaimIgnoresKinds: a claim that names its kinds takes tasks of any
	// kind once it has found one of its own to take.
	ClaimIgnoresKinds
	// FusedLostReadsNotApplied: a statement PostgreSQL runs as its own
	// transaction (a lone submit, a fused group) whose connection was lost
	// while it ran is reported not applied, though it may have committed.
	FusedLostReadsNotApplied
	// FusedCompletionUnfenced: a fused group's completions
	// (PostgreSQL's complete_and_claim) are accepted whatever fence they
	// name.
	FusedCompletionUnfenced
	// ReplayIgnoresTombstone: a submit under the key of a pruned task
	// does not read the tombstone the prune left (SQLite's statements),
	// so a replay makes a new task and a changed request is accepted.
	ReplayIgnoresTombstone
	// GroupRefusalLosesRecord: a member of a group of several refused
	// with a record (a stale write's event, a settle for a budget, step
	// or deadline refusal) is rolled back to its savepoint, record and
	// all.
	GroupRefusalLosesRecord
	// GroupUnknownMixed: after a group's COMMIT fails, its first member
	// is written again alone, so the group ends partly applied.
	GroupUnknownMixed
	// BatchedCompletionUnfenced: a group's batched completions
	// (complete_batch) are matched against the running task's own version,
	// whatever fence they name.
	BatchedCompletionUnfenced

	variantEnd // one past the last variant
)

// names are the variants' names, as LEASEHOLD_BROKEN and the SQL
// placeholders spell them.
var names = [variantEnd]string{
	CompleteWithoutFence:      "complete-without-fence",
	WriteAfterLeaseExpiry:     "write-after-lease-expiry",
	NoUserLimit:               "no-user-limit",
	NoBudgetCheck:             "no-budget-check",
	StepCASSkipped:            "step-cas-skipped",
	WorkerIgnoresReceipts:     "worker-ignores-receipts",
	ReaperNotCharging:         "reaper-not-charging",
	ApprovalNotBound:          "approval-not-bound",
	ReaperRequeuesCancelled:   "reaper-requeues-cancelled",
	ChangedRequestReplayed:    "changed-request-replayed",
	HeartbeatHidesCancel:      "heartbeat-hides-cancel",
	EventWrongReason:          "event-wrong-reason",
	RetryWithoutBackoff:       "retry-without-backoff",
	ReceiptNotStored:          "receipt-not-stored",
	ClaimPastDeadline:         "claim-past-deadline",
	ClaimExclusiveRunAt:       "claim-exclusive-run-at",
	WorkerIgnoresCancel:       "worker-ignores-cancel",
	DepthCapOffByOne:          "depth-cap-off-by-one",
	PauseChargesAttempt:       "pause-charges-attempt",
	ReleaseChargesAttempt:     "release-charges-attempt",
	RequeueGrantUnbounded:     "requeue-grant-unbounded",
	WriteAtLeaseUntil:         "write-at-lease-until",
	ReleaseRecordedAsRetry:    "release-recorded-as-retry",
	NoHeartbeatDuringRun:      "no-heartbeat-during-run",
	BatchChangedReplayed:      "batch-changed-replayed",
	StepLimitOffByOne:         "step-limit-off-by-one",
	FollowerSkipsMark:         "follower-skips-mark",
	CompleteClaimWhenStale:    "complete-claim-when-stale",
	ClaimIgnoresKinds:         "claim-ignores-kinds",
	FusedLostReadsNotApplied:  "fused-lost-reads-not-applied",
	FusedCompletionUnfenced:   "fused-completion-unfenced",
	ReplayIgnoresTombstone:    "replay-ignores-tombstone",
	GroupRefusalLosesRecord:   "group-refusal-loses-record",
	GroupUnknownMixed:         "group-unknown-mixed",
	BatchedCompletionUnfenced: "batched-completion-unfenced",
}

// String returns the variant's name.
func (v Variant) String() string {
	if v <= 0 || v >= variantEnd {
		return fmt.Sprintf("Variant(%d)", int(v))
	}
	return names[v]
}

// All returns every variant, in declaration order.
func All() []Variant {
	out := make([]Variant, 0, variantEnd-1)
	for v := Variant(1); v < variantEnd; v++ {
		out = append(out, v)
	}
	return out
}

// Parse returns the variant named name.
func Parse(name string) (Variant, error) {
	for v := Variant(1); v < variantEnd; v++ {
		if names[v] == name {
			return v, nil
		}
	}
	return 0, fmt.Errorf("broken: no variant named %q", name)
}

// Pick returns safe, or, when v is switched on, broken: the value a
// mechanism has without its check.
func Pick[T any](v Variant, safe, broken T) T {
	if On(v) {
		return broken
	}
	return safe
}

// switchedOn reads the LEASEHOLD_BROKEN list for v.
func switchedOn(v Variant) bool {
	for _, name := range strings.Split(os.Getenv("LEASEHOLD_BROKEN"), ",") {
		if strings.TrimSpace(name) == v.String() {
			return true
		}
	}
	return false
}
