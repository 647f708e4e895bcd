package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/evidence"
	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/sim"
)

func init() {
	register("sim", "run the deterministic simulator over one seed or a sweep", runSim)
}

// simSeedMax is the last seed a sweep may reach.
const simSeedMax = ^uint64(0)

// simOptions is what sim's flags ask for, checked.
type simOptions struct {
	scenarios                        []scenarios.Scenario
	seed                             uint64
	count, parallel                  int
	keep                             []int
	shrink, determinism, trace, json bool
	coverage                         bool
	timeline, report                 string
}

func runSim(e *env, args []string) int {
	o, err := simFlags(args)
	if err != nil {
		return fail(e, "sim", err)
	}
	dir := ""
	if o.report != "" {
		if dir, err = reportDir(o.report); err != nil {
			return fail(e, "sim", err)
		}
	}
	code := exitOK
	for _, sc := range o.scenarios {
		recs, c := simScenario(e, o, sc)
		if c == exitUsage {
			return c
		}
		code = max(code, c)
		if dir != "" {
			facts, err := buildFacts()
			var r reports.Report
			if err == nil {
				r, err = evidence.SimReport(sc, o.seed, o.count, o.keep, recs, facts, sim.Run)
			}
			if err == nil {
				err = writeReport(dir, "report", r)
			}
			if err != nil {
				fmt.Fprintf(e.stderr, "leasehold sim: report: %v\n", err)
				return exitFail
			}
			if !o.json {
				fmt.Fprintf(e.stdout, "report: %s (index.html, report.md, report.json)\n", dir)
			}
		}
	}
	return code
}

// simFlags parses and checks sim's flags: every one is range-checked, and
// bad usage is an error naming the flag.
func simFlags(args []string) (simOptions, error) {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	seed := fs.Uint64("seed", 1, "first seed")
	scenarioName := fs.String("scenario", "portfolio", "scenario name, or all (every scenario in turn)")
	count := fs.Int("seeds", 1, "number of seeds to sweep from --seed")
	shrink := fs.Bool("shrink", false, "shrink a failing seed's schedule to the fewest events that still break the same invariant")
	determinism := fs.Bool("check-determinism", false, "run each seed twice and compare fingerprints")
	keep := fs.String("events", "", "replay only these event indices of the seed's schedule (comma-separated and increasing, as --shrink prints)")
	parallel := fs.Int("parallel", 0, "processes a sweep is split across, each running one seed at a time on one core (default: all cores; 1 runs the sweep in this process)")
	trace := fs.Bool("trace", false, "print every trace line of a single seed")
	timeline := fs.String("timeline", "", "write a single seed's structured timeline (the shrunk run's with --shrink) to this JSON file")
	report := fs.String("report", "", "also write a report of the run (index.html, report.md, report.json: fingerprints, verdicts, a timeline) into this directory")
	asJSON := fs.Bool("json", false, "print one JSON record per seed and a summary record per scenario (with its coverage map) instead of text")
	coverage := fs.Bool("coverage", false, "print each scenario's coverage map: transitions, refusals and fault kinds at phases its seeds reached (a sweep of at least 200 seeds fails on a declared cell none reached)")
	if err := parse(fs, args); err != nil {
		return simOptions{}, err
	}
	o := simOptions{seed: *seed, count: *count, parallel: *parallel, shrink: *shrink, determinism: *determinism,
		trace: *trace, json: *asJSON, coverage: *coverage, timeline: *timeline, report: *report}
	if *scenarioName == "all" {
		for _, name := range scenarios.Names() {
			sc, _ := scenarios.Get(name)
			o.scenarios = append(o.scenarios, sc)
		}
	} else {
		sc, err := scenarios.Get(*scenarioName)
		if err != nil {
			return o, badUsage("--scenario: %v", err)
		}
		o.scenarios = []scenarios.Scenario{sc}
	}
	if o.count < 1 || o.count > 10_000_000 {
		return o, badUsage("--seeds: must be between 1 and 10000000, got %d", o.count)
	}
	if uint64(o.count-1) > simSeedMax-o.seed {
		return o, badUsage("--seeds: %d seeds from --seed %d would pass the last seed %d", o.count, o.seed, simSeedMax)
	}
	if o.parallel < 0 || o.parallel > 256 {
		return o, badUsage("--parallel: must be between 0 and 256, got %d", o.parallel)
	}
	if (o.trace || o.timeline != "") && o.count != 1 {
		return o, badUsage("--trace and --timeline describe one seed; drop --seeds")
	}
	if len(o.scenarios) > 1 && (*keep != "" || o.timeline != "" || o.report != "") {
		return o, badUsage("--scenario all: --events, --timeline and --report name one scenario's run; pick a scenario")
	}
	if o.timeline != "" {
		if fi, err := os.Stat(o.timeline); err == nil && fi.IsDir() {
			return o, badUsage("--timeline: %s is a directory, not a file", o.timeline)
		}
		if fi, err := os.Stat(filepath.Dir(o.timeline)); err != nil || !fi.IsDir() {
			return o, badUsage("--timeline: the directory of %s does not exist", o.timeline)
		}
	}
	var err error
	if o.keep, err = parseIndices(*keep); err != nil {
		return o, badUsage("--events: %v", err)
	}
	if o.keep != nil {
		if o.count != 1 {
			return o, badUsage("--events replays one seed; drop --seeds")
		}
		sc := o.scenarios[0]
		n := len(sim.Generate(sc, o.seed, sim.MixFor(sc, o.seed)))
		if last := o.keep[len(o.keep)-1]; last >= n {
			return o, badUsage("--events: index %d is past the end of seed %d's schedule (%d events, 0 to %d)", last, o.seed, n, n-1)
		}
	}
	return o, nil
}

