package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestErrorMatchesItsSentinel(t *testing.T) {
	cases := []struct {
		err  *Error
		want error
		not  error
	}{
		{&Error{Status: 400, Code: "bad_input", Field: "user"}, ErrBadInput, ErrConflict},
		{&Error{Status: 409, Code: "version_mismatch", Field: "version"}, ErrVersionMismatch, ErrNotFound},
		{&Error{Status: 409, Code: "version_mismatch"}, ErrConflict, ErrBadInput},
		{&Error{Status: 409, Code: "conflict", Field: "key"}, ErrConflict, ErrVersionMismatch},
		{&Error{Status: 429, Code: "queue_full"}, ErrQueueFull, ErrTooManyStreams},
		{&Error{Status: 429, Code: "too_many_streams"}, ErrTooManyStreams, ErrQueueFull},
		{&Error{Status: 404, Code: "not_found", Field: "id"}, ErrNotFound, ErrForbidden},
		{&Error{Status: 403}, ErrForbidden, ErrUnauthorized}, // no code: by status
		{&Error{Status: 503, Code: "timeout"}, ErrUnavailable, ErrBadInput},
	}
	for _, c := range cases {
		err := fmt.Errorf("wrapped: %w", c.err)
		require.ErrorIs(t, err, c.want, c.err.Error())
		require.False(t, errors.Is(err, c.not), c.err.Error())
	}
	require.Equal(t, "leasehold: 400 bad_input (field user): user is empty",
		(&Error{Status: 400, Code: "bad_input", Field: "user", Message: "user is empty"}).Error())
}

func TestNewRefusesBadBase(t *testing.T) {
	for _, base := range []string{"", "127.0.0.1:8080", "ftp://h", "http://", "http://h/?q=1"} {
		_, err := New(base, "s3cret-s3cret-s3cret")
		require.Error(t, err, base)
	}
	_, err := New("http://h", "has space")
	require.Error(t, err)
}

func TestTimeWire(t *testing.T) {
	var v struct{ At Time }
	require.NoError(t, json.Unmarshal([]byte(`{"At":""}`), &v))
	require.True(t, v.At.IsZero())
	require.NoError(t, json.Unmarshal([]byte(`{"At":"2026-03-01T09:00:00.5Z"}`), &v))
	require.Equal(t, time.Date(2026, 3, 1, 9, 0, 0, 5e8, time.UTC), v.At.Time)
	b, err := json.Marshal(Time{})
	require.NoError(t, err)
	require.Equal(t, `""`, string(b))
	require.Error(t, json.Unmarshal([]byte(`{"At":"yesterday"}`), &v))
}

// TestFollowReadsAStream checks the stream parser against a recorded
// stream: comments skipped, events in order, the end event reported with
// the last sequence number delivered. A follow from after an event is a
// resume and says so in Last-Event-ID.
func TestFollowReadsAStream(t *testing.T) {
	var gotAuth, gotAfter, gotResume string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotAfter, gotResume = r.Header.Get("Authorization"), r.URL.Query().Get("after"), r.Header.Get("Last-Event-ID")
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "retry: 1000\n\n: ping\n\n")
		fmt.Fprint(w, "id: 8\nevent: event\ndata: {\"seq\":8,\"task_id\":\"t-1\",\"kind\":\"submitted\",\"user\":\"ana\"}\n\n")
		fmt.Fprint(w, ": ping\n\nid: 9\nevent: event\ndata: {\"seq\":9,\"task_id\":\"t-1\",\"kind\":\"transition\"}\n\n")
		fmt.Fprint(w, "event: end\ndata: {\"reason\":\"shutdown\"}\n\n")
	}))
	defer srv.Close()
	c, err := New(srv.URL, "s3cret-s3cret-s3cret")
	require.NoError(t, err)
	var seen []int64
	last, err := c.Follow(context.Background(), 7, func(e Event) error {
		seen = append(seen, e.Seq)
		return nil
	})
	require.ErrorIs(t, err, ErrStreamEnded)
	require.Equal(t, int64(9), last)
	require.Equal(t, []int64{8, 9}, seen)

	// A follower that stops at an event has been given it: last names it,
	// so a resume from last does not repeat it.
	stop := errors.New("stop")
	last, err = c.Follow(context.Background(), 7, func(e Event) error { return stop })
	require.ErrorIs(t, err, stop)
	require.Equal(t, int64(8), last)
	require.Equal(t, "Bearer s3cret-s3cret-s3cret", gotAuth)
	require.Equal(t, "7", gotAfter)
	require.Equal(t, "7", gotResume)

	// A follow from the start is not a resume.
	_, err = c.Follow(context.Background(), 0, func(e Event) error { return stop })
	require.ErrorIs(t, err, stop)
	require.Equal(t, "0", gotAfter)
	require.Empty(t, gotResume)
}

