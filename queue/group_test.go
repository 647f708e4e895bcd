package queue

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

	"github.com/leasehold/leasehold/faults/storagefault"
	"github.com/leasehold/leasehold/internal/pgtest"
	"github.com/leasehold/leasehold/model"
)

// groupRig is a file queue whose group leader the test can hold, so that it
// queues exactly the operations it wants into one group, in order, and
// a storage fault injector under it.
type groupRig struct {
	*bundle
	storage *storagefault.Storage
}

func setupGroup(t *testing.T) *groupRig {
	t.Helper()
	clock := clockwork.NewFakeClockAt(epoch)
	storage := storagefault.NewStorage(&sqlite.Driver{}, clock)
	b := openBundle(t, filepath.Join(t.TempDir(), "leasehold.db"), clock, 1, func(o *Options) { o.Driver = storage })
	require.NotNil(t, b.q.ops, "grouping is on by default")
	return &groupRig{bundle: b, storage: storage}
}

// hold runs an operation that, leading its group, blocks every other
// group until release is called;
// before it returns, the operation runs then (the fault it may arm fires
// on the next group's first statement).
func (g *groupRig) hold(then func()) (release func()) {
	running, gate, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- g.q.write(g.ctx, "hold", func(t *txn) error {
			close(running)
			<-gate
			if then != nil {
				then()
			}
			return nil
		})
	}()
	<-running
	return func() {
		close(gate)
		require.NoError(g.t, <-done)
	}
}

// enqueue starts op on a goroutine of its own and returns once op's write
// is queued behind the held group (the queue holds want operations).
func (g *groupRig) enqueue(want int, op func() error) <-chan error {
	out := make(chan error, 1)
	go func() { out <- op() }()
	for len(g.q.ops) < want {
		runtime.Gosched()
	}
	return out
}

// inGroup runs ops as one group, in order, and returns their errors.
func (g *groupRig) inGroup(then func(), ops ...func() error) []error {
	g.t.Helper()
	release := g.hold(then)
	var outs []<-chan error
	for i, op := range ops {
		outs = append(outs, g.enqueue(i+1, op))
	}
	groups := g.q.stats.groups.Load()
	release()
	errs := make([]error, len(ops))
	for i, out := range outs {
		errs[i] = <-out
	}
	require.Equal(g.t, groups+1, g.q.stats.groups.Load(), "one group: the held one ran before")
	return errs
}

// inGroupRetrying is inGroup for members that may run again after their
// group rolls back (writeRetrying): they start as one group, and each
// returns once its last run is over.
func (g *groupRig) inGroupRetrying(ops ...func() error) []error {
	g.t.Helper()
	release := g.hold(nil)
	var outs []<-chan error
	for i, op := range ops {
		outs = append(outs, g.enqueue(i+1, op))
	}
	release()
	errs := make([]error, len(ops))
	for i, out := range outs {
		errs[i] = <-out
	}
	return errs
}

func (g *groupRig) submitOp(key string) func() error {
	return func() error {
		_, err := g.q.Submit(g.ctx, model.SubmitRequest{User: "ana", Key: key, Payload: `{"steps":[{"cost":1}]}`,
			CostBudget: 10, StepsMax: 5})
		return err
	}
}

func (g *groupRig) taskCount() int {
	g.t.Helper()
	tasks, err := g.q.List(g.ctx, model.ListFilter{Limit: model.ListLimitMax})
	require.NoError(g.t, err)
	return len(tasks)
}

// A group of k submits all commit in one transaction, one commit.
func TestGroupCommitsOnce(t *testing.T) {
	g := setupGroup(t)
	before := g.storage.Commits()
	var ops []func() error
	for i := range 5 {
		ops = append(ops, g.submitOp(fmt.Sprintf("k%d", i)))
	}
	for _, err := range g.inGroup(nil, ops...) {
		require.NoError(t, err)
	}
	require.Equal(t, 5, g.taskCount())
	// The held operation's commit, then the group's.
	require.Equal(t, before+2, g.storage.Commits())
}

