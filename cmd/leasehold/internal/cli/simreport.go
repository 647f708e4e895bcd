package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/sim"
)

// reportFingerprintsMax bounds the fingerprints a sim report lists: the
// first seeds and every failed one, up to this many.
const reportFingerprintsMax = 50

// simReport builds the report of a simulator run from its seeds' records,
// with the timeline of its first failed seed (or of its first seed).
func simReport(sc scenarios.Scenario, from uint64, count int, keep []int, recs []seedRecord) (reports.Report, error) {
	if len(recs) == 0 {
		return reports.Report{}, errors.New("the run printed no seed results")
	}
	r := reports.Report{Title: fmt.Sprintf("leasehold sim: %s, seeds %d..%d", sc.Name, from, from+uint64(count)-1),
		Generated: time.Now().UTC().Format(time.RFC3339),
		Fixture:   reports.Section{Kind: reports.Fixture}, Live: reports.Section{Kind: reports.Live,
			About: []string{"No live figures: this report is a simulator run (make demo and make evidence measure real processes)."}}}
	if err := addBuildFacts(&r); err != nil {
		return r, err
	}

	sweepCmd := fmt.Sprintf("make sim SEED=%d SEEDS=%d SCENARIO=%s", from, count, sc.Name)
	if keep != nil {
		sweepCmd = fmt.Sprintf("leasehold sim --scenario %s --seed %d --events %s", sc.Name, from, joinInts(keep))
	}
	sweep := reports.Sweep{Scenario: sc.Name, From: from, Seeds: len(recs), Faults: "swarm per seed" + floors(sc), Command: sweepCmd}
	var firstFailed *seedRecord
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

	res := sim.Run(sim.Config{Scenario: sc, Seed: shown.Seed, Keep: keep, Timeline: true})
	if res.Fingerprint != shown.Fingerprint {
		return r, fmt.Errorf("seed %d ran again with fingerprint %s, not %s: the run is not deterministic", shown.Seed, res.Fingerprint, shown.Fingerprint)
	}
	verdict := "passed"
	if !res.Pass {
		verdict = "failed: " + res.Summary()
	}
	t := simTimeline(fmt.Sprintf("%s seed %d (%s)", sc.Name, shown.Seed, verdict), res.Timeline, res.Workers)
	t.Caption = fmt.Sprintf("Fixture, simulated time. Faults: %s. Reproduce: %s (fingerprint %s).", res.Mix, seedCmd, res.Fingerprint)
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

// writeReport writes index.html, NAME.md and NAME.json into dir.
func writeReport(dir, name string, r reports.Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		name   string
		render func(*bytes.Buffer, reports.Report) error
	}{
		{name + ".json", func(b *bytes.Buffer, r reports.Report) error { return reports.JSON(b, r) }},
		{name + ".md", func(b *bytes.Buffer, r reports.Report) error { return reports.Markdown(b, r) }},
		{"index.html", func(b *bytes.Buffer, r reports.Report) error { return reports.HTML(b, r) }},
	} {
		var b bytes.Buffer
		if err := f.render(&b, r); err != nil {
			return fmt.Errorf("render %s: %w", f.name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// reportDir checks a report directory before anything runs: inside the
// allowed directory (LEASEHOLD_DATA_DIR, or the working directory), not a
// file, and resolved through its nearest existing ancestor so a symbolic
// link cannot lead outside.
func reportDir(p string) (string, error) { return checkedDir("report", p) }

// checkedDir checks the directory flag --field names (p) as reportDir
// describes and returns it resolved.
func checkedDir(field, p string) (string, error) {
	if strings.TrimSpace(p) == "" {
		return "", badUsage("--%s: directory required", field)
	}
	root, err := allowedRoot()
	if err != nil {
		return "", err
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", badUsage("--%s: %v", field, err)
	}
	existing, rest := abs, ""
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			break
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
	resolved, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", badUsage("--%s: %s: %v", field, p, err)
	}
	resolved = filepath.Join(resolved, rest)
	if err := inside(field, p, root, resolved); err != nil {
		return "", err
	}
	if fi, err := os.Stat(resolved); err == nil && !fi.IsDir() {
		return "", badUsage("--%s: %s is a file, not a directory", field, p)
	}
	return resolved, nil
}
