package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// The world's actors for the rest of the protocol: a batch caller that
// submits with SubmitMany, and a follower that reads the audit trail for
// a set of users a window at a time.

// batchUser is the batch caller's user; its tasks are no scenario's.
const batchUser = "batcher"

// batchPayload is the batch caller's tasks' work: one cheap step.
const batchPayload = `{"steps":[{"cost":1}]}`

// Shapes of a batch (EvBatch's Name): new requests only; new requests
// with an exact replay of an earlier batch's request and of one of its
// own; and those with a changed request under a used key besides, which
// refuses the whole batch.
const (
	BatchNew      = "new"
	BatchReplay   = "replay"
	BatchConflict = "conflict"
)

// BatchShapes lists the batch shapes in a fixed order.
func BatchShapes() []string { return []string{BatchNew, BatchReplay, BatchConflict} }

// batchCaller is the world's batch caller: the requests it has sent, in
// order, whose keys it replays.
type batchCaller struct {
	sent    []model.SubmitRequest
	batches int
}

// batchRequest is the batch caller's request under key number n.
func batchRequest(n int) model.SubmitRequest {
	return model.SubmitRequest{User: batchUser, Key: fmt.Sprintf("batch-%d", n), Payload: batchPayload,
		CostBudget: 3, StepsMax: 2, Priority: -1}
}

// batch submits a batch of the shape named, with SubmitMany.
func (w *World) batch(shape string) string {
	b := &w.batcher
	b.batches++
	fresh := 1 + b.batches%3
	var reqs []model.SubmitRequest
	for range fresh {
		reqs = append(reqs, batchRequest(len(b.sent)+len(reqs)+1))
	}
	replays := 0
	if shape == BatchReplay || shape == BatchConflict {
		if len(b.sent) > 0 {
			reqs = append(reqs, w.replayOf())
			replays++
		}
		reqs = append(reqs, reqs[0])
		replays++
	}
	if shape == BatchConflict {
		changed := reqs[len(reqs)-1]
		changed.CostBudget++
		if len(b.sent) > 0 && b.batches%2 == 0 {
			changed = b.sent[(b.batches/2)%len(b.sent)]
			changed.Payload = `{"steps":[{"cost":2}]}`
		}
		reqs = append(reqs, changed)
	}
	res, err := w.q.SubmitMany(w.ctx, reqs)
	w.cover.refusal(err)
	line := fmt.Sprintf("batch %s of %d (%d new)", shape, len(reqs), fresh)
	// A batch whose outcome is not known may have been applied: its keys
	// are replayed later all the same, and the oracle knows which it was.
	if err == nil || RefusalClass(err) == "" {
		b.sent = append(b.sent, reqs[:fresh]...)
	}
	if err != nil {
		if errors.Is(err, model.ErrIdempotencyConflict) && replays > 0 {
			w.cover.path(PathBatchReplayConflict)
		}
		return line + " -> refused: " + err.Error()
	}
	var ids []string
	replayed := false
	for i, r := range res {
		w.replayed(reqs[i].User, reqs[i].Key, r)
		w.checker.submitted(r.TaskID)
		replayed = replayed || r.Replay
		ids = append(ids, fmt.Sprintf("%s replay=%t", r.TaskID, r.Replay))
	}
	if replayed {
		w.cover.path(PathBatchReplay)
	}
	return line + " -> " + strings.Join(ids, ", ")
}

// replayOf is the earlier request the batch caller replays: the first
// whose task a prune removed (its tombstone answers), else one in turn.
func (w *World) replayOf() model.SubmitRequest {
	b := &w.batcher
	for _, r := range b.sent {
		if _, pruned := w.pruned[model.TaskKey(r.User, r.Key)]; pruned {
			return r
		}
	}
	return b.sent[b.batches%len(b.sent)]
}

// follower reads the audit trail for a set of users, from its cursor, a
// page at a time, as events --follow and the HTTP API's followers do.
type follower struct {
	users []string
	after int64
	seen  int // events read
}

// followLimit is the follower's page: small, so that pages fill.
const followLimit = 3

// simTrailWindow is how far one read of the trail for some users looks
// in the simulator's queues (queue.Options.TrailWindow): small, so that
// a run of a few hundred events has many window marks.
const simTrailWindow = 16

// followerUsers are the users the follower follows: the batch caller and
// the user of the scenario's first task, whose events are few among
// everyone's, so that reads stop at window marks.
func (w *World) followerUsers() []string {
	users := []string{batchUser}
	if len(w.sc.Tasks) > 0 {
		users = append(users, w.sc.Tasks[0].Request.User)
	}
	return users
}

