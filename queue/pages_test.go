package queue

import (
	"testing"
	"time"

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
