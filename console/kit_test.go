package console

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/leasehold/leasehold/httpapi"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/worker"
)

// epoch is the fake clock's start.
var epoch = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// Secrets of the tokens the tests sign in with.
const (
	anaSecret      = "ana-submits-0123456789"
	bobSecret      = "bob-submits-0123456789"
	approverSecret = "approver-0123456789ab"
	operatorSecret = "operator-0123456789ab"
	anaOpsSecret   = "ana-operates-0123456789"
)

// bundle is a console over the HTTP API's cores and a real SQLite file,
// mounted beside the API on one mux behind a real HTTP server, as serve
// mounts them.
type bundle struct {
	q       *queue.Queue
	clock   *clockwork.FakeClock
	backend *countingBackend
	console *Console
	srv     *httptest.Server
	w       *worker.Worker
}

// tokenLines are the test's tokens file: NAME SCOPES SECRET USERS.
var tokenLines = strings.Join([]string{
	"ana submit " + anaSecret + " ana",
	"bob submit " + bobSecret + " bob",
	"approver approve " + approverSecret + " *",
	"operator operate,submit " + operatorSecret + " *",
	"ana-ops operate " + anaOpsSecret + " ana",
}, "\n")

// countingBackend counts sign-in checks, to show a forged sign-in never
// reaches one.
type countingBackend struct {
	Backend
	auths int
}

func (c *countingBackend) Authenticate(ctx context.Context, secret, remoteAddr string) (Principal, error) {
	c.auths++
	return c.Backend.Authenticate(ctx, secret, remoteAddr)
}

func setup(t testing.TB, edit ...func(*Options)) *bundle {
	t.Helper()
	return setupWith(t, nil, edit...)
}

