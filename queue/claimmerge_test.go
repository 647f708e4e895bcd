package queue

import (
	"context"
	"database/sql/driver"
	"fmt"
	"path/filepath"
	"sync"
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

// trapDriver wraps a driver (a storagefault.Storage) and, once set, calls
// fire just before a statement with a given text runs for the skip+1-th
// time: fire may arm the storage's fault, which then hits that very
// statement, or return an error of its own, which the statement returns
// without running. It lets a test fail the j-th statement of a claim.
type trapDriver struct {
	inner driver.Driver

	mu    sync.Mutex
	query string
	skip  int
	fire  func() error
	fired int
	// after makes the trap fire once the statement has run (and, for a
	// query, its rows have been read and closed): the statement is
	// applied, and its caller gets fire's error.
	after bool
}

// set makes the skip+1-th statement with text query fire.
func (d *trapDriver) set(query string, skip int, fire func() error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.query, d.skip, d.fire, d.after = query, skip, fire, false
}

// setAfter makes the skip+1-th statement with text query run and then
// fail with fire's error.
func (d *trapDriver) setAfter(query string, skip int, fire func() error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.query, d.skip, d.fire, d.after = query, skip, fire, true
}

// hitAfter is hit for a trap set with setAfter: it reports whether the
// statement with text query is to run and then fail, and with what.
func (d *trapDriver) hitAfter(query string) (bool, func() error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.after || d.fire == nil || query != d.query {
		return false, nil
	}
	if d.skip > 0 {
		d.skip--
		return false, nil
	}
	fire := d.fire
	d.fire, d.after = nil, false
	d.fired++
	return true, fire
}

// hit is called before each statement runs, with its text.
func (d *trapDriver) hit(query string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fire == nil || d.after || query != d.query {
		return nil
	}
	if d.skip > 0 {
		d.skip--
		return nil
	}
	fire := d.fire
	d.fire = nil
	d.fired++
	return fire()
}

// trapInner is what trapDriver needs of the wrapped connections (what
// storagefault's offer).
type trapInner interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.NamedValueChecker
	driver.SessionResetter
	driver.Validator
	driver.Pinger
}

func (d *trapDriver) Open(name string) (driver.Conn, error) {
	c, err := d.inner.Open(name)
	if err != nil {
		return nil, err
	}
	inner, ok := c.(trapInner)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("trap: connection %T lacks an interface", c)
	}
	return &trapConn{trapInner: inner, d: d}, nil
}

type trapConn struct {
	trapInner
	d *trapDriver
}

func (c *trapConn) Unwrap() driver.Conn { return c.trapInner }

func (c *trapConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *trapConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	s, err := c.trapInner.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	inner, ok := s.(trapStmtInner)
	if !ok {
		s.Close()
		return nil, fmt.Errorf("trap: statement %T lacks an interface", s)
	}
	return &trapStmt{trapStmtInner: inner, d: c.d, query: query}, nil
}

func (c *trapConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := c.d.hit(query); err != nil {
		return nil, err
	}
	return c.trapInner.ExecContext(ctx, query, args)
}

func (c *trapConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.d.hit(query); err != nil {
		return nil, err
	}
	return c.trapInner.QueryContext(ctx, query, args)
}

type trapStmtInner interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

type trapStmt struct {
	trapStmtInner
	d     *trapDriver
	query string
}

func (s *trapStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if err := s.d.hit(s.query); err != nil {
		return nil, err
	}
	return s.trapStmtInner.ExecContext(ctx, args)
}

