package broken

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNames: every variant has a distinct name that parses back to it.
func TestNames(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range All() {
		name := v.String()
		require.NotEmpty(t, name, "variant %d has no name", int(v))
		require.False(t, seen[name], "name %s used twice", name)
		seen[name] = true
		parsed, err := Parse(name)
		require.NoError(t, err)
		require.Equal(t, v, parsed)
	}
	require.Len(t, seen, 35)
	_, err := Parse("no-such-variant")
	require.ErrorContains(t, err, `no variant named "no-such-variant"`)
	require.Equal(t, "Variant(0)", Variant(0).String())
}

// TestSwitchedOn reads the comma-separated list, spaces allowed.
func TestSwitchedOn(t *testing.T) {
	t.Setenv("LEASEHOLD_BROKEN", "no-user-limit, step-cas-skipped")
	require.True(t, switchedOn(NoUserLimit))
	require.True(t, switchedOn(StepCASSkipped))
	require.False(t, switchedOn(NoBudgetCheck))
	require.Equal(t, Built, On(NoUserLimit), "On follows the list only in the broken build")
	require.Equal(t, Built, Pick(StepCASSkipped, false, true))
	require.Equal(t, 3, Pick(NoBudgetCheck, 3, 4), "a variant not listed keeps its safe value")
}