// simScenario runs one scenario as the options say (one seed, or a sweep
// in this process or in child processes), prints each seed and the
// summary, and returns the seeds' records and the exit code.
func simScenario(e *env, o simOptions, sc scenarios.Scenario) ([]evidence.SeedRecord, int) {
	var recs []evidence.SeedRecord
	var cov sim.Coverage
	failed, firstFailed := 0, uint64(0)
	take := func(rec evidence.SeedRecord) {
		recs = append(recs, rec)
		cov.Add(rec.Coverage)
		if !rec.Pass {
			if failed == 0 {
				firstFailed = rec.Seed
			}
			failed++
		}
	}
	last := o.seed + uint64(o.count-1)
	start := time.Now()
	switch {
	case o.keep != nil || o.shrink || o.determinism || o.count == 1:
		for s := o.seed; ; s++ {
			rec, ok := simOne(e, o, sc, s)
			take(rec)
			if !ok && rec.Pass {
				failed++ // the determinism check or the timeline failed
			}
			if s == last {
				break
			}
		}
	case o.parallel != 1:
		err := sweepProcesses(sc.Name, o.seed, o.count, o.parallel, e.stderr, func(rec evidence.SeedRecord) {
			printRecord(e, rec, o.json)
			take(rec)
		})
		if err != nil {
			return recs, fail(e, "sim", err)
		}
	default:
		sim.Sweep(sim.SweepConfig{Scenario: sc, From: o.seed, Count: o.count, Parallel: 1}, func(r sim.Result) {
			rec := evidence.SeedRecordOf(r)
			printRecord(e, rec, o.json)
			take(rec)
		})
	}
	missing := cov.Missing(sc)
	sum := evidence.SummaryRecord{Record: evidence.RecordSummary, Scenario: sc.Name, From: o.seed, Seeds: o.count, Passed: o.count - failed,
		Failed: failed, FirstFailed: firstFailed, CoverageEnforced: cov.Enforced(), Unreached: cov.Unreached(sc),
		Coverage: cov, Pass: failed == 0 && len(missing) == 0}
	if sum.Unreached == nil {
		sum.Unreached = []scenarios.Cell{}
	}
	printSummary(e, o, sc, sum, cov, time.Since(start))
	if !sum.Pass {
		return recs, exitFail
	}
	return recs, exitOK
}

