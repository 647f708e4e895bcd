package queue

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/faults/storagefault"
	"github.com/leasehold/leasehold/model"
)

// fusedStores runs test on PostgreSQL's merge rig (the store that fuses
// groups), when the PostgreSQL suites run.
func fusedStores(t *testing.T, test func(t *testing.T, open func(t *testing.T) *mergeRig)) {
	mergeStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		if open(t).q.store.Dialect() == "sqlite" {
			t.Skip("SQLite's statements are calls within the process: it fuses nothing")
		}
		test(t, open)
	})
}

// fusedCase is a group a worker's slots make: five completions, four
// claiming their next task, one only completing, over tasks of three users
// under a running limit of two a user (ana's third task waits). It returns
// the claims, in member order, and the members' errors. (A claim of more
// than one reads the stored limits first, and so keeps its group from
// being fused.)
func fusedCase(t *testing.T, g *groupRig, stale int) ([][]model.Claimed, []error) {
	out, ops := fusedOps(g, stale)
	return out, g.inGroup(nil, ops...)
}

// fusedOps sets up fusedCase and returns where its claims go and its
// operations.
func fusedOps(g *groupRig, stale int) ([][]model.Claimed, []func() error) {
	g.setLimits(func(l *model.Limits) { l.UserRunningMax = 2 })
	var claims []model.Claim
	for i := range 5 {
		_, c := g.running(func(r *model.SubmitRequest) { r.User = fmt.Sprintf("u%d", i%3) })
		if i == stale {
			c.Fence++
		}
		claims = append(claims, c)
	}
	for _, user := range []string{"ana", "bob", "ana", "ana", "cy", "bob"} {
		g.submit(func(r *model.SubmitRequest) { r.User = user })
	}
	g.advance(time.Second)
	out := make([][]model.Claimed, len(claims))
	var ops []func() error
	for i, c := range claims {
		if i == 2 {
			ops = append(ops, func() error { return g.q.Complete(model.WithScope(g.ctx, "slots"), c) })
			continue
		}
		ops = append(ops, g.completeAndClaimOp(c, model.ClaimRequest{Worker: "w2", Max: 1, Lease: testLease}, "slots", &out[i]))
	}
	return out, ops
}

// A fused group (one statement) gives the same claims to the same members,
// the same trail and the same figures as the group run the usual way.
func TestFusedGroupMatchesTheUsualWay(t *testing.T) {
	fusedStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		fused := open(t)
		fusedClaims, fusedErrs := fusedCase(t, fused.groupRig, -1)
		require.EqualValues(t, 1, fused.q.stats.fused.Load(), "the group was one statement")
		usual := open(t)
		usual.q.fuse = false
		usualClaims, usualErrs := fusedCase(t, usual.groupRig, -1)
		require.Zero(t, usual.q.stats.fused.Load())
		require.Equal(t, usualErrs, fusedErrs)
		for _, err := range fusedErrs {
			require.NoError(t, err)
		}
		require.Equal(t, usualClaims, fusedClaims)
		fusedTrail, fusedMetrics := fused.trail()
		usualTrail, usualMetrics := usual.trail()
		require.Equal(t, usualTrail, fusedTrail)
		require.Equal(t, usualMetrics, fusedMetrics)
		require.NoError(t, fused.q.CheckCounters(fused.ctx))
		// The case claims what it means to: a task each but the member
		// that only completes, within the limit of two a user.
		var sizes []int
		users := map[string]int{}
		for _, c := range fusedClaims {
			sizes = append(sizes, len(c))
			for _, cl := range c {
				users[cl.Task.User]++
			}
		}
		require.Equal(t, []int{1, 1, 0, 1, 1}, sizes)
		for user, n := range users {
			require.LessOrEqual(t, n, 2, user)
		}
	})
}

