package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/faults"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/scenarios"
)

// A group event commits its actors' writes as one group under the oracle,
// whatever its COMMIT does: applied, failed (not applied), or applied but
// reported failed (unknown), and after a statement error (rolled back).
func TestGroupEventUnderTheOracle(t *testing.T) {
	for _, fault := range []faults.StorageFault{"", faults.FailCommit, faults.AmbiguousCommit, faults.FailStatement} {
		t.Run("fault="+string(fault), func(t *testing.T) {
			w := oracleWorld(t)
			e := Event{Kind: EvGroup, Name: "s+s+b+s", Fault: fault}
			require.Equal(t, e, mustParse(t, e.String()))
			before := w.q.GroupSizes()
			out := w.applyCovered(e)
			require.Nil(t, w.checker.check(), out)
			after := w.q.GroupSizes()
			grew := 0
			for k := 2; k < len(after); k++ {
				grew += int(after[k] - before[k])
			}
			require.Positive(t, grew, "a group of several: %s", out)
			tasks, err := w.q.ref.List(w.ctx, model.ListFilter{User: batchUser, Limit: model.ListLimitMax})
			require.NoError(t, err)
			if fault == "" {
				require.NotEmpty(t, tasks, out)
			}
		})
	}
}

// A group event's trace is the same on every run of the seed: its
// members and their order come from the schedule and the world's stream.
func TestGroupEventsRepeat(t *testing.T) {
	var prints []string
	for range 2 {
		r := Run(Config{Scenario: scenarios.Portfolio(), Seed: 3})
		require.True(t, r.Pass, r.Summary())
		prints = append(prints, r.Fingerprint)
	}
	require.Equal(t, prints[0], prints[1])
}

func mustParse(t *testing.T, s string) Event {
	t.Helper()
	e, err := ParseEvent(s)
	require.NoError(t, err)
	return e
}