// printSummary prints a scenario's summary: its record, or the text
// (the counts and speed of a sweep, the coverage map if asked for, the
// first failure and the unreached cells).
func printSummary(e *env, o simOptions, sc scenarios.Scenario, sum evidence.SummaryRecord, cov sim.Coverage, elapsed time.Duration) {
	if o.json {
		writeJSONLine(e.stdout, sum)
		return
	}
	if o.count > 1 {
		fmt.Fprintf(e.stdout, "summary: scenario %s seeds %d..%d: %d passed, %d failed in %.1fs (%.0f seeds/s)\n",
			sc.Name, sum.From, sum.From+uint64(sum.Seeds)-1, sum.Passed, sum.Failed, elapsed.Seconds(), float64(o.count)/elapsed.Seconds())
	}
	if o.coverage {
		fmt.Fprint(e.stdout, cov.Table(sc))
	}
	if sum.Failed > 0 && o.count > 1 {
		fmt.Fprintf(e.stdout, "first failure: make sim SEED=%d SCENARIO=%s\n", sum.FirstFailed, sc.Name)
	}
	if len(cov.Missing(sc)) > 0 {
		fmt.Fprintln(e.stdout, cov.MissingSummary(sc))
	}
}

// simOne runs one seed, optionally shrinking a failure or checking
// determinism, prints its record, and returns the record and whether
// everything asked of it passed.
func simOne(e *env, o simOptions, sc scenarios.Scenario, seed uint64) (evidence.SeedRecord, bool) {
	cfg := sim.Config{Scenario: sc, Seed: seed, Keep: o.keep, Trace: o.trace, Timeline: o.timeline != ""}
	r := sim.Run(cfg)
	rec := evidence.SeedRecordOf(r)
	ok := r.Pass
	if o.determinism {
		same := sim.Run(cfg).Fingerprint == r.Fingerprint
		rec.Deterministic = &same
		ok = ok && same
	}
	if o.shrink && !r.Pass {
		s := sim.Shrink(cfg, r)
		rec.Shrunk = &evidence.ShrunkRecord{Broken: r.Broken(), Of: len(r.Schedule), Keep: s.Keep, Events: make([]string, len(s.Events)),
			Replay: fmt.Sprintf("leasehold sim --scenario %s --seed %d --events %s", sc.Name, seed, joinInts(s.Keep))}
		for i, ev := range s.Events {
			rec.Shrunk.Events[i] = ev.String()
		}
		if o.timeline != "" {
			r = sim.Run(sim.Config{Scenario: sc, Seed: seed, Keep: s.Keep, Timeline: true})
		}
	}
	if o.json {
		rec.Trace = r.Trace
		writeJSONLine(e.stdout, rec)
	} else {
		printSeedText(e.stdout, rec, r.Trace)
	}
	if o.timeline != "" {
		if err := writeTimeline(o.timeline, r); err != nil {
			fmt.Fprintf(e.stderr, "leasehold sim: %v\n", err)
			return rec, false
		}
	}
	return rec, ok
}

// timelineFile is what sim --timeline writes.
type timelineFile struct {
	Scenario    string              `json:"scenario"`
	Seed        uint64              `json:"seed"`
	Faults      string              `json:"faults"`
	Fingerprint string              `json:"fingerprint"`
	Pass        bool                `json:"pass"`
	Broken      string              `json:"broken"`
	Summary     string              `json:"summary"`
	Workers     int                 `json:"workers"`
	Events      []string            `json:"events"`
	Entries     []sim.TimelineEntry `json:"entries"`
}

