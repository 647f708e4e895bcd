package evidence

import (
	"fmt"
	"sort"
	"strings"

	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/sim"
)

// Sweep is what the report needs from one scenario's sweep, gathered from
// its seeds' records.
type Sweep struct {
	sweep       reports.Sweep
	events      int
	staleWrites int64
	expiries    int64
	lateRefused int
	reviews     int64
	failures    []string
	// coverageMissing names the declared coverage cells no seed reached
	// (a sweep of at least scenarios.CoverageSeedsMin seeds fails on it).
	coverageMissing string
}

// SweepOf gathers the sweep of sc's seeds from 1 from their records, in
// seed order.
func SweepOf(sc scenarios.Scenario, recs []SeedRecord) Sweep {
	st := Sweep{sweep: reports.Sweep{Scenario: sc.Name, From: 1, Seeds: len(recs),
		Faults:  "swarm per seed" + Floors(sc),
		Command: fmt.Sprintf("make sim SEED=1 SEEDS=%d SCENARIO=%s", len(recs), sc.Name)}}
	var cov sim.Coverage
	for _, rec := range recs {
		cov.Add(rec.Coverage)
		if rec.Pass {
			st.sweep.Passed++
		} else {
			st.sweep.Failed++
			st.failures = append(st.failures, fmt.Sprintf("seed %d: %s", rec.Seed, rec.Summary))
		}
		if len(st.sweep.Fingerprints) < 3 {
			st.sweep.Fingerprints = append(st.sweep.Fingerprints, reports.Fingerprint{Seed: rec.Seed, Fingerprint: rec.Fingerprint})
		}
		st.events += rec.Events + rec.Rounds
		st.staleWrites += rec.Stats.StaleWrites
		st.expiries += rec.Stats.LeaseExpiries
		st.lateRefused += rec.Stats.LateRefused
		st.reviews += rec.Stats.Reviews
	}
	for _, row := range cov.Rows(sc) {
		st.sweep.Coverage = append(st.sweep.Coverage, reports.CoverageCell{Cell: row.Cell.String(), Seeds: row.Seeds, Declared: row.Declared})
	}
	st.coverageMissing = cov.MissingSummary(sc)
	return st
}

// Passed is how many of the sweep's seeds passed.
func (st Sweep) Passed() int { return st.sweep.Passed }

// Floors describes sc's fault floors ("" when it has none).
func Floors(sc scenarios.Scenario) string {
	if len(sc.FaultFloors) == 0 {
		return ""
	}
	keys := make([]string, 0, len(sc.FaultFloors))
	for k := range sc.FaultFloors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s>=%d", k, sc.FaultFloors[k])
	}
	return "; floors (per mille): " + strings.Join(parts, " ")
}