func (s *trapStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if after, fire := s.d.hitAfter(s.query); after {
		rows, err := s.trapStmtInner.QueryContext(ctx, args)
		if err != nil {
			return nil, err
		}
		dest := make([]driver.Value, len(rows.Columns()))
		for rows.Next(dest) == nil {
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		return nil, fire()
	}
	if err := s.d.hit(s.query); err != nil {
		return nil, err
	}
	return s.trapStmtInner.QueryContext(ctx, args)
}

// conflictError reads as PostgreSQL's deadlock_detected.
type conflictError struct{}

func (conflictError) Error() string    { return "trap: deadlock detected" }
func (conflictError) SQLState() string { return "40P01" }

// mergeRig is a groupRig whose statements can be trapped.
type mergeRig struct {
	*groupRig
	trap *trapDriver
}

// mergeStores runs test on SQLite and on PostgreSQL (when a server is
// configured), with a one-lane group rig over a trapDriver.
func mergeStores(t *testing.T, test func(t *testing.T, open func(t *testing.T) *mergeRig)) {
	t.Run("sqlite", func(t *testing.T) {
		test(t, func(t *testing.T) *mergeRig {
			clock := clockwork.NewFakeClockAt(epoch)
			storage := storagefault.NewStorage(&sqlite.Driver{}, clock)
			trap := &trapDriver{inner: storage}
			b := openBundle(t, filepath.Join(t.TempDir(), "leasehold.db"), clock, 1, func(o *Options) { o.Driver = trap })
			return &mergeRig{groupRig: &groupRig{bundle: b, storage: storage}, trap: trap}
		})
	})
	t.Run("postgres", func(t *testing.T) {
		test(t, func(t *testing.T) *mergeRig {
			url := pgtest.Fresh(t, migratePostgresURL)
			clock := clockwork.NewFakeClockAt(epoch)
			storage := storagefault.NewPostgres(stdlib.GetDefaultDriver(), clock)
			trap := &trapDriver{inner: storage}
			// Faults meet the rig's statements only: no wake-up notifier.
			b := openBundle(t, url, clock, 1, func(o *Options) { o.Driver, o.NoWakeNotify = trap, true })
			b.q.startGroups(1) // the rig's held group must block every other
			return &mergeRig{groupRig: &groupRig{bundle: b, storage: storage}, trap: trap}
		})
	})
}

// completeAndClaimOp completes c and claims for req in whatever group it
// joins, under scope, putting the claims in out.
func (g *groupRig) completeAndClaimOp(c model.Claim, req model.ClaimRequest, scope string, out *[]model.Claimed) func() error {
	return func() error {
		var err error
		*out, err = g.q.CompleteAndClaim(model.WithScope(g.ctx, scope), c, req)
		return err
	}
}

// claimIDs are the task ids and fences of claims.
func claimIDs(claims []model.Claimed) []string {
	var out []string
	for _, c := range claims {
		out = append(out, fmt.Sprintf("%s@%d", c.Claim.TaskID, c.Claim.Fence))
	}
	return out
}

// mergeAsk is one CompleteAndClaim of the merge tests: the worker it
// claims for and how many.
type mergeAsk struct {
	worker string
	max    int
}

// mergeAsks: four members claim for w2 (one run, of 1+2+1+1 tasks), one
// between them for w3 (a run of its own, after w2's in the group), and
// the last completion is stale (refused, claiming nothing).
var mergeAsks = []mergeAsk{{"w2", 1}, {"w2", 2}, {"w3", 1}, {"w2", 1}, {"w2", 1}, {"w2", 1}}

const mergeStale = 5

// runMergeCase sets up running tasks to complete and queued tasks to
// claim, under a running limit of 2 a user, and runs the mergeAsks:
// together, in one group, or one by one as the group orders them (every
// completion, then the claims of the w2 run in member order, then w3's,
// then the stale completion). It returns each member's claims (as
// claimIDs), the trail and the figures.
func runMergeCase(t *testing.T, g *groupRig, together bool) ([][]model.Claimed, []model.Event, model.Metrics) {
	g.setLimits(func(l *model.Limits) { l.UserRunningMax = 2 })
	var claims []model.Claim
	for i := range mergeAsks {
		_, c := g.running(func(r *model.SubmitRequest) { r.User = fmt.Sprintf("u%d", i) })
		if i == mergeStale {
			c.Fence++
		}
		claims = append(claims, c)
	}
	// In claim order: eve's (ahead of all by priority), then ana, bob,
	// ana, cy, bob, ana (whose third waits for the limit), dee.
	for _, user := range []string{"ana", "bob", "ana", "cy", "bob", "ana", "dee"} {
		g.submit(func(r *model.SubmitRequest) { r.User = user })
	}
	g.submit(func(r *model.SubmitRequest) { r.User, r.Priority = "eve", 5 })
	g.advance(time.Second)
	out := make([][]model.Claimed, len(mergeAsks))
	errs := make([]error, len(mergeAsks))
	req := func(i int) model.ClaimRequest {
		return model.ClaimRequest{Worker: mergeAsks[i].worker, Max: mergeAsks[i].max, Lease: testLease}
	}
	scope := func(i int) string { return fmt.Sprintf("member%d", i) }
	if together {
		var ops []func() error
		for i, c := range claims {
			ops = append(ops, g.completeAndClaimOp(c, req(i), scope(i), &out[i]))
		}
		errs = g.inGroup(nil, ops...)
	} else {
		for i, c := range claims {
			if i != mergeStale {
				require.NoError(t, g.q.Complete(model.WithScope(g.ctx, scope(i)), c))
			}
		}
		for _, i := range []int{0, 1, 3, 4, 2} {
			var err error
			out[i], err = g.q.Claim(model.WithScope(g.ctx, scope(i)), req(i))
			require.NoError(t, err)
		}
		errs[mergeStale] = g.q.Complete(model.WithScope(g.ctx, scope(mergeStale)), claims[mergeStale])
	}
	for i, err := range errs {
		if i == mergeStale {
			require.ErrorIs(t, err, ErrStaleClaim)
			continue
		}
		require.NoError(t, err, "member %d", i)
	}
	require.NoError(t, g.q.CheckCounters(g.ctx))
	events, metrics := g.trail()
	return out, events, metrics
}

// The claims of a group's CompleteAndClaim members are merged, one store
// claim per worker and lease, and give the same tasks to the same members,
// the same trail (each claimed event in its member's scope) and the same
// figures as the completions and then the claims one by one.
func TestMergedClaimsMatchOneByOne(t *testing.T) {
	mergeStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		g := open(t)
		merged, mergedTrail, mergedMetrics := runMergeCase(t, g.groupRig, true)
		var mergedUsers [][]string
		for _, claims := range merged {
			var users []string
			for _, c := range claims {
				users = append(users, c.Task.User)
			}
			mergedUsers = append(mergedUsers, users)
		}
		require.Equal(t, int64(4), g.q.stats.merged.Load(), "w2's four claims were one store claim")
		alone := open(t)
		single, singleTrail, singleMetrics := runMergeCase(t, alone.groupRig, false)
		require.Zero(t, alone.q.stats.merged.Load())
		require.Equal(t, single, merged)
		require.Equal(t, singleTrail, mergedTrail)
		require.Equal(t, singleMetrics, mergedMetrics)
		// The case claims what it means to: eve's first (priority), then
		// ana, bob, ana, cy for w2 (five asked), then bob's second for w3.
		require.Equal(t, [][]string{{"eve"}, {"ana", "bob"}, {"bob"}, {"ana"}, {"cy"}, nil}, mergedUsers)
	})
}

