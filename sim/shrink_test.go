//go:build leasehold_broken

package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/scenarios"
)

// TestShrinkKeepsTheBreak shrinks a broken variant's failing seed and
// checks that the shrunk schedule is much shorter, breaks the same
// invariant, and replays to the same failure by its event indices.
func TestShrinkKeepsTheBreak(t *testing.T) {
	t.Setenv("LEASEHOLD_BROKEN", "step-cas-skipped")
	cfg := Config{Scenario: scenarios.Portfolio(), Seed: 1}
	failed := Run(cfg)
	require.False(t, failed.Pass)
	require.Equal(t, InvOracleEvents, failed.Broken(), "a disagreement with the reference shrinks like any violation")
	s := Shrink(cfg, failed, nil)
	t.Logf("shrunk %d events to %d: %s", len(failed.Schedule), len(s.Keep), s.Result.Summary())
	require.Less(t, len(s.Keep), len(failed.Schedule)/4)
	require.Equal(t, failed.Broken(), s.Result.Broken())
	replay := Run(Config{Scenario: cfg.Scenario, Seed: cfg.Seed, Keep: s.Keep})
	require.Equal(t, failed.Broken(), replay.Broken())
	require.Equal(t, s.Result.Fingerprint, replay.Fingerprint)
	for _, k := range s.Keep {
		require.Less(t, k, len(failed.Schedule))
	}
}