// A statement fault at member j of a group of k, on its savepoint or on
// its operation's first statement, rolls the whole group back: member j
// gets the injected error and every member ErrNotApplied; nothing is
// written.
func TestGroupStatementFaultRollsBackAll(t *testing.T) {
	for _, k := range []int{2, 3, 5} {
		for _, j := range slices.Compact([]int{0, k / 2, k - 1}) {
			for _, where := range []string{"savepoint", "operation"} {
				t.Run(fmt.Sprintf("k%d/j%d/%s", k, j, where), func(t *testing.T) {
					g := setupGroup(t)
					arm := func() { g.storage.Arm(storagefault.FailStatement) }
					var ops []func() error
					var armFirst func()
					for i := range k {
						key := fmt.Sprintf("k%d", i)
						switch {
						case i == j && where == "operation":
							ops = append(ops, func() error { return g.armedSubmit(key, arm) })
						case i == j-1 && where == "savepoint":
							ops = append(ops, func() error { return g.armedSubmitAfter(key, arm) })
						default:
							ops = append(ops, g.submitOp(key))
						}
					}
					if j == 0 && where == "savepoint" {
						armFirst = arm
					}
					errs := g.inGroup(armFirst, ops...)
					for i, err := range errs {
						require.ErrorIs(t, err, ErrNotApplied, "member %d", i)
						require.NotErrorIs(t, err, ErrOutcomeUnknown, "member %d", i)
						if i == j {
							require.ErrorIs(t, err, storagefault.ErrInjected, "member %d", i)
						} else {
							require.NotErrorIs(t, err, storagefault.ErrInjected, "member %d", i)
						}
					}
					require.Equal(t, 1, g.storage.Counts().FailStatement)
					require.Zero(t, g.taskCount())
					require.Empty(t, g.events(""))
				})
			}
		}
	}
}

// armedSubmit is a submit (the queue's own, t.submit) that arms a fault
// first, inside the group: the fault fires on the operation's first
// statement, after its savepoint.
func (g *groupRig) armedSubmit(key string, arm func()) error {
	return g.q.write(g.ctx, "submit", func(t *txn) error {
		arm()
		n, err := model.Normalize(model.SubmitRequest{User: "ana", Key: key, Payload: `{}`, CostBudget: 1, StepsMax: 1})
		if err != nil {
			return err
		}
		_, err = t.submit(n, "ana")
		return err
	})
}

// armedSubmitAfter submits inside the group and arms a fault after its
// last statement: the fault fires on the next member's savepoint.
func (g *groupRig) armedSubmitAfter(key string, arm func()) error {
	return g.q.write(g.ctx, "submit", func(t *txn) error {
		n, err := model.Normalize(model.SubmitRequest{User: "ana", Key: key, Payload: `{}`, CostBudget: 1, StepsMax: 1})
		if err != nil {
			return err
		}
		if _, err := t.submit(n, "ana"); err != nil {
			return err
		}
		arm()
		return nil
	})
}

// A refusal without a record (a key reused with another payload) rolls
// back that member alone; the rest of the group commits.
func TestGroupRefusalRollsBackOnlyItsMember(t *testing.T) {
	g := setupGroup(t)
	g.submit(func(r *model.SubmitRequest) { r.Key = "used" })
	conflict := func() error {
		_, err := g.q.Submit(g.ctx, model.SubmitRequest{User: "ana", Key: "used", Payload: `{"other":1}`, CostBudget: 10, StepsMax: 5})
		return err
	}
	// A refusal after the operation wrote: its writes go back to its
	// savepoint, and only its.
	wroteThenRefused := func() error {
		return g.q.write(g.ctx, "submit", func(t *txn) error {
			n, err := model.Normalize(model.SubmitRequest{User: "ana", Key: "refused", Payload: `{}`, CostBudget: 1, StepsMax: 1})
			if err != nil {
				return err
			}
			if _, err := t.submit(n, "ana"); err != nil {
				return err
			}
			return fmt.Errorf("refused after writing: %w", model.ErrInvalidTransition)
		})
	}
	errs := g.inGroup(nil, g.submitOp("a"), conflict, g.submitOp("b"), wroteThenRefused, g.submitOp("c"))
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], ErrIdempotencyConflict)
	require.NotErrorIs(t, errs[1], ErrNotApplied)
	require.NoError(t, errs[2])
	require.ErrorIs(t, errs[3], ErrInvalidTransition)
	require.NoError(t, errs[4])
	require.Equal(t, 4, g.taskCount())
	_, err := g.q.Submit(g.ctx, model.SubmitRequest{User: "ana", Key: "refused", Payload: `{"new":1}`, CostBudget: 1, StepsMax: 1})
	require.NoError(t, err, "the refused member's key was never stored")
}