// A merged claim under a running limit of one a user gives that user
// exactly one task across its members, to the first member; the next
// members take other users' tasks in claim order, and the last none.
func TestMergedClaimUserLimitOne(t *testing.T) {
	mergeStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		g := open(t)
		g.setLimits(func(l *model.Limits) { l.UserRunningMax = 1 })
		var claims []model.Claim
		for i := range 4 {
			_, c := g.running(func(r *model.SubmitRequest) { r.User = fmt.Sprintf("u%d", i) })
			claims = append(claims, c)
		}
		ana := []string{g.submit(func(r *model.SubmitRequest) { r.User = "ana" }),
			g.submit(func(r *model.SubmitRequest) { r.User = "ana" }),
			g.submit(func(r *model.SubmitRequest) { r.User = "ana" })}
		bob := g.submit(func(r *model.SubmitRequest) { r.User = "bob" })
		out := make([][]model.Claimed, len(claims))
		var ops []func() error
		for i, c := range claims {
			ops = append(ops, g.completeAndClaimOp(c, model.ClaimRequest{Worker: "w2", Max: 2, Lease: testLease}, "", &out[i]))
		}
		for i, err := range g.inGroup(nil, ops...) {
			require.NoError(t, err, "member %d", i)
		}
		require.Equal(t, int64(4), g.q.stats.merged.Load())
		require.Equal(t, []string{ana[0] + "@1", bob + "@1"}, claimIDs(out[0]), "the first member takes its Max, in claim order")
		for i := 1; i < len(out); i++ {
			require.Empty(t, out[i], "member %d", i)
		}
		require.Equal(t, model.Queued, g.state(ana[1]))
		require.Equal(t, model.Queued, g.state(ana[2]))
		require.NoError(t, g.q.CheckCounters(g.ctx))
	})
}

