package queue

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

// kindsOf returns the kind and user of each claimed task, in order.
func kindsOf(claimed []model.Claimed) []string {
	out := []string{}
	for _, c := range claimed {
		out = append(out, c.Task.Kind+"/"+c.Task.User)
	}
	return out
}

// TestClaimTakesOnlyItsKinds: a claim that names its kinds takes tasks of
// those kinds only, in claim order across them (priority, run_at,
// submission), within the per-user running limits; one that names none
// takes any kind. CompleteAndClaim's claim does the same.
func TestClaimTakesOnlyItsKinds(t *testing.T) {
	stores(t, func(t *testing.T, store string) {
		ctx := context.Background()
		q, clock := openPrunable(t, store)
		require.NoError(t, q.SetUserLimit(ctx, model.UserLimit{User: "cy", RunningMax: 1, DepthMax: -1}, "ops"))
		n := 0
		submit := func(user, kind string, priority int) {
			n++
			_, err := q.Submit(ctx, model.SubmitRequest{User: user, Key: fmt.Sprintf("k%d", n), Kind: kind,
				Payload: `{}`, CostBudget: 5, StepsMax: 2, Priority: priority})
			require.NoError(t, err)
		}
		submit("ana", "email", 0)
		submit("bob", "report", 0)
		submit("cy", "report", 3)
		submit("cy", "report", 2) // cy's second waits for its limit of one
		submit("dee", "", 1)
		submit("eve", "email", 5)
		submit("fay", "report", 0)
		clock.Advance(time.Second)
		claim := func(max int, kinds ...string) []string {
			t.Helper()
			req := model.ClaimRequest{Worker: "w", Max: max, Lease: time.Minute, Kinds: kinds}
			claimed, err := q.Claim(ctx, req)
			require.NoError(t, err)
			for _, c := range claimed {
				require.True(t, req.Serves(c.Task.Kind), "a claim for %v took a task of kind %s", kinds, c.Task.Kind)
			}
			return kindsOf(claimed)
		}
		require.Equal(t, []string{"report/cy", "report/bob"}, claim(2, "report"))
		require.Equal(t, []string{"email/eve", "email/ana", "report/fay"}, claim(5, "email", "report"),
			"kinds merged in claim order; cy's second held by its limit")
		require.Empty(t, claim(3, "email", "nothing"))
		require.Equal(t, []string{"synthetic/dee"}, claim(4))

		// CompleteAndClaim: completing cy's first frees its room, and the
		// claim for report takes cy's second.
		running, err := q.ListPage(ctx, PageFilter{User: "cy", State: model.Running})
		require.NoError(t, err)
		require.Len(t, running.Tasks, 1)
		task := running.Tasks[0]
		next, err := q.CompleteAndClaim(ctx, model.Claim{TaskID: task.ID, Fence: task.Version, Owner: "w", Attempt: task.Attempt},
			model.ClaimRequest{Worker: "w", Max: 2, Lease: time.Minute, Kinds: []string{"report"}})
		require.NoError(t, err)
		require.Equal(t, []string{"report/cy"}, kindsOf(next))
	})
}

// TestClaimRequestKinds: a claim's kinds are valid names, none twice, at
// most model.ClaimKindsMax; nil names every kind.
func TestClaimRequestKinds(t *testing.T) {
	ok := model.ClaimRequest{Worker: "w", Max: 1, Lease: time.Minute}
	require.NoError(t, ok.Validate(1))
	ok.Kinds = []string{"report", "email"}
	require.NoError(t, ok.Validate(1))
	many := make([]string, model.ClaimKindsMax+1)
	for i := range many {
		many[i] = fmt.Sprintf("k%d", i)
	}
	for _, c := range []struct {
		kinds []string
		field string
	}{
		{[]string{}, "kinds"},
		{[]string{"report", "Email"}, "kinds[1]"},
		{[]string{"report", "report"}, "kinds[1]"},
		{many, "kinds"},
	} {
		req := ok
		req.Kinds = c.kinds
		var v *model.ValidationError
		require.ErrorAs(t, req.Validate(1), &v, "%v", c.kinds)
		require.Equal(t, c.field, v.Field)
	}
	a := model.ClaimRequest{Kinds: []string{"b", "a"}}
	b := model.ClaimRequest{Kinds: []string{"a", "b"}}
	require.Equal(t, a.KindsKey(), b.KindsKey(), "the same kinds in another order")
	require.NotEqual(t, a.KindsKey(), model.ClaimRequest{}.KindsKey(), "some kinds and every kind")
	require.NotEqual(t, a.KindsKey(), model.ClaimRequest{Kinds: []string{"a"}}.KindsKey())
}

