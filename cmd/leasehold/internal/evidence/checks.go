package evidence

import (
	"fmt"
	"sort"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/liverun"
	"github.com/leasehold/leasehold/reports"
)

// fixtureResult is a sweep's outcome as a check's result: observed as
// given when every seed passed, else the first failure.
func fixtureResult(st Sweep, inputs, observed string) reports.Result {
	obs := observed
	if len(st.failures) > 0 {
		obs = fmt.Sprintf("%d of %d seeds failed; first: %s", st.sweep.Failed, st.sweep.Seeds, st.failures[0])
	}
	if st.coverageMissing != "" {
		obs += "; " + st.coverageMissing
	}
	return reports.Result{Kind: reports.Fixture, Inputs: fmt.Sprintf("%s (%d seeds, %s)", inputs, st.sweep.Seeds, st.sweep.Faults),
		Observed: obs, Pass: st.sweep.Failed == 0 && st.coverageMissing == "", Command: st.sweep.Command}
}

// buildChecks is the report's checks: each claim with its simulated and
// live results, then the recovery procedures.
func buildChecks(stats map[string]Sweep, seeds int, d liverun.Result, runbook map[string]bool) []reports.Check {
	singleClaim, failedSeeds := singleClaimObserved(stats)
	lease := d.Settings["lease"]
	if lease == "" {
		lease = "(not recorded)"
	}
	pf := stats["portfolio"]
	checks := []reports.Check{
		{ID: "single-claim", Title: "A task never executes under two valid claims", Results: []reports.Result{
			{Kind: reports.Fixture, Inputs: fmt.Sprintf("every scenario, %d seeds each, swarm faults", seeds),
				Observed: singleClaim, Pass: failedSeeds == 0, Command: fmt.Sprintf("make sim SEED=1 SEEDS=%d SCENARIO=<name>", seeds)},
			liveResult(d, liverun.StoryStop, "", fmt.Sprintf("a worker frozen with SIGSTOP past its lease (%s), then continued", lease)),
			liveResult(d, liverun.StoryKill, "", "a worker killed with SIGKILL mid-task"),
		}},
		{ID: "budget-cancel", Title: "Budget and cancellation stops are visible to the caller", Results: []reports.Result{
			fixtureResult(pf, "portfolio: the budget task must end failed/budget_exhausted, the cancel task cancelled/cancelled_by_caller with cancelled_by set", "every seed: both ends as expected, and the over-budget charge never applied"),
			liveResult(d, liverun.StoryExpect, "budget", "the portfolio's budget task (cost 4+4+4 with a charge, budget 10), read through the queue"),
			liveResult(d, liverun.StoryCancel, "cancel", "the portfolio's cancel task cancelled by its caller while running, read through the queue"),
			liveResult(d, liverun.StoryOverBudget, "budget", "the service ledger after the run"),
		}},
		{ID: "user-limit", Title: "The per-user concurrency limit holds", Results: []reports.Result{
			fixtureResult(stats["quota"], "quota: users with running limits 1 and 2 and depth caps under three workers", "no claim ever left a user above its running limit"),
			liveResult(d, liverun.StoryUserLimit, "", "two tasks of one user under a running limit of 1, two workers"),
		}},
		{ID: "crash", Title: "A worker crash is survived", Results: []reports.Result{
			fixtureResult(stats["crash-storm"], "crash-storm: frequent crashes and restarts, also right after an external call", "every task completed (or recovered by the operator) with no effect applied twice"),
			liveResult(d, liverun.StoryKill, "", fmt.Sprintf("SIGKILL mid-task, lease %s", lease)),
		}},
		{ID: "duplicate-delivery", Title: "Duplicate delivery changes nothing", Results: []reports.Result{
			fixtureResult(pf, "portfolio with duplicated writes and late redeliveries in the fault mix", "no step charged twice, no receipt twice, no accepted write under an old fence"),
			liveResult(d, liverun.StoryDuplicateDeliver, "", "worker w2 started with "+liverun.DuplicateEnv+"=complete"),
		}},
		{ID: "storage", Title: "Unavailable storage is survived, never a false success", Results: []reports.Result{
			fixtureResult(stats["storage-outage"], "storage-outage: long outages and failed, ambiguous and busy commits", "every submit durable or refused; ambiguous commits recognised on retry; everything completed"),
			liveResult(d, liverun.StoryStorageSubmit, "", "another connection holds an exclusive lock for 2.5 s; a submit meanwhile"),
			liveResult(d, liverun.StoryStorageBackoff, "", "the worker logs during the lock"),
		}},
		{ID: "late-result", Title: "A late result is rejected by claim version", Results: []reports.Result{
			fixtureResult(stats["late-result"], "late-result: the claimant stalled, its lease expired, another worker took over, the stalled one delivered its result",
				fmt.Sprintf("the late result was refused in %d seeds (the rest: the story was interrupted by other faults); never accepted", stats["late-result"].lateRefused)),
			liveResult(d, liverun.StoryStop, "", "SIGSTOP past the lease, SIGCONT after the takeover"),
		}},
		{ID: "restart-paused", Title: "Restart while paused resumes with the recorded version", Results: []reports.Result{
			fixtureResult(pf, "portfolio: a worker restarted while the approval task waits; an approval naming an outdated version refused, then the recorded one", "every seed: completed, approved_by manager"),
			liveResult(d, liverun.StoryApproval, "approval", "SIGTERM and restart of a worker while the task waits at its gate; an approval naming the recorded version"),
		}},
		{ID: "replay", Title: "An exact replay returns the original task; a changed payload is refused", Results: []reports.Result{
			fixtureResult(pf, "portfolio: the duplicate task submitted, replayed exactly, then with a changed payload under the same key", "every seed: same ID with replay=true, then an idempotency conflict"),
			liveResult(d, liverun.StoryReplay, "duplicate", "the same request submitted twice through the queue"),
			liveResult(d, liverun.StoryConflict, "duplicate", "the same key submitted with a changed payload"),
		}},
	}
	recovery := recoveryCheck(pf, runbook)
	checks = append(checks, recovery)
	return checks
}

