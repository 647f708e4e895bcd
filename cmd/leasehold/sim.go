package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/sim"
)

func init() {
	register("sim", "run the deterministic simulator over one seed or a sweep", runSim)
}

func runSim(e *env, args []string) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	seed := fs.Uint64("seed", 1, "first seed")
	scenarioName := fs.String("scenario", "portfolio", "scenario name")
	count := fs.Int("seeds", 1, "number of seeds to sweep from --seed")
	shrink := fs.Bool("shrink", false, "shrink a failing seed's schedule to the fewest events that still break the same invariant")
	determinism := fs.Bool("check-determinism", false, "run each seed twice and compare fingerprints")
	keep := fs.String("events", "", "replay only these event indices of the seed's schedule (comma-separated, as --shrink prints)")
	parallel := fs.Int("parallel", 0, "processes a sweep is split across, each running one seed at a time on one core (default: all cores; 1 runs the sweep in this process)")
	trace := fs.Bool("trace", false, "print every trace line of a single seed")
	timeline := fs.String("timeline", "", "write a single seed's structured timeline (the shrunk run's with --shrink) to this JSON file")
	report := fs.String("report", "", "also write a report of the run (index.html, report.md, report.json: fingerprints, verdicts, a timeline) into this directory")
	if err := parse(fs, args); err != nil {
		return fail(e, "sim", err)
	}
	sc, err := scenarios.Get(*scenarioName)
	if err != nil {
		return fail(e, "sim", badUsage("--scenario: %v", err))
	}
	if *count < 1 || *count > 10_000_000 {
		return fail(e, "sim", badUsage("--seeds: must be between 1 and 10000000, got %d", *count))
	}
	if *parallel < 0 || *parallel > 256 {
		return fail(e, "sim", badUsage("--parallel: must be between 0 and 256, got %d", *parallel))
	}
	indices, err := parseIndices(*keep)
	if err != nil {
		return fail(e, "sim", badUsage("--events: %v", err))
	}
	if indices != nil && *count != 1 {
		return fail(e, "sim", badUsage("--events replays one seed; drop --seeds"))
	}
	if (*trace || *timeline != "") && *count != 1 {
		return fail(e, "sim", badUsage("--trace and --timeline describe one seed; drop --seeds"))
	}
	var captured bytes.Buffer
	dir := ""
	if *report != "" {
		if dir, err = reportDir(*report); err != nil {
			return fail(e, "sim", err)
		}
		teed := *e
		teed.stdout = io.MultiWriter(e.stdout, &captured)
		e = &teed
	}
	code := func() int {
		if indices != nil || *shrink || *determinism || *count == 1 {
			failed := 0
			for s := *seed; s < *seed+uint64(*count); s++ {
				if !simOne(e, sc, s, indices, *shrink, *determinism, *trace, *timeline) {
					failed++
				}
			}
			if *count > 1 {
				fmt.Fprintf(e.stdout, "summary: scenario %s seeds %d..%d: %d passed, %d failed\n", sc.Name, *seed, *seed+uint64(*count)-1, *count-failed, failed)
			}
			if failed > 0 {
				return exitFail
			}
			return exitOK
		}
		start := time.Now()
		failed, firstFailed := 0, uint64(0)
		if *parallel != 1 {
			var err error
			failed, firstFailed, err = sweepProcesses(e, sc.Name, *seed, *count, *parallel)
			if err != nil {
				return fail(e, "sim", err)
			}
		} else {
			sim.Sweep(sim.SweepConfig{Scenario: sc, From: *seed, Count: *count, Parallel: 1}, func(r sim.Result) {
				printResult(e, r)
				if !r.Pass {
					if failed == 0 {
						firstFailed = r.Seed
					}
					failed++
				}
			})
		}
		elapsed := time.Since(start)
		fmt.Fprintf(e.stdout, "summary: scenario %s seeds %d..%d: %d passed, %d failed in %.1fs (%.0f seeds/s)\n",
			sc.Name, *seed, *seed+uint64(*count)-1, *count-failed, failed, elapsed.Seconds(), float64(*count)/elapsed.Seconds())
		if failed > 0 {
			fmt.Fprintf(e.stdout, "first failure: make sim SEED=%d SCENARIO=%s\n", firstFailed, sc.Name)
			return exitFail
		}
		return exitOK
	}()
	if dir != "" {
		r, err := simReport(sc, *seed, *count, indices, captured.Bytes())
		if err == nil {
			err = writeReport(dir, "report", r)
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "leasehold sim: report: %v\n", err)
			return exitFail
		}
		fmt.Fprintf(e.stdout, "report: %s (index.html, report.md, report.json)\n", dir)
	}
	return code
}

