package scenarios

import (
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/model"
)

// CoverageSeedsMin is the smallest sweep in which a declared coverage cell
// no seed reached fails the sweep. A shorter sweep, or a single seed,
// reports its coverage but is never failed by it.
const CoverageSeedsMin = 200

// CellKind names one part of a coverage map.
type CellKind string

// The parts of a coverage map.
const (
	// CellTransition is a state change the audit trail recorded, named by
	// its from state, event kind and to state: "running -retry-> queued".
	CellTransition CellKind = "transition"
	// CellRefusal is a class of refusal an operation met: "stale_claim",
	// "budget", "queue_full", ...
	CellRefusal CellKind = "refusal"
	// CellFault is a fault kind where it hit: the worker's phase, or the
	// write or operation it hit, as "crash@send" or "ambiguous_commit@step".
	CellFault CellKind = "fault"
	// CellRun is how a step's run (the handler's call) ended: "returned",
	// "outlived_lease", "cancel_requested", "timeout", "lease_lost".
	CellRun CellKind = "run"
	// CellPath is a path of the protocol a write took: how many tasks a
	// complete-and-claim took ("complete_and_claim:several"), a batch
	// submit with a replay and a conflict, a replay inside a tombstone's
	// window, a follower crossing a window mark, ...
	CellPath CellKind = "path"
	// CellTaskKind is what claims did with the kinds of tasks: a claim
	// took a task of a kind ("claimed:render"), a worker's claim naming
	// its kinds found nothing while a task of another kind was claimable
	// (KindIdleOthersQueued), one claim took tasks of several kinds
	// (KindClaimSeveral).
	CellTaskKind CellKind = "task_kind"
)

// Names of the task-kind cells besides ClaimedKind's.
const (
	KindIdleOthersQueued = "idle_while_others_queued"
	KindClaimSeveral     = "claim_of_several_kinds"
)

// ClaimedKind is the name of the task-kind cell of a claim that took a
// task of kind.
func ClaimedKind(kind string) string { return "claimed:" + kind }

// Cell is one cell of a coverage map.
type Cell struct {
	Kind CellKind
	Name string
}

// TransitionCell names the state change from -kind-> to.
func TransitionCell(from model.State, kind model.EventKind, to model.State) Cell {
	return Cell{Kind: CellTransition, Name: fmt.Sprintf("%s -%s-> %s", from, kind, to)}
}

// RefusalCell names a class of refusal.
func RefusalCell(class string) Cell { return Cell{Kind: CellRefusal, Name: class} }

// FaultCell names a fault kind at a phase.
func FaultCell(fault, phase string) Cell { return Cell{Kind: CellFault, Name: fault + "@" + phase} }

// RunCell names how a step's run ended.
func RunCell(outcome string) Cell { return Cell{Kind: CellRun, Name: outcome} }

// PathCell names a path of the protocol.
func PathCell(name string) Cell { return Cell{Kind: CellPath, Name: name} }

// TaskKindCell names what a claim did with kinds (CellTaskKind).
func TaskKindCell(name string) Cell { return Cell{Kind: CellTaskKind, Name: name} }

// String renders the cell as "kind name".
func (c Cell) String() string { return string(c.Kind) + " " + c.Name }

// MarshalText renders the cell as String does, so a map keyed by cells
// is a JSON object.
func (c Cell) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads a cell in its String form.
func (c *Cell) UnmarshalText(b []byte) error {
	parsed, err := ParseCell(string(b))
	if err != nil {
		return err
	}
	*c = parsed
	return nil
}

// ParseCell reads a cell in its String form.
func ParseCell(s string) (Cell, error) {
	kind, name, ok := strings.Cut(s, " ")
	c := Cell{Kind: CellKind(kind), Name: name}
	switch {
	case !ok || name == "":
		return Cell{}, fmt.Errorf("coverage cell %q: want \"kind name\"", s)
	case c.Kind != CellTransition && c.Kind != CellRefusal && c.Kind != CellFault && c.Kind != CellRun && c.Kind != CellPath &&
		c.Kind != CellTaskKind:
		return Cell{}, fmt.Errorf("coverage cell %q: unknown kind %q", s, kind)
	}
	return c, nil
}