// mergeStatements are the statements of a merged claim, in the order they
// run, and how many times each has run before (skip) in the claim when
// the fault hits: on SQLite claim_next and claim_task a task, on
// PostgreSQL claim_batch once (the whole claim); then the insert of the
// group's buffered events.
func mergeStatements(q *Queue) []struct {
	name string
	skip int
} {
	type at = struct {
		name string
		skip int
	}
	if q.store.Dialect() == "sqlite" {
		return []at{{"claim_next", 0}, {"claim_room", 0}, {"claim_tasks", 0}, {"event_insert_batch", 0}}
	}
	return []at{{"claim_batch", 0}, {"event_insert_batch", 0}}
}

// A storage fault at any statement of a merged claim of k members rolls
// the whole group back: every member is told ErrNotApplied (the merged
// claim's members with the injected error), nothing is written; a plain
// member of the group is told ErrNotApplied too.
func TestMergedClaimFaultRollsBackAll(t *testing.T) {
	mergeStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		probe := open(t)
		for _, k := range []int{2, 3} {
			for _, st := range mergeStatements(probe.q) {
				t.Run(fmt.Sprintf("k%d_%s_%d", k, st.name, st.skip), func(t *testing.T) {
					g := open(t)
					var ids []string
					var ops []func() error
					out := make([][]model.Claimed, k)
					for i := range k {
						id, c := g.running(func(r *model.SubmitRequest) { r.User = fmt.Sprintf("u%d", i) })
						ids = append(ids, id)
						ops = append(ops, g.completeAndClaimOp(c, model.ClaimRequest{Worker: "w2", Max: 1, Lease: testLease}, "", &out[i]))
					}
					ops = append(ops, g.submitOp("plain"))
					var queued []string
					for range k {
						queued = append(queued, g.submit())
					}
					before := len(g.events(""))
					text := g.q.query(g.q.variant(st.name)).text
					g.trap.set(text, st.skip, func() error { g.storage.Arm(storagefault.FailStatement); return nil })
					errs := g.inGroup(nil, ops...)
					require.Equal(t, 1, g.trap.fired, "the trap fired")
					require.Equal(t, 1, g.storage.Counts().FailStatement)
					for i, err := range errs {
						require.ErrorIs(t, err, ErrNotApplied, "member %d", i)
						require.NotErrorIs(t, err, ErrOutcomeUnknown, "member %d", i)
						if i < k || st.name == "event_insert_batch" { // the group's insert is every member's
							require.ErrorIs(t, err, storagefault.ErrInjected, "member %d", i)
						} else {
							require.NotErrorIs(t, err, storagefault.ErrInjected, "member %d", i)
						}
					}
					for _, id := range ids {
						require.Equal(t, model.Running, g.state(id))
					}
					for _, id := range queued {
						require.Equal(t, model.Queued, g.state(id))
					}
					require.Len(t, g.events(""), before)
					require.Equal(t, k+k, g.taskCount(), "the plain submit was rolled back")
					require.NoError(t, g.q.CheckCounters(g.ctx))
				})
			}
		}
	})
}

// A conflict (a deadlock) at a statement of a merged claim rolls the group
// back as a conflict: every member is run again (writeRetrying) and, the
// conflict gone, each completes and claims as it would have.
func TestMergedClaimConflictRetries(t *testing.T) {
	mergeStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		g := open(t)
		if g.q.store.Dialect() == "sqlite" {
			t.Skip("SQLite, one writer at a time, reports no conflicts")
		}
		for _, st := range mergeStatements(g.q) {
			t.Run(st.name, func(t *testing.T) {
				g := open(t)
				g.q.fuse = false // the usual way's statements (a fused group's: fused_test.go)
				var ops []func() error
				out := make([][]model.Claimed, 3)
				for i := range 3 {
					_, c := g.running(func(r *model.SubmitRequest) { r.User = fmt.Sprintf("u%d", i) })
					ops = append(ops, g.completeAndClaimOp(c, model.ClaimRequest{Worker: "w2", Max: 1, Lease: testLease}, "", &out[i]))
				}
				for range 3 {
					g.submit()
				}
				g.trap.set(g.q.query(g.q.variant(st.name)).text, st.skip, func() error { return conflictError{} })
				for i, err := range g.inGroupRetrying(ops...) {
					require.NoError(t, err, "member %d", i)
				}
				require.Equal(t, 1, g.trap.fired)
				require.GreaterOrEqual(t, g.q.stats.merged.Load(), int64(3), "the first run merged")
				claimed := map[string]bool{}
				for i := range out {
					require.Len(t, out[i], 1, "member %d", i)
					claimed[out[i][0].Claim.TaskID] = true
				}
				require.Len(t, claimed, 3)
				require.NoError(t, g.q.CheckCounters(g.ctx))
			})
		}
	})
}

