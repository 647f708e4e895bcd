package queuetest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// Pruner is the retention a store may offer beside Store: the prune and
// the trail read a follower makes (the SQLite and PostgreSQL queues, and
// the reference model through an adapter that takes queue.PruneRequest).
// The prune cases skip a store without it.
type Pruner interface {
	Prune(ctx context.Context, r queue.PruneRequest) (queue.PruneResult, error)
	EventsAfter(ctx context.Context, after int64, limit int) ([]model.Event, error)
}

// Retainer is the stored retention policy and housekeeping's prune by it
// (the SQLite and PostgreSQL queues; the reference model keeps no stored
// policy). The cases of the policy skip a store without it.
type Retainer interface {
	PruneDue(ctx context.Context) (queue.PruneResult, error)
	Retention(ctx context.Context) (queue.RetentionPolicy, error)
	SetRetention(ctx context.Context, p queue.RetentionPolicy, actor string) error
}

// pruner returns the store's Pruner, or skips the test.
func (s *suite) pruner() Pruner {
	s.t.Helper()
	p, ok := s.store.(Pruner)
	if !ok {
		s.t.Skipf("%T does not prune", s.store)
	}
	return p
}

// retainer returns the store's Retainer, or skips the test.
func (s *suite) retainer() Retainer {
	s.t.Helper()
	p, ok := s.store.(Retainer)
	if !ok {
		s.t.Skipf("%T keeps no retention policy", s.store)
	}
	return p
}

const day = 24 * time.Hour

// completed submits a task, claims it and completes it.
func (s *suite) completed(mods ...func(*model.SubmitRequest)) string {
	s.t.Helper()
	id, c := s.running(mods...)
	require.NoError(s.t, s.store.Complete(s.ctx, c))
	return id
}

// failedPermanently submits a task, claims it and fails it for good.
func (s *suite) failedPermanently() string {
	s.t.Helper()
	id, c := s.running()
	to, err := s.store.Fail(s.ctx, c, model.Failure{Class: model.Permanent, Message: "no"})
	require.NoError(s.t, err)
	require.Equal(s.t, model.Failed, to)
	return id
}

// newer submits a task that is not claimable for a hundred days: the
// newest task, which no prune removes (so that its seq is never given
// again), and which stays out of the claims the cases make.
func (s *suite) newer() string {
	s.t.Helper()
	later := s.now().Add(100 * day)
	return s.submit(func(r *model.SubmitRequest) { r.RunAt = later })
}

// cancelled submits a task and cancels it while it is queued.
func (s *suite) cancelled() string {
	s.t.Helper()
	id := s.submit()
	_, err := s.store.Cancel(s.ctx, id, "ana")
	require.NoError(s.t, err)
	return id
}

func (s *suite) prune(r queue.PruneRequest) queue.PruneResult {
	s.t.Helper()
	if r.Actor == "" {
		r.Actor = "ops"
	}
	res, err := s.pruner().Prune(s.ctx, r)
	require.NoError(s.t, err)
	return res
}

// requireGone checks that a task, its events and its effects are gone.
func (s *suite) requireGone(id string) {
	s.t.Helper()
	_, err := s.store.Task(s.ctx, id)
	require.ErrorIs(s.t, err, model.ErrNotFound, "task %s was to be pruned", id)
	require.Empty(s.t, s.events(id), "task %s's events were to be pruned", id)
	require.Empty(s.t, s.effects(id), "task %s's effects were to be pruned", id)
}

// prunedEvents returns the audit trail's pruned events.
func (s *suite) prunedEvents() []model.Event {
	s.t.Helper()
	var out []model.Event
	for _, e := range s.events("") {
		if e.Kind == model.EventPruned {
			out = append(out, e)
		}
	}
	return out
}

