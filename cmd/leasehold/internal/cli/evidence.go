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

	"github.com/leasehold/leasehold/cmd/leasehold/internal/liverun"
	"github.com/leasehold/leasehold/cmd/leasehold/internal/view"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/scenarios"
	"github.com/leasehold/leasehold/sim"
)

func init() {
	register("evidence", "write the evidence report: simulated sweeps, the live demo, the failed attempt (out/evidence)", runEvidence)
}

// The failed attempt the report shows: a broken variant (compiled in with
// the leasehold_broken tag) the simulator must catch.
const (
	failedVariant  = "worker-ignores-receipts"
	failedScenario = "crash-storm"
)

// sweepStats is what the report needs from one scenario's sweep.
type sweepStats struct {
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

func buildEvidence(e *env, seeds int, demoPath, brokenBin, runbookJSON string) (reports.Report, error) {
	r := reports.Report{Title: "leasehold evidence", Generated: time.Now().UTC().Format(time.RFC3339),
		Fixture: reports.Section{Kind: reports.Fixture}, Live: reports.Section{Kind: reports.Live}}
	if err := addBuildFacts(&r); err != nil {
		return r, err
	}

	fmt.Fprintf(e.stdout, "sweeping %d seeds of each scenario...\n", seeds)
	stats := map[string]sweepStats{}
	for _, name := range scenarios.Names() {
		stats[name] = sweepScenario(name, seeds)
		r.Fixture.Sweeps = append(r.Fixture.Sweeps, stats[name].sweep)
		fmt.Fprintf(e.stdout, "  %-15s %d/%d passed\n", name, stats[name].sweep.Passed, seeds)
	}
	r.Fixture.About = []string{
		"Fixture: the real queue (SQLite, in memory) driven by seeded schedules under a fake clock that starts at " + sim.Epoch.Format(time.RFC3339) + ".",
		"Each seed draws its own fault mix (swarm): crash, stall, storage outage and storage faults (failed, ambiguous and busy commits, I/O errors), duplicate and late delivery, lost responses, crashes right after a call; each on or off at its own rate; the effect service runs as a seed-drawn kind (dedup, fenced, queryable, plain).",
		"Invariants are checked after every event; then faults heal and every task must settle (liveness); then each scenario's expected outcomes are checked.",
		fmt.Sprintf("Every figure here is reproducible: make sim SEED=n SCENARIO=name (or --seeds %d for the sweep).", seeds),
	}
	takeover, err := fixtureTakeover()
	if err != nil {
		return r, err
	}
	r.Fixture.Timelines = append(r.Fixture.Timelines, takeover)

	demo, err := liverun.Read(demoPath)
	if err != nil {
		return r, err
	}
	fillLive(&r, demo)

	failed, err := failedAttempt(e, brokenBin, seeds)
	if err != nil {
		return r, err
	}
	r.Failed = failed

	runbook, err := readRunbookResults(runbookJSON)
	if err != nil {
		return r, err
	}
	r.Checks = buildChecks(stats, seeds, demo, runbook)
	r.Commands = []reports.Command{
		{What: "everything in this report", Command: "make evidence"},
		{What: "one simulated seed (trace fingerprint, verdict)", Command: "make sim SEED=1 SCENARIO=portfolio"},
		{What: fmt.Sprintf("a scenario's sweep of %d seeds", seeds), Command: fmt.Sprintf("make sim SEED=1 SEEDS=%d SCENARIO=portfolio", seeds)},
		{What: "the live run", Command: "make demo (writes out/demo/result.json)"},
		{What: "the failed attempt", Command: r.Failed.Replay},
		{What: "the broken variants caught", Command: "go test -tags leasehold_broken -run Broken -v ./sim"},
		{What: "the runbook procedures", Command: "go test -run TestRunbook -v ./cmd/leasehold"},
	}
	r.Pass = true
	for _, c := range r.Checks {
		r.Pass = r.Pass && c.Pass()
	}
	r.Pass = r.Pass && r.Failed.FixedPass
	return r, r.Validate()
}

// addBuildFacts records in r what produced it: the build's versions, and
// the SQLite version and the PRAGMAs the queue opens with, read from a
// scratch database.
func addBuildFacts(r *reports.Report) error {
	dir, err := os.MkdirTemp("", "leasehold-evidence")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	q, err := queue.Open(context.Background(), queue.Options{Path: filepath.Join(dir, "q.db"), Clock: clockwork.NewRealClock(), IDs: randomIDs{}})
	if err != nil {
		return err
	}
	defer q.Close()
	var sqliteVersion string
	if err := q.DB().QueryRow("SELECT sqlite_version()").Scan(&sqliteVersion); err != nil {
		return err
	}
	v := buildVersion()
	r.Versions = reports.Versions{Module: v.Module, Commit: dash(v.Commit), Go: v.Go, SQLite: sqliteVersion, Schema: v.Schema}
	r.Pragmas = q.Pragmas()
	return nil
}

func sweepScenario(name string, seeds int) sweepStats {
	sc, _ := scenarios.Get(name)
	st := sweepStats{sweep: reports.Sweep{Scenario: name, From: 1, Seeds: seeds,
		Faults:  "swarm per seed" + floors(sc),
		Command: fmt.Sprintf("make sim SEED=1 SEEDS=%d SCENARIO=%s", seeds, name)}}
	var cov sim.Coverage
	sim.Sweep(sim.SweepConfig{Scenario: sc, From: 1, Count: seeds, Parallel: runtime.NumCPU()}, func(res sim.Result) {
		cov.Add(res.Coverage)
		if res.Pass {
			st.sweep.Passed++
		} else {
			st.sweep.Failed++
			st.failures = append(st.failures, fmt.Sprintf("seed %d: %s", res.Seed, res.Summary()))
		}
		if len(st.sweep.Fingerprints) < 3 {
			st.sweep.Fingerprints = append(st.sweep.Fingerprints, reports.Fingerprint{Seed: res.Seed, Fingerprint: res.Fingerprint})
		}
		st.events += res.Events + res.Rounds
		st.staleWrites += res.Stats.StaleWrites
		st.expiries += res.Stats.LeaseExpiries
		st.lateRefused += res.Stats.LateRefused
		st.reviews += res.Stats.Reviews
	})
	for _, row := range cov.Rows(sc) {
		st.sweep.Coverage = append(st.sweep.Coverage, reports.CoverageCell{Cell: row.Cell.String(), Seeds: row.Seeds, Declared: row.Declared})
	}
	st.coverageMissing = cov.MissingSummary(sc)
	return st
}

func floors(sc scenarios.Scenario) string {
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

// fixtureTakeover draws a simulated run of the late-result exercise: a
// claimant stalled, its lease expiring, the takeover and the late result
// refused by version.
func fixtureTakeover() (reports.Timeline, error) {
	sc := scenarios.LateResult()
	for seed := uint64(1); seed <= 50; seed++ {
		res := sim.Run(sim.Config{Scenario: sc, Seed: seed, Timeline: true})
		if res.Pass && res.Stats.LateRefused > 0 {
			t := simTimeline(fmt.Sprintf("late-result seed %d: stall, lease expiry, takeover, late result refused", seed), res.Timeline, res.Workers)
			t.Caption = fmt.Sprintf("Fixture, simulated time. Reproduce: make sim SEED=%d SCENARIO=late-result (fingerprint %s).", seed, res.Fingerprint)
			return t, nil
		}
	}
	return reports.Timeline{}, errors.New("no late-result seed in 1..50 showed the late result refused")
}

func fillLive(r *reports.Report, d liverun.Result) {
	r.Live.About = []string{
		fmt.Sprintf("Live: the %s scenario and the live fault stories over two real worker processes (leasehold worker), one file database, the wall clock, leases of %s; run %s, %.1f s, commit %s.",
			dash(d.Scenario), d.Settings["lease"], view.RFC3339(d.Started), float64(d.DurationMs)/1000, dash(d.Commit)),
		fmt.Sprintf("Machine: %s, %s/%s, %s CPUs, %s.", d.Machine["hostname"], d.Machine["goos"], d.Machine["goarch"], d.Machine["cpus"], d.Machine["go"]),
		"Outcomes were observed from outside the workers' memory: task states, audit events and submissions through the queue's Go API on the same database file, effects from the external service's ledger, and storage back-off and local lease expiry from the worker logs' JSON records. Reproduce: make demo.",
	}
	for _, o := range d.Outcomes {
		r.Live.Outcomes = append(r.Live.Outcomes, reports.Outcome{Name: o.Name, Expected: o.Expected, Observed: o.Observed, Pass: o.Pass, AtMs: o.AtMs})
	}
	r.Live.Series = demoSeries(d)
	r.Live.Timelines = append(r.Live.Timelines, liveTimeline(d))
}

// demoSeries turns the demo's metrics samples into chart series.
func demoSeries(d liverun.Result) []reports.Series {
	series := map[string]*reports.Series{}
	var order []string
	add := func(name, unit string, x int64, y float64) {
		s, ok := series[name]
		if !ok {
			s = &reports.Series{Name: name, Unit: unit}
			if strings.HasPrefix(name, "depth ") {
				s.Chart = "queue depth by state"
			}
			series[name] = s
			order = append(order, name)
		}
		s.Points = append(s.Points, reports.Point{X: x, Y: y})
	}
	for _, smp := range d.Samples {
		m := metricsRecordOf(smp.Metrics)
		for _, st := range model.States() {
			add("depth "+string(st), "tasks", smp.AtMs, float64(m.Depth[string(st)]))
		}
		add("oldest due queued task", "s", smp.AtMs, float64(m.OldestQueuedMs)/1000)
		add("completions", "tasks", smp.AtMs, float64(m.Completions))
		add("failures", "tasks", smp.AtMs, float64(m.Failures))
		add("retries", "attempts", smp.AtMs, float64(m.Retries))
		add("budget exhaustions", "tasks", smp.AtMs, float64(m.BudgetExhausted))
		add("queue wait (mean)", "ms", smp.AtMs, mean(m.QueueWait))
		add("run time (mean)", "ms", smp.AtMs, mean(m.RunTime))
	}
	out := make([]reports.Series, 0, len(order))
	for _, name := range order {
		out = append(out, *series[name])
	}
	return out
}

func mean(h histogramRecord) float64 {
	if h.Count == 0 {
		return 0
	}
	return float64(h.Sum) / float64(h.Count)
}

// failedAttempt runs the broken variant until a seed fails, shrinks it,
// and runs the same seeds against the real queue.
func failedAttempt(e *env, brokenBin string, seeds int) (*reports.Attempt, error) {
	if _, err := os.Stat(brokenBin); err != nil {
		return nil, fmt.Errorf("the broken build %s (go build -tags leasehold_broken -o %s ./cmd/leasehold): %w", brokenBin, brokenBin, err)
	}
	a := &reports.Attempt{Title: "A worker that calls an operation that already has a receipt",
		Variant: failedVariant, Scenario: failedScenario,
		Story: []string{
			"The effects ledger's promise is that an operation with a receipt is never called again. The variant " + failedVariant + " (build tag leasehold_broken) removes one line from the worker: on a retry it ignores the receipt the queue reports and calls the service again.",
			"The harness does not know which variant runs. It sweeps the scenario's seeds with the usual invariants until one breaks, then shrinks the failing schedule while the same invariant still breaks, and prints the command that replays it.",
			"Investigating the shrunk run (its trace is below) shows the sequence: an operation's receipt is on record when a later claim reaches its step (a lost response that was reconciled, or settled as applied by the operator after the provider confirmed it), the queue answers the intent with receipted, and the broken worker calls the service again; a service that does not deduplicate applies it twice. The change that fixes it is the production code itself: on a receipted intent the worker goes straight to charging the step. The same seeds then pass against the real build.",
			"Real bugs the harness found during development are in the commit history: a worker that never claimed again after a claim dropped following a failed heartbeat (found by the first portfolio sweeps; commit ae06659), cancellation seen mid-step acted on only after the effect call, concurrency above the claim batch limit never claiming, and a shrinker that accepted empty schedules (commit 7ab61d4).",
		}}
	env := append(os.Environ(), "LEASEHOLD_BROKEN="+failedVariant)
	var failed seedRecord
	for s := uint64(1); s <= uint64(seeds) && failed.Seed == 0; s++ {
		recs, _, err := simRecords(brokenBin, env, "--scenario", failedScenario, "--seed", fmt.Sprint(s))
		if err != nil {
			return nil, err
		}
		a.SeedsRun = int(s)
		if len(recs) == 1 && !recs[0].Pass {
			failed = recs[0]
		}
	}
	if failed.Seed == 0 {
		return nil, fmt.Errorf("broken variant %s was not caught within %d seeds of %s", failedVariant, seeds, failedScenario)
	}
	seed := failed.Seed
	a.Seed, a.Detail = seed, failed.Summary
	tl := filepath.Join(os.TempDir(), fmt.Sprintf("leasehold-failed-%d.json", os.Getpid()))
	defer os.Remove(tl)
	recs, _, err := simRecords(brokenBin, env, "--scenario", failedScenario, "--seed", fmt.Sprint(seed), "--shrink", "--timeline", tl)
	if err != nil {
		return nil, err
	}
	if len(recs) != 1 || recs[0].Shrunk == nil {
		return nil, fmt.Errorf("shrinking seed %d gave no shrunk record", seed)
	}
	shrunk := recs[0].Shrunk
	a.Invariant = shrunk.Broken
	for i, ev := range shrunk.Events {
		a.Shrunk = append(a.Shrunk, fmt.Sprintf("%d %s", shrunk.Keep[i], ev))
	}
	a.Replay = fmt.Sprintf("LEASEHOLD_BROKEN=%s bin/leasehold-broken sim --scenario %s --seed %d --events %s",
		failedVariant, failedScenario, seed, joinInts(shrunk.Keep))
	var f timelineFile
	if b, err := os.ReadFile(tl); err == nil && json.Unmarshal(b, &f) == nil {
		// The shrunk run happens in a few simulated milliseconds: draw it
		// in the order things happened instead.
		entries := append([]sim.TimelineEntry(nil), f.Entries...)
		for i := range entries {
			entries[i].AtMs = int64(i) * 10
		}
		t := simTimeline(fmt.Sprintf("%s seed %d, shrunk to %d events, under %s: the violation", failedScenario, seed, len(a.Shrunk), failedVariant), entries, f.Workers)
		t.Unit = "steps in order (x10)"
		t.Caption = "Fixture. The shrunk run takes a few simulated milliseconds, so it is drawn in the order things happened. The red mark is where the invariant broke. Replay: " + a.Replay
		a.Timeline = &t
	}
	recs, _, err = simRecords(brokenBin, env, "--scenario", failedScenario, "--seed", fmt.Sprint(seed), "--events", joinInts(shrunk.Keep), "--trace")
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		for _, line := range rec.Trace {
			if line == "" || strings.Contains(line, "nothing due") || strings.Contains(line, " idle") || strings.Contains(line, "no-op") {
				continue
			}
			a.Trace = append(a.Trace, line)
		}
	}
	// The same seeds against the real build.
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	_, sum, err := simRecords(self, os.Environ(), "--scenario", failedScenario, "--seed", "1", "--seeds", fmt.Sprint(seed), "--parallel", "1")
	if err != nil {
		return nil, err
	}
	a.FixedPass = sum.Pass
	summary := fmt.Sprintf("scenario %s seeds %d..%d: %d passed, %d failed", sum.Scenario, sum.From, sum.From+uint64(sum.Seeds)-1, sum.Passed, sum.Failed)
	a.FixedRun = fmt.Sprintf("leasehold sim --scenario %s --seed 1 --seeds %d (real build): %s", failedScenario, seed, summary)
	fmt.Fprintf(e.stdout, "failed attempt: %s caught at seed %d, shrunk to %d events; real build: %s\n", failedVariant, seed, len(a.Shrunk), summary)
	return a, nil
}

// simRecords runs bin's sim command with args and --json under env, and
// returns the seed records and the summary record it printed. Exit 1 (a
// seed failed) is a verdict, not an error; any other failure, or output
// without a summary record, is.
func simRecords(bin string, env []string, args ...string) ([]seedRecord, summaryRecord, error) {
	cmd := exec.Command(bin, append(append([]string{"sim"}, args...), "--json")...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == exitFail) {
		return nil, summaryRecord{}, fmt.Errorf("%s sim %s: %w: %s", bin, strings.Join(args, " "), err, oneLine(stderr.String()))
	}
	recs, sums, err := readRecords(stdout.Bytes())
	if err == nil && len(sums) != 1 {
		err = fmt.Errorf("%d summary records, want 1", len(sums))
	}
	if err != nil {
		return nil, summaryRecord{}, fmt.Errorf("%s sim %s: %w", bin, strings.Join(args, " "), err)
	}
	return recs, sums[0], nil
}

// readRunbookResults reads go test -json output and returns each
// TestRunbook* test's verdict.
func readRunbookResults(path string) (map[string]bool, error) {
	results := map[string]bool{}
	if path == "" {
		return results, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the runbook test results: %w", err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		var ev struct {
			Action string `json:"Action"`
			Test   string `json:"Test"`
		}
		if json.Unmarshal(line, &ev) != nil || !strings.HasPrefix(ev.Test, "TestRunbook") || strings.Contains(ev.Test, "/") {
			continue
		}
		switch ev.Action {
		case "pass":
			results[ev.Test] = true
		case "fail":
			results[ev.Test] = false
		}
	}
	return results, nil
}