// A run of merged claims is cut where the sum of its Max would pass
// model.ClaimBatchLimit: five members asking for 16 tasks each are a
// merged claim of 64 (the first four) and a claim of 16 (the fifth, alone),
// and each member still gets its 16, in member order and claim order.
func TestMergedClaimChunksAtBatchLimit(t *testing.T) {
	mergeStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		g := open(t)
		const members, each = 5, 16
		require.Greater(t, members*each, model.ClaimBatchLimit)
		g.setLimits(func(l *model.Limits) { l.ClaimBatchMax = each })
		var claims []model.Claim
		for range members {
			_, c := g.running()
			claims = append(claims, c)
		}
		var reqs []model.SubmitRequest
		for i := range members * each {
			r := g.request()
			r.Key = fmt.Sprintf("bulk%d", i)
			reqs = append(reqs, r)
		}
		results, err := g.q.SubmitMany(g.ctx, reqs)
		require.NoError(t, err)
		out := make([][]model.Claimed, members)
		var ops []func() error
		for i, c := range claims {
			ops = append(ops, g.completeAndClaimOp(c, model.ClaimRequest{Worker: "w2", Max: each, Lease: testLease}, "", &out[i]))
		}
		for i, err := range g.inGroup(nil, ops...) {
			require.NoError(t, err, "member %d", i)
		}
		require.Equal(t, int64(4), g.q.stats.merged.Load(), "the fifth member claimed alone")
		for i := range out {
			var want []string
			for _, r := range results[i*each : (i+1)*each] {
				want = append(want, r.TaskID+"@1")
			}
			require.Equal(t, want, claimIDs(out[i]), "member %d", i)
		}
		require.NoError(t, g.q.CheckCounters(g.ctx))
	})
}

// A claim of several tasks whose first candidates in claim order include
// more of a user's tasks than its running limit leaves room for takes the
// user's first, skips the rest, and looks past them: it takes what
// claiming one task at a time takes, in claim order (on PostgreSQL the
// candidates are capped per user by its room before the batch's limit).
func TestBatchClaimLooksPastAUserAtItsLimit(t *testing.T) {
	mergeStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		g := open(t)
		g.setLimits(func(l *model.Limits) { l.UserRunningMax = 1 })
		a1 := g.submit(func(r *model.SubmitRequest) { r.User = "ana" })
		a2 := g.submit(func(r *model.SubmitRequest) { r.User = "ana" })
		b1 := g.submit(func(r *model.SubmitRequest) { r.User = "bob" })
		c1 := g.submit(func(r *model.SubmitRequest) { r.User = "cy" })
		got, err := g.q.Claim(g.ctx, model.ClaimRequest{Worker: "w1", Max: 3, Lease: testLease})
		require.NoError(t, err)
		require.Equal(t, []string{a1 + "@1", b1 + "@1", c1 + "@1"}, claimIDs(got))
		require.Equal(t, model.Queued, g.state(a2))
		for _, c := range got {
			require.Equal(t, model.Running, c.Task.State)
			require.Equal(t, int64(1), c.Task.Version)
		}
		more, err := g.q.Claim(g.ctx, model.ClaimRequest{Worker: "w1", Max: 3, Lease: testLease})
		require.NoError(t, err)
		require.Empty(t, more, "every user with a queued task is at its limit")
		require.NoError(t, g.q.CheckCounters(g.ctx))
	})
}