// A fused group's completions clear their tasks' last errors, as the
// usual way's do (migration 0021).
func TestFusedGroupClearsLastErrors(t *testing.T) {
	fusedStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		g := open(t)
		var ids []string
		for i := range 3 {
			id, c := g.running(func(r *model.SubmitRequest) { r.User = fmt.Sprintf("u%d", i) })
			_, err := g.q.Fail(g.ctx, c, model.Failure{Class: model.Transient, Message: "connection reset"})
			require.NoError(t, err)
			ids = append(ids, id)
		}
		g.advance(time.Hour) // past every backoff
		claimed := g.claimN("w1", 3)
		require.Len(t, claimed, 3)
		out := make([][]model.Claimed, len(claimed))
		var ops []func() error
		for i, c := range claimed {
			require.Equal(t, "connection reset", c.Task.LastError)
			ops = append(ops, g.completeAndClaimOp(c.Claim, model.ClaimRequest{Worker: "w1", Max: 1, Lease: testLease}, "slots", &out[i]))
		}
		for _, err := range g.inGroup(nil, ops...) {
			require.NoError(t, err)
		}
		require.EqualValues(t, 1, g.q.stats.fused.Load(), "the group was one statement")
		for _, id := range ids {
			task := g.task(id)
			require.Equal(t, model.Completed, task.State)
			require.Empty(t, task.LastError, "task %s", id)
		}
	})
}

// A fused group with a stale completion writes nothing in its statement
// and runs the usual way, where the stale member is refused (its event
// kept) and the others complete and claim.
func TestFusedGroupFallsBackOnAStaleClaim(t *testing.T) {
	fusedStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		g := open(t)
		claims, errs := fusedCase(t, g.groupRig, 3)
		require.Zero(t, g.q.stats.fused.Load())
		require.EqualValues(t, 1, g.q.stats.fallbacks.Load())
		for i, err := range errs {
			if i == 3 {
				require.ErrorIs(t, err, ErrStaleClaim)
				require.Empty(t, claims[i])
				continue
			}
			require.NoError(t, err, "member %d", i)
		}
		require.Len(t, claims[4], 1, "the members after the stale one still claim")
		var stale int
		for _, e := range g.events("") {
			if e.Kind == model.EventStaleWrite {
				stale++
			}
		}
		require.Equal(t, 1, stale)
		require.NoError(t, g.q.CheckCounters(g.ctx))
	})
}

