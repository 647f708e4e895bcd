//go:build leasehold_broken

package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/scenarios"
)

// brokenSeedsMax is how many seeds each broken variant may take to catch.
const brokenSeedsMax = 200

// brokenVariants names each variant compiled in under the leasehold_broken
// build tag (queue/broken_on.go, worker/broken_on.go) and the scenario that
// targets it. The harness does not know which variant runs: it checks the
// same invariants and expectations as always.
var brokenVariants = []struct{ variant, scenario string }{
	{"complete-without-fence", "late-result"},
	{"write-after-lease-expiry", "portfolio"},
	{"no-user-limit", "portfolio"},
	{"no-budget-check", "portfolio"},
	{"step-cas-skipped", "portfolio"},
	{"worker-ignores-receipts", "crash-storm"},
	{"reaper-not-charging", "portfolio"},
	{"approval-not-bound", "portfolio"},
}

// TestBrokenVariantsCaught switches on each broken variant and sweeps its
// scenario until a seed fails, asserting that one does within 200 seeds.
func TestBrokenVariantsCaught(t *testing.T) {
	for _, v := range brokenVariants {
		t.Run(v.variant, func(t *testing.T) {
			t.Setenv("LEASEHOLD_BROKEN", v.variant)
			sc, err := scenarios.Get(v.scenario)
			require.NoError(t, err)
			for seed := uint64(1); seed <= brokenSeedsMax; seed++ {
				r := Run(Config{Scenario: sc, Seed: seed})
				if !r.Pass {
					t.Logf("variant %s caught by %s seed %d (%d seeds): %s", v.variant, v.scenario, seed, seed, r.Summary())
					return
				}
			}
			t.Fatalf("variant %s not caught within %d seeds of %s", v.variant, brokenSeedsMax, v.scenario)
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