// testPruneTerminalOnly: a prune removes exactly the terminal tasks settled
// at or before its cutoff, with their events; every other task (queued,
// running, waiting, in review, or settled after the cutoff) is untouched,
// the counters still reconcile, and the prune is in the audit trail.
func testPruneTerminalOnly(s *suite) {
	s.pruner()
	done := s.completed()
	failed := s.failedPermanently()
	cancelled := s.cancelled()
	parked, _ := s.parked()
	waiting, _ := s.waiting()
	later := s.now().Add(100 * day)
	queued := s.submit(func(r *model.SubmitRequest) { r.RunAt = later }) // old, and not claimable below
	s.advance(10 * day)
	running, _ := s.running()
	recent := s.completed()
	kept := []string{parked, waiting, queued, running, recent}
	before := map[string]model.Task{}
	eventsBefore := map[string][]model.Event{}
	for _, id := range kept {
		before[id] = s.task(id)
		eventsBefore[id] = s.events(id)
	}
	m := s.metrics()

	res := s.prune(queue.PruneRequest{OlderThan: 10 * day})

	require.Equal(s.t, map[model.State]int64{model.Completed: 1, model.Failed: 1, model.Cancelled: 1}, res.Tasks)
	require.Equal(s.t, int64(3), res.Tombstones)
	require.Positive(s.t, res.Events)
	require.Equal(s.t, 1, res.Transactions)
	require.Equal(s.t, s.now().Add(-10*day), res.Cutoff)
	for _, id := range []string{done, failed, cancelled} {
		s.requireGone(id)
	}
	for _, id := range kept {
		require.Equal(s.t, before[id], s.task(id), "prune changed task %s", id)
		require.Equal(s.t, eventsBefore[id], s.events(id), "prune changed the events of %s", id)
	}
	after := s.metrics()
	require.Equal(s.t, int64(3), after.Pruned)
	require.Equal(s.t, m.Submitted, after.Submitted)
	require.Equal(s.t, m.Depth[model.Completed]-1, after.Depth[model.Completed])
	require.Zero(s.t, after.Depth[model.Failed])
	require.Zero(s.t, after.Depth[model.Cancelled])
	require.Equal(s.t, m.Depth[model.NeedsReview], after.Depth[model.NeedsReview])
	require.Equal(s.t, m.Completions, after.Completions, "the outcome counters count what happened, pruned or not")

	pruned := s.prunedEvents()
	require.Len(s.t, pruned, 1)
	e := pruned[0]
	require.Equal(s.t, "ops", e.Actor)
	require.Empty(s.t, e.TaskID)
	require.Equal(s.t, s.now(), e.At)
	require.Equal(s.t, model.DetailPruned(10*day, res), e.Detail)
	require.Contains(s.t, e.Detail, "tasks=3 completed=1 failed=1 cancelled=1")

	again := s.prune(queue.PruneRequest{OlderThan: 10 * day})
	require.Zero(s.t, again.TaskCount())
	require.Zero(s.t, again.Transactions)
	require.Len(s.t, s.prunedEvents(), 1, "a prune that removes nothing records nothing")
}

// testPruneAgeBoundary: a task settled exactly at the cutoff goes; one
// settled a millisecond after it stays.
func testPruneAgeBoundary(s *suite) {
	s.pruner()
	first := s.completed()
	s.advance(time.Millisecond)
	second := s.completed()
	s.advance(time.Hour - time.Millisecond)
	res := s.prune(queue.PruneRequest{OlderThan: time.Hour})
	require.Equal(s.t, int64(1), res.TaskCount())
	s.requireGone(first)
	require.Equal(s.t, model.Completed, s.task(second).State)
}

// testPruneKeepsUnreceiptedEffects: a terminal task with an effect whose
// intent has no receipt is never pruned (it is counted as kept); one whose
// effects all have receipts goes with them.
func testPruneKeepsUnreceiptedEffects(s *suite) {
	s.pruner()
	open, c := s.running()
	_, err := s.store.RecordIntent(s.ctx, c, 0)
	require.NoError(s.t, err)
	to, err := s.store.Fail(s.ctx, c, model.Failure{Class: model.Permanent, Message: "gave up"})
	require.NoError(s.t, err)
	require.Equal(s.t, model.Failed, to)

	receipted, c := s.running()
	intent, err := s.store.RecordIntent(s.ctx, c, 0)
	require.NoError(s.t, err)
	require.NoError(s.t, s.store.RecordReceipt(s.ctx, c, intent.OpID, "ok"))
	require.NoError(s.t, s.store.Complete(s.ctx, c))
	s.newer()
	s.advance(day)
	openBefore, effectsBefore := s.task(open), s.effects(open)

	dry, err := s.pruner().Prune(s.ctx, queue.PruneRequest{OlderThan: day, DryRun: true, Actor: "ops"})
	require.NoError(s.t, err)
	require.Equal(s.t, int64(1), dry.Kept)
	require.Equal(s.t, []string{open}, dry.KeptIDs)
	require.Equal(s.t, int64(1), dry.Effects)

	res := s.prune(queue.PruneRequest{OlderThan: day})
	require.Equal(s.t, map[model.State]int64{model.Completed: 1}, res.Tasks)
	require.Equal(s.t, int64(1), res.Effects)
	require.Equal(s.t, int64(1), res.Kept)
	s.requireGone(receipted)
	require.Equal(s.t, openBefore, s.task(open))
	require.Equal(s.t, effectsBefore, s.effects(open))
	require.False(s.t, effectsBefore[0].Receipted())
}