// A stale write inside a group is refused and its stale-write event kept,
// a step past the budget fails its task (the settle kept), and the rest of
// the group commits.
func TestGroupStaleWriteKeepsItsEvent(t *testing.T) {
	g := setupGroup(t)
	a, ca := g.running()
	b, cb := g.running(func(r *model.SubmitRequest) { r.CostBudget = 1 })
	c, cc := g.running()
	stale := cc
	stale.Fence++ // a fence this task never had
	errs := g.inGroup(nil,
		func() error { return g.q.Complete(g.ctx, ca) },
		func() error { return g.q.Complete(g.ctx, stale) },
		func() error {
			_, err := g.q.CompleteStep(g.ctx, model.StepWrite{Claim: cb, Index: 0, Cost: 5})
			return err
		},
		func() error {
			_, err := g.q.CompleteStep(g.ctx, model.StepWrite{Claim: cc, Index: 0, Cost: 1})
			return err
		})
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], ErrStaleClaim)
	require.ErrorIs(t, errs[2], ErrBudgetExhausted)
	require.NoError(t, errs[3])
	require.Equal(t, model.Completed, g.state(a))
	task := g.task(b)
	require.Equal(t, model.Failed, task.State)
	require.Equal(t, model.BudgetExhausted, task.Reason)
	task = g.task(c)
	require.Equal(t, model.Running, task.State)
	require.Equal(t, 1, task.StepsUsed)
	var staleEvents int
	for _, e := range g.events(c) {
		if e.Kind == model.EventStaleWrite {
			staleEvents++
			require.Equal(t, stale.Fence, e.Fence)
		}
	}
	require.Equal(t, 1, staleEvents)
}

// A COMMIT that fails acknowledges no member: each is told
// ErrOutcomeUnknown and nothing is written. One that is applied but
// reports failure tells each the same, and everything is written. A
// member refused and rolled back to its savepoint keeps its refusal.
func TestGroupCommitFailureAcknowledgesNoMember(t *testing.T) {
	for _, fault := range []storagefault.Fault{storagefault.FailCommit, storagefault.AmbiguousCommit} {
		t.Run(string(fault), func(t *testing.T) {
			g := setupGroup(t)
			g.submit(func(r *model.SubmitRequest) { r.Key = "used" })
			conflict := func() error {
				_, err := g.q.Submit(g.ctx, model.SubmitRequest{User: "ana", Key: "used", Payload: `{"other":1}`, CostBudget: 10, StepsMax: 5})
				return err
			}
			// The first member arms the fault inside the group, after the
			// held write's commit: it fires on the group's.
			armed := func() error { return g.armedSubmit("a", func() { g.storage.Arm(fault) }) }
			errs := g.inGroup(nil, armed, conflict, g.submitOp("b"), g.submitOp("c"))
			for i, err := range errs {
				if i == 1 {
					require.ErrorIs(t, err, ErrIdempotencyConflict)
					require.NotErrorIs(t, err, ErrOutcomeUnknown)
					continue
				}
				require.ErrorIs(t, err, ErrOutcomeUnknown, "member %d", i)
				require.ErrorIs(t, err, storagefault.ErrInjected, "member %d", i)
			}
			want := 1
			if fault == storagefault.AmbiguousCommit {
				want = 4
			}
			require.Equal(t, want, g.taskCount())
			require.Equal(t, 1, g.storage.Counts().Fired(fault))
		})
	}
}

// A caller whose context ends while its operation waits in the queue gets
// the context's error and its operation never runs; one cancelled after
// its operation started waits for the group and gets its outcome.
func TestGroupCancelledCaller(t *testing.T) {
	g := setupGroup(t)
	ctx, cancel := context.WithCancel(g.ctx)
	ran := false
	queued := func() error {
		return g.q.write(ctx, "queued", func(t *txn) error {
			ran = true
			return nil
		})
	}
	cancelInside := func() error {
		inner, cancelInner := context.WithCancel(g.ctx)
		return g.q.write(inner, "submit", func(t *txn) error {
			cancelInner()
			n, err := model.Normalize(model.SubmitRequest{User: "ana", Key: "inside", Payload: `{}`, CostBudget: 1, StepsMax: 1})
			if err != nil {
				return err
			}
			_, err = t.submit(n, "ana")
			return err
		})
	}
	errs := g.inGroup(cancel, queued, cancelInside, g.submitOp("after"))
	require.ErrorIs(t, errs[0], context.Canceled)
	require.False(t, ran)
	require.NoError(t, errs[1])
	require.NoError(t, errs[2])
	require.Equal(t, 2, g.taskCount())

	// Cancelled before it joins: nothing is queued, nothing runs.
	_, err := g.q.Submit(ctx, g.request())
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 2, g.taskCount())
}

