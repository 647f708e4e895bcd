package wire

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// TestFoldKindsKeepsTheSum: the kinds named keep their counts (zeros
// included), every other kind's and the unknown kind's are summed under
// other, a kind named other is not a kind of its own, and the sum over
// the result is the sum over what was folded.
func TestFoldKindsKeepsTheSum(t *testing.T) {
	byKind := map[string]model.Counts{
		"report":          {Submitted: 3, Completions: 2},
		"stray":           {Submitted: 1, Failures: 1},
		model.KindUnknown: {StaleWrites: 4},
		KindOther:         {Submitted: 2},
	}
	got := FoldKinds(byKind, []string{"report", "synthetic", KindOther, "report"})
	require.Equal(t, map[string]model.Counts{
		"report":    {Submitted: 3, Completions: 2},
		"synthetic": {},
		KindOther:   {Submitted: 3, Failures: 1, StaleWrites: 4},
	}, got)
	var before, after model.Counts
	for _, c := range byKind {
		before.Add(c)
	}
	for _, c := range got {
		after.Add(c)
	}
	require.Equal(t, before, after)
	require.Equal(t, map[string]model.Counts{KindOther: {}}, FoldKinds(nil, nil), "other is always there")
}

// TestMetricsOfCarriesTheTotalsAndEveryState: the record's counters are
// the snapshot's totals, its depth names every state (zeros included),
// and an empty histogram still has a count per bucket.
func TestMetricsOfCarriesTheTotalsAndEveryState(t *testing.T) {
	m := model.Metrics{Depth: map[model.State]int64{model.Queued: 2}, Submitted: 2, Completions: 1,
		ByKind: map[string]model.Counts{"report": {Submitted: 2, Completions: 1}}}
	r := MetricsOf(m, []string{"report"})
	require.Equal(t, int64(2), r.Submitted)
	require.Equal(t, int64(1), r.Completions)
	require.Len(t, r.Depth, len(model.States()))
	require.Equal(t, int64(2), r.Depth[string(model.Queued)])
	require.Equal(t, map[string]Counts{"report": {Submitted: 2, Completions: 1}, KindOther: {}}, r.ByKind)
	require.Len(t, r.QueueWait.Counts, len(model.HistogramBounds)+1)
}