func writeTimeline(path string, r sim.Result) error {
	events := make([]string, len(r.Schedule))
	for i, ev := range r.Schedule {
		events[i] = ev.String()
	}
	f := timelineFile{Scenario: r.Scenario, Seed: r.Seed, Faults: r.Mix.String(), Fingerprint: r.Fingerprint, Pass: r.Pass,
		Broken: r.Broken(), Summary: r.Summary(), Workers: r.Workers, Events: events, Entries: r.Timeline}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// sweepProcesses splits a sweep into contiguous ranges run by child
// processes of this binary (one per core unless told otherwise: separate
// processes share no locks, unlike goroutines over one SQLite library),
// reads their JSON records and hands each seed's record to each in seed
// order. A child that dies (a panic, a signal) or does not judge every
// seed of its range is an error naming the range: its unjudged seeds are
// never counted as passes.
func sweepProcesses(scenario string, from uint64, count, parallel int, stderr io.Writer, each func(evidence.SeedRecord)) error {
	if parallel <= 0 {
		parallel = runtime.NumCPU()
	}
	parallel = min(parallel, count)
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary to run sweep processes: %w", err)
	}
	type child struct {
		out  bytes.Buffer
		cmd  *exec.Cmd
		from uint64
		n    int
	}
	children := make([]*child, 0, parallel)
	stop := func(rest []*child) {
		for _, c := range rest {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	}
	next := from
	for i := 0; i < parallel; i++ {
		n := count / parallel
		if i < count%parallel {
			n++
		}
		c := &child{from: next, n: n}
		c.cmd = exec.Command(self, "sim", "--scenario", scenario, "--seed", strconv.FormatUint(next, 10),
			"--seeds", strconv.Itoa(n), "--parallel", "1", "--json")
		// One core per process, and a collector tuned for a batch of
		// short-lived worlds: a 10,000-seed portfolio sweep on two cores
		// went from 150 s to under 115 s.
		c.cmd.Env = sim.SweepProcessEnv(os.Environ())
		c.cmd.Stdout, c.cmd.Stderr = &c.out, stderr
		if err := c.cmd.Start(); err != nil {
			stop(children)
			return fmt.Errorf("start sweep process: %w", err)
		}
		children, next = append(children, c), next+uint64(n)
	}
	for i, c := range children {
		werr := c.cmd.Wait()
		var exit *exec.ExitError
		if werr != nil && !errors.As(werr, &exit) {
			stop(children[i+1:])
			return fmt.Errorf("sweep process for seeds %d..%d: %w", c.from, c.from+uint64(c.n)-1, werr)
		}
		recs, err := judgeSweepChild(c.out.Bytes(), c.cmd.ProcessState.ExitCode(), c.cmd.ProcessState.String(), scenario, c.from, c.n)
		if err != nil {
			stop(children[i+1:])
			return err
		}
		for _, rec := range recs {
			each(rec)
		}
	}
	return nil
}

// judgeSweepChild reads the JSON records a sweep process printed for its n
// seeds from from, and how it exited (code, and how as the process state
// says it), and returns its seeds' records. Exit 0 with every seed passed
// and exit 1 with some failed (or a declared coverage cell unreached, when
// its range alone is long enough to require them) are the only good ends:
// any other exit (a panic exits 2, a signal -1), a line that is not a
// record, a seed missing or out of order, or an exit that disagrees with
// the verdicts is an error naming the range and the command that reruns
// it.
func judgeSweepChild(out []byte, code int, how, scenario string, from uint64, n int) ([]evidence.SeedRecord, error) {
	last := from + uint64(n) - 1
	rerun := fmt.Sprintf("rerun them: leasehold sim --scenario %s --seed %d --seeds %d --parallel 1", scenario, from, n)
	recs, err := readSeedRecords(out)
	judged := 0
	for judged < len(recs) && recs[judged].Seed == from+uint64(judged) && recs[judged].Scenario == scenario {
		judged++
	}
	if code != exitOK && code != exitFail {
		return nil, fmt.Errorf("sweep process for seeds %d..%d ended with %s after judging %d of %d seeds; %s", from, last, how, judged, n, rerun)
	}
	if err != nil {
		return nil, fmt.Errorf("sweep process for seeds %d..%d printed what is not a record (%v) after %d of its %d seeds; %s", from, last, err, judged, n, rerun)
	}
	if judged != n || len(recs) != n {
		return nil, fmt.Errorf("sweep process for seeds %d..%d judged %d of its %d seeds in order (printed %d seed records) and exited %d; %s",
			from, last, judged, n, len(recs), code, rerun)
	}
	failed := 0
	var cov sim.Coverage
	for _, rec := range recs {
		cov.Add(rec.Coverage)
		if !rec.Pass {
			failed++
		}
	}
	sc, _ := scenarios.Get(scenario)
	bad := failed > 0 || len(cov.Missing(sc)) > 0
	if bad != (code == exitFail) {
		return nil, fmt.Errorf("sweep process for seeds %d..%d exited %d with %d of its %d seeds failed; %s", from, last, code, failed, n, rerun)
	}
	return recs, nil
}

func parseIndices(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]int, 0, len(parts))
	for _, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not an event index", p)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("indices must increase: %d after %d", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	return out, nil
}

func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}
