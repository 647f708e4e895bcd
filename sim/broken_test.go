//go:build leasehold_broken

package sim

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/internal/broken"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/scenarios"
)

// brokenSeedsMax is how many seeds each broken variant may take to catch
// with every check on; brokenCheckSeedsMax, with only its own check on.
const (
	brokenSeedsMax      = 200
	brokenCheckSeedsMax = 20
)

// brokenVariants names each variant of internal/broken (compiled in under
// the leasehold_broken build tag), the scenario that
// targets it, and, for the variants that show a check of the lockstep
// oracle or a stated invariant, the check that catches it alone. The
// harness does not know which variant runs: it checks the same invariants
// and expectations as always.
var brokenVariants = []struct{ variant, scenario, check string }{
	{"complete-without-fence", "late-result", ""},
	{"write-after-lease-expiry", "portfolio", ""},
	{"no-user-limit", "portfolio", ""},
	{"no-budget-check", "portfolio", ""},
	{"step-cas-skipped", "portfolio", ""},
	{"worker-ignores-receipts", "crash-storm", ""},
	{"reaper-not-charging", "portfolio", ""},
	{"approval-not-bound", "portfolio", ""},
	{"reaper-requeues-cancelled", "portfolio", ""},
	{"changed-request-replayed", "portfolio", InvOracleOutcome},
	{"heartbeat-hides-cancel", "portfolio", InvOracleReturns},
	{"event-wrong-reason", "portfolio", InvOracleEvents},
	{"retry-without-backoff", "portfolio", InvOracleRows},
	{"receipt-not-stored", "portfolio", InvOracleEffects},
	{"claim-past-deadline", "deadline", InvClaimEligible},
	{"claim-exclusive-run-at", "portfolio", InvClaimExhaustive},
	{"worker-ignores-cancel", "portfolio", InvCancelObserved},
	{"depth-cap-off-by-one", "quota", InvLimitsInForce},
	{"pause-charges-attempt", "portfolio", InvNoCharge},
	{"release-charges-attempt", "portfolio", InvNoCharge},
	{"requeue-grant-unbounded", "portfolio", InvOracleOutcome},
	{"write-at-lease-until", "boundaries", InvOracleOutcome},
	{"release-recorded-as-retry", "portfolio", CheckCoverage},
	// Runs longer than the lease lose their claims: the tasks that should
	// complete end failed after the operator's recoveries (seed 1).
	{"no-heartbeat-during-run", "long-running", ""},
	// The paths the simulator's batch caller, follower, careless client
	// and refilling workers take (first caught: portfolio seed 1;
	// portfolio seed 81, the careless client's step past the limit, which
	// the queue took where the reference refuses it; portfolio seed 6;
	// portfolio seed 10, the careless client's complete-and-claim after
	// its lease ran out).
	{"batch-changed-replayed", "portfolio", InvOracleOutcome},
	{"step-limit-off-by-one", "portfolio", ""},
	{"follower-skips-mark", "portfolio", InvFollower},
	{"complete-claim-when-stale", "portfolio", ""},
	// A claim that names its kinds takes the first tasks of any kind
	// (long-running seed 1: a worker takes the other worker's kind).
	{"claim-ignores-kinds", "long-running", InvClaimKinds},
	// A submit after a prune answered as if the key were unused: the
	// queue accepts what the reference answers from the tombstone (first
	// caught: portfolio seed 32, a scripted changed request after the
	// task was pruned, accepted where the reference refuses a conflict).
	{"replay-ignores-tombstone", "portfolio", ""},
	// Group commits (world_groups.go).
	{"group-refusal-loses-record", "portfolio", ""},
	{"group-unknown-mixed", "portfolio", ""},
	// A stale completion batched beside a live one (a chasing group's late
	// completion; first caught: portfolio seed 1, the careless client's
	// completion under a claim it gave up, completed by the batch where
	// the reference refuses it).
	{"batched-completion-unfenced", "portfolio", ""},
}

// TestBrokenVariantsListed: every variant of internal/broken is swept
// here, or, for one of the PostgreSQL store alone, by
// TestPostgresBrokenVariantsCaught.
func TestBrokenVariantsListed(t *testing.T) {
	listed := pgOnlyVariants()
	for _, v := range brokenVariants {
		listed = append(listed, v.variant)
	}
	var all []string
	for _, v := range broken.All() {
		all = append(all, v.String())
	}
	require.ElementsMatch(t, all, listed)
}

// catch sweeps seeds 1 to seeds of the scenario and returns the first
// failing run. When no seed fails, a sweep long enough for the coverage
// rule, with the rule switched on, is caught by a declared cell no seed
// reached: the result then names CheckCoverage as its violation.
func catch(t *testing.T, scenario string, seeds uint64, only []string) (Result, bool) {
	t.Helper()
	sc, err := scenarios.Get(scenario)
	require.NoError(t, err)
	var cov Coverage
	for seed := uint64(1); seed <= seeds; seed++ {
		r := Run(Config{Scenario: sc, Seed: seed, Only: only})
		if !r.Pass {
			return r, true
		}
		cov.Add(r.Coverage)
	}
	if missing := cov.MissingSummary(sc); missing != "" && (only == nil || slices.Contains(only, CheckCoverage)) {
		return Result{Scenario: scenario, Seed: seeds, Violation: &model.Violation{Invariant: CheckCoverage, Detail: missing}}, true
	}
	return Result{}, false
}

// TestBrokenVariantsCaught switches on each broken variant and sweeps its
// scenario until a seed fails, asserting that one does within 200 seeds
// with every check on; and, for a variant that shows a check, that the
// check alone catches it within 20 seeds (the coverage rule, which needs a
// sweep of scenarios.CoverageSeedsMin seeds, within that many).
func TestBrokenVariantsCaught(t *testing.T) {
	for _, v := range brokenVariants {
		t.Run(v.variant, func(t *testing.T) {
			t.Setenv("LEASEHOLD_BROKEN", v.variant)
			r, caught := catch(t, v.scenario, brokenSeedsMax, nil)
			require.True(t, caught, "variant %s not caught within %d seeds of %s", v.variant, brokenSeedsMax, v.scenario)
			t.Logf("variant %s caught by %s seed %d: %s", v.variant, v.scenario, r.Seed, r.Summary())
			if v.check == "" {
				return
			}
			seeds := uint64(brokenCheckSeedsMax)
			if v.check == CheckCoverage {
				seeds = scenarios.CoverageSeedsMin
			}
			r, caught = catch(t, v.scenario, seeds, []string{v.check})
			require.True(t, caught, "variant %s not caught by %s alone within %d seeds of %s", v.variant, v.check, seeds, v.scenario)
			require.NotNil(t, r.Violation, r.Summary())
			require.Equal(t, v.check, r.Violation.Invariant, r.Summary())
			t.Logf("variant %s caught by %s alone at %s seed %d", v.variant, v.check, v.scenario, r.Seed)
		})
	}
}

// TestNoVariantWithoutTheEnvironment checks that the tagged build with no
// variant switched on passes like the real one.
func TestNoVariantWithoutTheEnvironment(t *testing.T) {
	t.Setenv("LEASEHOLD_BROKEN", "")
	for seed := uint64(1); seed <= 20; seed++ {
		r := Run(Config{Scenario: scenarios.Portfolio(), Seed: seed})
		require.True(t, r.Pass, "seed %d: %s", seed, r.Summary())
	}
}
