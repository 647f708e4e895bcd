package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/testkit"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// Tokens bound to users, beside testTokens' three-field lines (which act
// for every user).
const (
	secretAnaPhone = "ana-phone-secret-0123456789"
	secretAnaCI    = "ana-ci-secret-0123456789"
	secretAnaOps   = "ana-ops-secret-0123456789"
	secretBen      = "ben-secret-0123456789"
)

const boundTokens = `
ana-phone submit ` + secretAnaPhone + ` ana
ana-ci submit ` + secretAnaCI + ` ana
ana-ops approve,operate ` + secretAnaOps + ` ana,dora
ben submit,approve,operate ` + secretBen + ` *
`

// clientFor is the Go client for secret, through the test's checked
// transport.
func (a *api) clientFor(t *testing.T, secret string) *client.Client {
	t.Helper()
	c, err := client.New(a.base, secret, client.WithHTTPClient(a.client))
	require.NoError(t, err)
	return c
}

func request(user, key string) model.SubmitRequest {
	return model.SubmitRequest{User: user, Key: key, Payload: `{"steps":[{"cost":1}]}`, CostBudget: 10, StepsMax: 5}
}

// requireRefusal checks err is an *client.Error of sentinel naming field.
func requireRefusal(t *testing.T, err error, sentinel error, field string) *client.Error {
	t.Helper()
	require.ErrorIs(t, err, sentinel)
	var e *client.Error
	require.True(t, errors.As(err, &e), "%v", err)
	require.Equal(t, field, e.Field, "%v", err)
	return e
}

// TestTokensActOnlyForTheirUsers: a token acts only for the users its
// line names, through every route: submitting for another user is 403;
// reading, listing, watching, following or acting on another user's task
// is 404 worded as for a task that does not exist; and nothing refused is
// written.
func TestTokensActOnlyForTheirUsers(t *testing.T) {
	a := setupAPI(t)
	ctx := context.Background()
	phone, ci, ops, ben := a.clientFor(t, secretAnaPhone), a.clientFor(t, secretAnaCI), a.clientFor(t, secretAnaOps), a.clientFor(t, secretBen)

	mine, err := phone.Submit(ctx, request("ana", "k1"))
	require.NoError(t, err)
	require.False(t, mine.Replay)
	theirs, err := ben.Submit(ctx, request("carol", "k1"))
	require.NoError(t, err)
	gated, version := a.paused(t, "carol", "g1")

	// A replay through another of ana's tokens matches: the actor is not
	// part of the request's hash.
	again, err := ci.Submit(ctx, request("ana", "k1"))
	require.NoError(t, err)
	require.Equal(t, client.SubmitResult{TaskID: mine.TaskID, Replay: true}, again)
	events, err := phone.Events(ctx, mine.TaskID)
	require.NoError(t, err)
	require.Len(t, events, 1)
	require.Equal(t, "ana-phone", events[0].Actor, "the actor is the token's name")
	require.Equal(t, "ana", events[0].User, "the task's user is beside it")

	rows := a.counts(t)
	_, err = phone.Submit(ctx, request("carol", "k2"))
	requireRefusal(t, err, client.ErrForbidden, "user")
	_, err = phone.SubmitMany(ctx, []model.SubmitRequest{request("ana", "k3"), request("carol", "k3")})
	requireRefusal(t, err, client.ErrForbidden, "tasks[1].user")

	unknown := requireRefusal(t, func() error { _, err := phone.Task(ctx, testkit.UnknownTask); return err }(), client.ErrNotFound, "id")
	for name, call := range map[string]func() error{
		"read":         func() error { _, err := phone.Task(ctx, theirs.TaskID); return err },
		"events":       func() error { _, err := phone.Events(ctx, theirs.TaskID); return err },
		"cancel":       func() error { _, err := phone.Cancel(ctx, theirs.TaskID); return err },
		"wait":         func() error { _, err := phone.WaitTask(ctx, theirs.TaskID, 0, time.Second); return err },
		"approve":      func() error { _, err := ops.Approve(ctx, gated, version); return err },
		"reject":       func() error { _, err := ops.Reject(ctx, gated, version); return err },
		"requeue":      func() error { _, err := ops.Requeue(ctx, theirs.TaskID, 1, 1); return err },
		"resolve":      func() error { _, err := ops.Resolve(ctx, theirs.TaskID, model.Failed); return err },
		"settle":       func() error { _, err := ops.SettleEffect(ctx, model.OperationID(theirs.TaskID, 0), true); return err },
		"cancel (ops)": func() error { _, err := ops.Cancel(ctx, theirs.TaskID); return err },
	} {
		t.Run(name, func(t *testing.T) {
			e := requireRefusal(t, call(), client.ErrNotFound, e404Field(name))
			if name == "read" || name == "events" || name == "cancel" || name == "wait" {
				require.Equal(t, strings.ReplaceAll(unknown.Message, testkit.UnknownTask, theirs.TaskID), e.Message,
					"another user's task is refused as a task that does not exist")
			}
		})
	}
	_, err = ops.SetLimits(ctx, client.Limits{DepthMax: 1})
	requireRefusal(t, err, client.ErrForbidden, "")
	_, err = ops.SetUserLimit(ctx, client.UserLimit{User: "carol", RunningMax: 1, DepthMax: model.Inherit})
	requireRefusal(t, err, client.ErrForbidden, "user")
	_, err = ops.AddSchedule(ctx, client.ScheduleSpec{User: "carol", Payload: `{"steps":[]}`, CostBudget: 1, StepsMax: 1, Period: time.Hour})
	requireRefusal(t, err, client.ErrForbidden, "user")
	require.Equal(t, rows, a.counts(t), "a refused request writes nothing")
	require.Equal(t, model.WaitingForApproval, a.taskState(t, gated))
	require.Equal(t, model.Queued, a.taskState(t, theirs.TaskID))

	// Listing shows only the token's users, whatever the filter.
	page, err := phone.List(ctx, client.ListOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{mine.TaskID}, taskIDs(page.Tasks))
	page, err = phone.List(ctx, client.ListOptions{User: "carol"})
	require.NoError(t, err)
	require.Empty(t, page.Tasks)
	page, err = ben.List(ctx, client.ListOptions{User: "carol"})
	require.NoError(t, err)
	require.Equal(t, []string{theirs.TaskID, gated}, taskIDs(page.Tasks))
	inspected, err := ops.Inspect(ctx)
	require.NoError(t, err)
	for _, in := range inspected {
		require.Contains(t, []string{"ana", "dora"}, in.Task.User)
	}

	// The event stream shows only the token's users' tasks' events.
	want, err := a.q.EventsSince(ctx, queue.EventFilter{Users: []string{"ana"}})
	require.NoError(t, err)
	got := follow(t, phone, 0, len(want))
	require.Len(t, got, len(want))
	for i, e := range got {
		require.Equal(t, want[i].Seq, e.Seq)
		require.Equal(t, "ana", e.User)
	}
	a.requireNoSecrets(t)
}