// A fused group whose claim finds a candidate's user with a running limit
// held by another transaction (a claim of another process) waits for that
// user's row rather than skipping that user's tasks (which left every claim of a
// process empty-handed while another process's claim held its users:
// docs/PERF.md), and then takes in claim order: of the candidates ana,
// bob, ana and cy, with bob's counter row held elsewhere, the group
// waits, and once the row is free its members get ana, bob, ana and cy.
// A claim_batch, in a transaction that may hold other locks, still skips
// the held user. The counters agree with the tasks throughout.
func TestFusedGroupWaitsForAHeldUser(t *testing.T) {
	fusedStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		g := open(t)
		out, ops := fusedOps(g.groupRig, -1)
		holder, err := g.q.db.BeginTx(g.ctx, nil)
		require.NoError(t, err)
		defer func() { _ = holder.Rollback() }()
		_, err = holder.ExecContext(g.ctx, "SELECT 1 FROM users WHERE user_id = 'bob' FOR NO KEY UPDATE")
		require.NoError(t, err)
		var holderPID int
		require.NoError(t, holder.QueryRowContext(g.ctx, "SELECT pg_backend_pid()").Scan(&holderPID))

		skipped, err := g.q.db.BeginTx(g.ctx, nil)
		require.NoError(t, err)
		var bobs int
		require.NoError(t, skipped.QueryRowContext(g.ctx,
			"SELECT COUNT(*) FROM claim_batch($1, 4, 'w9', $2, NULL) WHERE user_id = 'bob'",
			model.Millis(g.clock.Now()), model.Millis(g.clock.Now().Add(testLease))).Scan(&bobs))
		require.Zero(t, bobs, "claim_batch skips the held user")
		require.NoError(t, skipped.Rollback())

		done := make(chan []error, 1)
		go func() { done <- g.inGroup(nil, ops...) }()
		deadline, ok := t.Deadline()
		if !ok {
			deadline = time.Now().Add(time.Minute)
		}
		waitCtx, cancel := context.WithDeadline(g.ctx, deadline)
		defer cancel()
		for blocked := false; !blocked; {
			require.NoError(t, g.q.db.QueryRowContext(waitCtx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			    WHERE $1 = ANY(pg_blocking_pids(pid)) AND query LIKE '%complete_and_claim%')`, holderPID).Scan(&blocked),
				"the fused claim never waited for bob's row")
		}
		require.NoError(t, holder.Rollback())
		for i, err := range <-done {
			require.NoError(t, err, "member %d", i)
		}
		require.EqualValues(t, 1, g.q.stats.fused.Load(), "the group was one statement")
		var users []string
		for _, claims := range out {
			for _, c := range claims {
				users = append(users, c.Task.User)
			}
		}
		require.Equal(t, []string{"ana", "bob", "ana", "cy"}, users, "bob's task taken once his row was free")
		require.NoError(t, g.q.CheckCounters(g.ctx))
	})
}

// A fused group whose completions free their user's room claims into it,
// as the usual way does: ana, at her running limit of two, completes both
// tasks, and the same two members claim her next two: the claim's first
// estimate of her room (user_caps) and its fold under her row's lock both
// count the change rows the completions left a statement before.
func TestFusedGroupClaimsTheRoomItsCompletionsFree(t *testing.T) {
	fusedStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		run := func(g *mergeRig) ([][]model.Claimed, []error) {
			g.setLimits(func(l *model.Limits) { l.UserRunningMax = 2 })
			var claims []model.Claim
			for range 2 {
				_, c := g.running(func(r *model.SubmitRequest) { r.User = "ana" })
				claims = append(claims, c)
			}
			g.submit(func(r *model.SubmitRequest) { r.User = "ana" })
			g.submit(func(r *model.SubmitRequest) { r.User = "ana" })
			g.advance(time.Second)
			out := make([][]model.Claimed, len(claims))
			var ops []func() error
			for i, c := range claims {
				ops = append(ops, g.completeAndClaimOp(c, model.ClaimRequest{Worker: "w2", Max: 1, Lease: testLease}, "", &out[i]))
			}
			return out, g.inGroup(nil, ops...)
		}
		fused := open(t)
		fusedClaims, fusedErrs := run(fused)
		require.EqualValues(t, 1, fused.q.stats.fused.Load(), "the group was one statement")
		usual := open(t)
		usual.q.fuse = false
		usualClaims, usualErrs := run(usual)
		require.Equal(t, usualErrs, fusedErrs)
		require.Equal(t, usualClaims, fusedClaims)
		for i, c := range fusedClaims {
			require.NoError(t, fusedErrs[i])
			require.Len(t, c, 1, "member %d claims ana's next task", i)
		}
		fusedTrail, fusedMetrics := fused.trail()
		usualTrail, usualMetrics := usual.trail()
		require.Equal(t, usualTrail, fusedTrail)
		require.Equal(t, usualMetrics, fusedMetrics)
		require.NoError(t, fused.q.CheckCounters(fused.ctx))
	})
}

// fusedStatement is the text of the fused group's statement.
func fusedStatement(g *mergeRig) string { return g.q.query(g.q.variant("complete_and_claim")).text }

// A fused statement the server refuses (a deadlock, before anything is
// applied) tells every member ErrNotApplied as a conflict: each
// CompleteAndClaim is run again and then completes and claims, and the
// plain Complete (which is not run again, as in a group run the usual way)
// returns the conflict, nothing of it written.
func TestFusedGroupConflictRetries(t *testing.T) {
	fusedStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		g := open(t)
		g.trap.set(fusedStatement(g), 0, func() error { return conflictError{} })
		claims, ops := fusedOps(g.groupRig, -1)
		for i, err := range g.inGroupRetrying(ops...) {
			if i == 2 {
				require.ErrorIs(t, err, ErrNotApplied)
				require.Equal(t, ClassConflict, ClassOf(err))
				continue
			}
			require.NoError(t, err, "member %d", i)
		}
		require.Equal(t, 1, g.trap.fired)
		require.Equal(t, []int{1, 1, 0, 1, 1}, []int{len(claims[0]), len(claims[1]), len(claims[2]), len(claims[3]), len(claims[4])})
		require.NoError(t, g.q.CheckCounters(g.ctx))
	})
}

// A connection lost while the fused statement runs leaves its outcome
// unknown: every member is told ErrOutcomeUnknown, never a false success
// nor a false "not applied". Here the injected fault ran nothing, so the
// tasks are still running, and the same writes then go through.
func TestFusedGroupConnectionLostIsUnknown(t *testing.T) {
	fusedStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		g := open(t)
		var ids []string
		var ops []func() error
		var claims []model.Claim
		for i := range 3 {
			id, c := g.running(func(r *model.SubmitRequest) { r.User = fmt.Sprintf("u%d", i) })
			ids, claims = append(ids, id), append(claims, c)
			ops = append(ops, g.completeOp(c))
		}
		before := len(g.events(""))
		errs := g.inGroup(func() { g.storage.Arm(storagefault.FailStatement) }, ops...)
		require.Equal(t, 1, g.storage.Counts().FailStatement)
		for i, err := range errs {
			require.ErrorIs(t, err, ErrOutcomeUnknown, "member %d", i)
			require.NotErrorIs(t, err, ErrNotApplied, "member %d", i)
			require.ErrorIs(t, err, storagefault.ErrInjected, "member %d", i)
		}
		for _, id := range ids {
			require.Equal(t, model.Running, g.state(id))
		}
		require.Len(t, g.events(""), before)
		for _, c := range claims {
			require.NoError(t, g.q.Complete(g.ctx, c))
		}
		require.NoError(t, g.q.CheckCounters(g.ctx))
	})
}

// A fused statement that committed and then failed to report it (the
// connection lost after the commit) tells every member ErrOutcomeUnknown:
// everything it did is in the database, and a member's retry is refused
// by its fence, so nothing is done twice.
func TestFusedGroupCommittedButUnreportedIsUnknown(t *testing.T) {
	fusedStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		g := open(t)
		lost := errors.New("trap: connection lost after the commit")
		g.trap.setAfter(fusedStatement(g), 0, func() error { return lost })
		var ids []string
		var claims []model.Claim
		var ops []func() error
		out := make([][]model.Claimed, 3)
		for i := range 3 {
			id, c := g.running(func(r *model.SubmitRequest) { r.User = fmt.Sprintf("u%d", i) })
			ids, claims = append(ids, id), append(claims, c)
			ops = append(ops, g.completeAndClaimOp(c, model.ClaimRequest{Worker: "w2", Max: 1, Lease: testLease}, "", &out[i]))
		}
		queued := []string{g.submit(), g.submit()}
		errs := g.inGroup(nil, ops...)
		require.Equal(t, 1, g.trap.fired)
		for i, err := range errs {
			require.ErrorIs(t, err, ErrOutcomeUnknown, "member %d", i)
			require.ErrorIs(t, err, lost, "member %d", i)
		}
		for _, id := range ids {
			require.Equal(t, model.Completed, g.state(id), "the statement committed")
		}
		for _, id := range queued {
			require.Equal(t, model.Running, g.state(id), "and claimed")
		}
		require.NoError(t, g.q.CheckCounters(g.ctx))
		_, err := g.q.CompleteAndClaim(g.ctx, claims[0], model.ClaimRequest{Worker: "w2", Max: 1, Lease: testLease})
		require.ErrorIs(t, err, ErrStaleClaim, "the retry is refused by its fence")
	})
}