// A flood of submits from many goroutines, far past the group queue's
// bound, is held back: the queue never holds more than GroupQueueMax,
// callers past it wait (and one whose context ends while waiting gives up
// with nothing written), no group exceeds GroupMax, and every other
// submit is stored once groups run again.
func TestGroupFloodBackPressure(t *testing.T) {
	g := setupGroup(t)
	limits := model.DefaultLimits
	limits.UserDepthMax = 0
	require.NoError(t, g.q.SetLimits(g.ctx, limits, "test"))
	const flood = 4 * GroupQueueMax
	const impatient = GroupQueueMax // of the flood, given up on while waiting
	release := g.hold(nil)
	ctx, cancel := context.WithCancel(g.ctx)
	var wg sync.WaitGroup
	var stored, gaveUp atomic.Int64
	errs := make(chan error, flood)
	for i := range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			callCtx := g.ctx
			if i < impatient {
				callCtx = ctx
			}
			_, err := g.q.Submit(callCtx, model.SubmitRequest{User: fmt.Sprintf("u%d", i%7), Key: fmt.Sprintf("k%d", i),
				Payload: `{}`, CostBudget: 1, StepsMax: 1})
			switch {
			case err == nil:
				stored.Add(1)
			case i < impatient && errors.Is(err, context.Canceled):
				gaveUp.Add(1)
			default:
				errs <- err
			}
		}()
	}
	for len(g.q.ops) < GroupQueueMax {
		runtime.Gosched()
	}
	// The queue is full and the groups held: nobody has been answered.
	require.Equal(t, GroupQueueMax, len(g.q.ops))
	require.Zero(t, stored.Load())
	cancel()
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// Every impatient caller was waiting (for room, or in the queue) when
	// cancelled, so each gave up with nothing written.
	require.Equal(t, int64(impatient), gaveUp.Load())
	require.Equal(t, int64(flood-impatient), stored.Load())
	require.Equal(t, int(stored.Load()), g.taskCount())
	require.LessOrEqual(t, g.q.stats.largest.Load(), int64(GroupMax))
	require.Greater(t, g.q.stats.largest.Load(), int64(1), "the flood was grouped")
}

// Close answers every operation still queued, and refuses new ones.
func TestGroupClose(t *testing.T) {
	g := setupGroup(t)
	release := g.hold(nil)
	out := g.enqueue(1, g.submitOp("late"))
	closed := make(chan error, 1)
	go func() { closed <- g.q.Close() }()
	<-g.q.closing
	release()
	require.NoError(t, <-closed)
	g.closed = true
	err := <-out
	require.ErrorIs(t, err, ErrClosed)
	_, err = g.q.Submit(g.ctx, g.request())
	require.ErrorIs(t, err, ErrClosed)
}

// groupStores runs test on grouped SQLite file queues and, when the
// PostgreSQL suites run, on PostgreSQL queues with group commit forced
// on; open opens one (each its own database), with a storage fault
// injector under it.
func groupStores(t *testing.T, test func(t *testing.T, open func() *groupRig)) {
	t.Run("sqlite", func(t *testing.T) { test(t, func() *groupRig { return setupGroup(t) }) })
	t.Run("postgres", func(t *testing.T) {
		test(t, func() *groupRig {
			url := pgtest.Fresh(t, migratePostgresURL)
			clock := clockwork.NewFakeClockAt(epoch)
			storage := storagefault.NewPostgres(stdlib.GetDefaultDriver(), clock)
			// Faults meet the rig's statements only: no wake-up notifier.
			b := openBundle(t, url, clock, 1, func(o *Options) { o.Driver, o.NoWakeNotify = storage, true })
			if _, ok := b.q.sql.queries["group_savepoint"]; !ok {
				t.Skip("this build's PostgreSQL store has no group savepoints")
			}
			// One lane: the rig's held group must block every other.
			b.q.startGroups(1)
			return &groupRig{bundle: b, storage: storage}
		})
	})
}