func e404Field(name string) string {
	if name == "settle" {
		return "op"
	}
	return "id"
}

func taskIDs(tasks []client.Task) []string {
	out := []string{}
	for _, t := range tasks {
		out = append(out, t.ID)
	}
	return out
}

func (a *api) taskState(t *testing.T, id string) model.State {
	t.Helper()
	task, err := a.q.Task(context.Background(), id)
	require.NoError(t, err)
	return task.State
}

var errEnough = errors.New("enough events")

// follow reads n events of the stream from after, then hangs up.
func follow(t *testing.T, c *client.Client, after int64, n int) []client.Event {
	t.Helper()
	var got []client.Event
	if n == 0 {
		return got
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a safety net
	defer cancel()
	_, err := c.Follow(ctx, after, func(e client.Event) error {
		got = append(got, e)
		if len(got) == n {
			return errEnough
		}
		return nil
	})
	require.ErrorIs(t, err, errEnough)
	return got
}

// TestTokenLinesWithoutUsers: a line of three fields acts for every user,
// and the server warns once naming each such token; --strict-tokens
// refuses the line.
func TestTokenLinesWithoutUsers(t *testing.T) {
	a := setupAPI(t)
	logs := a.logs.String()
	for _, name := range []string{"alice", "bob", "olga", "root"} {
		require.Equal(t, 1, strings.Count(logs, `"token":"`+name+`"`), "one warning for %s:\n%s", name, logs)
	}
	require.NotContains(t, logs, `"token":"ana-phone"`)
	_, err := ParseTokens(testTokens, true)
	require.ErrorContains(t, err, "tokens line 2: no USERS field")
	tokens, err := ParseTokens(boundTokens, true)
	require.NoError(t, err)
	require.Equal(t, Principal{Name: "ana-ops", Scopes: []string{"approve", "operate"}, Users: []string{"ana", "dora"}}, tokens[2].Principal())
	require.True(t, tokens[3].Principal().AllUsers())
}

// TestFailedAuthenticationIsSlowedPerHost: the second failure in a row
// from one host waits on the server's clock; a valid token from the same
// host is not slowed; the log names the host, never the secret.
func TestFailedAuthenticationIsSlowedPerHost(t *testing.T) {
	a := setupAPIWith(t, func(o *Options) { o.AuthDelay = 0 }) // zero: AuthDelayDefault
	const guess = "guessed-secret-0123456789"
	a.refused(t, http.MethodGet, "/v1/tasks", guess, "", http.StatusUnauthorized, "")
	answered := make(chan int, 1)
	go func() {
		status, _, _ := a.doNoCheck(http.MethodGet, "/v1/tasks", guess)
		answered <- status
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, a.clock.BlockUntilContext(ctx, 1), "the second failure waits on the clock")
	select {
	case <-answered:
		t.Fatal("answered before its delay")
	default:
	}
	page, err := a.clientFor(t, secretRoot).List(ctx, client.ListOptions{})
	require.NoError(t, err, "a valid token is not slowed")
	require.Empty(t, page.Tasks)
	a.clock.Advance(AuthDelayDefault)
	require.Equal(t, http.StatusUnauthorized, <-answered)
	logs := a.logs.String()
	require.Contains(t, logs, `"msg":"authentication failed","remote":"127.0.0.1"`)
	require.NotContains(t, logs, guess)
	require.Equal(t, []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second},
		delays(AuthDelayDefault, 7))
}

// delays are the delays of n failures in a row from one host.
func delays(base time.Duration, n int) []time.Duration {
	g := &authGate{base: base, clock: fixedClock()}
	var out []time.Duration
	for range n {
		out = append(out, g.failed("10.0.0.1"))
	}
	return out
}

// doNoCheck sends a request from another goroutine than the test's: it
// reports what it got rather than failing the test.
func (a *api) doNoCheck(method, path, secret string) (int, http.Header, error) {
	req, err := http.NewRequest(method, a.base+path, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header, nil
}

func fixedClock() clockwork.Clock { return clockwork.NewFakeClockAt(apiEpoch) }
