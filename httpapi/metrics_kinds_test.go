package httpapi

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/client"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/wire"
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

	stray := a.submit(t, "carol", "s1", func(b map[string]any) { b["kind"] = "stray-1"; urgent(b) })
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

// TestMetricsJSONByKind: GET /v1/metrics, read through the client, holds
// the outcome counters over every kind and by kind as /metrics folds
// them: report and synthetic by name (zeros included), every other kind
// under other, never named; each total is the sum over by_kind. Without
// a token it is refused.
func TestMetricsJSONByKind(t *testing.T) {
	a := setupAPIWith(t, func(o *Options) { o.Kinds = []string{"report", model.KindSynthetic, wire.KindOther} },
		func(o *queue.Options) { o.Validators = nil })
	ctx := t.Context()
	c := a.clientFor(t, secretSubmit)
	m, err := c.Metrics(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]client.Counts{"report": {}, model.KindSynthetic: {}, client.KindOther: {}}, m.ByKind,
		"every kind named, and other, from the start")

	report := a.submit(t, "carol", "r1", func(b map[string]any) { b["kind"] = "report" })
	require.NoError(t, a.q.Complete(ctx, a.claim(t, report)))
	a.submit(t, "carol", "r2", func(b map[string]any) { b["kind"] = "report" })
	stray := a.submit(t, "carol", "s1", func(b map[string]any) { b["kind"] = "stray-1"; urgent(b) })
	_, err = a.q.Fail(ctx, a.claim(t, stray), model.Failure{Class: model.Permanent, Message: "no"})
	require.NoError(t, err)
	a.submit(t, "carol", "y1", nil)

	m, err = c.Metrics(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]client.Counts{
		"report":            {Submitted: 2, Completions: 1},
		model.KindSynthetic: {Submitted: 1},
		client.KindOther:    {Submitted: 1, Failures: 1},
	}, m.ByKind)
	require.Equal(t, int64(4), m.Submitted)
	require.Equal(t, int64(1), m.Completions)
	require.Equal(t, int64(1), m.Failures)
	require.Equal(t, map[string]int64{"queued": 2, "running": 0, "waiting_for_approval": 0, "needs_review": 0,
		"completed": 1, "failed": 1, "cancelled": 0}, m.Depth)
	require.Equal(t, int64(2), m.QueueWait.Count, "two claims")
	require.Len(t, m.QueueWait.Counts, len(model.HistogramBounds)+1)

	status, _, body := a.do(t, http.MethodGet, "/v1/metrics", secretOperate, "")
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.NotContains(t, string(body), "stray", "a kind the server does not name is never named")
	a.refused(t, http.MethodGet, "/v1/metrics", "", "", http.StatusUnauthorized, "")
}