// completeOp completes c in whatever group it joins.
func (g *groupRig) completeOp(c model.Claim) func() error {
	return func() error { return g.q.Complete(g.ctx, c) }
}

// A group of completions is completed set-wise: those whose claims hold
// are committed with their completed events; a stale fence, an expired
// lease and a second completion of a task are each refused with their
// stale-write event kept, and one of a missing task is refused alone.
func TestGroupBatchesCompletions(t *testing.T) {
	groupStores(t, func(t *testing.T, open func() *groupRig) {
		g := open()
		short := g.submit()
		expired := g.claimFor("w1", 1, time.Second)[0].Claim
		require.Equal(t, short, expired.TaskID)
		a, ca := g.running()
		b, cb := g.running(func(r *model.SubmitRequest) { r.User = "bob" })
		c, cc := g.running()
		d, cd := g.running(func(r *model.SubmitRequest) { r.User = "bob" })
		g.advance(2 * time.Second)
		stale := cc
		stale.Fence++
		missing := ca
		missing.TaskID = "no-such-task"
		errs := g.inGroup(nil, g.completeOp(ca), g.completeOp(stale), g.completeOp(expired), g.completeOp(cb),
			g.completeOp(missing), g.completeOp(cd), g.completeOp(cb))
		require.NoError(t, errs[0])
		require.ErrorIs(t, errs[1], ErrStaleClaim)
		require.ErrorIs(t, errs[2], ErrStaleClaim)
		require.NoError(t, errs[3])
		require.ErrorIs(t, errs[4], ErrNotFound)
		require.NotErrorIs(t, errs[4], ErrNotApplied)
		require.NoError(t, errs[5])
		require.ErrorIs(t, errs[6], ErrStaleClaim, "the second completion of a task sees the first")
		require.Equal(t, int64(3), g.q.stats.batched.Load(), "a, b and d were completed set-wise")
		for _, id := range []string{a, b, d} {
			require.Equal(t, model.Completed, g.state(id))
			var done []model.Event
			for _, e := range g.events(id) {
				if e.Kind == model.EventCompleted {
					done = append(done, e)
				}
			}
			require.Len(t, done, 1)
			require.Equal(t, "w1", done[0].Actor)
			require.Equal(t, g.now(), done[0].At)
			require.Equal(t, done[0].Fence, int64(done[0].Attempt))
		}
		require.Equal(t, model.Running, g.state(c))
		require.Equal(t, model.Running, g.state(short), "the lease expired, but nobody reaped it")
		staleEvents := map[string]int{}
		for _, e := range g.events("") {
			if e.Kind == model.EventStaleWrite {
				staleEvents[e.TaskID]++
			}
		}
		require.Equal(t, map[string]int{c: 1, short: 1, b: 1}, staleEvents)
	})
}

// A completion whose scope JSON would not carry byte for byte (invalid
// UTF-8, a NUL) is not batched: its event keeps the scope as it is.
func TestGroupBatchLeavesOddTextAlone(t *testing.T) {
	groupStores(t, func(t *testing.T, open func() *groupRig) {
		g := open()
		a, ca := g.running()
		b, cb := g.running()
		c, cc := g.running()
		odd := "scope\xff"
		if g.q.store.Dialect() != "sqlite" {
			odd = "scope" // PostgreSQL text holds no invalid UTF-8; a NUL neither
		}
		scoped := model.WithScope(g.ctx, odd)
		errs := g.inGroup(nil, g.completeOp(ca), func() error { return g.q.Complete(scoped, cb) }, g.completeOp(cc))
		for _, err := range errs {
			require.NoError(t, err)
		}
		want := int64(2)
		if odd == "scope" {
			want = 3
		}
		require.Equal(t, want, g.q.stats.batched.Load())
		require.Equal(t, odd, g.lastEvent(b).Scope)
		require.Equal(t, "", g.lastEvent(a).Scope)
		require.Equal(t, model.Completed, g.state(c))
	})
}

