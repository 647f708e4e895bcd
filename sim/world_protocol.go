package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

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

// Shapes of a batch (EvBatch's Name): new requests only (and, once a
// prune expired the tombstone of a task of the batch caller's, that
// task's request again, which makes a new task); new requests with an
// exact replay of an earlier batch's request and of one of its
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
	singles int // its single submits in groups (world_groups.go)
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
	if r, ok := w.expiredRequest(); ok && shape == BatchNew {
		reqs = append(reqs, r) // a new task under a key used before
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
// whose task a prune removed and whose tombstone a later prune expired
// (a new task), else the first whose task a prune removed (its tombstone
// answers), else one in turn.
func (w *World) replayOf() model.SubmitRequest {
	b := &w.batcher
	if r, ok := w.expiredRequest(); ok {
		return r
	}
	for _, r := range b.sent {
		if _, pruned := w.pruned[model.TaskKey(r.User, r.Key)]; pruned {
			return r
		}
	}
	return b.sent[b.batches%len(b.sent)]
}

// expiredRequest is the first request the batch caller sent whose task a
// prune removed and whose tombstone a later prune expired.
func (w *World) expiredRequest() (model.SubmitRequest, bool) {
	for _, r := range w.batcher.sent {
		if w.keyExpired(r.User, r.Key) {
			return r, true
		}
	}
	return model.SubmitRequest{}, false
}

// follower reads the audit trail for a set of users, from its cursor, a
// page at a time, as events --follow and the HTTP API's followers do:
// every other time with a read that returns at once (EventsThrough), and
// in between with a wait (WaitEventsThrough) that blocks until there is
// an event of its users.
type follower struct {
	users []string
	after int64
	seen  int // events read
	reads int // reads and waits made
	// clock is the queue's clock, which says when a wait parks.
	clock *pollClock
}

// pollClock is the queue's clock in the simulator: the world's fake
// clock, which also says when a wait for events (queue.WaitEventsThrough)
// makes its poll timer, the last thing it does before it blocks until a
// commit, the timer or its context wakes it.
type pollClock struct {
	*clockwork.FakeClock
	parked chan struct{} // a wait made its poll timer (buffered: one)
}

func newPollClock(c *clockwork.FakeClock) *pollClock {
	return &pollClock{FakeClock: c, parked: make(chan struct{}, 1)}
}

// NewTimer makes the fake clock's timer, and says so when it is a wait's
// poll timer.
func (c *pollClock) NewTimer(d time.Duration) clockwork.Timer {
	t := c.FakeClock.NewTimer(d)
	if d == queue.WaitPollInterval {
		select {
		case c.parked <- struct{}{}:
		default:
		}
	}
	return t
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

// follow reads the follower's next page, or waits for it, and checks it
// against the trail.
func (w *World) follow() string {
	f := &w.follower
	if f.users == nil {
		f.users = w.followerUsers()
	}
	f.reads++
	if f.reads%2 == 0 && f.clock != nil {
		return w.followWait()
	}
	// The reads go around the fault plan: a read's faults are not what
	// the follower checks, and a read of two statements would take a
	// fault a store reading in one would not (the stores' traces would
	// part).
	var page []queue.TrailEvent
	var through int64
	var err error
	w.storage.Bypass(func() {
		page, through, err = w.q.EventsThrough(w.ctx, queue.EventFilter{Users: f.users, After: f.after, Limit: followLimit})
	})
	if err != nil {
		w.checker.lockstepReport(InvReadable, "", err.Error())
		return "follow: trail unreadable: " + err.Error()
	}
	line := fmt.Sprintf("follow -> %d events", len(page))
	stopped, err := w.followed(page, through)
	if err != nil {
		return "follow: trail unreadable: " + err.Error()
	}
	if stopped {
		w.cover.path(PathFollowWindowMark)
		line += ", stopped at a window mark"
	}
	return line
}

// waitOutcome is what a follower's wait returned.
type waitOutcome struct {
	page    []queue.TrailEvent
	through int64
	err     error
}

// followWait waits for the follower's next page as a blocking follower
// does, in simulated time and deterministically: the wait runs on a
// goroutine of its own while the world does nothing but watch it, until
// it returns or parks (its poll timer made, it blocks). Parked, it has
// looked through every window up to the end of the trail, crossing window
// marks, and found none of its users' events. The batch caller then
// submits a batch (whether the wait parked or not, so that the world does
// the same on every store), whose commit wakes a parked wait, which
// returns the batch's events; a wait that parks again (the batch was
// refused) is ended by its context and returns how far it looked. Its
// page is checked as a read's is. The wait and the batch go around the
// fault plan, as the reads do.
func (w *World) followWait() string {
	f := &w.follower
	select {
	case <-f.clock.parked:
	default:
	}
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	done := make(chan waitOutcome, 1)
	start := f.after
	var out waitOutcome
	var line string
	w.storage.Bypass(func() {
		go func() {
			page, through, err := w.q.WaitEventsThrough(ctx, queue.EventFilter{Users: f.users, After: start, Limit: followLimit})
			done <- waitOutcome{page: page, through: through, err: err}
		}()
		returned := false
		select {
		case out = <-done:
			returned = true
			line = fmt.Sprintf("follow wait -> %d events at once", len(out.page))
		case <-f.clock.parked:
			line = "follow wait -> parked"
		}
		line += "; " + w.batch(BatchNew)
		if returned {
			return
		}
		select {
		case out = <-done:
			line += fmt.Sprintf("; woken: %d events", len(out.page))
			if len(out.page) > 0 {
				w.cover.path(PathFollowWaitWoken)
			}
		case <-f.clock.parked:
			cancel()
			out = <-done
			line += "; parked again, ended"
		}
	})
	if out.err != nil && ctx.Err() == nil {
		w.checker.lockstepReport(InvReadable, "", out.err.Error())
		return line + "; trail unreadable: " + out.err.Error()
	}
	if out.through > start+simTrailWindow {
		w.cover.path(PathFollowWaitAcrossMarks)
	}
	if _, err := w.followed(out.page, out.through); err != nil {
		return line + "; trail unreadable: " + err.Error()
	}
	return line
}

// followed checks a page the follower read or waited for against the
// trail as it stands (read around the fault plan): every event of its
// users past its cursor and up to where the read says it looked, each
// once, in order, none of anyone else's; a full page looked as far as its
// last event; the read never looks back. It moves the cursor on and
// reports whether the read stopped short of the trail's end with a page
// not full: at a window mark.
func (w *World) followed(page []queue.TrailEvent, through int64) (bool, error) {
	f := &w.follower
	var trail []queue.TrailEvent
	var err error
	w.storage.Bypass(func() {
		trail, _, err = w.q.EventsThrough(w.ctx, queue.EventFilter{After: f.after, Limit: model.ListLimitMax})
	})
	if err != nil {
		w.checker.lockstepReport(InvReadable, "", err.Error())
		return false, err
	}
	var want []queue.TrailEvent
	for _, e := range trail {
		if e.Seq <= through && slices.Contains(f.users, e.User) && len(want) < followLimit {
			want = append(want, e)
		}
	}
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
	stopped := len(page) < followLimit && through < lastSeq(trail, f.after)
	f.after, f.seen = through, f.seen+len(page)
	return stopped, nil
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
// or more, or ten seconds ago or more, keeping their tombstones past the
// run; and of every task settled a lease ago or more, keeping their
// tombstones a millisecond only (pruneKeepKeysShort), so that any later prune expires
// them, after which a submit under one of their keys makes a new task.
// The simulator's task IDs derive from the user, the key and the instant
// of the submit (model.NewDerivedIDsAt), so the new task's ID is not the
// pruned one's. A scenario's scripted replay of a key whose tombstone
// expired is missed (keyExpired): the script expects the original task.
const (
	PruneShort  = "short"
	PruneLong   = "long"
	PruneExpire = "expire"
)

// PruneNames lists the prunes in a fixed order.
func PruneNames() []string { return []string{PruneShort, PruneLong, PruneExpire} }

// pruneKeepKeys is how long the simulator's prunes keep tombstones, and
// pruneKeepKeysShort how long an expire prune keeps them.
const (
	pruneKeepKeys      = 24 * time.Hour
	pruneKeepKeysShort = time.Millisecond
)

// pruneRequest is the prune named, in passes of one to three tasks.
func (w *World) pruneRequest(name string) queue.PruneRequest {
	w.prunes++
	r := queue.PruneRequest{OlderThan: time.Second, KeepKeys: pruneKeepKeys, Batch: 1 + w.prunes%3, Actor: operatorActor}
	switch name {
	case PruneLong:
		r.OlderThan = 10 * time.Second
	case PruneExpire:
		// Settled a lease ago or more: no worker still holds the task
		// (one whose completion's outcome was unknown retries it only
		// while its lease lasts), so none meets it gone.
		r.OlderThan, r.KeepKeys = max(w.sc.Lease, time.Millisecond), pruneKeepKeysShort
	}
	return r
}

// keyExpired reports whether a prune removed the task under user's key
// and a later one its tombstone: a submit under the key makes a new task.
func (w *World) keyExpired(user, key string) bool {
	if _, pruned := w.pruned[model.TaskKey(user, key)]; !pruned || w.q.ref == nil {
		return false
	}
	for _, s := range w.q.ref.Tombstones() {
		if s.User == user && s.Key == key {
			return false
		}
	}
	return true
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
	// The terminal tasks a prune may remove, and, of the scenario's (whose
	// expectations read it), whether each had a retried attempt: their
	// events go with them.
	// A scenario task is known by its user and key as well as by its ID:
	// a caller whose submit's answer was lost does not know the ID yet,
	// and learns it, by its retried submit, only after the prune.
	var before []model.Task
	retried := map[string]bool{}
	scripted := make(map[string]bool, len(w.tasks))
	for _, st := range w.tasks {
		scripted[model.TaskKey(st.request.User, st.request.Key)] = true
	}
	for _, t := range w.allTasks() {
		if _, gone := w.prunedRetried[t.ID]; gone || !t.State.Terminal() {
			continue
		}
		before = append(before, t)
		if w.scriptOf(t.ID) != nil || scripted[model.TaskKey(t.User, t.Key)] {
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
	// What is left, in one read: a task of before not in it was pruned.
	var left []model.Task
	w.storage.Bypass(func() { left, err = w.q.Queue.List(w.ctx, model.ListFilter{Limit: model.ListLimitMax}) })
	if err != nil {
		w.checker.lockstepReport(InvReadable, "", err.Error())
		return "prune: tasks unreadable: " + err.Error()
	}
	kept := make(map[string]bool, len(left))
	for _, t := range left {
		kept[t.ID] = true
	}
	for _, t := range before {
		if !kept[t.ID] {
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
// was pruned: a replay answered from its tombstone, or, once a prune
// expired the tombstone, a new task (the key is then no pruned task's).
func (w *World) replayed(user, key string, res model.SubmitResult) {
	k := model.TaskKey(user, key)
	id, ok := w.pruned[k]
	switch {
	case !ok:
	case res.Replay && res.TaskID == id:
		w.cover.path(PathPruneReplayInWindow)
	case !res.Replay && res.TaskID != id:
		w.cover.path(PathPruneReplayAfterWindow)
		delete(w.pruned, k)
	}
}