// TestClaimByKindsReadsNoTaskOfAnotherKind: with tasks of another kind
// due and the served kind's tasks not due, the claim of the served kind
// finds nothing, and the plans of its statements search tasks_claim_kind
// for the kind: no scan of tasks, and (claim_any_kinds, like claim_any)
// no read of a task not due.
func TestClaimByKindsReadsNoTaskOfAnotherKind(t *testing.T) {
	b := setupFile(t)
	for i := range 30 {
		b.submit(func(r *model.SubmitRequest) { r.Kind, r.Priority = "other", i%3 })
		b.submit(func(r *model.SubmitRequest) {
			r.Kind, r.Priority, r.RunAt = "mine", i%3, b.now().Add(time.Hour)
		})
	}
	kinds := sql.Named("kinds", `["mine"]`)
	now := sql.Named("now", model.Millis(b.now()))
	plan := strings.Join(queryPlan(t, b, "claim_any_kinds", now, kinds), " | ")
	require.Regexp(t, `SEARCH tasks (EXISTS )?USING (COVERING )?INDEX tasks_claim_kind \(kind=\? AND blocked=\? AND priority=\? AND run_at<\?\)`,
		plan, "plan: %s", plan)
	require.NotContains(t, plan, "SCAN tasks", "plan: %s", plan)
	plan = strings.Join(queryPlan(t, b, "claim_next_kinds", now, kinds, sql.Named("limit", 8)), " | ")
	require.Contains(t, plan, "INDEX tasks_claim_kind (kind=? AND blocked=?", "plan: %s", plan)
	require.NotContains(t, plan, "SCAN tasks", "plan: %s", plan)
	found, err := b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w", Max: 4, Lease: time.Minute, Kinds: []string{"mine"}})
	require.NoError(t, err)
	require.Empty(t, found)
	found, err = b.q.Claim(b.ctx, model.ClaimRequest{Worker: "w", Max: 4, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, found, 4, "the other kind's tasks are due")
}

// TestPostgresClaimByKindsReadsNoTaskOfAnotherKind: among 3,000 due tasks
// of another kind, claim_batch and complete_and_claim for one kind read
// that kind's few rows of tasks, and claim_any_kinds reads none of the
// other kind's.
func TestPostgresClaimByKindsReadsNoTaskOfAnotherKind(t *testing.T) {
	f := freshPostgres(t)
	_, err := f.db.ExecContext(f.ctx, `
INSERT INTO users (user_id) VALUES ('ana');
INSERT INTO tasks (id, user_id, idem_key, request_hash, kind, payload, state, priority, run_at, deadline, attempts_max,
                   queued_at, cost_budget, steps_max, created_at, updated_at)
SELECT 'o' || i, 'ana', 'o' || i, 'h', 'other', '{}', 'queued', i % 3, 0, 0, 3, 0, 10, 10, 0, 0
FROM generate_series(1, 3000) i;
INSERT INTO tasks (id, user_id, idem_key, request_hash, kind, payload, state, priority, run_at, deadline, attempts_max,
                   queued_at, cost_budget, steps_max, created_at, updated_at)
SELECT 'm' || i, 'ana', 'm' || i, 'h', 'mine', '{}', 'queued', 0, 0, 0, 3, 0, 10, 10, 0, 0
FROM generate_series(1, 3) i;
INSERT INTO task_keys (user_id, idem_key, seq) SELECT user_id, idem_key, seq FROM tasks;
ANALYZE tasks;`)
	require.NoError(t, err)
	tasksRead := func(fn func(tx *sql.Tx)) int64 {
		tx, err := f.db.BeginTx(f.ctx, nil)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback() }()
		read := func() int64 {
			var n int64
			require.NoError(t, tx.QueryRowContext(f.ctx, `SELECT COALESCE(seq_tup_read, 0) + COALESCE(idx_tup_fetch, 0)
			    FROM pg_stat_xact_user_tables WHERE relid = 'tasks'::regclass`).Scan(&n))
			return n
		}
		before := read()
		fn(tx)
		return read() - before
	}
	args := []any{sql.Named("now", int64(1000)), sql.Named("max", 8), sql.Named("owner", "w"),
		sql.Named("lease_until", int64(6000)), sql.Named("kinds", `["mine"]`)}
	for _, name := range []string{"claim_batch", "complete_and_claim"} {
		var ids []string
		read := tasksRead(func(tx *sql.Tx) {
			text, bound := f.args(name, append(args, sql.Named("claims", "[]"), sql.Named("events", "[]"), sql.Named("scope", ""))...)
			rows, err := tx.QueryContext(f.ctx, text, bound...)
			require.NoError(t, err)
			tasks, err := scanTasks(rows)
			require.NoError(t, err)
			for _, task := range tasks {
				ids = append(ids, task.ID)
			}
		})
		require.Equal(t, []string{"m1", "m2", "m3"}, ids, name)
		t.Logf("%s read %d rows of tasks", name, read)
		require.Less(t, read, int64(30), "%s read %d rows of tasks for 3 tasks of its kind", name, read)
	}
	for _, c := range []struct {
		kinds string
		found bool
	}{{`["nothing"]`, false}, {`["nothing","mine"]`, true}} {
		read := tasksRead(func(tx *sql.Tx) {
			text, bound := f.args("claim_any_kinds", sql.Named("now", int64(1000)), sql.Named("kinds", c.kinds))
			var found int
			err := tx.QueryRowContext(f.ctx, text, bound...).Scan(&found)
			if c.found {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, sql.ErrNoRows)
			}
		})
		require.Less(t, read, int64(10), "claim_any_kinds %s read %d rows of tasks", c.kinds, read)
	}
}

