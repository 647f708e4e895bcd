package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/model"
)

// TestListPagesWithAStableCursor: GET /v1/tasks pages in submission
// order; tasks submitted between pages come after the cursor, so nothing
// is skipped or repeated; the last page says so with an empty next.
func TestListPagesWithAStableCursor(t *testing.T) {
	a := setupAPI(t)
	ctx := context.Background()
	c := a.clientFor(t, secretRoot)
	var want []string
	for i := range 5 {
		want = append(want, a.submit(t, "carol", fmt.Sprintf("p%d", i), nil))
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		page, err := c.List(ctx, client.ListOptions{Limit: 2, After: after})
		require.NoError(t, err)
		got = append(got, taskIDs(page.Tasks)...)
		if pages == 0 {
			want = append(want, a.submit(t, "carol", "late1", nil), a.submit(t, "carol", "late2", nil))
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	require.Equal(t, want, got)

	// Filters, and refusals naming the parameter.
	_, err := c.Cancel(ctx, want[1])
	require.NoError(t, err)
	page, err := c.List(ctx, client.ListOptions{State: model.Cancelled})
	require.NoError(t, err)
	require.Equal(t, []string{want[1]}, taskIDs(page.Tasks))
	page, err = c.List(ctx, client.ListOptions{CreatedUntil: apiEpoch})
	require.NoError(t, err)
	require.Empty(t, page.Tasks)
	for query, field := range map[string]string{
		"limit=0": "limit", "limit=10001": "limit", "limit=x": "limit", "after=abc": "after", "after=-3": "after",
		"state=lost": "state", "bogus=1": "query", "created_from=yesterday": "created_from", "user=a/b": "user",
		"limit=1&limit=2": "limit", "order=latest": "order",
	} {
		a.refused(t, http.MethodGet, "/v1/tasks?"+query, secretRoot, "", http.StatusBadRequest, field)
	}
}

// TestListPagesNewestFirst: with order=newest the pages hold the newest
// tasks first, each page's next leading to older ones, and a task
// submitted between pages is not on a later page; a token for some users
// pages through theirs alone.
func TestListPagesNewestFirst(t *testing.T) {
	a := setupAPI(t)
	ctx := context.Background()
	c := a.clientFor(t, secretRoot)
	var submitted []string
	for i := range 5 {
		submitted = append(submitted, a.submit(t, "carol", fmt.Sprintf("n%d", i), nil))
		a.submit(t, "dora", fmt.Sprintf("n%d", i), nil)
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		page, err := c.List(ctx, client.ListOptions{User: "carol", Limit: 2, After: after, Newest: true})
		require.NoError(t, err)
		got = append(got, taskIDs(page.Tasks)...)
		if pages == 0 {
			a.submit(t, "carol", "late", nil) // newer than every page to come
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	slices.Reverse(submitted)
	require.Equal(t, submitted, got)

	bound, err := a.clientFor(t, secretAnaOps).List(ctx, client.ListOptions{Newest: true, Limit: 3})
	require.NoError(t, err)
	require.Len(t, bound.Tasks, 3)
	for i, task := range bound.Tasks {
		require.Equal(t, "dora", task.User, "a token for ana and dora lists theirs only")
		require.Equal(t, fmt.Sprintf("n%d", 4-i), task.Key)
	}
}

// TestSubmitBatchOverHTTP: one transaction; replays marked; a bad item
// refuses the batch naming its index and writes nothing.
func TestSubmitBatchOverHTTP(t *testing.T) {
	a := setupAPI(t)
	ctx := context.Background()
	c := a.clientFor(t, secretRoot)
	first, err := c.Submit(ctx, request("carol", "b0"))
	require.NoError(t, err)
	res, err := c.SubmitMany(ctx, []model.SubmitRequest{request("carol", "b0"), request("carol", "b1"), request("dora", "b1")})
	require.NoError(t, err)
	require.Len(t, res, 3)
	require.Equal(t, client.SubmitResult{TaskID: first.TaskID, Replay: true}, res[0])
	require.False(t, res[1].Replay)
	require.False(t, res[2].Replay)

	rows := a.counts(t)
	bad := request("carol", "b2")
	bad.CostBudget = 0
	_, err = c.SubmitMany(ctx, []model.SubmitRequest{request("carol", "b3"), bad})
	requireRefusal(t, err, client.ErrBadInput, "tasks[1].cost_budget")
	a.refused(t, http.MethodPost, "/v1/tasks/batch", secretRoot, `{"tasks":[{"user":"carol","key":"b4","payload":{},"cost_budget":1,"steps_max":1,"colour":"red"}]}`,
		http.StatusBadRequest, "tasks[0].body")
	a.refused(t, http.MethodPost, "/v1/tasks/batch", secretRoot, `{"tasks":[]}`, http.StatusBadRequest, "tasks")
	a.refused(t, http.MethodPost, "/v1/tasks/batch", secretRoot, `{}`, http.StatusBadRequest, "tasks")
	a.refused(t, http.MethodPost, "/v1/tasks/batch", secretApprove, `{"tasks":[]}`, http.StatusForbidden, "")
	require.Equal(t, rows, a.counts(t))
}

// TestLocationOfANewTask: 201 and a replay's 200 carry Location.
func TestLocationOfANewTask(t *testing.T) {
	a := setupAPI(t)
	body := submitJSON(t, "carol", "loc", nil)
	status, header, b := a.do(t, http.MethodPost, "/v1/tasks", secretRoot, body)
	require.Equal(t, http.StatusCreated, status, "%s", b)
	var res client.SubmitResult
	require.NoError(t, json.Unmarshal(b, &res))
	require.Equal(t, "/v1/tasks/"+res.TaskID, header.Get("Location"))
	status, header, _ = a.do(t, http.MethodPost, "/v1/tasks", secretRoot, body)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "/v1/tasks/"+res.TaskID, header.Get("Location"))
	got := a.call(t, http.MethodGet, header.Get("Location"), secretRoot, "", http.StatusOK)
	require.Equal(t, res.TaskID, got["id"])
}

// TestLongPoll over a real loopback listener: a wait returns as soon as
// the task has an event past after_seq, at its timeout (on the server's
// clock) unchanged, and at once when the server shuts down.
func TestLongPoll(t *testing.T) {
	a := setupAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a safety net
	defer cancel()
	c := a.clientFor(t, secretRoot)
	id := a.submit(t, "carol", "w1", nil)
	before, err := c.Task(ctx, id)
	require.NoError(t, err)
	require.Positive(t, before.LastEventSeq)

	type answer struct {
		task client.Task
		err  error
	}
	wait := func(after int64, d time.Duration) chan answer {
		out := make(chan answer, 1)
		go func() {
			task, err := c.WaitTask(ctx, id, after, d)
			out <- answer{task, err}
		}()
		return out
	}

	// A past event answers at once.
	got := <-wait(before.LastEventSeq-1, 30*time.Second)
	require.NoError(t, got.err)
	require.Equal(t, before.LastEventSeq, got.task.LastEventSeq)

	// A change wakes the waiter.
	waiting := wait(before.LastEventSeq, 30*time.Second)
	require.NoError(t, a.clock.BlockUntilContext(ctx, 2)) // the wait's timeout and the queue's poll
	_, err = a.q.Cancel(ctx, id, "olga")
	require.NoError(t, err)
	got = <-waiting
	require.NoError(t, got.err)
	require.Equal(t, model.Cancelled, got.task.State)
	require.Greater(t, got.task.LastEventSeq, before.LastEventSeq)

	// The timeout answers the task unchanged.
	waiting = wait(got.task.LastEventSeq, 10*time.Second)
	require.NoError(t, a.clock.BlockUntilContext(ctx, 2))
	a.clock.Advance(10 * time.Second)
	timedOut := <-waiting
	require.NoError(t, timedOut.err)
	require.Equal(t, got.task, timedOut.task)

	// Refusals.
	for query, field := range map[string]string{
		"wait=61s&after_seq=1": "wait", "wait=0s&after_seq=1": "wait", "wait=soon&after_seq=1": "wait",
		"wait=1s": "wait", "after_seq=1": "wait", "wait=1s&after_seq=-1": "after_seq", "wait=1s&after_seq=x": "after_seq",
		"wait=1s&after_seq=1&colour=red": "query",
	} {
		a.refused(t, http.MethodGet, "/v1/tasks/"+id+"?"+query, secretRoot, "", http.StatusBadRequest, field)
	}

	// Shutdown answers an open wait.
	waiting = wait(got.task.LastEventSeq, 30*time.Second)
	require.NoError(t, a.clock.BlockUntilContext(ctx, 2))
	a.stop(t)
	final := <-waiting
	require.NoError(t, final.err)
	require.Equal(t, got.task.LastEventSeq, final.task.LastEventSeq)
}

// sseEvent is one event of a raw stream.
type sseEvent struct{ id, kind, data, comment string }

// sseReader reads a raw event stream.
type sseReader struct {
	resp *http.Response
	sc   *bufio.Scanner
}

func (a *api) openStream(t *testing.T, secret string, header http.Header, query string) *sseReader {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, a.base+"/v1/events"+query, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := a.client.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	t.Cleanup(func() { resp.Body.Close() })
	r := &sseReader{resp: resp, sc: bufio.NewScanner(resp.Body)}
	require.Equal(t, sseEvent{}, r.next(t, true), "the stream opens with its retry line")
	return r
}

// next reads one event (or comment, when comments); ok false at the end.
func (r *sseReader) next(t *testing.T, comments bool) sseEvent {
	t.Helper()
	var e sseEvent
	for r.sc.Scan() {
		line := r.sc.Text()
		switch {
		case line == "":
			if e != (sseEvent{}) || comments {
				return e
			}
		case strings.HasPrefix(line, ": "):
			e.comment = strings.TrimPrefix(line, ": ")
		case strings.HasPrefix(line, "id: "):
			e.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			e.kind = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			e.data = strings.TrimPrefix(line, "data: ")
		case strings.HasPrefix(line, "retry: "):
		default:
			t.Fatalf("unexpected stream line %q", line)
		}
	}
	require.NoError(t, r.sc.Err())
	return sseEvent{kind: "EOF"}
}

// TestEventStream over a real loopback listener: events in order; a
// resumed stream (Last-Event-ID) misses nothing and repeats nothing; an
// idle stream pings; a token's streams are capped; a shutdown ends every
// open stream with an end event.
func TestEventStream(t *testing.T) {
	a := setupAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a safety net
	defer cancel()
	for i := range 3 {
		a.submit(t, "carol", fmt.Sprintf("e%d", i), nil)
	}
	all, err := a.q.Events(ctx, "")
	require.NoError(t, err)
	require.Len(t, all, 3)

	// Read two, hang up, write more, resume from the second.
	first := follow(t, a.clientFor(t, secretRoot), 0, 2)
	require.Equal(t, []int64{all[0].Seq, all[1].Seq}, []int64{first[0].Seq, first[1].Seq})
	a.submit(t, "carol", "e3", nil)
	a.submit(t, "dora", "e4", nil)
	all, err = a.q.Events(ctx, "")
	require.NoError(t, err)
	s := a.openStream(t, secretRoot, http.Header{"Last-Event-ID": {strconv.FormatInt(first[1].Seq, 10)}}, "?after=0")
	var resumed []int64
	for range all[2:] {
		e := s.next(t, false)
		require.Equal(t, "event", e.kind)
		var ev client.Event
		require.NoError(t, json.Unmarshal([]byte(e.data), &ev))
		require.Equal(t, e.id, strconv.FormatInt(ev.Seq, 10))
		resumed = append(resumed, ev.Seq)
	}
	var want []int64
	for _, e := range all[2:] {
		want = append(want, e.Seq)
	}
	require.Equal(t, want, resumed, "resumed after the last event seen: nothing missed, nothing repeated")

	// A new event reaches the open stream.
	id := a.submit(t, "carol", "e5", nil)
	e := s.next(t, false)
	require.Contains(t, e.data, id)

	// The cap, on a token with no stream yet: four fit, a fifth not.
	for range StreamsPerTokenDefault {
		a.openStream(t, secretAnaOps, nil, "")
	}
	a.refused(t, http.MethodGet, "/v1/events", secretAnaOps, "", http.StatusTooManyRequests, "")
	_, header, _ := a.do(t, http.MethodGet, "/v1/events", secretAnaOps, "")
	require.Equal(t, "5", header.Get("Retry-After"), "a 429 says when to try again")
	_, err = a.clientFor(t, secretAnaOps).Follow(ctx, 0, func(client.Event) error { return nil })
	requireRefusal(t, err, client.ErrTooManyStreams, "")
	require.Equal(t, RetryAfter, err.(*client.Error).RetryAfter)
	other := a.openStream(t, secretBen, nil, "?after="+strconv.FormatInt(all[len(all)-1].Seq+100, 10))

	// Refusals name the parameter.
	a.refused(t, http.MethodGet, "/v1/events?after=x", secretBen, "", http.StatusBadRequest, "after")
	status, _, b := a.doHeader(t, http.MethodGet, "/v1/events", http.Header{"Authorization": {"Bearer " + secretBen}, "Last-Event-ID": {"-1"}}, "")
	require.Equal(t, http.StatusBadRequest, status, "%s", b)
	require.Contains(t, string(b), `"field":"Last-Event-ID"`)

	// Shutdown ends the open streams with an end event.
	a.stop(t)
	require.Equal(t, "end", s.next(t, false).kind)
	require.Equal(t, "EOF", s.next(t, false).kind)
	require.Equal(t, "end", other.next(t, false).kind)
}

// TestEventStreamPings: an idle stream sends a ping comment at each ping
// interval of the server's clock, and still delivers the next event.
func TestEventStreamPings(t *testing.T) {
	a := setupAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a safety net
	defer cancel()
	s := a.openStream(t, secretRoot, nil, "")
	for range 2 {
		require.NoError(t, a.clock.BlockUntilContext(ctx, 2)) // the ping timer and the queue's poll
		a.clock.Advance(PingInterval)
		require.Equal(t, sseEvent{comment: "ping"}, s.next(t, true))
	}
	id := a.submit(t, "carol", "p1", nil)
	e := s.next(t, false)
	require.Equal(t, "event", e.kind)
	require.Contains(t, e.data, id)
}

// TestLongLivedRoutesSkipTheTimeout: the long-poll and the stream are
// served outside the request timeout; the rest inside it.
func TestLongLivedRoutesSkipTheTimeout(t *testing.T) {
	for target, want := range map[string]bool{
		"GET /v1/events":                          true,
		"GET /v1/events?after=3":                  true,
		"GET /v1/tasks/t_01?wait=30s&after_seq=1": true,
		"GET /v1/tasks/t_01":                      false,
		"GET /v1/tasks?wait=30s":                  false,
		"POST /v1/tasks/t_01?wait=30s":            false,
		"GET /v1/inspect":                         false,
	} {
		method, path, _ := strings.Cut(target, " ")
		r, err := http.NewRequest(method, "http://x"+path, nil)
		require.NoError(t, err)
		require.Equal(t, want, longLived(r), target)
	}
}

// TestEventStreamResumesUnderConcurrentWrites: while writers submit from
// several goroutines (their writes grouped into shared commits), a
// follower that hangs up every few events and resumes from the last one
// it saw ends with every event exactly once, in order.
//
// The follower resumes at once each time, under the default cap of
// streams per token: each resume takes the place of the stream it hung up
// on, whether or not the server has seen that one close yet.
func TestEventStreamResumesUnderConcurrentWrites(t *testing.T) {
	a := setupAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a safety net
	defer cancel()
	const writers, each = 4, 20
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := range each {
				_, err := a.q.Submit(ctx, request("carol", fmt.Sprintf("w%d-%d", w, i)))
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	c := a.clientFor(t, secretRoot)
	var got []int64
	var last int64
	for len(got) < writers*each {
		n := 0
		var err error
		last, err = c.Follow(ctx, last, func(e client.Event) error {
			got = append(got, e.Seq)
			n++
			if n == 7 || len(got) == writers*each {
				return errEnough // hang up, resume from last
			}
			return nil
		})
		require.ErrorIs(t, err, errEnough)
	}
	for range writers {
		require.NoError(t, <-errs)
	}
	all, err := a.q.Events(ctx, "")
	require.NoError(t, err)
	want := make([]int64, 0, len(all))
	for _, e := range all {
		want = append(want, e.Seq)
	}
	require.Equal(t, want, got, "every event once, in sequence order, across %d resumes", len(got)/7)
}

// TestResumeAtTheCapReplacesTheOldestStream over a real loopback
// listener: a token holding its cap of live streams is refused a new one
// (429), but a resume (Last-Event-ID) is let in and the token's oldest
// stream ends with an end event saying why; the others go on receiving
// events, and the cap still holds for the next new stream.
func TestResumeAtTheCapReplacesTheOldestStream(t *testing.T) {
	a := setupAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a safety net
	defer cancel()
	a.submit(t, "ana", "r0", nil)
	all, err := a.q.Events(ctx, "")
	require.NoError(t, err)
	seen := strconv.FormatInt(all[len(all)-1].Seq, 10)

	var open []*sseReader
	for range StreamsPerTokenDefault {
		open = append(open, a.openStream(t, secretAnaOps, nil, "?after="+seen))
	}
	a.refused(t, http.MethodGet, "/v1/events?after="+seen, secretAnaOps, "", http.StatusTooManyRequests, "")

	resumed := a.openStream(t, secretAnaOps, http.Header{"Last-Event-ID": {seen}}, "")
	end := open[0].next(t, false)
	require.Equal(t, "end", end.kind)
	require.Contains(t, end.data, "replaced")
	require.Equal(t, "EOF", open[0].next(t, false).kind)
	require.Contains(t, a.logs.String(), "event stream replaced by a resume of the same token")
	a.refused(t, http.MethodGet, "/v1/events?after="+seen, secretAnaOps, "", http.StatusTooManyRequests, "")

	id := a.submit(t, "ana", "r1", nil)
	for i, s := range append(open[1:], resumed) {
		e := s.next(t, false)
		require.Equal(t, "event", e.kind, "stream %d", i+1)
		require.Contains(t, e.data, id, "stream %d", i+1)
	}

	// Another token's streams are its own: ben's resume replaces none of
	// ana-ops's.
	a.openStream(t, secretBen, http.Header{"Last-Event-ID": {seen}}, "")
	id = a.submit(t, "ana", "r2", nil)
	for i, s := range append(open[1:], resumed) {
		require.Contains(t, s.next(t, false).data, id, "stream %d", i+1)
	}
}
