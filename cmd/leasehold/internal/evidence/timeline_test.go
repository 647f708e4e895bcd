package evidence

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/liverun"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/sim"
)

// The one builder draws a simulated run: a claim is a bar until its end,
// a crash ends its worker's claims, a storage outage is shaded for its
// recorded length, and a claim still open ends at the last moment.
func TestSimTimeline(t *testing.T) {
	tl := SimTimeline("run", []sim.TimelineEntry{
		{AtMs: 0, Worker: "w0", Kind: "claim", TaskID: "t_aaaaaaaaaa", Attempt: 1, Fence: 1},
		{AtMs: 5, Worker: "w1", Kind: "claim", TaskID: "t_bbbbbbbbbb", Attempt: 1, Fence: 1},
		{AtMs: 10, Kind: sim.TimelineFault, Event: sim.EvStorageDown, DurationMs: 40, Detail: "storage_down 40ms"},
		{AtMs: 20, Worker: "w0", Kind: sim.TimelineFault, Event: sim.EvCrash, Detail: "crash w0"},
		{AtMs: 30, Worker: "w1", Kind: "complete", TaskID: "t_bbbbbbbbbb", Attempt: 1, Fence: 1},
		{AtMs: 35, Worker: "w1", Kind: "claim", TaskID: "t_aaaaaaaaaa", Attempt: 2, Fence: 3},
	}, 2)
	require.Equal(t, []string{"w0", "w1"}, tl.Lanes)
	require.Equal(t, []reports.Shade{{Start: 10, End: 50, Label: "storage down"}}, tl.Shades, "the outage's length comes from the entry, not its detail")
	require.Len(t, tl.Bars, 3)
	require.Equal(t, [3]int64{0, 20, 1}, [3]int64{tl.Bars[0].Start, tl.Bars[0].End, tl.Bars[0].Fence})
	require.Contains(t, tl.Bars[0].Detail, "ended: worker crashed")
	require.Equal(t, [2]int64{5, 30}, [2]int64{tl.Bars[1].Start, tl.Bars[1].End})
	require.Equal(t, [2]int64{35, 50}, [2]int64{tl.Bars[2].Start, tl.Bars[2].End}, "still held: ends at the outage's end, the last moment")
	require.Contains(t, tl.Bars[2].Detail, "still held at the end")
	require.Equal(t, int64(60), tl.End)
	var faults []string
	for _, m := range tl.Marks {
		if m.Kind == reports.MarkFault {
			faults = append(faults, m.Label)
		}
	}
	require.Equal(t, []string{"storage_down", "crash"}, faults)
}

// The same builder draws the live run from audit events: a claim's bar
// ends at the event leaving running, on the claimant's lane.
func TestLiveTimeline(t *testing.T) {
	start := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	ev := func(seq int64, ms int, kind model.EventKind, from, to model.State, actor string) model.Event {
		return model.Event{Seq: seq, TaskID: "t_cccccccccc", Kind: kind, Attempt: 1, Fence: 1, From: from, To: to, Actor: actor,
			At: start.Add(time.Duration(ms) * time.Millisecond)}
	}
	d := liverun.Result{Started: start, DurationMs: 500, Events: []model.Event{
		ev(2, 300, model.EventLeaseExpired, model.Running, model.Queued, "reaper"),
		ev(1, 100, model.EventClaimed, model.Queued, model.Running, "w2"),
	}}
	tl := LiveTimeline(d)
	require.Len(t, tl.Bars, 1)
	require.Equal(t, "w2", tl.Bars[0].Lane)
	require.Equal(t, [2]int64{100, 300}, [2]int64{tl.Bars[0].Start, tl.Bars[0].End})
	require.Len(t, tl.Marks, 1)
	require.Equal(t, reports.MarkExpiry, tl.Marks[0].Kind)
	require.Equal(t, "w2", tl.Marks[0].Lane, "the expiry is drawn on the claimant's lane, not the reaper's")
	require.Equal(t, int64(700), tl.End)
}

func TestRunbookResults(t *testing.T) {
	got := RunbookResults([]byte(`{"Action":"run","Test":"TestRunbookA"}
{"Action":"pass","Test":"TestRunbookA"}
{"Action":"fail","Test":"TestRunbookB"}
{"Action":"pass","Test":"TestRunbookB/sub"}
{"Action":"pass","Test":"TestOther"}
not json
`))
	require.Equal(t, map[string]bool{"TestRunbookA": true, "TestRunbookB": false}, got)
}