// transitions returns the transition cells named by "from kind to"
// triples.
func transitions(triples ...string) []Cell {
	out := make([]Cell, 0, len(triples))
	for _, t := range triples {
		f := strings.Fields(t)
		if len(f) != 3 {
			panic(fmt.Sprintf("scenarios: transition %q is not \"from kind to\"", t))
		}
		out = append(out, TransitionCell(model.State(f[0]), model.EventKind(f[1]), model.State(f[2])))
	}
	return out
}

// refusals returns the refusal cells of classes.
func refusals(classes ...string) []Cell {
	out := make([]Cell, 0, len(classes))
	for _, c := range classes {
		out = append(out, RefusalCell(c))
	}
	return out
}

// faults returns the fault cells named "kind@phase".
func faults(pairs ...string) []Cell {
	out := make([]Cell, 0, len(pairs))
	for _, p := range pairs {
		kind, phase, ok := strings.Cut(p, "@")
		if !ok {
			panic(fmt.Sprintf("scenarios: fault cell %q is not \"kind@phase\"", p))
		}
		out = append(out, FaultCell(kind, phase))
	}
	return out
}

// runs returns the run cells of outcomes.
func runs(outcomes ...string) []Cell {
	out := make([]Cell, 0, len(outcomes))
	for _, o := range outcomes {
		out = append(out, RunCell(o))
	}
	return out
}

// paths returns the path cells of names.
func paths(names ...string) []Cell {
	out := make([]Cell, 0, len(names))
	for _, n := range names {
		out = append(out, PathCell(n))
	}
	return out
}

// taskKinds returns the task-kind cells of names.
func taskKinds(names ...string) []Cell {
	out := make([]Cell, 0, len(names))
	for _, n := range names {
		out = append(out, TaskKindCell(n))
	}
	return out
}

// protocolPaths returns the path cells of the writes production makes
// that a sweep of the portfolio reaches: a completion that claims the
// slot's next task in the same write (none, one, several), a batch
// submit answered with a replay and one refused for a conflict beside a
// replay, a follower's read stopping at a window mark and its wait woken
// by a commit, a pruned task's key submitted again inside its
// tombstone's window (a replay) and after it (a new task), and the
// queue's own refusals of a step past the budget and past the step limit
// (the careless client's).
func protocolPaths() []Cell {
	return cells(paths("complete_and_claim:none", "complete_and_claim:one", "complete_and_claim:several",
		"submit_many:replay", "submit_many:replay_and_conflict", "follow:window_mark", "follow:wait_woken",
		"prune:replay_in_window", "prune:replay_after_window"), refusals("budget", "steps"))
}

// groupPaths returns the path cells of group commits a sweep of the
// portfolio reaches (the simulator's group events): groups of one, of two
// to seven, of eight or more and of the simulator's maximum; a member
// refused inside a group of several; a group rolled back by a statement
// error; a group of several whose COMMIT failed; complete-and-claims
// inside groups of several taking none, one and several tasks; a claim
// taking the running room the same group's completions freed; and a late
// completion, under a claim another has since taken, committed beside a
// live one.
func groupPaths() []Cell {
	return paths("group:size_1", "group:size_2_7", "group:size_8_plus", "group:size_max", "group:refusal_inside",
		"group:rolled_back", "group:unknown_several", "group:complete_and_claim_none", "group:complete_and_claim_one",
		"group:complete_and_claim_several", "group:claim_freed_room", "group:late_completion_batched")
}

// cells joins lists of cells.
func cells(lists ...[]Cell) []Cell {
	var out []Cell
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// common returns the cells every scenario's sweep reaches: the claim and
// the completion, a lease expiry's retry, a graceful release, an operator
// requeue; stale claims, depth caps, out-of-range requests and actions
// the state forbids (the operator's probes); crashes, stalls and
// shutdowns of idle workers; duplicated heartbeats; and
// storage outages under claims, heartbeats, the reaper, the operator and
// the careless client.
func common() []Cell {
	return cells(
		transitions("queued claimed running", "running completed completed", "running lease_expired queued",
			"running released queued", "needs_review requeued queued"),
		refusals("stale_claim", "queue_full", "bad_input", "not_allowed"),
		faults("crash@idle", "stall@idle", "shutdown@idle", "duplicate@heartbeat", "unavailable@claim", "unavailable@heartbeat", "unavailable@reap",
			"unavailable@operator", "unavailable@careless"))
}
