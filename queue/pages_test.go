package queue

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/model"
)

func ids(tasks []model.Task) []string {
	out := []string{}
	for _, t := range tasks {
		out = append(out, t.ID)
	}
	return out
}

// TestListPageCursorStableWhileTasksArrive pages through the tasks while
// more are submitted between pages: every task present when paging began
// is seen once, in submission order, and the new ones follow.
func TestListPageCursorStableWhileTasksArrive(t *testing.T) {
	b := setup(t)
	var want []string
	for range 5 {
		want = append(want, b.submit())
	}
	var got []string
	var after int64
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10, "paging did not end")
		page, err := b.q.ListPage(b.ctx, PageFilter{After: after, Limit: 2})
		require.NoError(t, err)
		got = append(got, ids(page.Tasks)...)
		if pages == 0 {
			want = append(want, b.submit(), b.submit()) // arrive behind the cursor
		}
		if page.Next == 0 {
			require.LessOrEqual(t, len(page.Tasks), 2)
			break
		}
		require.Len(t, page.Tasks, 2)
		after = page.Next
	}
	require.Equal(t, want, got)
}

func TestListPageFilters(t *testing.T) {
	b := setup(t)
	ana1 := b.submit()
	bob := b.submit(func(r *model.SubmitRequest) { r.User = "bob" })
	b.advance(time.Hour)
	ana2 := b.submit()
	cat := b.submit(func(r *model.SubmitRequest) { r.User = "cat" })
	_, err := b.q.Cancel(b.ctx, ana2, "ops")
	require.NoError(t, err)

	list := func(f PageFilter) []string {
		t.Helper()
		page, err := b.q.ListPage(b.ctx, f)
		require.NoError(t, err)
		require.Zero(t, page.Next)
		return ids(page.Tasks)
	}
	require.Equal(t, []string{ana1, ana2}, list(PageFilter{User: "ana"}))
	require.Equal(t, []string{bob, cat}, list(PageFilter{Users: []string{"cat", "bob"}}))
	require.Equal(t, []string{}, list(PageFilter{Users: []string{}}), "an empty binding sees nothing")
	require.Equal(t, []string{}, list(PageFilter{User: "ana", Users: []string{"bob"}}), "a user outside the binding")
	require.Equal(t, []string{bob}, list(PageFilter{User: "bob", Users: []string{"bob"}}))
	require.Equal(t, []string{ana2}, list(PageFilter{State: model.Cancelled}))
	require.Equal(t, []string{ana1, bob, cat}, list(PageFilter{State: model.Queued}))
	require.Equal(t, []string{ana2, cat}, list(PageFilter{CreatedFrom: epoch.Add(time.Hour)}))
	require.Equal(t, []string{ana1, bob}, list(PageFilter{CreatedUntil: epoch.Add(time.Hour)}))
	require.Equal(t, []string{}, list(PageFilter{ScheduleID: "sch-none"}))

	_, err = b.q.ListPage(b.ctx, PageFilter{State: "lost"})
	require.ErrorIs(t, err, model.ErrInvalidInput)
	_, err = b.q.ListPage(b.ctx, PageFilter{Limit: model.ListLimitMax + 1})
	require.ErrorIs(t, err, model.ErrInvalidInput)
	_, err = b.q.ListPage(b.ctx, PageFilter{After: -1})
	require.ErrorIs(t, err, model.ErrInvalidInput)
}

// TestListPageExactFit: a last page that is exactly full says there is
// no page after it.
func TestListPageExactFit(t *testing.T) {
	b := setup(t)
	b.submit()
	b.submit()
	page, err := b.q.ListPage(b.ctx, PageFilter{Limit: 2})
	require.NoError(t, err)
	require.Len(t, page.Tasks, 2)
	require.Zero(t, page.Next)
	page, err = b.q.ListPage(b.ctx, PageFilter{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, page.Tasks[0].Seq, page.Next)
}

// walkPages pages through the tasks the named listing query selects for
// users and state, pageLen at a time, and returns their IDs in order.
func walkPages(t *testing.T, q *Queue, name queryName, users []string, state model.State, until int64, pageLen int) []string {
	t.Helper()
	arg, err := usersArg(users)
	require.NoError(t, err)
	got := []string{}
	var after int64
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "paging did not end")
		rows, err := q.readRows(context.Background(), name, sql.Named("after", after), sql.Named("state", string(state)),
			sql.Named("created_from", int64(0)), sql.Named("created_until", until), sql.Named("schedule_id", ""), sql.Named("kind", ""),
			sql.Named("limit", pageLen), sql.Named("users", arg))
		require.NoError(t, err)
		tasks, err := scanTasks(rows)
		require.NoError(t, err)
		got = append(got, ids(tasks)...)
		if len(tasks) < pageLen {
			return got
		}
		after = tasks[len(tasks)-1].Seq
	}
}

