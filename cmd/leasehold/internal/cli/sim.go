package cli

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/evidence"
	"github.com/leasehold/leasehold/queue"
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
	// verbose prints every seed of a sweep and every scenario's coverage
	// map; without it a sweep prints its failed seeds, a line a scenario
	// and, for several scenarios, their table last.
	verbose          bool
	timeline, report string
	// pgURL is the PostgreSQL database of --store postgres, empty for
	// SQLite; store is opened on it by runSim.
	pgURL string
	store sim.Store
}

// simPgParallel is how many worlds a PostgreSQL sweep runs at once in this
// process by default: a world waits on the server most of its time.
const simPgParallel = 8

func runSim(e *env, args []string) int {
	o, err := simFlags(args)
	if err != nil {
		return fail(e, "sim", err)
	}
	if o.pgURL != "" {
		// The store holds at most sim.PostgresConnsDefault connections at
		// once, and waits out a server that refuses one for having too
		// many clients (other programs'): a world never sees either.
		if o.store, err = sim.PostgresStore(o.pgURL, sim.PostgresOptions{Clock: clockwork.NewRealClock()}); err != nil {
			return fail(e, "sim", badUsage("--db: %v", err))
		}
		defer func() {
			if err := o.store.Close(); err != nil {
				fmt.Fprintf(e.stderr, "leasehold sim: %v\n", err)
			}
		}()
		if err := o.store.Ready(e.ctx); err != nil {
			return fail(e, "sim", err)
		}
	}
	dir := ""
	if o.report != "" {
		if dir, err = reportDir(o.report); err != nil {
			return fail(e, "sim", err)
		}
	}
	intr, release := watchInterrupt(e.ctx)
	defer release()
	code := exitOK
	var runs []scenarioRun
	for _, sc := range o.scenarios {
		sc = o.store.Declared(sc) // the store's own cells (PostgreSQL's fused statements)
		run, c := simScenario(e, o, sc, intr)
		if c == exitUsage {
			return c
		}
		if intr.Interrupted() {
			// What finished is printed; no report of a part of a run, and
			// no scenario after this one.
			return intr.Code()
		}
		code = max(code, c)
		runs = append(runs, run)
		recs := run.recs
		if dir != "" {
			facts, err := buildFacts()
			var r reports.Report
			if err == nil {
				r, err = evidence.SimReport(sc, o.seed, o.count, o.keep, recs, facts)
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
	if len(runs) > 1 && !o.json {
		printSummaryTable(e.stdout, o, runs)
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
	report := fs.String("report", "", "also write a report of the run (index.html, report.md, report.json: fingerprints, verdicts, a timeline, drawn from the seeds' records; a sweep with a report runs in this process) into this directory")
	asJSON := fs.Bool("json", false, "print one JSON record per seed and a summary record per scenario (with its coverage map) instead of text")
	coverage := fs.Bool("coverage", false, "print each scenario's coverage map: transitions, refusals and fault kinds at phases its seeds reached (a sweep of at least 200 seeds fails on a declared cell none reached; with several scenarios, the maps only with -v)")
	verbose := fs.Bool("v", false, "a sweep prints every seed's record (and, with --coverage, every scenario's map), not only the failed seeds and a line a scenario")
	store := fs.String("store", sim.StoreSQLite, fmt.Sprintf("the store the worlds run on: sqlite (in memory) or postgres (a schema of its own per world, in the database --db names; a sweep runs --parallel worlds at once in this process, default %d, on at most %d connections)", simPgParallel, sim.PostgresConnsDefault))
	db := fs.String("db", "", "with --store postgres: the PostgreSQL database (postgres:// URL) the worlds' schemas are made in and dropped from (default: $LEASEHOLD_DB when it is a postgres:// URL, else $LEASEHOLD_TEST_POSTGRES)")
	if err := parse(fs, args); err != nil {
		return simOptions{}, err
	}
	pgURL, err := simStoreURL(*store, *db)
	if err != nil {
		return simOptions{}, err
	}
	o := simOptions{seed: *seed, count: *count, parallel: *parallel, shrink: *shrink, determinism: *determinism,
		trace: *trace, json: *asJSON, coverage: *coverage, verbose: *verbose, timeline: *timeline, report: *report, pgURL: pgURL}
	if o.scenarios, err = simScenarios(*scenarioName); err != nil {
		return o, err
	}
	return o, checkSimOptions(&o, *keep)
}

// simScenarios returns the scenario --scenario names, or every scenario in
// turn for all.
func simScenarios(name string) ([]scenarios.Scenario, error) {
	if name != "all" {
		sc, err := scenarios.Get(name)
		if err != nil {
			return nil, badUsage("--scenario: %v", err)
		}
		return []scenarios.Scenario{sc}, nil
	}
	var all []scenarios.Scenario
	for _, n := range scenarios.Names() {
		sc, _ := scenarios.Get(n)
		all = append(all, sc)
	}
	return all, nil
}

// checkSimOptions range-checks o and the flags' combinations, and sets
// o.keep from --events (keep), checked against the seed's schedule.
func checkSimOptions(o *simOptions, keep string) error {
	if o.count < 1 || o.count > 10_000_000 {
		return badUsage("--seeds: must be between 1 and 10000000, got %d", o.count)
	}
	if uint64(o.count-1) > simSeedMax-o.seed {
		return badUsage("--seeds: %d seeds from --seed %d would pass the last seed %d", o.count, o.seed, simSeedMax)
	}
	if o.parallel < 0 || o.parallel > 256 {
		return badUsage("--parallel: must be between 0 and 256, got %d", o.parallel)
	}
	if (o.trace || o.timeline != "") && o.count != 1 {
		return badUsage("--trace and --timeline describe one seed; drop --seeds")
	}
	if len(o.scenarios) > 1 && (keep != "" || o.timeline != "" || o.report != "") {
		return badUsage("--scenario all: --events, --timeline and --report name one scenario's run; pick a scenario")
	}
	if o.timeline != "" {
		if fi, err := os.Stat(o.timeline); err == nil && fi.IsDir() {
			return badUsage("--timeline: %s is a directory, not a file", o.timeline)
		}
		if fi, err := os.Stat(filepath.Dir(o.timeline)); err != nil || !fi.IsDir() {
			return badUsage("--timeline: the directory of %s does not exist", o.timeline)
		}
	}
	var err error
	if o.keep, err = parseIndices(keep); err != nil {
		return badUsage("--events: %v", err)
	}
	if o.keep != nil {
		if o.count != 1 {
			return badUsage("--events replays one seed; drop --seeds")
		}
		sc := o.scenarios[0]
		n := len(sim.Generate(sc, o.seed, sim.MixFor(sc, o.seed)))
		if last := o.keep[len(o.keep)-1]; last >= n {
			return badUsage("--events: index %d is past the end of seed %d's schedule (%d events, 0 to %d)", last, o.seed, n, n-1)
		}
	}
	return nil
}

// simStoreURL checks --store and --db and returns the PostgreSQL URL the
// worlds run in, or "" for SQLite.
func simStoreURL(store, db string) (string, error) {
	switch store {
	case sim.StoreSQLite:
		if db != "" {
			return "", badUsage("--db: the SQLite simulator runs in memory; --db names a PostgreSQL database for --store postgres")
		}
		return "", nil
	case sim.StorePostgres:
	default:
		return "", badUsage("--store: want sqlite or postgres, got %q", store)
	}
	if db == "" {
		if env := os.Getenv("LEASEHOLD_DB"); strings.Contains(env, "://") {
			db = env
		} else {
			db = os.Getenv(pgtestEnv)
		}
	}
	if db == "" {
		return "", badUsage("--store postgres: name the database with --db postgres://HOST/DB (or set LEASEHOLD_DB)")
	}
	loc, err := queue.ParseLocation(db)
	if err != nil {
		return "", badUsage("%v", strings.TrimSuffix(err.Error(), ": "+queue.ErrBadLocation.Error()))
	}
	if loc.Kind != queue.StorePostgres {
		return "", badUsage("--db: --store postgres needs a postgres:// URL, not the file %s", loc.String())
	}
	return loc.URL, nil
}

// pgtestEnv names the test server's URL (internal/pgtest.Env), which a
// PostgreSQL sim falls back on.
const pgtestEnv = "LEASEHOLD_TEST_POSTGRES"

// scenarioRun is one scenario's run: its seeds' records, its summary and
// coverage, and how long it took.
type scenarioRun struct {
	sc      scenarios.Scenario
	recs    []evidence.SeedRecord
	sum     evidence.SummaryRecord
	cov     sim.Coverage
	elapsed time.Duration
}

// simScenario runs one scenario as the options say (one seed, or a sweep
// in this process or in child processes), prints the seeds o.showSeed
// lets through and the summary, and returns the run and the exit code.
// Interrupted, it starts no further seed, and its summary counts the
// seeds judged from the first before it stopped (with the command that
// resumes the sweep).
func simScenario(e *env, o simOptions, sc scenarios.Scenario, intr *simInterrupt) (scenarioRun, int) {
	var t simTally
	start := time.Now()
	if err := simSeeds(e, o, sc, intr, &t); err != nil {
		return scenarioRun{sc: sc, recs: t.recs}, fail(e, "sim", err)
	}
	run := scenarioRun{sc: sc, recs: t.recs, sum: t.summary(o, sc), cov: t.cov, elapsed: time.Since(start)}
	printSummary(e, o, sc, run.sum, t.cov, run.elapsed)
	if run.sum.Interrupted {
		fmt.Fprintf(e.stderr, "leasehold sim: interrupted (%s) after %d of %d seeds of scenario %s\n", intr.Name(), run.sum.Seeds, o.count, sc.Name)
	}
	if !run.sum.Pass {
		return run, exitFail
	}
	return run, exitOK
}

// showSeed reports whether a seed's record is printed: always as JSON (the
// records are what other programs read), for one seed, with -v, and for a
// seed that failed (ok false: its verdict, or what was asked of it).
func (o simOptions) showSeed(ok bool) bool {
	return o.json || o.count == 1 || o.verbose || !ok
}

// simSeeds runs the scenario's seeds one at a time in this process (one
// seed, or a sweep that shrinks, checks determinism or replays events), in
// child processes, or as a sweep in this process, and gives t each seed's
// record as it is judged. It starts no seed once intr is interrupted.
func simSeeds(e *env, o simOptions, sc scenarios.Scenario, intr *simInterrupt, t *simTally) error {
	switch {
	case o.keep != nil || o.shrink || o.determinism || o.count == 1:
		last := o.seed + uint64(o.count-1)
		for s := o.seed; !intr.Interrupted(); s++ {
			rec, ok := simOne(e, o, sc, s, intr.Stop())
			t.take(rec)
			if !ok && rec.Pass {
				t.failed++ // the determinism check or the timeline failed
			}
			if s == last {
				break
			}
		}
		return nil
	case o.parallel != 1 && o.report == "" && o.store.Name() == sim.StoreSQLite:
		return sweepProcesses(e, o, sc, intr.Stop(), func(rec evidence.SeedRecord) {
			if o.showSeed(rec.Pass) {
				printRecord(e, rec, o.json)
			}
			t.take(rec)
		})
	default:
		// A report draws a seed's timeline from its record, so a sweep with
		// one records them, in this process (its goroutines are the
		// parallel runs).
		// A PostgreSQL sweep runs its worlds in this process too: each
		// waits on the server most of its time.
		parallel := o.parallel
		if parallel == 0 && o.store.Name() == sim.StorePostgres {
			parallel = simPgParallel
		}
		sim.Sweep(sim.SweepConfig{Scenario: sc, From: o.seed, Count: o.count, Parallel: parallel, Stop: intr.Stop(),
			Timelines: o.report != "", Store: o.store}, func(r sim.Result) {
			rec := evidence.SeedRecordOf(r)
			if o.showSeed(rec.Pass) {
				printRecord(e, rec, o.json)
			}
			t.take(rec)
		})
		return nil
	}
}

// simTally gathers a scenario's seed records as they are judged: the
// records, their coverage, and the failures.
type simTally struct {
	recs        []evidence.SeedRecord
	cov         sim.Coverage
	failed      int
	firstFailed uint64
}

// take adds a seed's record.
func (t *simTally) take(rec evidence.SeedRecord) {
	if len(t.recs) > 0 && (rec.Pass || t.failed > 0) {
		rec.Timeline = nil // the report draws the first seed or the first failed one
	}
	t.recs = append(t.recs, rec)
	t.cov.Add(rec.Coverage)
	if !rec.Pass {
		if t.failed == 0 {
			t.firstFailed = rec.Seed
		}
		t.failed++
	}
}

// summary returns the scenario's summary record of the seeds taken: it
// fails on a failed seed, a declared coverage cell unreached, or fewer
// seeds judged than o asked for (only an interruption judges fewer).
func (t *simTally) summary(o simOptions, sc scenarios.Scenario) evidence.SummaryRecord {
	missing := t.cov.Missing(sc)
	judged := len(t.recs)
	sum := evidence.SummaryRecord{Record: evidence.RecordSummary, Scenario: sc.Name, From: o.seed, Seeds: judged, Passed: judged - t.failed,
		Failed: t.failed, FirstFailed: t.firstFailed, CoverageEnforced: t.cov.Enforced(), Unreached: t.cov.Unreached(sc),
		Coverage: t.cov, Pass: t.failed == 0 && len(missing) == 0}
	if judged < o.count {
		// Only an interruption judges fewer seeds than asked for.
		sum.Interrupted, sum.Requested, sum.Pass = true, o.count, false
	}
	if sum.Unreached == nil {
		sum.Unreached = []scenarios.Cell{}
	}
	return sum
}

// printSummary prints a scenario's summary: its record, or the text
// (the coverage map if asked for, the first failure and the unreached
// cells, then the counts and speed of a sweep on one line, last). With
// several scenarios a sweep prints the maps only with -v: their table
// (printSummaryTable) counts the cells each reached.
func printSummary(e *env, o simOptions, sc scenarios.Scenario, sum evidence.SummaryRecord, cov sim.Coverage, elapsed time.Duration) {
	if o.json {
		writeJSONLine(e.stdout, sum)
		return
	}
	if sum.Interrupted {
		fmt.Fprintf(e.stdout, "summary: scenario %s seeds from %d: interrupted after %d of %d seeds: %d passed, %d failed in %.1fs\n",
			sc.Name, sum.From, sum.Seeds, sum.Requested, sum.Passed, sum.Failed, elapsed.Seconds())
		if sum.Failed > 0 {
			fmt.Fprintf(e.stdout, "first failure: make sim SEED=%d SCENARIO=%s\n", sum.FirstFailed, sc.Name)
		}
		fmt.Fprintf(e.stdout, "resume: leasehold sim --scenario %s --seed %d --seeds %d\n", sc.Name, sum.From+uint64(sum.Seeds), sum.Requested-sum.Seeds)
		return
	}
	if o.coverage && (o.count == 1 || o.verbose || len(o.scenarios) == 1) {
		fmt.Fprint(e.stdout, cov.Table(sc))
	}
	if sum.Failed > 0 && o.count > 1 {
		fmt.Fprintf(e.stdout, "first failure: make sim SEED=%d SCENARIO=%s\n", sum.FirstFailed, sc.Name)
	}
	if len(cov.Missing(sc)) > 0 {
		fmt.Fprintln(e.stdout, cov.MissingSummary(sc))
	}
	if o.count > 1 {
		fmt.Fprintf(e.stdout, "summary: scenario %s seeds %d..%d: %d passed, %d failed in %.1fs (%.0f seeds/s)\n",
			sc.Name, sum.From, sum.From+uint64(sum.Seeds)-1, sum.Passed, sum.Failed, elapsed.Seconds(), float64(o.count)/elapsed.Seconds())
	}
}

// printSummaryTable prints, after several scenarios, one row each (its
// seeds passed and failed, the declared coverage cells its seeds reached,
// its time) and a row of them all: the last lines a run prints.
func printSummaryTable(w io.Writer, o simOptions, runs []scenarioRun) {
	last := o.seed + uint64(o.count) - 1
	fmt.Fprintf(w, "\nsummary of %d scenarios, seeds %d..%d:\n", len(runs), o.seed, last)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tpassed\tfailed\tcoverage\ttime\tverdict")
	var passed, failed int
	var elapsed time.Duration
	verdict := "pass"
	for _, r := range runs {
		declared := len(r.sc.Covers)
		reached := declared - len(r.cov.Unreached(r.sc))
		cov := fmt.Sprintf("%d/%d cells", reached, declared)
		if !r.cov.Enforced() {
			cov += " (reported only)"
		}
		v := "pass"
		if !r.sum.Pass {
			v, verdict = "FAIL", "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%.1fs\t%s\n", r.sc.Name, r.sum.Passed, r.sum.Failed, cov, r.elapsed.Seconds(), v)
		passed, failed, elapsed = passed+r.sum.Passed, failed+r.sum.Failed, elapsed+r.elapsed
	}
	fmt.Fprintf(tw, "all\t%d\t%d\t\t%.1fs\t%s\n", passed, failed, elapsed.Seconds(), verdict)
	_ = tw.Flush() // w is stdout; a lost line there has nowhere else to go
}

// simOne runs one seed, optionally shrinking a failure or checking
// determinism, prints its record (when o.showSeed lets it), and returns
// the record and whether everything asked of it passed.
func simOne(e *env, o simOptions, sc scenarios.Scenario, seed uint64, stop <-chan struct{}) (evidence.SeedRecord, bool) {
	cfg := sim.Config{Scenario: sc, Seed: seed, Keep: o.keep, Trace: o.trace, Timeline: o.timeline != "" || o.report != "", Store: o.store}
	r := sim.Run(cfg)
	rec := evidence.SeedRecordOf(r)
	ok := r.Pass
	if o.determinism {
		same := sim.Run(cfg).Fingerprint == r.Fingerprint
		rec.Deterministic = &same
		ok = ok && same
	}
	if o.shrink && !r.Pass {
		s := sim.Shrink(cfg, r, stop)
		rec.Shrunk = &evidence.ShrunkRecord{Broken: r.Broken(), Of: len(r.Schedule), Keep: s.Keep, Events: make([]string, len(s.Events)), Stopped: s.Stopped,
			Replay: fmt.Sprintf("leasehold sim --scenario %s --seed %d --events %s", sc.Name, seed, joinInts(s.Keep))}
		for i, ev := range s.Events {
			rec.Shrunk.Events[i] = ev.String()
		}
		if o.timeline != "" {
			r = sim.Run(sim.Config{Scenario: sc, Seed: seed, Keep: s.Keep, Timeline: true, Store: o.store})
		}
	}
	if o.timeline != "" {
		if err := writeTimeline(o.timeline, r); err != nil {
			fmt.Fprintf(e.stderr, "leasehold sim: %v\n", err)
			ok = false
		}
	}
	switch {
	case !o.showSeed(ok):
	case o.json:
		rec.Trace = r.Trace
		writeJSONLine(e.stdout, rec)
	default:
		printSeedText(e.stdout, rec, r.Trace)
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
	return reports.WriteFile(path, b)
}

// sweepProcesses runs the sweep o asks for across processes of this
// binary (sim.ProcessSweep), each running `sim --json` over its range,
// and hands each seed's record to each in seed order.
func sweepProcesses(e *env, o simOptions, sc scenarios.Scenario, stop <-chan struct{}, each func(evidence.SeedRecord)) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this binary to run sweep processes: %w", err)
	}
	var bad error // a seed line that is not a seed record, once judged
	err = sim.ProcessSweep{Scenario: sc, From: o.seed, Count: o.count, Processes: o.parallel, Stderr: e.stderr, Stop: stop, Clock: clockwork.NewRealClock(),
		Command: func(from uint64, n int) []string {
			return []string{self, "sim", "--scenario", sc.Name, "--seed", strconv.FormatUint(from, 10),
				"--seeds", strconv.Itoa(n), "--parallel", "1", "--json"}
		},
		Rerun: func(from uint64, n int) string {
			return fmt.Sprintf("leasehold sim --scenario %s --seed %d --seeds %d --parallel 1", sc.Name, from, n)
		},
	}.Run(func(line sim.SeedLine) {
		var rec evidence.SeedRecord
		if err := json.Unmarshal(line.Line, &rec); err != nil {
			bad = cmp.Or(bad, fmt.Errorf("sweep process: the record of seed %d: %w", line.Seed, err))
			return
		}
		each(rec)
	})
	return cmp.Or(err, bad)
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