// setupWith is setup with server, if not nil, changing the API's options
// after the tests' own.
func setupWith(t testing.TB, server func(*httpapi.Options), edit ...func(*Options)) *bundle {
	t.Helper()
	clock := clockwork.NewFakeClockAt(epoch)
	q, err := queue.Open(context.Background(), queue.Options{Path: filepath.Join(t.TempDir(), "console.db"), Clock: clock,
		IDs: model.NewSeededIDs(7), Validators: map[string]model.PayloadValidator{model.KindSynthetic: worker.ValidateSynthetic}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	tokens, err := httpapi.ParseTokens(tokenLines, true)
	require.NoError(t, err)
	ao := httpapi.Options{Queue: q, Tokens: tokens, Clock: clock, AuthDelay: -1}
	if server != nil {
		server(&ao)
	}
	api, err := httpapi.New(ao)
	require.NoError(t, err)
	b := &countingBackend{Backend: FromAPI(api)}
	o := Options{Backend: b, Clock: clock, Random: rand.NewChaCha8([32]byte{1}), Idle: 10 * time.Minute, Lifetime: time.Hour, PageSize: 3}
	for _, e := range edit {
		e(&o)
	}
	c, err := New(o)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	mux := http.NewServeMux()
	api.Mount(mux)
	mux.Handle(Prefix, c)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	w, err := worker.New(worker.Config{ID: "w1", Queue: q, Handler: worker.Synthetic{}, Service: &dedupService{results: map[string]string{}}, Clock: clock})
	require.NoError(t, err)
	return &bundle{q: q, clock: clock, backend: b, console: c, srv: srv, w: w}
}

// dedupService applies each operation once and answers a repeat with the
// first result.
type dedupService struct{ results map[string]string }

func (s *dedupService) Kind() worker.ServiceKind { return worker.Dedup }

func (s *dedupService) Call(_ context.Context, c worker.Call) (string, error) {
	if r, ok := s.results[c.OpID]; ok {
		return r, nil
	}
	s.results[c.OpID] = c.Effect + " done"
	return s.results[c.OpID], nil
}

func (s *dedupService) Status(context.Context, string, int64) (bool, string, error) {
	return false, "", worker.ErrNoStatus
}

// gatedPayload pauses at an approval gate between two steps.
const gatedPayload = `{"steps": [{"cost": 2, "duration_ms": 700}, {"cost": 1, "effect": "charge"}, {"approval": "manager"}, {"cost": 3, "duration_ms": 900}]}`

// submit submits a task directly to the queue.
func (b *bundle) submit(t testing.TB, user, key, payload string) string {
	t.Helper()
	res, err := b.q.Submit(context.Background(), model.SubmitRequest{User: user, Key: key, Payload: payload, CostBudget: 100, StepsMax: 10})
	require.NoError(t, err)
	return res.TaskID
}

// drive steps the worker, advancing the fake clock over its waits, until
// the task is in one of the states (or fails the test after a bound).
func (b *bundle) drive(t *testing.T, id string, states ...model.State) model.Task {
	t.Helper()
	for range 500 {
		task, err := b.q.Task(context.Background(), id)
		require.NoError(t, err)
		for _, s := range states {
			if task.State == s {
				return task
			}
		}
		r := b.w.Step(context.Background())
		if r.Wait > 0 {
			b.clock.Advance(r.Wait)
		}
	}
	t.Fatalf("task %s did not reach %v in 500 worker steps", id, states)
	return model.Task{}
}

// eventCount counts the audit trail's events: a refused request must not
// add one.
func (b *bundle) eventCount(t testing.TB) int {
	t.Helper()
	events, err := b.q.Events(context.Background(), "")
	require.NoError(t, err)
	return len(events)
}

// client is one browser: its session cookie, no redirects followed, and
// the Origin a browser sends with a form.
type client struct {
	t      testing.TB
	base   string
	origin string
	cookie string
	http   *http.Client
}

func (b *bundle) client(t testing.TB) *client {
	return &client{t: t, base: b.srv.URL, origin: b.srv.URL, http: &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// page is an answer: status, headers and body.
type page struct {
	status int
	header http.Header
	body   string
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF token in the page's forms.
func (p page) csrf(t testing.TB) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(p.body)
	require.NotNil(t, m, "no CSRF field in the page:\n%s", p.body)
	return m[1]
}

func (c *client) do(req *http.Request) page {
	c.t.Helper()
	if c.cookie != "" {
		req.AddCookie(&http.Cookie{Name: cookieName, Value: c.cookie})
	}
	res, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(c.t, err)
	for _, ck := range res.Cookies() {
		if ck.Name == cookieName {
			c.cookie = ck.Value
			if ck.MaxAge < 0 {
				c.cookie = ""
			}
		}
	}
	return page{status: res.StatusCode, header: res.Header, body: string(body)}
}

func (c *client) get(path string) page {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	require.NoError(c.t, err)
	return c.do(req)
}

func (c *client) post(path string, form url.Values) page {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if c.origin != "" {
		req.Header.Set("Origin", c.origin)
	}
	return c.do(req)
}

// signIn signs in with secret and checks that it worked.
func (c *client) signIn(secret string) {
	c.t.Helper()
	form := c.get("/ui/signin")
	require.Equal(c.t, http.StatusOK, form.status, form.body)
	res := c.post("/ui/signin", url.Values{"csrf": {form.csrf(c.t)}, "token": {secret}})
	require.Equal(c.t, http.StatusSeeOther, res.status, res.body)
	require.Equal(c.t, "/ui/tasks", res.header.Get("Location"))
}

// form posts to path with the CSRF token of the page at from.
func (c *client) form(from, path string, values url.Values) page {
	c.t.Helper()
	p := c.get(from)
	require.Equal(c.t, http.StatusOK, p.status, p.body)
	if values == nil {
		values = url.Values{}
	}
	values.Set("csrf", p.csrf(c.t))
	return c.post(path, values)
}

func taskPath(id string) string { return fmt.Sprintf("/ui/tasks/%s", id) }
