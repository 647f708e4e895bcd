package sim

import (
	"github.com/leasehold/leasehold/model"
)

// Paths of group commits (world_groups.go) a coverage map names.
const (
	// A group committed, by its size: one write, two to seven, eight or
	// more, and GroupMax.
	PathGroupOne  = "group:size_1"
	PathGroupFew  = "group:size_2_7"
	PathGroupMany = "group:size_8_plus"
	PathGroupMax  = "group:size_max"
	// A group of several with a member refused; rolled back by a
	// statement error; whose COMMIT failed (outcome unknown).
	PathGroupRefusal    = "group:refusal_inside"
	PathGroupRolledBack = "group:rolled_back"
	PathGroupUnknown    = "group:unknown_several"
	// A complete-and-claim accepted in a group of several, by how many
	// tasks its claim took.
	PathGroupClaimNone    = "group:complete_and_claim_none"
	PathGroupClaimOne     = "group:complete_and_claim_one"
	PathGroupClaimSeveral = "group:complete_and_claim_several"
	// A claim after the group's set-wise completions that took running
	// room one of those completions freed.
	PathGroupFreedRoom = "group:claim_freed_room"
	// A completion under a claim another claim has since taken committed
	// in a group beside a live completion (world_groups.go, lateComplete).
	PathGroupLateBatched = "group:late_completion_batched"
)

// GroupPathNames lists the group commits' path cells in a fixed order.
func GroupPathNames() []string {
	return []string{PathGroupOne, PathGroupFew, PathGroupMany, PathGroupMax, PathGroupRefusal, PathGroupRolledBack,
		PathGroupUnknown, PathGroupClaimNone, PathGroupClaimOne, PathGroupClaimSeveral, PathGroupFreedRoom,
		PathGroupLateBatched}
}

// coverGroup records a committed group's size and how its members ended.
func (l *lockstep) coverGroup(size int, errs []error) {
	switch {
	case size == GroupMax:
		l.cover.path(PathGroupMax)
		l.cover.path(PathGroupMany)
	case size >= 8:
		l.cover.path(PathGroupMany)
	case size >= 2:
		l.cover.path(PathGroupFew)
	default:
		l.cover.path(PathGroupOne)
	}
	if size < 2 {
		return
	}
	for _, err := range errs {
		switch {
		case RefusalClass(err) != "":
			l.cover.path(PathGroupRefusal)
		case isStorage(err) && atCommit(err):
			l.cover.path(PathGroupUnknown)
		case isStorage(err):
			l.cover.path(PathGroupRolledBack)
		}
	}
}

// coverGroupClaims records how many tasks each complete-and-claim of a
// group of several took, as the reference made them.
func (l *lockstep) coverGroupClaims(calls []heldCall) {
	if len(calls) < 2 {
		return
	}
	for _, c := range calls {
		if _, next := c.completion(); next == nil {
			continue
		}
		res, err := c.refOutcome()
		got, ok := res.([]model.Claimed)
		if err != nil || !ok && res != nil {
			continue
		}
		switch len(got) {
		case 0:
			l.cover.path(PathGroupClaimNone)
		case 1:
			l.cover.path(PathGroupClaimOne)
		default:
			l.cover.path(PathGroupClaimSeveral)
		}
	}
}

// coverFreedRoom records a claim that took a user's running room only the
// group's own completions freed: the user, with the claims taken back and
// the completions undone, was at its running limit.
func (l *lockstep) coverFreedRoom(completed, claimed map[string]int) {
	for user, n := range claimed {
		if completed[user] == 0 {
			continue
		}
		running, limit := l.ref.RunningRoom(user)
		if limit > 0 && running-n+completed[user] >= limit {
			l.cover.path(PathGroupFreedRoom)
		}
	}
}
