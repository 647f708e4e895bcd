//go:build leasehold_broken

package sim

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/scenarios"
)

// pgBrokenVariants are the variants whose mechanism is (also) in the
// PostgreSQL store's SQL, each with the scenario that targets it: the ones
// the placeholders of queue/internal/postgres/sql switch on.
var pgBrokenVariants = []struct{ variant, scenario string }{
	{"no-user-limit", "portfolio"},
	{"claim-past-deadline", "deadline"},
	{"claim-exclusive-run-at", "portfolio"},
	{"write-after-lease-expiry", "portfolio"},
	{"write-at-lease-until", "boundaries"},
	{"pause-charges-attempt", "portfolio"},
	{"receipt-not-stored", "portfolio"},
}

// TestPostgresBrokenVariantsCaught switches on each variant of the
// PostgreSQL store's SQL and runs its scenario on PostgreSQL, every check
// on: a seed among the first brokenCheckSeedsMax must fail, and the first
// to fail must be the first to fail on SQLite, broken the same way (the
// stores run the same schedule to the same trace). Each variant has a
// store of its own: a schema installs the broken function bodies of the
// variants switched on when it is migrated.
func TestPostgresBrokenVariantsCaught(t *testing.T) {
	for _, v := range pgBrokenVariants {
		t.Run(v.variant, func(t *testing.T) {
			t.Setenv("LEASEHOLD_BROKEN", v.variant)
			st := postgresStore(t)
			sc, err := scenarios.Get(v.scenario)
			require.NoError(t, err)
			pg, caught := firstFailure(sc, st, brokenCheckSeedsMax)
			require.True(t, caught, "variant %s not caught on postgres within %d seeds of %s", v.variant, brokenCheckSeedsMax, v.scenario)
			lite, caught := firstFailure(sc, Store{}, brokenCheckSeedsMax)
			require.True(t, caught, "variant %s not caught on sqlite within %d seeds of %s", v.variant, brokenCheckSeedsMax, v.scenario)
			require.Equal(t, lite.Seed, pg.Seed, "postgres: %s; sqlite: %s", pg.Summary(), lite.Summary())
			require.Equal(t, lite.Broken(), pg.Broken(), "postgres: %s; sqlite: %s", pg.Summary(), lite.Summary())
			t.Logf("variant %s caught on postgres at %s seed %d by %s: %s", v.variant, v.scenario, pg.Seed, pg.Broken(), pg.Summary())
		})
	}
}

// firstFailure runs seeds 1 to seeds of sc on st, pgSweepParallel at a
// time, and returns the first (lowest) seed's failing run.
func firstFailure(sc scenarios.Scenario, st Store, seeds uint64) (Result, bool) {
	for from := uint64(1); from <= seeds; from += pgSweepParallel {
		results := make([]Result, min(pgSweepParallel, seeds-from+1))
		var wg sync.WaitGroup
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = Run(Config{Scenario: sc, Seed: from + uint64(i), Store: st})
			}()
		}
		wg.Wait()
		for _, r := range results {
			if !r.Pass {
				return r, true
			}
		}
	}
	return Result{}, false
}
