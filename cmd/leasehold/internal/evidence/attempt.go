package evidence

import (
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/reports"
	"github.com/leasehold/leasehold/sim"
)

// The failed attempt the report shows: a broken variant (compiled in with
// the leasehold_broken tag) the simulator must catch.
const (
	FailedVariant  = "worker-ignores-receipts"
	FailedScenario = "crash-storm"
)

// Attempt is the records of the failed attempt: the broken build's sim run
// over FailedScenario's seeds until one failed, that seed shrunk, the
// shrunk run replayed with its trace, and the same seeds on the real build.
type Attempt struct {
	SeedsRun int        // seeds run until one failed
	Caught   SeedRecord // the first failed seed's record
	Shrunk   SeedRecord // the same seed run with --shrink (Shrunk set)
	// Timeline and Workers are the shrunk run's timeline (nil if none).
	Timeline []sim.TimelineEntry
	Workers  int
	Replayed SeedRecord    // the shrunk run replayed with --trace (Trace set)
	Fixed    SummaryRecord // seeds 1 to the caught one on the real build
}

// FailedAttempt tells the story of the failed attempt from its records.
func FailedAttempt(in Attempt) (*reports.Attempt, error) {
	if in.Caught.Seed == 0 || in.Caught.Pass {
		return nil, fmt.Errorf("broken variant %s was not caught within %d seeds of %s", FailedVariant, in.SeedsRun, FailedScenario)
	}
	shrunk := in.Shrunk.Shrunk
	if shrunk == nil {
		return nil, fmt.Errorf("shrinking seed %d gave no shrunk record", in.Caught.Seed)
	}
	seed := in.Caught.Seed
	a := &reports.Attempt{Title: "A worker that calls an operation that already has a receipt",
		Variant: FailedVariant, Scenario: FailedScenario, Story: attemptStory,
		SeedsRun: in.SeedsRun, Seed: seed, Detail: in.Caught.Summary, Invariant: shrunk.Broken,
		Replay: fmt.Sprintf("LEASEHOLD_BROKEN=%s bin/leasehold-broken sim --scenario %s --seed %d --events %s",
			FailedVariant, FailedScenario, seed, JoinInts(shrunk.Keep))}
	for i, ev := range shrunk.Events {
		a.Shrunk = append(a.Shrunk, fmt.Sprintf("%d %s", shrunk.Keep[i], ev))
	}
	if in.Timeline != nil {
		// The shrunk run happens in a few simulated milliseconds: draw it
		// in the order things happened instead.
		entries := append([]sim.TimelineEntry(nil), in.Timeline...)
		for i := range entries {
			entries[i].AtMs = int64(i) * 10
		}
		t := SimTimeline(fmt.Sprintf("%s seed %d, shrunk to %d events, under %s: the violation", FailedScenario, seed, len(a.Shrunk), FailedVariant), entries, in.Workers)
		t.Unit = "steps in order (x10)"
		t.Caption = "Fixture. The shrunk run takes a few simulated milliseconds, so it is drawn in the order things happened. The red mark is where the invariant broke. Replay: " + a.Replay
		a.Timeline = &t
	}
	for _, line := range in.Replayed.Trace {
		if line == "" || strings.Contains(line, "nothing due") || strings.Contains(line, " idle") || strings.Contains(line, "no-op") {
			continue
		}
		a.Trace = append(a.Trace, line)
	}
	f := in.Fixed
	a.FixedPass = f.Pass
	a.FixedRun = fmt.Sprintf("leasehold sim --scenario %s --seed %d --seeds %d (real build): scenario %s seeds %d..%d: %d passed, %d failed",
		FailedScenario, f.From, f.Seeds, f.Scenario, f.From, f.From+uint64(f.Seeds)-1, f.Passed, f.Failed)
	return a, nil
}

// attemptStory is how the failed attempt is told.
var attemptStory = []string{
	"The effects ledger's promise is that an operation with a receipt is never called again. The variant " + FailedVariant + " (build tag leasehold_broken) removes one line from the worker: on a retry it ignores the receipt the queue reports and calls the service again.",
	"The harness does not know which variant runs. It sweeps the scenario's seeds with the usual invariants until one breaks, then shrinks the failing schedule while the same invariant still breaks, and prints the command that replays it.",
	"Investigating the shrunk run (its trace is below) shows the sequence: an operation's receipt is on record when a later claim reaches its step (a lost response that was reconciled, or settled as applied by the operator after the provider confirmed it), the queue answers the intent with receipted, and the broken worker calls the service again; a service that does not deduplicate applies it twice. The change that fixes it is the production code itself: on a receipted intent the worker goes straight to charging the step. The same seeds then pass against the real build.",
	"Real bugs the harness found during development are in the commit history: a worker that never claimed again after a claim dropped following a failed heartbeat (found by the first portfolio sweeps; commit ae06659), cancellation seen mid-step acted on only after the effect call, concurrency above the claim batch limit never claiming, and a shrinker that accepted empty schedules (commit 7ab61d4).",
}
