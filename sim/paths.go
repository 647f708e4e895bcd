package sim

import (
	"slices"

	"github.com/leasehold/leasehold/scenarios"
)

// Paths of the protocol a coverage map names (scenarios.CellPath): the
// writes whose outcome a transition or a refusal does not tell apart.
const (
	// A complete-and-claim accepted, by how many tasks its claim took.
	PathCompleteClaimNone    = "complete_and_claim:none"
	PathCompleteClaimOne     = "complete_and_claim:one"
	PathCompleteClaimSeveral = "complete_and_claim:several"
	// A batch submit answered with an exact replay among its results; one
	// refused for a conflict that held an exact replay too.
	PathBatchReplay         = "submit_many:replay"
	PathBatchReplayConflict = "submit_many:replay_and_conflict"
	// A follower's read that stopped at a window mark short of the end of
	// the trail.
	PathFollowWindowMark = "follow:window_mark"
	// A follower's wait that looked on past a window mark before it
	// returned or parked; one that parked and was woken by a commit with
	// events of its users.
	PathFollowWaitAcrossMarks = "follow:wait_across_marks"
	PathFollowWaitWoken       = "follow:wait_woken"
	// A submit of a pruned task's key answered from its tombstone; one
	// made after a prune expired the tombstone, which makes a new task.
	PathPruneReplayInWindow    = "prune:replay_in_window"
	PathPruneReplayAfterWindow = "prune:replay_after_window"
)

// PathNames lists the path cells' names in a fixed order.
func PathNames() []string {
	return []string{PathCompleteClaimNone, PathCompleteClaimOne, PathCompleteClaimSeveral, PathBatchReplay,
		PathBatchReplayConflict, PathFollowWindowMark, PathFollowWaitAcrossMarks, PathFollowWaitWoken, PathPruneReplayInWindow, PathPruneReplayAfterWindow}
}

// knownPath reports whether name is a path cell's (a group commit's among
// them).
func knownPath(name string) bool {
	return slices.Contains(PathNames(), name) || slices.Contains(GroupPathNames(), name)
}

// path records a path cell, when the run keeps a coverage map.
func (r *recorder) path(name string) { r.add(scenarios.PathCell(name)) }

// completeClaimPath is the path of an accepted complete-and-claim that
// took n tasks.
func completeClaimPath(n int) string {
	switch {
	case n == 0:
		return PathCompleteClaimNone
	case n == 1:
		return PathCompleteClaimOne
	}
	return PathCompleteClaimSeveral
}
