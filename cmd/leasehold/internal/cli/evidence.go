package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/cmd/leasehold/internal/evidence"
	"github.com/leasehold/leasehold/cmd/leasehold/internal/liverun"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/randomid"
	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/sim"
)

func init() {
	register("evidence", "write the evidence report: simulated sweeps, the live demo, the failed attempt (out/evidence)", runEvidence)
}

func runEvidence(e *env, args []string) int {
	fs := flag.NewFlagSet("evidence", flag.ContinueOnError)
	out := fs.String("out", filepath.Join("out", "evidence"), "directory to write index.html, evidence.md and evidence.json")
	seeds := fs.Int("seeds", 200, "seeds swept per scenario")
	demoPath := fs.String("demo", filepath.Join("out", "demo", "result.json"), "the live demo's result.json")
	brokenBin := fs.String("broken", filepath.Join("bin", "leasehold-broken"), "a leasehold binary built with -tags leasehold_broken")
	runbookJSON := fs.String("runbook", "", "go test -json output of the runbook tests")
	chaosPath := fs.String("chaos", filepath.Join("out", "chaos", "result.json"), "the chaos run's result.json")
	if err := parse(fs, args); err != nil {
		return fail(e, "evidence", err)
	}
	if *seeds < 1 || *seeds > 100_000 {
		return fail(e, "evidence", badUsage("--seeds: must be between 1 and 100000, got %d", *seeds))
	}
	r, err := buildEvidence(e, *seeds, *demoPath, *brokenBin, *runbookJSON)
	if err == nil {
		err = addChaos(&r, *chaosPath)
	}
	if err != nil {
		return fail(e, "evidence", err)
	}
	if err := writeReport(*out, "evidence", r); err != nil {
		return fail(e, "evidence", err)
	}
	failed := 0
	for _, c := range r.Checks {
		mark := "PASS"
		if !c.Pass() {
			mark = "FAIL"
			failed++
		}
		fmt.Fprintf(e.stdout, "%s %s\n", mark, c.Title)
	}
	fmt.Fprintf(e.stdout, "evidence written to %s (index.html, evidence.md, evidence.json): %d of %d checks pass\n",
		*out, len(r.Checks)-failed, len(r.Checks))
	if !r.Pass {
		return exitFail
	}
	return exitOK
}

// buildEvidence gathers the evidence report's records (sweeps of every
// scenario, the demo's result, the failed attempt, the runbook tests'
// verdicts) and has package evidence assemble them.
func buildEvidence(e *env, seeds int, demoPath, brokenBin, runbookJSON string) (reports.Report, error) {
	facts, err := buildFacts()
	if err != nil {
		return reports.Report{}, err
	}
	in := evidence.Inputs{Facts: facts, Seeds: seeds, Sweeps: map[string]evidence.Sweep{}, Order: scenarios.Names()}
	fmt.Fprintf(e.stdout, "sweeping %d seeds of each scenario...\n", seeds)
	for _, name := range in.Order {
		sc, _ := scenarios.Get(name)
		in.Sweeps[name] = evidence.SweepOf(sc, sweepRecords(sc, seeds))
		fmt.Fprintf(e.stdout, "  %-15s %d/%d passed\n", name, in.Sweeps[name].Passed(), seeds)
	}
	if in.Takeover, err = takeoverRun(); err != nil {
		return reports.Report{}, err
	}
	if in.Demo, err = liverun.Read(demoPath); err != nil {
		return reports.Report{}, err
	}
	attempt, err := failedAttempt(brokenBin, seeds)
	if err != nil {
		return reports.Report{}, err
	}
	if in.Failed, err = evidence.FailedAttempt(attempt); err != nil {
		return reports.Report{}, err
	}
	fmt.Fprintf(e.stdout, "failed attempt: %s caught at seed %d, shrunk to %d events; %s\n",
		evidence.FailedVariant, in.Failed.Seed, len(in.Failed.Shrunk), in.Failed.FixedRun)
	in.Runbook = map[string]bool{}
	if runbookJSON != "" {
		b, err := os.ReadFile(runbookJSON)
		if err != nil {
			return reports.Report{}, fmt.Errorf("read the runbook test results: %w", err)
		}
		in.Runbook = evidence.RunbookResults(b)
	}
	return evidence.Build(in)
}

// sweepRecords sweeps sc's seeds 1 to seeds in this process and returns
// their records in seed order.
func sweepRecords(sc scenarios.Scenario, seeds int) []evidence.SeedRecord {
	recs := make([]evidence.SeedRecord, 0, seeds)
	sim.Sweep(sim.SweepConfig{Scenario: sc, From: 1, Count: seeds, Parallel: runtime.NumCPU()}, func(res sim.Result) {
		recs = append(recs, evidence.SeedRecordOf(res))
	})
	sort.Slice(recs, func(i, j int) bool { return recs[i].Seed < recs[j].Seed })
	return recs
}

// takeoverRun is the first passing late-result seed in 1..50 whose late
// result was refused, run with its timeline.
func takeoverRun() (sim.Result, error) {
	sc := scenarios.LateResult()
	for seed := uint64(1); seed <= 50; seed++ {
		res := sim.Run(sim.Config{Scenario: sc, Seed: seed, Timeline: true})
		if res.Pass && res.Stats.LateRefused > 0 {
			return res, nil
		}
	}
	return sim.Result{}, errors.New("no late-result seed in 1..50 showed the late result refused")
}

