package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/worker"
)

// TestProtocolActorsUnderTheOracle: with the batch caller, the follower
// and the operator's prunes frequent, and the workers claiming with their
// completions, portfolio seeds pass under the oracle, and between them
// they reach the paths those actors exist for: replays and conflicts in a
// batch, a replay answered from a pruned task's tombstone, a follower's
// read stopping at a window mark, and complete-and-claims taking none,
// one and several tasks.
func TestProtocolActorsUnderTheOracle(t *testing.T) {
	sc := scenarios.Portfolio()
	var cov Coverage
	for seed := uint64(1); seed <= 20; seed++ {
		mix := DefaultMix(worker.Queryable)
		mix.Batch, mix.Follow, mix.Prune, mix.Careless, mix.Refill = 40, 30, 30, 30, true
		r := Run(Config{Scenario: sc, Seed: seed, Mix: &mix})
		require.True(t, r.Pass, "seed %d: %s", seed, r.Summary())
		cov.Add(r.Coverage)
	}
	for _, p := range PathNames() {
		require.Positive(t, cov.Cells[scenarios.PathCell(p)], "no seed reached path %s", p)
	}
}