// A storage fault at the batch statement rolls the whole group back:
// every member is told ErrNotApplied and nothing is written.
func TestGroupBatchFaultRollsBackAll(t *testing.T) {
	groupStores(t, func(t *testing.T, open func() *groupRig) {
		g := open()
		g.q.fuse = false // the usual way's statements (a fused group's: fused_test.go)
		var ids []string
		var ops []func() error
		for range 3 {
			id, c := g.running()
			ids = append(ids, id)
			ops = append(ops, g.completeOp(c))
		}
		_, c := g.running()
		ops = append(ops, func() error {
			_, err := g.q.CompleteAndClaim(g.ctx, c, model.ClaimRequest{Worker: "w1", Max: 1, Lease: testLease})
			return err
		})
		ids = append(ids, c.TaskID)
		before := len(g.events(""))
		// Armed inside the held group: it fires on the next group's
		// first statement, the batch's UPDATE.
		errs := g.inGroup(func() { g.storage.Arm(storagefault.FailStatement) }, ops...)
		for i, err := range errs {
			require.ErrorIs(t, err, ErrNotApplied, "member %d", i)
			require.ErrorIs(t, err, storagefault.ErrInjected, "member %d", i)
			require.NotErrorIs(t, err, ErrOutcomeUnknown, "member %d", i)
		}
		require.Equal(t, 1, g.storage.Counts().FailStatement)
		for _, id := range ids {
			require.Equal(t, model.Running, g.state(id))
		}
		require.Len(t, g.events(""), before)
	})
}

// A storage fault at the statement that inserts the batch's events rolls
// the whole group back too.
func TestGroupBatchEventsFaultRollsBackAll(t *testing.T) {
	groupStores(t, func(t *testing.T, open func() *groupRig) {
		g := open()
		a, ca := g.running()
		b, cb := g.running()
		before := len(g.events(""))
		// b's completion arms the fault after its completion, in the part
		// that follows it: the next statement is the events' insert.
		armed := &completion{claim: cb, then: func(*txn) error { g.storage.Arm(storagefault.FailStatement); return nil }}
		errs := g.inGroup(nil, g.completeOp(ca), func() error { return g.q.writeCompletion(g.ctx, "complete", armed) })
		for i, err := range errs {
			require.ErrorIs(t, err, ErrNotApplied, "member %d", i)
			require.ErrorIs(t, err, storagefault.ErrInjected, "member %d", i)
		}
		require.Equal(t, 1, g.storage.Counts().FailStatement)
		require.Equal(t, model.Running, g.state(a))
		require.Equal(t, model.Running, g.state(b))
		require.Len(t, g.events(""), before)
	})
}

// A COMMIT that fails after a batch tells every member ErrOutcomeUnknown;
// one that is applied but reports failure has written every completion.
func TestGroupBatchCommitFailure(t *testing.T) {
	for _, fault := range []storagefault.Fault{storagefault.FailCommit, storagefault.AmbiguousCommit} {
		t.Run(string(fault), func(t *testing.T) {
			groupStores(t, func(t *testing.T, open func() *groupRig) {
				g := open()
				var ids []string
				var ops []func() error
				for range 3 {
					id, c := g.running()
					ids = append(ids, id)
					ops = append(ops, g.completeOp(c))
				}
				ops = append(ops, func() error {
					return g.q.write(g.ctx, "arm", func(*txn) error { g.storage.Arm(fault); return nil })
				})
				errs := g.inGroup(nil, ops...)
				for i, err := range errs {
					require.ErrorIs(t, err, ErrOutcomeUnknown, "member %d", i)
					require.ErrorIs(t, err, storagefault.ErrInjected, "member %d", i)
				}
				want := model.Running
				if fault == storagefault.AmbiguousCommit {
					want = model.Completed
				}
				for _, id := range ids {
					require.Equal(t, want, g.state(id))
				}
				require.Equal(t, int64(3), g.q.stats.batched.Load())
			})
		})
	}
}

// trail is a queue's audit trail without sequence numbers, and its
// figures.
func (g *groupRig) trail() ([]model.Event, model.Metrics) {
	events := g.events("")
	for i := range events {
		events[i].Seq = 0
	}
	return events, g.metrics()
}