// TestMergedClaimsKeepTheirKinds: a group merges the claims of
// CompleteAndClaim members only when they name the same kinds (in any
// order); claims of other kinds run apart, each taking its own kinds.
func TestMergedClaimsKeepTheirKinds(t *testing.T) {
	mergeStores(t, func(t *testing.T, open func(t *testing.T) *mergeRig) {
		g := open(t)
		var claims []model.Claim
		for i := range 4 {
			_, c := g.running(func(r *model.SubmitRequest) { r.User = fmt.Sprintf("u%d", i) })
			claims = append(claims, c)
		}
		for i, kind := range []string{"email", "report", "email", "report", "sms"} {
			g.submit(func(r *model.SubmitRequest) { r.User, r.Kind = fmt.Sprintf("q%d", i), kind })
		}
		g.advance(time.Second)
		asks := [][]string{{"email", "sms"}, {"report"}, {"sms", "email"}, {"report"}}
		out := make([][]model.Claimed, len(asks))
		var ops []func() error
		for i, c := range claims {
			req := model.ClaimRequest{Worker: "w2", Max: 1, Lease: testLease, Kinds: asks[i]}
			ops = append(ops, g.completeAndClaimOp(c, req, "", &out[i]))
		}
		for i, err := range g.inGroup(nil, ops...) {
			require.NoError(t, err, "member %d", i)
		}
		require.Equal(t, int64(4), g.q.stats.merged.Load(), "two runs of two: email+sms, and report")
		require.Equal(t, [][]string{{"email/q0"}, {"report/q1"}, {"email/q2"}, {"report/q3"}},
			[][]string{kindsOf(out[0]), kindsOf(out[1]), kindsOf(out[2]), kindsOf(out[3])})
		require.NoError(t, g.q.CheckCounters(g.ctx))
	})
}
