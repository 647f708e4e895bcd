// Package evidence assembles leasehold's reports from records: the
// simulator's seed and summary records (which sim --json prints and this
// package defines), the live demo's result, the chaos run's result, the
// broken build's failed attempt and the runbook tests' verdicts. It runs
// nothing itself; the command line gathers the records and writes the
// reports.
package evidence

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/liverun"
	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/sim"
)

// Facts is what produced a report: when, the build's versions, and the
// PRAGMAs the queue opens with.
type Facts struct {
	Generated time.Time
	Versions  reports.Versions
	Pragmas   []string
}

func (f Facts) add(r *reports.Report) {
	r.Generated = f.Generated.UTC().Format(time.RFC3339)
	r.Versions, r.Pragmas = f.Versions, f.Pragmas
}

// Inputs is everything the evidence report is assembled from.
type Inputs struct {
	Facts Facts
	// Seeds is how many seeds each scenario's sweep ran, and Sweeps the
	// sweeps by scenario name.
	Seeds  int
	Sweeps map[string]Sweep
	// Order is the scenarios' names in the order the report lists them.
	Order []string
	// Takeover is a passing late-result run, with its timeline, whose
	// late result was refused.
	Takeover sim.Result
	Demo     liverun.Result
	Failed   *reports.Attempt
	// Runbook is each TestRunbook* test's verdict (see RunbookResults).
	Runbook map[string]bool
}

// Build assembles the evidence report.
func Build(in Inputs) (reports.Report, error) {
	r := reports.Report{Title: "leasehold evidence", Fixture: reports.Section{Kind: reports.Fixture}, Live: reports.Section{Kind: reports.Live}}
	in.Facts.add(&r)
	for _, name := range in.Order {
		r.Fixture.Sweeps = append(r.Fixture.Sweeps, in.Sweeps[name].sweep)
	}
	r.Fixture.About = []string{
		"Fixture: the real queue (SQLite, in memory) driven by seeded schedules under a fake clock that starts at " + sim.Epoch.Format(time.RFC3339) + ".",
		"Each seed draws its own fault mix (swarm): crash, stall, storage outage and storage faults (failed, ambiguous and busy commits, I/O errors), duplicate and late delivery, lost responses, crashes right after a call; each on or off at its own rate; the effect service runs as a seed-drawn kind (dedup, fenced, queryable, plain).",
		"Invariants are checked after every event; then faults heal and every task must settle (liveness); then each scenario's expected outcomes are checked.",
		fmt.Sprintf("Every figure here is reproducible: make sim SEED=n SCENARIO=name (or --seeds %d for the sweep).", in.Seeds),
	}
	tk := in.Takeover
	t := SimTimeline(fmt.Sprintf("late-result seed %d: stall, lease expiry, takeover, late result refused", tk.Seed), tk.Timeline, tk.Workers)
	t.Caption = fmt.Sprintf("Fixture, simulated time. Reproduce: make sim SEED=%d SCENARIO=late-result (fingerprint %s).", tk.Seed, tk.Fingerprint)
	r.Fixture.Timelines = append(r.Fixture.Timelines, t)
	FillLive(&r, in.Demo)
	r.Failed = in.Failed
	r.Checks = buildChecks(in.Sweeps, in.Seeds, in.Demo, in.Runbook)
	r.Commands = []reports.Command{
		{What: "everything in this report", Command: "make evidence"},
		{What: "one simulated seed (trace fingerprint, verdict)", Command: "make sim SEED=1 SCENARIO=portfolio"},
		{What: fmt.Sprintf("a scenario's sweep of %d seeds", in.Seeds), Command: fmt.Sprintf("make sim SEED=1 SEEDS=%d SCENARIO=portfolio", in.Seeds)},
		{What: "the live run", Command: "make demo (writes out/demo/result.json)"},
		{What: "the failed attempt", Command: in.Failed.Replay},
		{What: "the broken variants caught", Command: "go test -tags leasehold_broken -run Broken -v ./sim"},
		{What: "the runbook procedures", Command: "go test -run TestRunbook -v ./cmd/leasehold/internal/cli"},
	}
	r.Pass = true
	for _, c := range r.Checks {
		r.Pass = r.Pass && c.Pass()
	}
	r.Pass = r.Pass && r.Failed.FixedPass
	return r, r.Validate()
}

// JoinInts is event indices as sim --events takes them: "3,7,12".
func JoinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}