// testPruneKeptOnce: a task kept for an effect without its receipt counts
// once in a prune's Kept, as in the dry run before it, however many passes
// the prune takes to expire tombstones (a rerun of the scan from the start
// counted it again in each).
func testPruneKeptOnce(s *suite) {
	s.pruner()
	open, c := s.running()
	_, err := s.store.RecordIntent(s.ctx, c, 0)
	require.NoError(s.t, err)
	_, err = s.store.Fail(s.ctx, c, model.Failure{Class: model.Permanent, Message: "gave up"})
	require.NoError(s.t, err)
	s.completed()
	s.completed()
	s.newer()
	s.advance(day)
	res := s.prune(queue.PruneRequest{OlderThan: day, KeepKeys: day})
	require.Equal(s.t, int64(2), res.Tombstones)
	require.Equal(s.t, int64(1), res.Kept)
	s.advance(day)

	dry := s.prune(queue.PruneRequest{OlderThan: day, DryRun: true})
	require.Equal(s.t, int64(2), dry.Expired)
	require.Equal(s.t, []string{open}, dry.KeptIDs)
	before := len(s.prunedEvents())
	res = s.prune(queue.PruneRequest{OlderThan: day, Batch: 1})
	require.Equal(s.t, int64(2), res.Expired)
	require.Equal(s.t, 2, res.Transactions)
	require.Equal(s.t, dry.Kept, res.Kept, "the kept task counts once")
	var kept []string
	for _, e := range s.prunedEvents()[before:] {
		fields := strings.Fields(e.Detail)
		kept = append(kept, fields[len(fields)-1])
	}
	require.Equal(s.t, []string{"kept=1", "kept=0"}, kept)
}

// testPruneTombstones: after its task is pruned, a replayed submit still
// returns the original task ID marked replay, and runs nothing; a changed
// request under the key is still refused. Once the tombstone's window has
// passed and a prune removes it, the key is free again.
func testPruneTombstones(s *suite) {
	s.pruner()
	req := s.request()
	orig, err := s.store.Submit(s.ctx, req)
	require.NoError(s.t, err)
	c := s.claim("w1")
	require.NoError(s.t, s.store.Complete(s.ctx, c.Claim))
	s.newer()
	s.advance(day)
	res := s.prune(queue.PruneRequest{OlderThan: day, KeepKeys: 7 * day})
	require.Equal(s.t, int64(1), res.Tombstones)
	s.requireGone(orig.TaskID)

	replay, err := s.store.Submit(s.ctx, req)
	require.NoError(s.t, err)
	require.Equal(s.t, model.SubmitResult{TaskID: orig.TaskID, Replay: true}, replay)
	many, err := s.store.SubmitMany(s.ctx, []model.SubmitRequest{req})
	require.NoError(s.t, err)
	require.Equal(s.t, []model.SubmitResult{{TaskID: orig.TaskID, Replay: true}}, many)
	s.noClaim()

	changed := req
	changed.CostBudget++
	_, err = s.store.Submit(s.ctx, changed)
	require.ErrorIs(s.t, err, model.ErrIdempotencyConflict)
	require.Contains(s.t, err.Error(), orig.TaskID)
	require.Equal(s.t, 1, s.count(model.ListFilter{}), "nothing was written")

	s.advance(7*day - time.Millisecond)
	res = s.prune(queue.PruneRequest{OlderThan: day})
	require.Zero(s.t, res.Expired, "the window has not passed")
	replay, err = s.store.Submit(s.ctx, req)
	require.NoError(s.t, err)
	require.True(s.t, replay.Replay)

	s.advance(time.Millisecond)
	res = s.prune(queue.PruneRequest{OlderThan: day})
	require.Equal(s.t, int64(1), res.Expired)
	require.Equal(s.t, 1, res.Transactions, "expiring a tombstone is a prune and is recorded")
	fresh, err := s.store.Submit(s.ctx, changed)
	require.NoError(s.t, err)
	require.False(s.t, fresh.Replay)
	s.metrics()
}

