//go:build leasehold_broken

package sim

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/scenarios"
)

// pgBrokenVariants are the variants whose mechanism is (also) in the
// PostgreSQL store, each with the scenario that targets it: the ones the
// placeholders of queue/internal/postgres/sql switch on (the fused
// statements' among them: submit_one's depth cap and key check,
// complete_and_claim's fence), and the store's reading of a fused
// statement's lost connection. pgOnly marks a variant SQLite has no
// mechanism for (TestBrokenVariantsListed leaves it to this list).
var pgBrokenVariants = []struct {
	variant, scenario string
	pgOnly            bool
}{
	{variant: "no-user-limit", scenario: "portfolio"},
	{variant: "claim-past-deadline", scenario: "deadline"},
	{variant: "claim-exclusive-run-at", scenario: "portfolio"},
	{variant: "write-after-lease-expiry", scenario: "portfolio"},
	{variant: "write-at-lease-until", scenario: "boundaries"},
	{variant: "pause-charges-attempt", scenario: "portfolio"},
	{variant: "receipt-not-stored", scenario: "portfolio"},
	// The lone submit, submit_one: its per-user depth cap and its check of
	// a used key's request.
	{variant: "depth-cap-off-by-one", scenario: "quota"},
	{variant: "changed-request-replayed", scenario: "portfolio"},
	// A fused statement's lost connection read as "not applied": caught
	// when an ambiguous commit lands on submit_one (the oracle finds the
	// task a "not applied" submit wrote).
	{variant: "fused-lost-reads-not-applied", scenario: "portfolio", pgOnly: true},
	// complete_and_claim runs for a group of two or more completions: a
	// chasing group's late completion beside a live one (first caught:
	// portfolio seed 2, the careless client's completion under a claim the
	// task had moved past, completed where the reference refuses it).
	{variant: "fused-completion-unfenced", scenario: "portfolio", pgOnly: true},
}

// pgOnlyVariants names the variants SQLite has no mechanism for.
func pgOnlyVariants() []string {
	var out []string
	for _, v := range pgBrokenVariants {
		if v.pgOnly {
			out = append(out, v.variant)
		}
	}
	return out
}

// TestPostgresBrokenVariantsCaught switches on each variant of the
// PostgreSQL store and runs its scenario on PostgreSQL, every check on: a
// seed among the first brokenSeedsMax must fail. A variant SQLite shares
// must be caught there too; the two stores' first failing seeds are
// logged, not compared: a fault that lands on a fused statement parts the
// stores' runs of a seed (TestPostgresSweeps). Each variant has a store of
// its own: a schema installs the broken function bodies of the variants
// switched on when it is migrated.
func TestPostgresBrokenVariantsCaught(t *testing.T) {
	for _, v := range pgBrokenVariants {
		t.Run(v.variant, func(t *testing.T) {
			t.Setenv("LEASEHOLD_BROKEN", v.variant)
			st := postgresStore(t)
			sc, err := scenarios.Get(v.scenario)
			require.NoError(t, err)
			pg, caught := firstFailure(sc, st, brokenSeedsMax)
			require.True(t, caught, "variant %s not caught on postgres within %d seeds of %s", v.variant, brokenSeedsMax, v.scenario)
			t.Logf("variant %s caught on postgres at %s seed %d by %s: %s", v.variant, v.scenario, pg.Seed, pg.Broken(), pg.Summary())
			if v.pgOnly {
				return
			}
			lite, caught := firstFailure(sc, Store{}, brokenSeedsMax)
			require.True(t, caught, "variant %s not caught on sqlite within %d seeds of %s", v.variant, brokenSeedsMax, v.scenario)
			t.Logf("variant %s caught on sqlite at %s seed %d by %s", v.variant, v.scenario, lite.Seed, lite.Broken())
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