// simOne runs one seed, optionally shrinking a failure or checking
// determinism, and reports whether it passed.
func simOne(e *env, sc scenarios.Scenario, seed uint64, keep []int, shrink, determinism, trace bool, timeline string) bool {
	cfg := sim.Config{Scenario: sc, Seed: seed, Keep: keep, Trace: trace, Timeline: timeline != ""}
	r := sim.Run(cfg)
	for _, line := range r.Trace {
		fmt.Fprintln(e.stdout, line)
	}
	printResult(e, r)
	ok := r.Pass
	if determinism {
		again := sim.Run(cfg)
		if again.Fingerprint != r.Fingerprint {
			fmt.Fprintf(e.stdout, "determinism: FAILED: second run fingerprint %s\n", again.Fingerprint)
			ok = false
		} else {
			fmt.Fprintln(e.stdout, "determinism: same fingerprint twice")
		}
	}
	if shrink && !r.Pass {
		s := sim.Shrink(cfg, r)
		fmt.Fprintf(e.stdout, "shrunk: %d of %d events still break %s\n", len(s.Keep), len(r.Schedule), r.Broken())
		for i, ev := range s.Events {
			fmt.Fprintf(e.stdout, "  %d %s\n", s.Keep[i], ev)
		}
		fmt.Fprintf(e.stdout, "replay: leasehold sim --scenario %s --seed %d --events %s\n", sc.Name, seed, joinInts(s.Keep))
		if timeline != "" {
			r = sim.Run(sim.Config{Scenario: sc, Seed: seed, Keep: s.Keep, Timeline: true})
		}
	}
	if timeline != "" {
		if err := writeTimeline(timeline, r); err != nil {
			fmt.Fprintf(e.stderr, "leasehold sim: %v\n", err)
			return false
		}
	}
	return ok
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

func printResult(e *env, r sim.Result) {
	fmt.Fprintf(e.stdout, "seed: %d\nscenario: %s\nfaults: %s\nfingerprint: %s\n", r.Seed, r.Scenario, r.Mix, r.Fingerprint)
	if r.Pass {
		fmt.Fprintln(e.stdout, "verdict: pass")
		return
	}
	fmt.Fprintln(e.stdout, "verdict: fail")
	fmt.Fprintf(e.stdout, "broken: %s\n", r.Summary())
	fmt.Fprintln(e.stdout, "events leading to it:")
	for _, line := range r.Tail {
		fmt.Fprintf(e.stdout, "  %s\n", line)
	}
	fmt.Fprintf(e.stdout, "reproduce: %s\n", r.Command())
}

// sweepProcesses splits a sweep into contiguous ranges run by child
// processes of this binary (one per core unless told otherwise: separate
// processes share no locks, unlike goroutines over one SQLite library), and
// prints their per-seed results in seed order. It returns how many seeds
// failed and the first that did. A child that dies (a panic, a signal) or
// does not judge every seed of its range is an error naming the range:
// its unjudged seeds are never counted as passes.
func sweepProcesses(e *env, scenario string, from uint64, count, parallel int) (int, uint64, error) {
	if parallel <= 0 {
		parallel = runtime.NumCPU()
	}
	parallel = min(parallel, count)
	self, err := os.Executable()
	if err != nil {
		return 0, 0, fmt.Errorf("find this binary to run sweep processes: %w", err)
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
			"--seeds", strconv.Itoa(n), "--parallel", "1")
		// One core per process, and a collector tuned for a batch of
		// short-lived worlds: a 10,000-seed portfolio sweep on two cores
		// went from 150 s to under 115 s.
		c.cmd.Env = sim.SweepProcessEnv(os.Environ())
		c.cmd.Stdout, c.cmd.Stderr = &c.out, e.stderr
		if err := c.cmd.Start(); err != nil {
			stop(children)
			return 0, 0, fmt.Errorf("start sweep process: %w", err)
		}
		children, next = append(children, c), next+uint64(n)
	}
	failed, first := 0, uint64(0)
	for i, c := range children {
		werr := c.cmd.Wait()
		for _, line := range strings.SplitAfter(c.out.String(), "\n") {
			if strings.HasPrefix(line, "summary: ") || strings.HasPrefix(line, "first failure: ") {
				continue
			}
			io.WriteString(e.stdout, line)
		}
		var exit *exec.ExitError
		if werr != nil && !errors.As(werr, &exit) {
			stop(children[i+1:])
			return 0, 0, fmt.Errorf("sweep process for seeds %d..%d: %w", c.from, c.from+uint64(c.n)-1, werr)
		}
		f, firstFailed, err := judgeSweepChild(c.out.Bytes(), c.cmd.ProcessState.ExitCode(), c.cmd.ProcessState.String(), scenario, c.from, c.n)
		if err != nil {
			stop(children[i+1:])
			return 0, 0, err
		}
		if f > 0 && failed == 0 {
			first = firstFailed
		}
		failed += f
	}
	return failed, first, nil
}

// judgeSweepChild reads what a sweep process printed for its n seeds from
// from, and how it exited (code, and how as the process state says it),
// and returns how many of them failed and the first that did. Exit 0 with
// every seed passed and exit 1 with some failed are the only good ends:
// any other exit (a panic exits 2, a signal -1), a seed missing, out of
// order or without a verdict, or an exit that disagrees with the verdicts
// is an error naming the range and the command that reruns it.
func judgeSweepChild(out []byte, code int, how, scenario string, from uint64, n int) (int, uint64, error) {
	last := from + uint64(n) - 1
	rerun := fmt.Sprintf("rerun them: leasehold sim --scenario %s --seed %d --seeds %d --parallel 1", scenario, from, n)
	recs := parseSeedRecords(out)
	judged := 0
	for judged < len(recs) && recs[judged].judged && recs[judged].seed == from+uint64(judged) {
		judged++
	}
	if code != exitOK && code != exitFail {
		return 0, 0, fmt.Errorf("sweep process for seeds %d..%d ended with %s after judging %d of %d seeds; %s", from, last, how, judged, n, rerun)
	}
	if judged != n || len(recs) != n {
		return 0, 0, fmt.Errorf("sweep process for seeds %d..%d judged %d of its %d seeds in order (printed %d seed results) and exited %d; %s",
			from, last, judged, n, len(recs), code, rerun)
	}
	failed, first := 0, uint64(0)
	for _, rec := range recs {
		if !rec.pass {
			if failed == 0 {
				first = rec.seed
			}
			failed++
		}
	}
	if (failed > 0) != (code == exitFail) {
		return 0, 0, fmt.Errorf("sweep process for seeds %d..%d exited %d with %d of its %d seeds failed; %s", from, last, code, failed, n, rerun)
	}
	return failed, first, nil
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