// testPruneBatches: a prune removes at most its batch per transaction, and
// records each transaction.
func testPruneBatches(s *suite) {
	s.pruner()
	var ids []string
	for range 5 {
		ids = append(ids, s.completed())
	}
	s.newer()
	s.advance(day)
	res := s.prune(queue.PruneRequest{OlderThan: day, Batch: 2})
	require.Equal(s.t, int64(5), res.TaskCount())
	require.Equal(s.t, 3, res.Transactions)
	for _, id := range ids {
		s.requireGone(id)
	}
	var removed []string
	for _, e := range s.prunedEvents() {
		removed = append(removed, strings.Fields(e.Detail)[1])
	}
	require.Equal(s.t, []string{"tasks=2", "tasks=2", "tasks=1"}, removed)
	require.Equal(s.t, int64(5), s.metrics().Pruned)
}

// testPruneDryRun: a dry run counts what a prune would remove and changes
// nothing.
func testPruneDryRun(s *suite) {
	s.pruner()
	s.completed()
	s.cancelled()
	s.submit()
	s.advance(day)
	events := s.events("")
	tasks := s.count(model.ListFilter{})
	dry, err := s.pruner().Prune(s.ctx, queue.PruneRequest{OlderThan: day, DryRun: true, Actor: "ops"})
	require.NoError(s.t, err)
	require.True(s.t, dry.DryRun)
	require.Equal(s.t, map[model.State]int64{model.Completed: 1, model.Cancelled: 1}, dry.Tasks)
	require.Equal(s.t, events, s.events(""), "a dry run writes nothing")
	require.Equal(s.t, tasks, s.count(model.ListFilter{}))

	res := s.prune(queue.PruneRequest{OlderThan: day})
	require.Equal(s.t, dry.Tasks, res.Tasks)
	require.Equal(s.t, dry.Events, res.Events)
	require.Equal(s.t, dry.Tombstones, res.Tombstones)
}

// testPruneValidation: a bad age, window, batch or actor is refused, naming
// it, and nothing is written.
func testPruneValidation(s *suite) {
	p := s.pruner()
	s.completed()
	s.advance(day)
	events := s.events("")
	for _, tc := range []struct {
		req   queue.PruneRequest
		field string
	}{
		{queue.PruneRequest{Actor: "ops"}, "older_than"},
		{queue.PruneRequest{OlderThan: -day, Actor: "ops"}, "older_than"},
		{queue.PruneRequest{OlderThan: queue.RetentionMax + day, Actor: "ops"}, "older_than"},
		{queue.PruneRequest{OlderThan: time.Microsecond, Actor: "ops"}, "older_than"},
		{queue.PruneRequest{OlderThan: day, KeepKeys: -1, Actor: "ops"}, "keep_keys"},
		{queue.PruneRequest{OlderThan: day, Batch: queue.PruneBatchMax + 1, Actor: "ops"}, "batch"},
		{queue.PruneRequest{OlderThan: day, Batch: -1, Actor: "ops"}, "batch"},
		{queue.PruneRequest{OlderThan: day}, "actor"},
	} {
		_, err := p.Prune(s.ctx, tc.req)
		s.requireInvalid(err, tc.field)
	}
	if r, ok := s.store.(Retainer); ok {
		s.requireInvalid(r.SetRetention(s.ctx, queue.RetentionPolicy{OlderThan: -1, KeepKeys: day}, "ops"), "older_than")
		s.requireInvalid(r.SetRetention(s.ctx, queue.RetentionPolicy{OlderThan: day}, "ops"), "keep_keys")
	}
	require.Equal(s.t, events, s.events(""))
}

// testPruneFollower: a follower whose cursor is behind a pruned range reads
// what remains, in order, ending with the pruned event.
func testPruneFollower(s *suite) {
	p := s.pruner()
	gone := s.completed()
	s.advance(day)
	stays := s.submit()
	all, err := p.EventsAfter(s.ctx, 0, model.ListLimitMax)
	require.NoError(s.t, err)
	var cursor int64
	for _, e := range all {
		if e.TaskID == gone && e.Kind == model.EventSubmitted {
			cursor = e.Seq
		}
	}
	s.prune(queue.PruneRequest{OlderThan: day})
	rest, err := p.EventsAfter(s.ctx, cursor, model.ListLimitMax)
	require.NoError(s.t, err)
	require.Len(s.t, rest, 2, "the remaining task's submit, then the prune")
	require.Equal(s.t, stays, rest[0].TaskID)
	require.Equal(s.t, model.EventPruned, rest[1].Kind)
	require.Less(s.t, rest[0].Seq, rest[1].Seq)
	require.Greater(s.t, rest[0].Seq, cursor)
}