// singleClaimObserved is what the sweeps of every scenario observed of the
// single-claim history, and how many of their seeds failed.
func singleClaimObserved(stats map[string]Sweep) (string, int) {
	total, events, stale := 0, 0, int64(0)
	for _, st := range stats {
		total += st.sweep.Seeds
		events += st.events
		stale += st.staleWrites
	}
	names := make([]string, 0, len(stats))
	for name := range stats {
		names = append(names, name)
	}
	sort.Strings(names)
	failedSeeds, firstFailure := 0, ""
	for _, name := range names {
		st := stats[name]
		failedSeeds += st.sweep.Failed
		if firstFailure == "" && len(st.failures) > 0 {
			firstFailure = name + " " + st.failures[0]
		}
	}
	singleClaim := fmt.Sprintf("%d seeds, %d events, the single-claim history checked after each: no write accepted under an older fence, none after its lease, none from another owner; %d stale writes refused", total, events, stale)
	if failedSeeds > 0 {
		singleClaim = fmt.Sprintf("%d of %d seeds failed; first: %s", failedSeeds, total, firstFailure)
	}
	return singleClaim, failedSeeds
}

// recoveryCheck is the runbook procedures' check: each procedure's test
// verdict, then the portfolio's liveness phase, where the operator
// recovers what the run parked.
func recoveryCheck(pf Sweep, runbook map[string]bool) reports.Check {
	recovery := reports.Check{ID: "recovery", Title: "Pending, failed and uncertain-effect tasks recover as the runbook describes"}
	for _, t := range []struct{ test, what string }{
		{"TestRunbookPendingTooLong", "a task pending behind its user's limit: the runbook's commands raise the limit and it is claimed"},
		{"TestRunbookFailedTask", "a failed task: the runbook's commands show the reason and resubmit under a new key"},
		{"TestRunbookUncertainEffect", "an uncertain effect: settled as applied (never called again), as not applied (made once), or resolved"},
		{"TestRunbookDeadLetter", "a dead-lettered task: requeued with a zero grant, or resolved"},
		{"TestRunbookStuckRunningTask", "a stuck running task: reaped (attempt charged) or cancelled"},
	} {
		pass, ran := runbook[t.test]
		observed := "passed: every command in RUNBOOK.md for it ran and the task ended as the runbook says"
		if !ran {
			observed = "not run (pass --runbook with go test -json output)"
		} else if !pass {
			observed = "failed"
		}
		recovery.Results = append(recovery.Results, reports.Result{Kind: reports.Fixture, Inputs: t.what + " (scripted database, commands parsed from docs/RUNBOOK.md)",
			Observed: observed, Pass: pass, Command: "go test -run " + t.test + " ./cmd/leasehold/internal/cli"})
	}
	recovery.Results = append(recovery.Results, fixtureResult(pf, "portfolio liveness phase: the operator settles uncertain effects by what the provider reports and requeues dead letters with a zero grant",
		fmt.Sprintf("every seed settled with each effect applied at most once (%d reviews recovered across the sweep)", pf.reviews)))
	return recovery
}
