package evidence

import (
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/sim"
)

// reportFingerprintsMax bounds the fingerprints a sim report lists: the
// first seeds and every failed one, up to this many.
const reportFingerprintsMax = 50

// SimReport builds the report of a simulator run of sc (count seeds from
// from, the events keep if not nil) from its seeds' records alone, with
// the timeline its first failed seed's record carries (or, none failed,
// its first seed's): the run must have recorded that timeline.
func SimReport(sc scenarios.Scenario, from uint64, count int, keep []int, recs []SeedRecord, facts Facts) (reports.Report, error) {
	if len(recs) == 0 {
		return reports.Report{}, errors.New("no seed records to report")
	}
	r := reports.Report{Title: fmt.Sprintf("leasehold sim: %s, seeds %d..%d", sc.Name, from, from+uint64(count)-1),
		Generated: facts.Generated.UTC().Format(time.RFC3339),
		Fixture:   reports.Section{Kind: reports.Fixture}, Live: reports.Section{Kind: reports.Live,
			About: []string{"No live figures: this report is a simulator run (make demo and make evidence measure real processes)."}}}
	facts.add(&r)

	sweepCmd := fmt.Sprintf("make sim SEED=%d SEEDS=%d SCENARIO=%s", from, count, sc.Name)
	if keep != nil {
		sweepCmd = fmt.Sprintf("leasehold sim --scenario %s --seed %d --events %s", sc.Name, from, JoinInts(keep))
	}
	sweep, firstFailed := simSweep(sc, from, sweepCmd, recs)
	r.Fixture.Sweeps = []reports.Sweep{sweep}
	r.Fixture.About = []string{
		"Fixture: the real queue (SQLite, in memory) driven by seeded schedules under a fake clock that starts at " + sim.Epoch.Format(time.RFC3339) + ".",
		"Each seed draws its own fault mix (swarm), printed per seed; invariants are checked after every event, then faults heal and every task must settle, then the scenario's expected outcomes are checked.",
		fmt.Sprintf("Listed fingerprints: the first %d seeds and every failed seed, at most %d.", min(10, len(recs)), reportFingerprintsMax),
	}

	observed := fmt.Sprintf("%d of %d seeds passed", sweep.Passed, len(recs))
	shown := recs[0]
	if firstFailed != nil {
		observed += fmt.Sprintf("; first failure: seed %d: %s", firstFailed.Seed, firstFailed.Summary)
		shown = *firstFailed
	}
	seedCmd := fmt.Sprintf("make sim SEED=%d SCENARIO=%s", shown.Seed, sc.Name)
	r.Checks = []reports.Check{{ID: "sim", Title: "Invariants after every event, liveness once faults heal, and the scenario's expected outcomes",
		Results: []reports.Result{{Kind: reports.Fixture, Inputs: fmt.Sprintf("scenario %s, %d seeds from %d, %s", sc.Name, len(recs), from, sweep.Faults),
			Observed: observed, Pass: sweep.Failed == 0, Command: sweepCmd}}}}

	if shown.Timeline == nil {
		return r, fmt.Errorf("seed %d's record carries no timeline: the run did not record it", shown.Seed)
	}
	verdict := "passed"
	if !shown.Pass {
		verdict = "failed: " + shown.Summary
	}
	t := SimTimeline(fmt.Sprintf("%s seed %d (%s)", sc.Name, shown.Seed, verdict), shown.Timeline.Entries, shown.Timeline.Workers)
	t.Caption = fmt.Sprintf("Fixture, simulated time. Faults: %s. Reproduce: %s (fingerprint %s).", shown.Faults, seedCmd, shown.Fingerprint)
	r.Fixture.Timelines = []reports.Timeline{t}

	r.Commands = []reports.Command{
		{What: "this run", Command: sweepCmd + " (add --report DIR for this report)"},
		{What: "the seed drawn in the timeline", Command: seedCmd},
	}
	if firstFailed != nil {
		r.Commands = append(r.Commands, reports.Command{What: "the failure, shrunk to its fewest events",
			Command: fmt.Sprintf("leasehold sim --scenario %s --seed %d --shrink", sc.Name, firstFailed.Seed)})
	}
	r.Pass = sweep.Failed == 0
	return r, r.Validate()
}

// simSweep is the sweep of sc's seeds from from, from their records, and
// its first failed seed's record (nil if none failed).
func simSweep(sc scenarios.Scenario, from uint64, command string, recs []SeedRecord) (reports.Sweep, *SeedRecord) {
	sweep := reports.Sweep{Scenario: sc.Name, From: from, Seeds: len(recs), Faults: "swarm per seed" + Floors(sc), Command: command}
	var firstFailed *SeedRecord
	for i := range recs {
		rec := &recs[i]
		if rec.Pass {
			sweep.Passed++
		} else {
			sweep.Failed++
			if firstFailed == nil {
				firstFailed = rec
			}
		}
		if len(sweep.Fingerprints) < reportFingerprintsMax && (i < 10 || !rec.Pass) {
			sweep.Fingerprints = append(sweep.Fingerprints, reports.Fingerprint{Seed: rec.Seed, Fingerprint: rec.Fingerprint})
		}
	}
	var cov sim.Coverage
	for _, rec := range recs {
		cov.Add(rec.Coverage)
	}
	for _, row := range cov.Rows(sc) {
		sweep.Coverage = append(sweep.Coverage, reports.CoverageCell{Cell: row.Cell.String(), Seeds: row.Seeds, Declared: row.Declared})
	}
	return sweep, firstFailed
}