// testPruneDue: housekeeping prunes by the stored policy, and not at all
// while the policy is off (the default).
func testPruneDue(s *suite) {
	p := s.retainer()
	policy, err := p.Retention(s.ctx)
	require.NoError(s.t, err)
	require.Equal(s.t, queue.RetentionPolicy{KeepKeys: queue.DefaultKeepKeys}, policy)
	id := s.completed()
	s.newer()
	s.advance(2 * day)
	res, err := p.PruneDue(s.ctx)
	require.NoError(s.t, err)
	require.Zero(s.t, res.TaskCount())
	require.Equal(s.t, model.Completed, s.task(id).State)

	want := queue.RetentionPolicy{OlderThan: day, KeepKeys: 3 * day}
	require.NoError(s.t, p.SetRetention(s.ctx, want, "ops"))
	got, err := p.Retention(s.ctx)
	require.NoError(s.t, err)
	require.Equal(s.t, want, got)
	last := s.lastEvent("")
	require.Equal(s.t, model.EventRetentionSet, last.Kind)
	require.Equal(s.t, "ops", last.Actor)
	require.Equal(s.t, "older_than=1d keep_keys=3d", last.Detail)

	res, err = p.PruneDue(s.ctx)
	require.NoError(s.t, err)
	require.Equal(s.t, int64(1), res.TaskCount())
	s.requireGone(id)
	e := s.lastEvent("")
	require.Equal(s.t, model.EventPruned, e.Kind)
	require.Equal(s.t, queue.HousekeepingActor, e.Actor)
	require.Equal(s.t, fmt.Sprintf("older_than=1d tasks=1 completed=1 failed=0 cancelled=0 events=%d effects=0 tombstones=1 expired_tombstones=0 kept=0", res.Events), e.Detail)
	s.metrics()
}

// testPruneNeverReusesSequence: a prune that removes the newest events
// (those of an older task that settled last) and the newest task it may
// leaves no sequence number to be given again: the events after it number
// above every event a follower may have seen, and a new task's seq is
// above every task's a lister may have seen (the newest task is never
// pruned: removing it would hand its seq out again on SQLite).
func testPruneNeverReusesSequence(s *suite) {
	s.pruner()
	first := s.submit()
	newest := s.newer()
	c := s.claim("w1")
	require.Equal(s.t, first, c.Claim.TaskID)
	require.NoError(s.t, s.store.Complete(s.ctx, c.Claim))
	s.advance(day)
	events := s.events("")
	top := events[len(events)-1].Seq
	require.Equal(s.t, first, events[len(events)-1].TaskID, "the newest events are the pruned task's")
	topTask := s.task(newest).Seq

	res := s.prune(queue.PruneRequest{OlderThan: day})
	require.Equal(s.t, int64(1), res.TaskCount())
	s.requireGone(first)
	e := s.lastEvent("")
	require.Equal(s.t, model.EventPruned, e.Kind)
	require.Greater(s.t, e.Seq, top, "the prune's event numbers above every event there was")

	// The newest task, settled and old, stays while it is the newest.
	_, err := s.store.Cancel(s.ctx, newest, "ana")
	require.NoError(s.t, err)
	s.advance(2 * day)
	res = s.prune(queue.PruneRequest{OlderThan: day})
	require.Zero(s.t, res.TaskCount())
	require.Equal(s.t, model.Cancelled, s.task(newest).State)

	id := s.submit()
	require.Greater(s.t, s.task(id).Seq, topTask, "no task seq is given twice")
	after := s.events(id)
	require.Len(s.t, after, 1)
	require.Greater(s.t, after[0].Seq, e.Seq)

	// Once it is no longer the newest, it goes too; still nothing reused.
	s.completedFor(id)
	s.advance(2 * day)
	res = s.prune(queue.PruneRequest{OlderThan: day})
	require.Equal(s.t, int64(1), res.TaskCount())
	s.requireGone(newest)
	require.Greater(s.t, s.lastEvent("").Seq, after[0].Seq)
}

// completedFor claims the queued task id and completes it.
func (s *suite) completedFor(id string) {
	s.t.Helper()
	c := s.claim("w1")
	require.Equal(s.t, id, c.Claim.TaskID)
	require.NoError(s.t, s.store.Complete(s.ctx, c.Claim))
}