// checkPagesForUsers: for a caller who may see a few users, list_page_for_users
// (each user's tasks by the user index, then merged) pages through
// exactly what list_page (every task in order, keeping theirs) does, with
// and without a state filter and a creation window, for one user, several
// (one with no task, one given twice), and ListPage's pages are the
// scan's.
func checkPagesForUsers(t *testing.T, q *Queue) {
	t.Helper()
	ctx := context.Background()
	users := []string{"ana", "bob", "cy", "dee", "eve"}
	for i := range 240 {
		_, err := q.Submit(ctx, model.SubmitRequest{User: users[(i*i+i/7)%len(users)], Key: fmt.Sprintf("k%d", i),
			Payload: `{}`, CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
	}
	for range 9 {
		claimed, err := q.Claim(ctx, model.ClaimRequest{Worker: "w", Max: 4, Lease: time.Minute})
		require.NoError(t, err)
		for i, c := range claimed {
			if i%2 == 0 {
				require.NoError(t, q.Complete(ctx, c.Claim))
			}
		}
	}
	for _, set := range [][]string{{"cy"}, {"bob", "eve"}, {"dee", "nobody", "ana", "dee"}, users} {
		for _, state := range []model.State{"", model.Queued, model.Running, model.Completed} {
			for _, until := range []int64{math.MaxInt64, 0} {
				want := walkPages(t, q, qListPage, set, state, until, 7)
				got := walkPages(t, q, qListPageForUsers, set, state, until, 7)
				require.Equal(t, want, got, "users %v, state %q, created before %d", set, state, until)
				if until != 0 {
					require.NotEmpty(t, want, "users %v, state %q", set, state)
				}
			}
		}
		page, err := q.ListPage(ctx, PageFilter{Users: set, Limit: 5})
		require.NoError(t, err)
		require.Equal(t, walkPages(t, q, qListPage, set, "", math.MaxInt64, 5)[:5], ids(page.Tasks))
	}
}

// TestListPageForUsersMatchesTheScan: checkPagesForUsers on SQLite, and
// the plan reads each user's tasks by the user index.
func TestListPageForUsersMatchesTheScan(t *testing.T) {
	b := setup(t)
	checkPagesForUsers(t, b.q)
	plan := strings.Join(queryPlan(t, b, "list_page_for_users", sql.Named("after", int64(0)), sql.Named("state", ""),
		sql.Named("created_from", int64(0)), sql.Named("created_until", int64(math.MaxInt64)),
		sql.Named("schedule_id", ""), sql.Named("kind", ""), sql.Named("limit", 7), sql.Named("users", `["ana","bob"]`)), " | ")
	require.Regexp(t, `SEARCH t USING (COVERING )?INDEX tasks_user \(user_id=\? AND seq>\?\)`, plan, plan)
}

// TestPostgresListPageForUsersMatchesTheScan: checkPagesForUsers on
// PostgreSQL, and the plan walks each user's keys by task_keys_user.
func TestPostgresListPageForUsersMatchesTheScan(t *testing.T) {
	f := freshPostgres(t)
	checkPagesForUsers(t, f.q)
	plan := f.plan("list_page_for_users", sql.Named("after", int64(0)), sql.Named("state", ""),
		sql.Named("created_from", int64(0)), sql.Named("created_until", int64(math.MaxInt64)),
		sql.Named("schedule_id", ""), sql.Named("kind", ""), sql.Named("limit", 7), sql.Named("users", `["ana","bob"]`))
	require.Contains(t, plan, "task_keys_user", plan)
	require.Contains(t, plan, "Index Cond: (seq = k.seq)", plan)
}

// checkTrailThrough: a read of the trail for a quiet user among busy ones
// looks at most eventsScanWindow past its cursor and says how far it
// looked; resuming there, reads reach the quiet user's next event in a
// few windows, and return exactly its events (those the whole trail holds
// of its tasks); a wait looks on, window after window, to that event at
// once, and, caught up, ends with the cursor at the last event.
func checkTrailThrough(t *testing.T, q *Queue) {
	t.Helper()
	ctx := context.Background()
	submit := func(user string, from, n int) {
		t.Helper()
		for start := from; start < from+n; start += SubmitBatchMax {
			var reqs []model.SubmitRequest
			for i := start; i < min(from+n, start+SubmitBatchMax); i++ {
				reqs = append(reqs, model.SubmitRequest{User: user, Key: fmt.Sprintf("k%d", i), Payload: `{}`, CostBudget: 1, StepsMax: 1})
			}
			_, err := q.SubmitMany(ctx, reqs)
			require.NoError(t, err)
		}
	}
	submit("quiet", 0, 1)
	first, err := q.EventsSince(ctx, EventFilter{Users: []string{"quiet"}})
	require.NoError(t, err)
	require.Len(t, first, 1)
	submit("busy", 1, 2*eventsScanWindow+500)
	submit("quiet", 100000, 1)
	var all []TrailEvent
	for after := int64(0); ; {
		page, err := q.EventsSince(ctx, EventFilter{After: after, Limit: model.ListLimitMax})
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
		after = page[len(page)-1].Seq
	}
	var want []int64
	for _, e := range all {
		if e.User == "quiet" && e.Seq > first[0].Seq {
			want = append(want, e.Seq)
		}
	}
	last := all[len(all)-1].Seq
	require.Len(t, want, 1)

	quiet := EventFilter{Users: []string{"quiet"}, After: first[0].Seq}
	events, through, err := q.EventsThrough(ctx, quiet)
	require.NoError(t, err)
	require.Empty(t, events)
	require.Equal(t, first[0].Seq+eventsScanWindow, through, "one window, and no further")
	var got []int64
	reads := 1
	for after := through; ; {
		require.Less(t, reads, 10, "reads did not reach the end")
		events, through, err := q.EventsThrough(ctx, EventFilter{Users: []string{"quiet"}, After: after})
		reads++
		require.NoError(t, err)
		require.GreaterOrEqual(t, through, after)
		for _, e := range events {
			got = append(got, e.Seq)
		}
		if through == last {
			break
		}
		after = through
	}
	require.Equal(t, want, got)
	require.Equal(t, 3, reads, "a window at a time")

	events, through, err = q.WaitEventsThrough(ctx, quiet)
	require.NoError(t, err)
	require.Len(t, events, 1)
	require.Equal(t, want[0], events[0].Seq)
	require.Equal(t, last, through)

	ended, cancel := context.WithCancel(ctx)
	cancel()
	_, through, err = q.WaitEventsThrough(ended, EventFilter{Users: []string{"quiet"}, After: last})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, last, through, "caught up, the cursor stays at the last event")
}

func TestEventsThroughLooksAWindowAtATime(t *testing.T) {
	checkTrailThrough(t, setup(t).q)
}

func TestPostgresEventsThroughLooksAWindowAtATime(t *testing.T) {
	checkTrailThrough(t, freshPostgres(t).q)
}

// walkListPage pages through ListPage with f, from its first page to its
// last, and returns the tasks' IDs in the order the pages give them.
func walkListPage(t *testing.T, q *Queue, f PageFilter) []string {
	t.Helper()
	got := []string{}
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "paging did not end")
		page, err := q.ListPage(context.Background(), f)
		require.NoError(t, err)
		got = append(got, ids(page.Tasks)...)
		if page.Next == 0 {
			return got
		}
		f.After = page.Next
	}
}

