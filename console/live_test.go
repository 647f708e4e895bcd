package console

import (
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// waitSample waits for the console's sampling to have taken a sample
// and set its timer for the next.
func waitSample(t *testing.T, c *Console) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a bound, not a synchronisation
	defer cancel()
	select {
	case <-c.history.waiting:
	case <-ctx.Done():
		t.Fatal("the console took no sample")
	}
}

// TestLiveChartsTheLastHour: the server samples the queue's metrics every
// minute on its clock, and the Live page draws the depth of each active
// state and the tasks completed and failed a minute from those samples,
// over the last hour.
func TestLiveChartsTheLastHour(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	waitSample(t, b.console) // at 09:00, an empty queue
	for _, k := range []string{"a", "b", "c", "d"} {
		b.submit(t, "ana", k, `{"steps": [{"cost": 1}]}`)
	}
	b.clock.Advance(time.Minute)
	waitSample(t, b.console) // 09:01: four queued
	claimed, err := b.q.Claim(ctx, model.ClaimRequest{Worker: "w9", Max: 3, Lease: 10 * time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	require.NoError(t, b.q.Complete(ctx, claimed[0].Claim))
	require.NoError(t, b.q.Complete(ctx, claimed[1].Claim))
	_, err = b.q.Fail(ctx, claimed[2].Claim, model.Failure{Class: model.Permanent, Message: "no"})
	require.NoError(t, err)
	b.clock.Advance(time.Minute)
	waitSample(t, b.console) // 09:02: one queued; two completed and one failed since 09:01

	op := b.client(t)
	op.signIn(operatorSecret)
	live := op.get("/ui/live")
	require.Equal(t, http.StatusOK, live.status)
	require.Contains(t, live.body, `<figure class="chart" id="depth-chart">`)
	require.Contains(t, live.body, `<figure class="chart" id="throughput-chart">`)
	require.Contains(t, live.body, `id="history-note">3 samples of the queue's metrics, taken by the server every 1m0s`)
	for _, series := range []string{
		"queued (tasks): 3 samples, min 0, max 4, last 1",
		"running (tasks): 3 samples, min 0, max 0, last 0",
		"waiting_for_approval (tasks): 3 samples",
		"needs_review (tasks): 3 samples",
		"completed (tasks/min): 2 samples, min 0, max 2, last 2",
		"failed or to review (tasks/min): 2 samples, min 0, max 1, last 1",
	} {
		require.Contains(t, live.body, "<title>"+series, series)
	}
	for _, label := range []string{">08:02<", ">09:02 UTC<", ">the last hour, as the server sampled it<"} {
		require.Contains(t, live.body, label)
	}
	// The samples sit at the right edge of the hour: 58, 59 and 60
	// minutes into it.
	queued := regexp.MustCompile(`queued \(tasks\)[^<]*</title>\s*<polyline points="([^"]+)"`).FindStringSubmatch(live.body)
	require.NotNil(t, queued)
	require.Equal(t, "336.1,142 341.1,12 346,109.5", queued[1])
	require.Contains(t, live.body, `<span class="num">1</span><span class="what">queued</span>`, "and the snapshot of now")

	// An hour on, the first samples have left the window.
	for range 60 {
		b.clock.Advance(time.Minute)
		waitSample(t, b.console)
	}
	op.signIn(operatorSecret) // the session expired meanwhile
	require.Contains(t, op.get("/ui/live").body, `id="history-note">61 samples`)
}

// The history keeps at most its bound, the oldest dropped first.
func TestHistoryIsBounded(t *testing.T) {
	h := newHistory(61)
	for i := range 200 {
		h.add(epoch.Add(time.Duration(i)*time.Minute), model.Metrics{Completions: int64(i)})
	}
	all := h.since(time.Time{})
	require.Len(t, all, 61)
	require.Equal(t, epoch.Add(139*time.Minute), all[0].at)
	require.Equal(t, int64(199), all[60].completions)
	require.Len(t, h.since(epoch.Add(190*time.Minute)), 10)
}
