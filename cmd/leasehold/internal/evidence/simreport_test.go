package evidence

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/sim"
)

// A sim report is built from its seeds' records alone: it draws the
// timeline the first seed's record carries, or the first failed seed's
// when one failed, and refuses records that carry none rather than run a
// seed again.
func TestSimReportDrawsTheRecordedTimeline(t *testing.T) {
	sc := scenarios.LateResult()
	var recs []SeedRecord
	for seed := uint64(1); seed <= 3; seed++ {
		recs = append(recs, SeedRecordOf(sim.Run(sim.Config{Scenario: sc, Seed: seed, Timeline: true})))
	}
	for _, rec := range recs {
		require.True(t, rec.Pass, "seed %d", rec.Seed)
		require.NotNil(t, rec.Timeline)
		require.NotEmpty(t, rec.Timeline.Entries)
	}
	facts := Facts{Generated: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
	drawn := func(rec SeedRecord, verdict string) reports.Timeline {
		return SimTimeline(fmt.Sprintf("%s seed %d (%s)", sc.Name, rec.Seed, verdict), rec.Timeline.Entries, rec.Timeline.Workers)
	}

	r, err := SimReport(sc, 1, 3, nil, recs, facts)
	require.NoError(t, err)
	require.True(t, r.Pass)
	require.Len(t, r.Fixture.Timelines, 1)
	got := r.Fixture.Timelines[0]
	want := drawn(recs[0], "passed")
	require.Equal(t, want.Title, got.Title)
	require.Equal(t, want.Bars, got.Bars)
	require.Contains(t, got.Caption, recs[0].Fingerprint)
	require.Contains(t, got.Caption, recs[0].Faults)

	// Seed 3's record says it failed: the report draws its timeline.
	failed := append([]SeedRecord(nil), recs...)
	failed[2].Pass, failed[2].Summary = false, "invariant broken (as recorded)"
	r, err = SimReport(sc, 1, 3, nil, failed, facts)
	require.NoError(t, err)
	require.False(t, r.Pass)
	got = r.Fixture.Timelines[0]
	want = drawn(failed[2], "failed: invariant broken (as recorded)")
	require.Equal(t, want.Title, got.Title)
	require.Equal(t, want.Bars, got.Bars)
	require.Contains(t, got.Caption, failed[2].Fingerprint)

	// The drawn seed's record carries no timeline: an error, not a rerun.
	failed[2].Timeline = nil
	_, err = SimReport(sc, 1, 3, nil, failed, facts)
	require.EqualError(t, err, "seed 3's record carries no timeline: the run did not record it")
	_, err = SimReport(sc, 1, 3, nil, nil, facts)
	require.Error(t, err)
}
