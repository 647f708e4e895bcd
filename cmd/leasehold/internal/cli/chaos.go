package cli

import (
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/chaos"
	"github.com/leasehold/leasehold/cmd/leasehold/internal/evidence"
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
	facts, err := buildFacts()
	if err != nil {
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
		c.Cancels, c.Approvals, c.Rejections, c.Applied, c.StaleRefused, evidence.LateCalls(c.LateCalls))
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