// liveResult is the live outcome of story (of the scenario task named,
// when task is not empty) as a check's result.
func liveResult(d liverun.Result, story liverun.Story, task, inputs string) reports.Result {
	o, ok := d.Find(story, task)
	if !ok {
		return reports.Result{Kind: reports.Live, Inputs: inputs, Observed: fmt.Sprintf("not observed: the demo has no outcome %s %s", story, task), Command: "make demo"}
	}
	return reports.Result{Kind: reports.Live, Inputs: inputs, Observed: o.Observed, Pass: o.Pass, Command: "make demo"}
}

func fixtureResult(st sweepStats, inputs, observed string) reports.Result {
	obs := observed
	if len(st.failures) > 0 {
		obs = fmt.Sprintf("%d of %d seeds failed; first: %s", st.sweep.Failed, st.sweep.Seeds, st.failures[0])
	}
	if st.coverageMissing != "" {
		obs += "; " + st.coverageMissing
	}
	return reports.Result{Kind: reports.Fixture, Inputs: fmt.Sprintf("%s (%d seeds, %s)", inputs, st.sweep.Seeds, st.sweep.Faults),
		Observed: obs, Pass: st.sweep.Failed == 0 && st.coverageMissing == "", Command: st.sweep.Command}
}

func buildChecks(stats map[string]sweepStats, seeds int, d liverun.Result, runbook map[string]bool) []reports.Check {
	total, events, stale := 0, 0, int64(0)
	for _, st := range stats {
		total += st.sweep.Seeds
		events += st.events
		stale += st.staleWrites
	}
	names := make([]string, 0, len(stats))
	for name := range stats {
		names = append(names, name)
	}
	sort.Strings(names)
	failedSeeds, firstFailure := 0, ""
	for _, name := range names {
		st := stats[name]
		failedSeeds += st.sweep.Failed
		if firstFailure == "" && len(st.failures) > 0 {
			firstFailure = name + " " + st.failures[0]
		}
	}
	singleClaim := fmt.Sprintf("%d seeds, %d events, the single-claim history checked after each: no write accepted under an older fence, none after its lease, none from another owner; %d stale writes refused", total, events, stale)
	if failedSeeds > 0 {
		singleClaim = fmt.Sprintf("%d of %d seeds failed; first: %s", failedSeeds, total, firstFailure)
	}
	lease := d.Settings["lease"]
	if lease == "" {
		lease = "(not recorded)"
	}
	pf := stats["portfolio"]
	checks := []reports.Check{
		{ID: "single-claim", Title: "A task never executes under two valid claims", Results: []reports.Result{
			{Kind: reports.Fixture, Inputs: fmt.Sprintf("every scenario, %d seeds each, swarm faults", seeds),
				Observed: singleClaim, Pass: failedSeeds == 0, Command: fmt.Sprintf("make sim SEED=1 SEEDS=%d SCENARIO=<name>", seeds)},
			liveResult(d, liverun.StoryStop, "", fmt.Sprintf("a worker frozen with SIGSTOP past its lease (%s), then continued", lease)),
			liveResult(d, liverun.StoryKill, "", "a worker killed with SIGKILL mid-task"),
		}},
		{ID: "budget-cancel", Title: "Budget and cancellation stops are visible to the caller", Results: []reports.Result{
			fixtureResult(pf, "portfolio: the budget task must end failed/budget_exhausted, the cancel task cancelled/cancelled_by_caller with cancelled_by set", "every seed: both ends as expected, and the over-budget charge never applied"),
			liveResult(d, liverun.StoryExpect, "budget", "the portfolio's budget task (cost 4+4+4 with a charge, budget 10), read through the queue"),
			liveResult(d, liverun.StoryCancel, "cancel", "the portfolio's cancel task cancelled by its caller while running, read through the queue"),
			liveResult(d, liverun.StoryOverBudget, "budget", "the service ledger after the run"),
		}},
		{ID: "user-limit", Title: "The per-user concurrency limit holds", Results: []reports.Result{
			fixtureResult(stats["quota"], "quota: users with running limits 1 and 2 and depth caps under three workers", "no claim ever left a user above its running limit"),
			liveResult(d, liverun.StoryUserLimit, "", "two tasks of one user under a running limit of 1, two workers"),
		}},
		{ID: "crash", Title: "A worker crash is survived", Results: []reports.Result{
			fixtureResult(stats["crash-storm"], "crash-storm: frequent crashes and restarts, also right after an external call", "every task completed (or recovered by the operator) with no effect applied twice"),
			liveResult(d, liverun.StoryKill, "", fmt.Sprintf("SIGKILL mid-task, lease %s", lease)),
		}},
		{ID: "duplicate-delivery", Title: "Duplicate delivery changes nothing", Results: []reports.Result{
			fixtureResult(pf, "portfolio with duplicated writes and late redeliveries in the fault mix", "no step charged twice, no receipt twice, no accepted write under an old fence"),
			liveResult(d, liverun.StoryDuplicateDeliver, "", "worker w2 started with "+liverun.DuplicateEnv+"=complete"),
		}},
		{ID: "storage", Title: "Unavailable storage is survived, never a false success", Results: []reports.Result{
			fixtureResult(stats["storage-outage"], "storage-outage: long outages and failed, ambiguous and busy commits", "every submit durable or refused; ambiguous commits recognised on retry; everything completed"),
			liveResult(d, liverun.StoryStorageSubmit, "", "another connection holds an exclusive lock for 2.5 s; a submit meanwhile"),
			liveResult(d, liverun.StoryStorageBackoff, "", "the worker logs during the lock"),
		}},
		{ID: "late-result", Title: "A late result is rejected by claim version", Results: []reports.Result{
			fixtureResult(stats["late-result"], "late-result: the claimant stalled, its lease expired, another worker took over, the stalled one delivered its result",
				fmt.Sprintf("the late result was refused in %d seeds (the rest: the story was interrupted by other faults); never accepted", stats["late-result"].lateRefused)),
			liveResult(d, liverun.StoryStop, "", "SIGSTOP past the lease, SIGCONT after the takeover"),
		}},
		{ID: "restart-paused", Title: "Restart while paused resumes with the recorded version", Results: []reports.Result{
			fixtureResult(pf, "portfolio: a worker restarted while the approval task waits; an approval naming an outdated version refused, then the recorded one", "every seed: completed, approved_by manager"),
			liveResult(d, liverun.StoryApproval, "approval", "SIGTERM and restart of a worker while the task waits at its gate; an approval naming the recorded version"),
		}},
		{ID: "replay", Title: "An exact replay returns the original task; a changed payload is refused", Results: []reports.Result{
			fixtureResult(pf, "portfolio: the duplicate task submitted, replayed exactly, then with a changed payload under the same key", "every seed: same ID with replay=true, then an idempotency conflict"),
			liveResult(d, liverun.StoryReplay, "duplicate", "the same request submitted twice through the queue"),
			liveResult(d, liverun.StoryConflict, "duplicate", "the same key submitted with a changed payload"),
		}},
	}
	recovery := reports.Check{ID: "recovery", Title: "Pending, failed and uncertain-effect tasks recover as the runbook describes"}
	for _, t := range []struct{ test, what string }{
		{"TestRunbookPendingTooLong", "a task pending behind its user's limit: the runbook's commands raise the limit and it is claimed"},
		{"TestRunbookFailedTask", "a failed task: the runbook's commands show the reason and resubmit under a new key"},
		{"TestRunbookUncertainEffect", "an uncertain effect: settled as applied (never called again), as not applied (made once), or resolved"},
		{"TestRunbookDeadLetter", "a dead-lettered task: requeued with a zero grant, or resolved"},
		{"TestRunbookStuckRunningTask", "a stuck running task: reaped (attempt charged) or cancelled"},
	} {
		pass, ran := runbook[t.test]
		observed := "passed: every command in RUNBOOK.md for it ran and the task ended as the runbook says"
		if !ran {
			observed = "not run (pass --runbook with go test -json output)"
		} else if !pass {
			observed = "failed"
		}
		recovery.Results = append(recovery.Results, reports.Result{Kind: reports.Fixture, Inputs: t.what + " (scripted database, commands parsed from docs/RUNBOOK.md)",
			Observed: observed, Pass: pass, Command: "go test -run " + t.test + " ./cmd/leasehold"})
	}
	recovery.Results = append(recovery.Results, fixtureResult(pf, "portfolio liveness phase: the operator settles uncertain effects by what the provider reports and requeues dead letters with a zero grant",
		fmt.Sprintf("every seed settled with each effect applied at most once (%d reviews recovered across the sweep)", pf.reviews)))
	checks = append(checks, recovery)
	return checks
}

