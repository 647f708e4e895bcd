package httpapi

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// TestOutcomeCountersByKind: the outcome counters are labelled by the
// kind of their task. A completion of a report task raises
// leasehold_completions_total{kind="report"}; one of a kind the server
// does not name raises the other series and never names its kind; the
// series of each named kind and other are there from the start, and a
// sum over kind is the queue's total.
func TestOutcomeCountersByKind(t *testing.T) {
	a := setupAPIWith(t, func(o *Options) { o.Kinds = []string{"report", model.KindSynthetic} },
		func(o *queue.Options) { o.Validators = nil })
	scrape := func(want map[string]float64) {
		t.Helper()
		status, _, b := a.do(t, http.MethodGet, "/metrics", "", "")
		require.Equal(t, http.StatusOK, status, "%s", b)
		body := string(b)
		for series, value := range want {
			require.InDelta(t, value, metricValue(t, body, series), 1e-9, series)
		}
		require.NotContains(t, body, "stray")
	}
	scrape(map[string]float64{
		`leasehold_completions_total{kind="report"}`:    0,
		`leasehold_completions_total{kind="synthetic"}`: 0,
		`leasehold_completions_total{kind="other"}`:     0,
	})

	ctx := context.Background()
	report := a.submit(t, "carol", "r1", func(b map[string]any) { b["kind"] = "report" })
	require.NoError(t, a.q.Complete(ctx, a.claim(t, report)))
	scrape(map[string]float64{
		`leasehold_submitted_total{kind="report"}`:      1,
		`leasehold_completions_total{kind="report"}`:    1,
		`leasehold_completions_total{kind="synthetic"}`: 0,
		`leasehold_completions_total{kind="other"}`:     0,
	})

	stray := a.submit(t, "carol", "s1", func(b map[string]any) { b["kind"] = "stray-1" })
	require.NoError(t, a.q.Complete(ctx, a.claim(t, stray)))
	a.submit(t, "carol", "s2", func(b map[string]any) { b["kind"] = "stray-2" })
	scrape(map[string]float64{
		`leasehold_submitted_total{kind="report"}`:      1,
		`leasehold_submitted_total{kind="synthetic"}`:   0,
		`leasehold_submitted_total{kind="other"}`:       2,
		`leasehold_completions_total{kind="report"}`:    1,
		`leasehold_completions_total{kind="synthetic"}`: 0,
		`leasehold_completions_total{kind="other"}`:     1,
	})
	m, err := a.q.Metrics(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), m.Completions)
	require.Equal(t, int64(3), m.Submitted)
	require.True(t, m.Reconciles())
}