// TestFollowRefusesAStreamGoingBack: an event at or below one already
// delivered is an error, never delivered twice.
func TestFollowRefusesAStreamGoingBack(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "id: 5\ndata: {\"seq\":5}\n\nid: 5\ndata: {\"seq\":5}\n\n")
	}))
	defer srv.Close()
	c, err := New(srv.URL, "s3cret-s3cret-s3cret")
	require.NoError(t, err)
	n := 0
	last, err := c.Follow(context.Background(), 0, func(Event) error { n++; return nil })
	require.ErrorContains(t, err, "went back")
	require.Equal(t, int64(5), last)
	require.Equal(t, 1, n)
}

func TestRefusalBecomesError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"error":"version 3 is stale","code":"version_mismatch","field":"version"}`)
	}))
	defer srv.Close()
	c, err := New(srv.URL+"/prefix/", "s3cret-s3cret-s3cret")
	require.NoError(t, err)
	_, err = c.Approve(context.Background(), "t-1", 3)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, Error{Status: 409, Code: "version_mismatch", Field: "version", Message: "version 3 is stale"}, *e)
	require.ErrorIs(t, err, ErrVersionMismatch)
}

// Reject names the version shown, as Approve does, and a stale one is
// ErrVersionMismatch (and ErrConflict).
func TestRejectSendsTheVersion(t *testing.T) {
	var got struct {
		path, body string
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.path, got.body = r.URL.Path, string(b)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"error":"reject task t-1 version 3: recorded version is 4","code":"version_mismatch","field":"version"}`)
	}))
	defer srv.Close()
	c, err := New(srv.URL, "s3cret-s3cret-s3cret")
	require.NoError(t, err)
	_, err = c.Reject(context.Background(), "t-1", 3)
	require.Equal(t, "/v1/tasks/t-1/reject", got.path)
	require.JSONEq(t, `{"version":3}`, got.body)
	require.ErrorIs(t, err, ErrVersionMismatch)
	require.ErrorIs(t, err, ErrConflict)
	require.NotErrorIs(t, err, ErrNotFound)
}

// TestRetryAfter: a 429's Retry-After, as seconds or as an HTTP date
// against the response's own Date (the package reads no clock), becomes
// Error.RetryAfter; what cannot be read, or is out of bounds, is 0.
func TestRetryAfter(t *testing.T) {
	date := "Sun, 06 Nov 1994 08:49:37 GMT"
	for _, c := range []struct {
		retry, date string
		want        time.Duration
	}{
		{"5", "", 5 * time.Second},
		{"0", "", 0},
		{"Sun, 06 Nov 1994 08:50:07 GMT", date, 30 * time.Second},
		{"Sun, 06 Nov 1994 08:50:07 GMT", "", 0},
		{"Sun, 06 Nov 1994 08:49:07 GMT", date, 0},
		{"-1", "", 0},
		{"86401", "", 0},
		{"soon", "", 0},
		{"", "", 0},
	} {
		h := http.Header{}
		if c.retry != "" {
			h.Set("Retry-After", c.retry)
		}
		if c.date != "" {
			h.Set("Date", c.date)
		}
		require.Equal(t, c.want, retryAfter(h), "Retry-After %q, Date %q", c.retry, c.date)
	}
}