// follow reads the follower's next page and checks it against the trail
// as it stands (read around the fault plan): every event of its users
// past its cursor and up to where the read says it looked, each once, in
// order, none of anyone else's; a full page looked as far as its last
// event; the read never looks back.
func (w *World) follow() string {
	f := &w.follower
	if f.users == nil {
		f.users = w.followerUsers()
	}
	// The reads go around the fault plan: a read's faults are not what
	// the follower checks, and a read of two statements would take a
	// fault a store reading in one would not (the stores' traces would
	// part).
	var page, trail []queue.TrailEvent
	var through int64
	var err error
	w.storage.Bypass(func() {
		page, through, err = w.q.EventsThrough(w.ctx, queue.EventFilter{Users: f.users, After: f.after, Limit: followLimit})
		if err == nil {
			trail, _, err = w.q.EventsThrough(w.ctx, queue.EventFilter{After: f.after, Limit: model.ListLimitMax})
		}
	})
	if err != nil {
		w.checker.lockstepReport(InvReadable, "", err.Error())
		return "follow: trail unreadable: " + err.Error()
	}
	var want []queue.TrailEvent
	for _, e := range trail {
		if e.Seq <= through && slices.Contains(f.users, e.User) && len(want) < followLimit {
			want = append(want, e)
		}
	}
	// The trace names no sequence number: PostgreSQL's may skip one a
	// rolled-back transaction took, SQLite's do not.
	line := fmt.Sprintf("follow -> %d events", len(page))
	switch {
	case through < f.after:
		w.checker.lockstepReport(InvFollower, "", fmt.Sprintf("a read after %d said it looked through %d", f.after, through))
	case len(page) == followLimit && page[len(page)-1].Seq != through:
		w.checker.lockstepReport(InvFollower, "", fmt.Sprintf("a full page after %d ends at %d but says it looked through %d",
			f.after, page[len(page)-1].Seq, through))
	default:
		if d := trailDiff(page, want); d != "" {
			w.checker.lockstepReport(InvFollower, "", fmt.Sprintf("a read after %d through %d: %s", f.after, through, d))
		}
	}
	if len(page) < followLimit && through < lastSeq(trail, f.after) {
		w.cover.path(PathFollowWindowMark)
		line += ", stopped at a window mark"
	}
	f.after, f.seen = through, f.seen+len(page)
	return line
}

// lastSeq is the number of the last event of trail, or after.
func lastSeq(trail []queue.TrailEvent, after int64) int64 {
	if len(trail) == 0 {
		return after
	}
	return trail[len(trail)-1].Seq
}

// trailDiff says how a follower's page differs from what the trail holds
// for it, or "".
func trailDiff(got, want []queue.TrailEvent) string {
	text := func(events []queue.TrailEvent) string {
		parts := make([]string, len(events))
		for i, e := range events {
			parts[i] = fmt.Sprintf("%d:%s/%s/%s", e.Seq, e.User, e.TaskID, e.Kind)
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	if a, b := text(got), text(want); a != b {
		return "read " + a + ", the trail holds " + b
	}
	return ""
}

// Prunes an EvPrune makes (its Name): of the tasks settled a second ago
// or more, or ten seconds ago or more. Their tombstones outlive the run:
// the simulator derives a task's ID from its user and key, so a task
// made under a key whose tombstone expired would take the pruned task's
// ID (production draws IDs at random), and the run would see one task
// where there are two. Replays after the window stay with the
// conformance suite (queuetest's PruneTombstones).
const (
	PruneShort = "short"
	PruneLong  = "long"
)

// PruneNames lists the prunes in a fixed order.
func PruneNames() []string { return []string{PruneShort, PruneLong} }

// pruneKeepKeys is how long the simulator's prunes keep tombstones.
const pruneKeepKeys = 24 * time.Hour

// pruneRequest is the prune named, in passes of one to three tasks.
func (w *World) pruneRequest(name string) queue.PruneRequest {
	w.prunes++
	r := queue.PruneRequest{OlderThan: time.Second, KeepKeys: pruneKeepKeys, Batch: 1 + w.prunes%3, Actor: operatorActor}
	if name == PruneLong {
		r.OlderThan = 10 * time.Second
	}
	return r
}

// prune prunes as the operator, around the fault plan (a prune of
// several transactions cut short by a fault has committed some of them,
// which the lockstep's two successors do not describe), and notes the
// tasks it removed, by key, for the replays that follow.
func (w *World) prune(name string) string {
	if w.q.ref == nil {
		return "no-op: the oracle is off" // the world reads pruned tasks' last rows from its mirror
	}
	if err := w.coverTrail(); err != nil { // the transitions of the tasks about to go
		w.checker.lockstepReport(InvReadable, "", err.Error())
		return "prune: trail unreadable: " + err.Error()
	}
	var before []model.Task
	retried := map[string]bool{}
	for _, t := range w.allTasks() {
		if t.State.Terminal() {
			before = append(before, t)
			retried[t.ID] = w.retried(t.ID)
		}
	}
	req := w.pruneRequest(name)
	var res queue.PruneResult
	var err error
	w.storage.Bypass(func() { res, err = w.q.Prune(w.ctx, req) })
	w.cover.refusal(err)
	if err != nil {
		return "prune -> error: " + err.Error()
	}
	for _, t := range before {
		var gone bool
		w.storage.Bypass(func() {
			_, terr := w.q.Queue.Task(w.ctx, t.ID)
			gone = errors.Is(terr, model.ErrNotFound)
		})
		if gone {
			w.pruned[model.TaskKey(t.User, t.Key)] = t.ID
			w.prunedRetried[t.ID] = retried[t.ID]
			w.q.forget(t.ID)
		}
	}
	return fmt.Sprintf("prune older_than=%s keep_keys=%s batch=%d -> tasks %d tombstones %d expired %d kept %d in %d transactions",
		model.FormatAge(req.OlderThan), model.FormatAge(req.KeepKeys), req.Batch, res.TaskCount(), res.Tombstones, res.Expired,
		res.Kept, res.Transactions)
}

// replayed notes the path a submit of user's key took when the key's task
// was pruned: a replay answered from its tombstone.
func (w *World) replayed(user, key string, res model.SubmitResult) {
	if id, ok := w.pruned[model.TaskKey(user, key)]; ok && res.Replay && res.TaskID == id {
		w.cover.path(PathPruneReplayInWindow)
	}
}
