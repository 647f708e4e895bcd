package cli

import (
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/reports"
)

func init() {
	register("chaos", "the kill storm: real workers under SIGKILL and SIGSTOP, then a Jepsen-style check (out/chaos)", runChaos)
}

func runChaos(e *env, args []string) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	kills := fs.Int("kills", 32, fmt.Sprintf("SIGKILLs in all, a quarter of them aimed between an effect's intent and its receipt (0 to %d)", chaos.KillsMax))
	stops := fs.Int("stops", 6, fmt.Sprintf("SIGSTOPs past the lease, each followed by SIGCONT (0 to %d)", chaos.StopsMax))
	tasks := fs.Int("tasks", 80, fmt.Sprintf("tasks submitted, spread over the four service kinds (1 to %d)", chaos.TasksMax))
	out := fs.String("out", filepath.Join("out", "chaos"), "directory inside LEASEHOLD_DATA_DIR (or the working directory) for result.json, index.html, the databases and the worker logs: emptied first, so it must be empty or hold a previous chaos run's result.json")
	seed := fs.Uint64("seed", 0, "seed of the workload and the attack plan (default: drawn from the operating system, and printed)")
	if err := parse(fs, args); err != nil {
		return fail(e, "chaos", err)
	}
	switch {
	case *kills < 0 || *kills > chaos.KillsMax:
		return fail(e, "chaos", badUsage("--kills: must be between 0 and %d, got %d", chaos.KillsMax, *kills))
	case *stops < 0 || *stops > chaos.StopsMax:
		return fail(e, "chaos", badUsage("--stops: must be between 0 and %d, got %d", chaos.StopsMax, *stops))
	case *tasks < 1 || *tasks > chaos.TasksMax:
		return fail(e, "chaos", badUsage("--tasks: must be between 1 and %d, got %d", chaos.TasksMax, *tasks))
	}
	seedSet := false
	fs.Visit(func(f *flag.Flag) { seedSet = seedSet || f.Name == "seed" })
	if !seedSet {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fail(e, "chaos", fmt.Errorf("draw a seed: %w", err))
		}
		*seed = binary.LittleEndian.Uint64(b[:]) >> 1
	}
	dir, err := chaosDir(*out)
	if err != nil {
		return fail(e, "chaos", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fail(e, "chaos", fmt.Errorf("find this binary: %w", err))
	}
	var facts reports.Report
	if err := addBuildFacts(&facts); err != nil {
		return fail(e, "chaos", fmt.Errorf("read the build facts: %w", err))
	}
	if err := os.RemoveAll(dir); err != nil {
		return fail(e, "chaos", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(e, "chaos", err)
	}
	res, err := chaos.Run(e.ctx, chaos.Config{Binary: self, Dir: dir, Seed: *seed, Kills: *kills, Stops: *stops, Tasks: *tasks,
		Log: e.stdout, Versions: facts.Versions})
	if err != nil {
		return fail(e, "chaos", err)
	}
	printChaos(e, res, dir)
	if !res.Pass {
		return exitFail
	}
	return exitOK
}

// printChaos prints the checker's verdict, Jepsen-style.
func printChaos(e *env, r chaos.Result, dir string) {
	c, f := r.Counts, r.Findings
	w := e.stdout
	fmt.Fprintf(w, "\nchaos (live: real processes, wall clock, %s) seed %d, %d ms\n", r.Machine["hostname"], r.Seed, r.Durations.Total)
	fmt.Fprintf(w, "  tasks %d   kills %d (aimed: %d before apply, %d after apply)   stops %d (%d past the lease, %d inside a call)   aims missed %d   restarts %d\n",
		c.Tasks, c.Kills, c.AimedBefore, c.AimedAfter, c.Stops, c.StopsPast, c.StopsAimed, c.AimMissed, c.Restarts)
	fmt.Fprintf(w, "  caller: %d cancellations, %d approvals, %d rejections; %d operations applied; %d stale writes refused; late calls %s\n",
		c.Cancels, c.Approvals, c.Rejections, c.Applied, c.StaleRefused, lateCalls(c.LateCalls))
	fmt.Fprintf(w, "  lost %d   duplicated %d   unexpected %d   stale accepted %d   overspent %d   integrity %s   porcupine %s\n",
		f.Lost, f.Duplicated, f.Unexpected, f.StaleAccepted, f.Overspent, f.Integrity, f.Porcupine)
	for _, d := range f.Details {
		fmt.Fprintf(w, "  violation: %s\n", d)
	}
	if r.Failure != "" {
		fmt.Fprintf(w, "  the run did not finish its plan: %s\n", r.Failure)
	}
	verdict := "VALID"
	if !r.Pass {
		verdict = "INVALID"
	}
	fmt.Fprintf(w, "chaos %s; results in %s and %s\n", verdict, filepath.Join(dir, "result.json"), filepath.Join(dir, "index.html"))
}

// chaosDir checks --out before anything is removed, as demo checks --dir:
// inside the allowed directory and not that directory itself, and empty or
// holding a previous chaos run's result.json.
func chaosDir(p string) (string, error) {
	return runDir("out", "chaos run", "chaos", p, func(path string) error {
		_, err := chaos.ReadResult(path)
		return err
	})
}

// addChaos adds the chaos run's figures to the evidence as live results,
// read from its result.json (the record package chaos defines).
func addChaos(r *reports.Report, path string) error {
	res, err := chaos.ReadResult(path)
	if err != nil {
		return err
	}
	c, f, s := res.Counts, res.Findings, res.Settings
	inputs := fmt.Sprintf("make chaos, seed %d on %s: %d tasks over %d lanes (%s), %d SIGKILLs (%d aimed between intent and receipt: %d before the service applied, %d after), %d SIGSTOPs past the lease; %d ms",
		res.Seed, res.Machine["hostname"], c.Tasks, len(s.Lanes), strings.Join(s.Lanes, ", "), c.Kills, c.AimedBefore+c.AimedAfter, c.AimedBefore, c.AimedAfter, c.Stops, res.Durations.Total)
	cmd := fmt.Sprintf("make chaos SEED=%d", res.Seed)
	result := func(observed string, pass bool) reports.Result {
		return reports.Result{Kind: reports.Live, Inputs: inputs, Observed: observed, Pass: pass, Command: cmd}
	}
	planned := res.Failure == "" && c.Kills == s.Kills && c.Stops == s.Stops && c.Tasks == s.Tasks
	check := reports.Check{ID: "chaos", Title: "The kill storm: nothing lost, applied twice or accepted stale", Results: []reports.Result{
		result(fmt.Sprintf("%d of %d kills, %d of %d stops, %d of %d tasks%s", c.Kills, s.Kills, c.Stops, s.Stops, c.Tasks, s.Tasks, map[bool]string{true: "", false: "; " + res.Failure}[res.Failure == ""]), planned),
		result(fmt.Sprintf("%d lost; final states %v", f.Lost, c.States), f.Lost == 0),
		result(fmt.Sprintf("%d duplicated and %d unexpected of %d operations applied (the service's own ledger)", f.Duplicated, f.Unexpected, c.Applied), f.Duplicated == 0 && f.Unexpected == 0),
		result(fmt.Sprintf("%d stale writes accepted, %d refused; late service calls %s; porcupine: %s", f.StaleAccepted, c.StaleRefused, lateCalls(c.LateCalls), f.Porcupine), f.StaleAccepted == 0 && f.Porcupine == chaos.PorcupineOK),
		result(fmt.Sprintf("%d overspent; integrity_check %s", f.Overspent, f.Integrity), f.Overspent == 0 && f.Integrity == "ok"),
	}}
	r.Checks = append(r.Checks, check)
	r.Live.About = append(r.Live.About, fmt.Sprintf("The kill storm (make chaos, seed %d, started %s): real worker processes over one SQLite file per service kind, checked from the databases, the service's ledger and the event trail after the drain; its own page is %s.",
		res.Seed, res.Started, filepath.Join(filepath.Dir(path), "index.html")))
	r.Commands = append(r.Commands, reports.Command{What: "the kill storm and its checker", Command: cmd})
	r.Pass = r.Pass && check.Pass()
	return r.Validate()
}

// lateCalls renders the late calls by the service's answer.
func lateCalls(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