// checkPagesNewest: ListPage with Newest pages from the newest task back
// through exactly the tasks it pages through oldest first, in reverse, for
// every user, one user, a few users (by each user's tasks) and many (by
// the scan), with and without a state filter; a task submitted while
// paging is on no later page.
func checkPagesNewest(t *testing.T, q *Queue) {
	t.Helper()
	ctx := context.Background()
	users := []string{"ana", "bob", "cy"}
	for i := range 40 {
		_, err := q.Submit(ctx, model.SubmitRequest{User: users[(i*i+i/4)%len(users)], Key: fmt.Sprintf("k%d", i),
			Payload: `{}`, CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
	}
	claimed, err := q.Claim(ctx, model.ClaimRequest{Worker: "w", Max: 5, Lease: time.Minute})
	require.NoError(t, err)
	require.NotEmpty(t, claimed)
	many := make([]string, pageUsersRows) // past pageUsersRows: the scan
	for i := range many {
		many[i] = fmt.Sprintf("u%d", i)
	}
	many[7] = "bob"
	for _, f := range []PageFilter{{}, {User: "ana"}, {Users: []string{"bob", "cy"}}, {Users: []string{"cy"}, User: "cy"},
		{Users: many}, {State: model.Running}, {State: model.Queued, Users: []string{"ana", "bob"}}} {
		f.Limit = 4
		oldest := walkListPage(t, q, f)
		require.NotEmpty(t, oldest, "%+v", f)
		f.Newest = true
		newest := walkListPage(t, q, f)
		slices.Reverse(newest)
		require.Equal(t, oldest, newest, "%+v", f)
	}
	first, err := q.ListPage(ctx, PageFilter{Newest: true, Limit: 3})
	require.NoError(t, err)
	_, err = q.Submit(ctx, model.SubmitRequest{User: "ana", Key: "late", Payload: `{}`, CostBudget: 1, StepsMax: 1})
	require.NoError(t, err)
	next, err := q.ListPage(ctx, PageFilter{Newest: true, Limit: 3, After: first.Next})
	require.NoError(t, err)
	require.Less(t, next.Tasks[0].Seq, first.Tasks[2].Seq, "the next page goes on below the first")
}

// newestPlanArgs are list_page_for_users_newest's arguments for a first
// page of two users.
var newestPlanArgs = []any{sql.Named("after", int64(math.MaxInt64)), sql.Named("state", ""),
	sql.Named("created_from", int64(0)), sql.Named("created_until", int64(math.MaxInt64)),
	sql.Named("schedule_id", ""), sql.Named("kind", ""), sql.Named("limit", 7), sql.Named("users", `["ana","bob"]`)}

// TestListPageNewestFirst: checkPagesNewest on SQLite, and a few users'
// pages read each user's tasks by the user index, backwards.
func TestListPageNewestFirst(t *testing.T) {
	b := setup(t)
	checkPagesNewest(t, b.q)
	plan := strings.Join(queryPlan(t, b, "list_page_for_users_newest", newestPlanArgs...), " | ")
	require.Regexp(t, `SEARCH t USING (COVERING )?INDEX tasks_user \(user_id=\? AND seq<\?\)`, plan, plan)
}

// TestPostgresListPageNewestFirst: checkPagesNewest on PostgreSQL, and
// the plan walks each user's keys by task_keys_user.
func TestPostgresListPageNewestFirst(t *testing.T) {
	f := freshPostgres(t)
	checkPagesNewest(t, f.q)
	plan := f.plan("list_page_for_users_newest", newestPlanArgs...)
	require.Contains(t, plan, "task_keys_user", plan)
	require.Contains(t, plan, "Index Cond: (seq = k.seq)", plan)
}

// TaskByKey finds a user's task by its idempotency key and no other
// user's; the reference agrees.
func TestTaskByKey(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, s interface {
		Submit(context.Context, model.SubmitRequest) (model.SubmitResult, error)
		TaskByKey(context.Context, string, string) (model.Task, error)
	}) {
		res, err := s.Submit(ctx, model.SubmitRequest{User: "ana", Key: "order-7", Payload: `{}`, CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
		_, err = s.Submit(ctx, model.SubmitRequest{User: "bob", Key: "order-8", Payload: `{}`, CostBudget: 1, StepsMax: 1})
		require.NoError(t, err)
		got, err := s.TaskByKey(ctx, "ana", "order-7")
		require.NoError(t, err)
		require.Equal(t, res.TaskID, got.ID)
		require.Equal(t, "order-7", got.Key)
		_, err = s.TaskByKey(ctx, "bob", "order-7")
		require.ErrorIs(t, err, model.ErrNotFound)
		_, err = s.TaskByKey(ctx, "ana", "order-8")
		require.ErrorIs(t, err, model.ErrNotFound)
	}
	t.Run("sqlite", func(t *testing.T) { check(t, setup(t).q) })
	t.Run("reference", func(t *testing.T) {
		check(t, model.NewReference(model.ReferenceOptions{Clock: clockwork.NewFakeClockAt(time.UnixMilli(1000)), IDs: model.NewSeededIDs(1),
			Rand: rand.New(rand.NewPCG(1, 2))}))
	})
	t.Run("postgres", func(t *testing.T) { check(t, freshPostgres(t).q) })
}