// simTimeline draws a simulated run's timeline.
func simTimeline(title string, entries []sim.TimelineEntry, workers int) reports.Timeline {
	t := reports.Timeline{Title: title, Kind: reports.Fixture, Unit: "simulated ms"}
	for i := 0; i < workers; i++ {
		t.Lanes = append(t.Lanes, fmt.Sprintf("w%d", i))
	}
	type open struct {
		bar   reports.Bar
		index int
	}
	claims := map[string]*open{}
	key := func(task string, fence int64) string { return fmt.Sprintf("%s/%d", task, fence) }
	closeBar := func(k string, at int64, why string) {
		if o, ok := claims[k]; ok {
			o.bar.End = at
			o.bar.Detail += "; ended: " + why
			t.Bars = append(t.Bars, o.bar)
			delete(claims, k)
		}
	}
	var end int64
	for _, e := range entries {
		end = max(end, e.AtMs)
		detail := fmt.Sprintf("task %s attempt %d fence %d", e.TaskID, e.Attempt, e.Fence)
		if e.OpID != "" {
			detail += " op " + e.OpID
		}
		if e.Detail != "" {
			detail += ": " + e.Detail
		}
		k := key(e.TaskID, e.Fence)
		switch e.Kind {
		case "claim":
			claims[k] = &open{bar: reports.Bar{Lane: e.Worker, Start: e.AtMs, TaskID: e.TaskID, Attempt: e.Attempt, Fence: e.Fence,
				Label: fmt.Sprintf("%s f%d", shortID(e.TaskID), e.Fence), Detail: detail}}
		case "complete", "fail", "pause", "release", "cancel_ack", sim.TimelineDrop:
			closeBar(k, e.AtMs, e.Kind+" "+e.Detail)
			if e.Kind != sim.TimelineDrop {
				t.Marks = append(t.Marks, reports.Mark{Lane: e.Worker, At: e.AtMs, Kind: reports.MarkState, Label: e.Kind, Detail: detail})
			} else {
				t.Marks = append(t.Marks, reports.Mark{Lane: e.Worker, At: e.AtMs, Kind: reports.MarkStale, Label: "dropped", Detail: detail})
			}
		case "heartbeat":
			t.Marks = append(t.Marks, reports.Mark{Lane: e.Worker, At: e.AtMs, Kind: reports.MarkHeartbeat, Label: "hb", Detail: detail})
		case "call", "receipt", "reconcile":
			t.Marks = append(t.Marks, reports.Mark{Lane: e.Worker, At: e.AtMs, Kind: reports.MarkEffect, Label: e.Kind, Detail: detail})
		case sim.TimelineExpiry:
			lane := ""
			if o, ok := claims[k]; ok {
				lane = o.bar.Lane
			}
			closeBar(k, e.AtMs, "lease expired")
			t.Marks = append(t.Marks, reports.Mark{Lane: lane, At: e.AtMs, Kind: reports.MarkExpiry, Label: "lease expired", Detail: detail})
		case sim.TimelineStale:
			t.Marks = append(t.Marks, reports.Mark{Lane: e.Worker, At: e.AtMs, Kind: reports.MarkStale, Label: "refused", Detail: detail})
		case sim.TimelineState:
			t.Marks = append(t.Marks, reports.Mark{At: e.AtMs, Kind: reports.MarkState, Label: firstWord(e.Detail), Detail: detail})
		case sim.TimelineFault:
			if e.Event == sim.EvStorageDown {
				t.Shades = append(t.Shades, reports.Shade{Start: e.AtMs, End: e.AtMs + e.DurationMs, Label: "storage down"})
				end = max(end, e.AtMs+e.DurationMs)
			}
			t.Marks = append(t.Marks, reports.Mark{Lane: e.Worker, At: e.AtMs, Kind: reports.MarkFault, Label: string(e.Event), Detail: e.Detail})
			if e.Event == sim.EvCrash {
				for k, o := range claims {
					if o.bar.Lane == e.Worker {
						closeBar(k, e.AtMs, "worker crashed")
					}
				}
			}
		case sim.TimelineViolation:
			m := reports.Mark{At: e.AtMs, Kind: reports.MarkViolation, Label: "violation", Detail: e.Detail}
			t.Violation = &m
		}
	}
	keys := make([]string, 0, len(claims))
	for k := range claims {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		closeBar(k, end, "still held at the end")
	}
	sort.SliceStable(t.Bars, func(i, j int) bool { return t.Bars[i].Start < t.Bars[j].Start })
	t.End = end + max(end/50, 10)
	for i := range t.Shades {
		t.Shades[i].End = min(t.Shades[i].End, t.End)
	}
	return t
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func firstWord(s string) string {
	w, _, _ := strings.Cut(strings.TrimSpace(s), " ")
	return w
}

// liveTimeline draws the demo's run from its audit events and the moments
// it noted (signals, the storage outage).
func liveTimeline(d liverun.Result) reports.Timeline {
	t := reports.Timeline{Title: "the live demo: two workers, signals and the wall clock", Kind: reports.Live, Unit: "wall ms",
		Lanes: []string{"w1", "w2"}}
	at := func(ts time.Time) int64 { return max(0, ts.Sub(d.Started).Milliseconds()) }
	type open struct{ bar reports.Bar }
	claims := map[string]*open{}
	var end int64 = d.DurationMs
	events := append([]model.Event(nil), d.Events...)
	sort.SliceStable(events, func(i, j int) bool { return events[i].Seq < events[j].Seq })
	for _, e := range events {
		x := at(e.At)
		end = max(end, x)
		detail := fmt.Sprintf("task %s attempt %d fence %d", e.TaskID, e.Attempt, e.Fence)
		if e.OpID != "" {
			detail += " op " + e.OpID
		}
		if e.Detail != "" {
			detail += ": " + e.Detail
		}
		k := fmt.Sprintf("%s/%d", e.TaskID, e.Fence)
		switch {
		case e.Kind == "claimed":
			claims[k] = &open{bar: reports.Bar{Lane: e.Actor, Start: x, TaskID: e.TaskID, Attempt: e.Attempt, Fence: e.Fence,
				Label: fmt.Sprintf("%s f%d", shortID(e.TaskID), e.Fence), Detail: detail + " claimed by " + e.Actor}}
		case e.From == "running" && e.To != "running":
			lane := e.Actor
			if o, ok := claims[k]; ok {
				o.bar.End = x
				o.bar.Detail += "; ended: " + string(e.Kind)
				lane = o.bar.Lane
				t.Bars = append(t.Bars, o.bar)
				delete(claims, k)
			}
			kind := reports.MarkState
			if e.Kind == "lease_expired" {
				kind = reports.MarkExpiry
			}
			t.Marks = append(t.Marks, reports.Mark{Lane: lane, At: x, Kind: kind, Label: string(e.Kind), Detail: detail})
		case e.Kind == "stale_write":
			t.Marks = append(t.Marks, reports.Mark{Lane: e.Actor, At: x, Kind: reports.MarkStale, Label: "refused", Detail: detail})
		case e.Kind == "effect_intent" || e.Kind == "effect_receipt":
			t.Marks = append(t.Marks, reports.Mark{Lane: e.Actor, At: x, Kind: reports.MarkEffect, Label: string(e.Kind), Detail: detail})
		case e.From != e.To:
			t.Marks = append(t.Marks, reports.Mark{At: x, Kind: reports.MarkState, Label: string(e.Kind), Detail: detail + " by " + e.Actor})
		}
	}
	for _, o := range claims {
		o.bar.End = end
		t.Bars = append(t.Bars, o.bar)
	}
	sort.SliceStable(t.Bars, func(i, j int) bool { return t.Bars[i].Start < t.Bars[j].Start })
	var stopAt, downAt int64 = -1, -1
	for _, m := range d.Timeline {
		switch {
		case m.Kind == liverun.WorkerSignalled && m.Signal == "SIGSTOP":
			stopAt = m.AtMs
		case m.Kind == liverun.WorkerSignalled && m.Signal == "SIGCONT" && stopAt >= 0:
			t.Shades = append(t.Shades, reports.Shade{Start: stopAt, End: m.AtMs, Label: "worker frozen (SIGSTOP)"})
			stopAt = -1
		case m.Kind == liverun.StorageLocked:
			downAt = m.AtMs
		case m.Kind == liverun.StorageUnlocked && downAt >= 0:
			t.Shades = append(t.Shades, reports.Shade{Start: downAt, End: m.AtMs, Label: "exclusive lock held"})
			downAt = -1
		case m.Kind == liverun.WorkerSignalled && (m.Signal == "SIGKILL" || m.Signal == "SIGTERM"):
			t.Marks = append(t.Marks, reports.Mark{Lane: m.Worker, At: m.AtMs, Kind: reports.MarkFault, Label: m.Signal, Detail: m.String()})
		case m.Kind == liverun.WorkerStarted:
			t.Marks = append(t.Marks, reports.Mark{Lane: m.Worker, At: m.AtMs, Kind: reports.MarkFault, Label: "started", Detail: m.String()})
		}
		end = max(end, m.AtMs)
	}
	t.End = end + 200
	t.Caption = "Live, wall-clock milliseconds since the demo started; from the audit trail (leasehold events) and the demo's own record of the signals it sent. Reproduce: make demo."
	return t
}
