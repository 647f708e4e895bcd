package evidence

// The evidence report's words must match what happened: a failed sweep is
// reported as failed in every check that rests on it, and the live inputs
// name the lease the demo actually ran with.

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/liverun"
	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/scenarios"
)

// evidenceStats returns sweep statistics for every scenario, each with
// seeds seeds passed, except those in failures (scenario -> its failure
// lines).
func evidenceStats(seeds int, failures map[string][]string) map[string]Sweep {
	stats := map[string]Sweep{}
	for _, name := range scenarios.Names() {
		st := Sweep{sweep: reports.Sweep{Scenario: name, From: 1, Seeds: seeds, Passed: seeds, Command: "make sim SCENARIO=" + name},
			events: 100, staleWrites: 2, failures: failures[name]}
		st.sweep.Failed = len(st.failures)
		st.sweep.Passed -= st.sweep.Failed
		stats[name] = st
	}
	return stats
}

// checkResult returns the index-th result of kind in check id.
func checkResult(t *testing.T, checks []reports.Check, id string, kind reports.Kind, index int) reports.Result {
	t.Helper()
	for _, c := range checks {
		if c.ID != id {
			continue
		}
		var of []reports.Result
		for _, r := range c.Results {
			if r.Kind == kind {
				of = append(of, r)
			}
		}
		require.Greater(t, len(of), index, "check %s has a %s result %d", id, kind, index)
		return of[index]
	}
	t.Fatalf("no check %s", id)
	return reports.Result{}
}

func TestEvidenceChecksSayWhatHappened(t *testing.T) {
	t.Parallel()
	demo := liverun.Result{Kind: liverun.Kind, Settings: map[string]string{"lease": "3s"}, Outcomes: []liverun.Outcome{
		{Story: liverun.StoryStop, Name: "worker stopped with SIGSTOP past its lease, then continued", Observed: "refused", Pass: true},
		{Story: liverun.StoryKill, Name: "worker killed with SIGKILL mid-task", Observed: "taken over", Pass: true},
	}}

	// Every sweep passed: the single-claim result says what was checked.
	checks := buildChecks(evidenceStats(10, nil), 10, demo, nil)
	single := checkResult(t, checks, "single-claim", reports.Fixture, 0)
	require.True(t, single.Pass)
	require.Contains(t, single.Observed, "no write accepted under an older fence")

	// The live inputs name the lease the demo recorded, not a fixed one.
	for _, r := range []reports.Result{checkResult(t, checks, "single-claim", reports.Live, 0), checkResult(t, checks, "crash", reports.Live, 0)} {
		require.Contains(t, r.Inputs, "3s", r.Inputs)
		require.NotContains(t, r.Inputs, "2 s", r.Inputs)
	}

	// A failed sweep: the single-claim result says so and names the first
	// failure, as every other fixture result does; it claims nothing
	// about writes it did not see hold.
	failing := evidenceStats(10, map[string][]string{"crash-storm": {"seed 4: single-claim broken at event 17"}})
	checks = buildChecks(failing, 10, demo, nil)
	single = checkResult(t, checks, "single-claim", reports.Fixture, 0)
	require.False(t, single.Pass)
	require.NotContains(t, single.Observed, "no write accepted")
	require.Contains(t, single.Observed, "1 of ")
	require.Contains(t, single.Observed, "crash-storm seed 4: single-claim broken at event 17")
	crash := checkResult(t, checks, "crash", reports.Fixture, 0)
	require.False(t, crash.Pass)
	require.Contains(t, crash.Observed, "seed 4")
}

// The live section says where its outcomes were observed: not all of them
// come from status and events.
func TestEvidenceLiveSectionNamesItsSources(t *testing.T) {
	t.Parallel()
	r := reports.Report{Live: reports.Section{Kind: reports.Live}}
	FillLive(&r, liverun.Result{Kind: liverun.Kind, Started: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Settings: map[string]string{"lease": "2s"}})
	about := strings.Join(r.Live.About, " ")
	require.NotContains(t, about, "Every outcome was read back through")
	for _, source := range []string{"queue's Go API", "service's ledger", "worker logs"} {
		require.Contains(t, about, source)
	}
}
