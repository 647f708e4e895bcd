package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/evidence"
	"github.com/leasehold/leasehold/scenarios"
)

// summaries reads the summary records of sim --json output.
func summaries(t *testing.T, out string) []evidence.SummaryRecord {
	t.Helper()
	var sums []evidence.SummaryRecord
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var s evidence.SummaryRecord
		require.NoError(t, json.Unmarshal([]byte(line), &s), line)
		if s.Record == evidence.RecordSummary {
			sums = append(sums, s)
		}
	}
	return sums
}

// A sweep split across child processes merges its children's JSON
// records: every seed once, in order, and a coverage map that counts each
// seed's cells; the same seeds run in this process give the same records.
func TestSweepProcessesMergeTheirRecords(t *testing.T) {
	t.Setenv(asBinary, "1") // the sweep's children are this binary, run as leasehold (chaos_test.go)
	split := lh(t, "sim", "--scenario", "late-result", "--seed", "5", "--seeds", "6", "--parallel", "2", "--json")
	requireOK(t, split)
	here := lh(t, "sim", "--scenario", "late-result", "--seed", "5", "--seeds", "6", "--parallel", "1", "--json")
	requireOK(t, here)
	recs, err := readSeedRecords([]byte(split.stdout))
	require.NoError(t, err)
	same, err := readSeedRecords([]byte(here.stdout))
	require.NoError(t, err)
	require.Equal(t, same, recs, "the children's records are the seeds' own")
	sum := summaries(t, split.stdout)
	require.Len(t, sum, 1)
	require.Equal(t, 6, sum[0].Coverage.Seeds)
	require.Equal(t, summaries(t, here.stdout)[0].Coverage, sum[0].Coverage)
	var claimed int
	for cell, n := range sum[0].Coverage.Cells {
		if cell == scenarios.TransitionCell("queued", "claimed", "running") {
			claimed = n
		}
	}
	require.Equal(t, 6, claimed, "every seed claims")
}

// --scenario all runs every scenario in turn, each with its summary;
// --coverage prints each scenario's table.
func TestSimAllScenarios(t *testing.T) {
	r := lh(t, "sim", "--scenario", "all", "--seed", "2", "--json")
	requireOK(t, r)
	sums := summaries(t, r.stdout)
	require.Len(t, sums, len(scenarios.Names()))
	for i, name := range scenarios.Names() {
		require.Equal(t, name, sums[i].Scenario)
		require.True(t, sums[i].Pass)
		require.False(t, sums[i].CoverageEnforced, "one seed reports coverage but never fails on it")
	}
	text := lh(t, "sim", "--scenario", "boundaries", "--seed", "2", "--coverage")
	requireOK(t, text)
	require.Contains(t, text.stdout, "coverage: scenario boundaries, 1 seeds")
	require.Contains(t, text.stdout, "transition queued -claimed-> running")
	require.Contains(t, text.stdout, "declared")
}