// buildFacts reads what produces a report now: this build's versions, and
// the SQLite version and the PRAGMAs the queue opens with, from a scratch
// database.
func buildFacts() (evidence.Facts, error) {
	dir, err := os.MkdirTemp("", "leasehold-evidence")
	if err != nil {
		return evidence.Facts{}, err
	}
	defer os.RemoveAll(dir)
	q, err := queue.Open(context.Background(), queue.Options{Path: filepath.Join(dir, "q.db"), Clock: clockwork.NewRealClock(), IDs: randomid.Source{}})
	if err != nil {
		return evidence.Facts{}, err
	}
	defer q.Close()
	engine, err := q.EngineVersion(context.Background())
	if err != nil {
		return evidence.Facts{}, err
	}
	sqliteVersion, ok := strings.CutPrefix(engine, "SQLite ")
	if !ok {
		return evidence.Facts{}, fmt.Errorf("evidence facts: the scratch database is %s, not SQLite", engine)
	}
	v := buildVersion()
	return evidence.Facts{Generated: time.Now(), Pragmas: q.Pragmas(),
		Versions: reports.Versions{Module: v.Module, Commit: dash(v.Commit), Go: v.Go, SQLite: sqliteVersion, Schema: v.Schema}}, nil
}

// failedAttempt runs the broken build's sim over the failed attempt's
// scenario until a seed fails, shrinks that seed, replays the shrunk run
// with its trace, and runs the same seeds on this (the real) build, and
// returns their records.
func failedAttempt(brokenBin string, seeds int) (evidence.Attempt, error) {
	var a evidence.Attempt
	if _, err := os.Stat(brokenBin); err != nil {
		return a, fmt.Errorf("the broken build %s (go build -tags leasehold_broken -o %s ./cmd/leasehold): %w", brokenBin, brokenBin, err)
	}
	env := append(os.Environ(), "LEASEHOLD_BROKEN="+evidence.FailedVariant)
	scenario := []string{"--scenario", evidence.FailedScenario}
	for s := uint64(1); s <= uint64(seeds) && a.Caught.Seed == 0; s++ {
		recs, _, err := simRecords(brokenBin, env, append(scenario, "--seed", fmt.Sprint(s))...)
		if err != nil {
			return a, err
		}
		a.SeedsRun = int(s)
		if len(recs) == 1 && !recs[0].Pass {
			a.Caught = recs[0]
		}
	}
	if a.Caught.Seed == 0 {
		return a, fmt.Errorf("broken variant %s was not caught within %d seeds of %s", evidence.FailedVariant, seeds, evidence.FailedScenario)
	}
	seed := fmt.Sprint(a.Caught.Seed)
	tl := filepath.Join(os.TempDir(), fmt.Sprintf("leasehold-failed-%d.json", os.Getpid()))
	defer os.Remove(tl)
	recs, _, err := simRecords(brokenBin, env, append(scenario, "--seed", seed, "--shrink", "--timeline", tl)...)
	if err != nil {
		return a, err
	}
	if len(recs) != 1 || recs[0].Shrunk == nil {
		return a, fmt.Errorf("shrinking seed %s gave no shrunk record", seed)
	}
	a.Shrunk = recs[0]
	var f timelineFile
	if b, err := os.ReadFile(tl); err == nil && json.Unmarshal(b, &f) == nil {
		a.Timeline, a.Workers = f.Entries, f.Workers
	}
	recs, _, err = simRecords(brokenBin, env, append(scenario, "--seed", seed, "--events", evidence.JoinInts(a.Shrunk.Shrunk.Keep), "--trace")...)
	if err != nil {
		return a, err
	}
	if len(recs) == 1 {
		a.Replayed = recs[0]
	}
	self, err := os.Executable()
	if err != nil {
		return a, err
	}
	_, a.Fixed, err = simRecords(self, os.Environ(), append(scenario, "--seed", "1", "--seeds", seed, "--parallel", "1")...)
	return a, err
}

// simRecords runs bin's sim command with args and --json under env, and
// returns the seed records and the summary record it printed. Exit 1 (a
// seed failed) is a verdict, not an error; any other failure, or output
// without a summary record, is.
func simRecords(bin string, env []string, args ...string) ([]evidence.SeedRecord, evidence.SummaryRecord, error) {
	cmd := exec.Command(bin, append(append([]string{"sim"}, args...), "--json")...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == exitFail) {
		return nil, evidence.SummaryRecord{}, fmt.Errorf("%s sim %s: %w: %s", bin, strings.Join(args, " "), err, oneLine(stderr.String()))
	}
	recs, sums, err := evidence.ReadRecords(stdout.Bytes())
	if err == nil && len(sums) != 1 {
		err = fmt.Errorf("%d summary records, want 1", len(sums))
	}
	if err != nil {
		return nil, evidence.SummaryRecord{}, fmt.Errorf("%s sim %s: %w", bin, strings.Join(args, " "), err)
	}
	return recs, sums[0], nil
}

// addChaos adds the chaos run's figures, read from its result.json, to
// the evidence.
func addChaos(r *reports.Report, path string) error {
	res, err := chaos.ReadResult(path)
	if err != nil {
		return err
	}
	return evidence.AddChaos(r, res, path)
}