// Completions batched in one group leave the same events and counters as
// the same completions one by one, in the order the group ran them (the
// batch's, then the stale one's refusal).
func TestGroupBatchMatchesOneByOne(t *testing.T) {
	groupStores(t, func(t *testing.T, open func() *groupRig) {
		g := open()
		run := func(g *groupRig, together bool) ([]model.Event, model.Metrics) {
			var ops []func() error
			for i := range 6 {
				_, c := g.running(func(r *model.SubmitRequest) { r.User = fmt.Sprintf("u%d", i%3) })
				if i == 4 {
					c.Fence++
				}
				ops = append(ops, g.completeOp(c))
			}
			g.advance(time.Second)
			var errs []error
			if together {
				errs = g.inGroup(nil, ops...)
			} else {
				// In the order the group runs them: the completions the
				// batch made, then the stale one's refusal.
				errs = make([]error, len(ops))
				for _, i := range []int{0, 1, 2, 3, 5, 4} {
					errs[i] = ops[i]()
				}
			}
			for i, err := range errs {
				if i == 4 {
					require.ErrorIs(t, err, ErrStaleClaim)
					continue
				}
				require.NoError(t, err, "completion %d", i)
			}
			require.NoError(t, g.q.CheckCounters(g.ctx))
			return g.trail()
		}
		batched, batchedMetrics := run(g, true)
		require.Equal(t, int64(5), g.q.stats.batched.Load())
		alone := open()
		single, singleMetrics := run(alone, false)
		require.Zero(t, alone.q.stats.batched.Load())
		require.Equal(t, single, batched)
		require.Equal(t, singleMetrics, batchedMetrics)
	})
}

// CompleteAndClaim batched in one group leaves the same events and
// counters as the same writes one by one in the order the group runs
// them: the completions, then each claim.
func TestGroupBatchedClaimsMatchOneByOne(t *testing.T) {
	groupStores(t, func(t *testing.T, open func() *groupRig) {
		run := func(g *groupRig, together bool) ([]model.Event, model.Metrics) {
			var claims []model.Claim
			for i := range 4 {
				_, c := g.running(func(r *model.SubmitRequest) { r.User = fmt.Sprintf("u%d", i%2) })
				claims = append(claims, c)
			}
			for i := range 4 {
				g.submit(func(r *model.SubmitRequest) { r.User = fmt.Sprintf("u%d", i%2) })
			}
			g.advance(time.Second)
			next := model.ClaimRequest{Worker: "w2", Max: 1, Lease: testLease}
			if together {
				var ops []func() error
				for _, c := range claims {
					ops = append(ops, func() error { _, err := g.q.CompleteAndClaim(g.ctx, c, next); return err })
				}
				for _, err := range g.inGroup(nil, ops...) {
					require.NoError(t, err)
				}
			} else {
				for _, c := range claims {
					require.NoError(t, g.q.Complete(g.ctx, c))
				}
				for range claims {
					require.Len(t, g.claimFor("w2", 1, testLease), 1)
				}
			}
			require.NoError(t, g.q.CheckCounters(g.ctx))
			return g.trail()
		}
		g := open()
		batched, batchedMetrics := run(g, true)
		require.Equal(t, int64(4), g.q.stats.batched.Load())
		single, singleMetrics := run(open(), false)
		require.Equal(t, single, batched)
		require.Equal(t, singleMetrics, batchedMetrics)
	})
}

// CompleteAndClaim in a group: the completions are batched, then each
// claim runs and sees them all: with one running task allowed per user,
// each slot takes the next task of a user whose task it just completed.
func TestGroupBatchedCompleteAndClaim(t *testing.T) {
	groupStores(t, func(t *testing.T, open func() *groupRig) {
		g := open()
		g.setLimits(func(l *model.Limits) { l.UserRunningMax = 1 })
		var ops []func() error
		claimed := make([][]model.Claimed, 2)
		for i, user := range []string{"ana", "bob"} {
			_, c := g.running(func(r *model.SubmitRequest) { r.User = user })
			ops = append(ops, func() error {
				var err error
				claimed[i], err = g.q.CompleteAndClaim(g.ctx, c, model.ClaimRequest{Worker: "w2", Max: 1, Lease: testLease})
				return err
			})
		}
		next := map[string]bool{g.submit(func(r *model.SubmitRequest) { r.User = "ana" }): true,
			g.submit(func(r *model.SubmitRequest) { r.User = "bob" }): true}
		for _, err := range g.inGroup(nil, ops...) {
			require.NoError(t, err)
		}
		require.Equal(t, int64(2), g.q.stats.batched.Load())
		for i := range claimed {
			require.Len(t, claimed[i], 1, "slot %d", i)
			require.True(t, next[claimed[i][0].Claim.TaskID], "slot %d", i)
			delete(next, claimed[i][0].Claim.TaskID)
			require.Equal(t, model.Running, g.state(claimed[i][0].Claim.TaskID))
		}
	})
}
