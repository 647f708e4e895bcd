package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
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

// A sweep of every scenario prints a line a scenario and its summary
// table last, not each seed's record nor each coverage map (21,290 lines
// for 500 seeds before); -v prints them all.
func TestSimSweepPrintsALineAScenario(t *testing.T) {
	args := []string{"sim", "--scenario", "all", "--seed", "3", "--seeds", "2", "--parallel", "1", "--coverage"}
	r := lh(t, args...)
	requireOK(t, r)
	names := scenarios.Names()
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	// A line a scenario, a blank line, the title, the header, a row a
	// scenario and the row of them all.
	require.Equal(t, 2*len(names)+4, len(lines), "lines printed")
	require.NotContains(t, r.stdout, "fingerprint:")
	require.NotContains(t, r.stdout, "coverage: scenario")
	for i, name := range names {
		require.True(t, strings.HasPrefix(lines[i], "summary: scenario "+name+" seeds 3..4: 2 passed, 0 failed"), lines[i])
	}
	table := lines[len(names):]
	require.Equal(t, "", table[0])
	require.Equal(t, fmt.Sprintf("summary of %d scenarios, seeds 3..4:", len(names)), table[1])
	require.Regexp(t, `^scenario +passed +failed +coverage +time +verdict$`, table[2])
	for i, name := range names {
		sc, err := scenarios.Get(name)
		require.NoError(t, err)
		require.Regexp(t, fmt.Sprintf(`^%s +2 +0 +\d+/%d cells \(reported only\) +\d+\.\ds +pass$`, regexp.QuoteMeta(name), len(sc.Covers)), table[3+i])
	}
	require.Regexp(t, fmt.Sprintf(`^all +%d +0 +\d+\.\ds +pass$`, 2*len(names)), table[len(table)-1])

	verbose := lh(t, append(args, "-v")...)
	requireOK(t, verbose)
	require.Equal(t, 2*len(names), strings.Count(verbose.stdout, "\nfingerprint: "), "every seed's record")
	require.Equal(t, len(names), strings.Count(verbose.stdout, "coverage: scenario "), "every scenario's map")
	title := strings.LastIndex(verbose.stdout, "\n"+table[1]+"\n")
	require.Greater(t, title, strings.LastIndex(verbose.stdout, "fingerprint: "), "the table comes last with -v too")
	require.Len(t, strings.Split(strings.TrimSuffix(verbose.stdout[title+1:], "\n"), "\n"), len(table)-1)
}

// In a sweep, a failed seed's record is printed whole and a passed one's
// not; one seed, -v and --json print every record.
func TestSimSweepShowsOnlyFailedSeeds(t *testing.T) {
	sweep := simOptions{count: 5}
	require.False(t, sweep.showSeed(true))
	require.True(t, sweep.showSeed(false))
	for _, o := range []simOptions{{count: 1}, {count: 5, verbose: true}, {count: 5, json: true}} {
		require.True(t, o.showSeed(true), "%+v", o)
	}
	var out bytes.Buffer
	e := &env{stdout: &out}
	for _, rec := range []evidence.SeedRecord{{Seed: 1, Scenario: "portfolio", Pass: true},
		{Seed: 2, Scenario: "portfolio", Summary: "two valid claims", Reproduce: "make sim SEED=2 SCENARIO=portfolio", Tail: []string{"event 9"}}} {
		if sweep.showSeed(rec.Pass) {
			printRecord(e, rec, false)
		}
	}
	require.NotContains(t, out.String(), "seed: 1\n")
	require.Contains(t, out.String(), "seed: 2\n")
	require.Contains(t, out.String(), "broken: two valid claims\nevents leading to it:\n  event 9\n")
	require.Contains(t, out.String(), "reproduce: make sim SEED=2 SCENARIO=portfolio\n")
}
