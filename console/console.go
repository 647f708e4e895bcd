package console

import (
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/httpapi"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/randomid"
)

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// cookieName names the session cookie.
const cookieName = "leasehold_session"

// Request bounds.
const (
	// formBytesMax bounds a form: a bulk submit of SubmitBatchMax small
	// requests, or one request with the largest payload.
	formBytesMax = 4 << 20
	// PageSizeDefault is the tasks shown per page when Options leaves it
	// zero.
	PageSizeDefault = 50
	// recentFailuresMax bounds the live view's list of failures.
	recentFailuresMax = 20
)

// Options configures New. API (or Backend) is required; every other
// field's zero value works.
type Options struct {
	// API is the HTTP API's server whose handler cores the console calls
	// (FromAPI): its tokens sign people in, and its scopes and user
	// bindings decide what each may see and do.
	API *httpapi.Server
	// Backend, when set, is called instead of API's cores (a test's
	// double, or a wrapper that counts calls).
	Backend Backend
	// Clock is the only source of time: session expiry and the ages the
	// pages show; nil is the API's clock (the real clock with a Backend
	// alone).
	Clock clockwork.Clock
	// Random is the source of session IDs and CSRF tokens; nil means
	// randomid.Reader, the operating system's cryptographic randomness.
	Random io.Reader
	// Idle and Lifetime expire a session after that long unused and that
	// long after sign-in; zero means DefaultIdle and DefaultLifetime.
	Idle, Lifetime time.Duration
	// PageSize is the tasks listed per page; zero means PageSizeDefault.
	PageSize int
	// SampleEvery is how often the console samples the queue's metrics
	// for the Live page's charts of the last hour, on Clock; zero means
	// DefaultSampleEvery. At least a second.
	SampleEvery time.Duration
	Logger      *slog.Logger // nil: discard
}

// Console is the console's HTTP handler; mount it at Prefix.
type Console struct {
	backend  Backend
	clock    clockwork.Clock
	sessions *sessions
	pageSize int
	log      *slog.Logger
	origin   *http.CrossOriginProtection
	pages    map[string]*template.Template
	mux      *http.ServeMux

	sampleEvery time.Duration
	history     *history
	stop        context.CancelFunc
	stopped     chan struct{} // closed when the sampling has ended
}

// New builds a console and starts its sampling of the queue's metrics
// (Close stops it).
func New(o Options) (*Console, error) {
	if o.Backend == nil && o.API == nil {
		return nil, errors.New("console: Options.API is required")
	}
	if o.Backend == nil {
		o.Backend = FromAPI(o.API)
	}
	if o.Clock == nil && o.API != nil {
		o.Clock = o.API.Clock()
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.Random == nil {
		o.Random = randomid.Reader
	}
	if o.Idle == 0 {
		o.Idle = DefaultIdle
	}
	if o.Lifetime == 0 {
		o.Lifetime = DefaultLifetime
	}
	if o.Idle < 0 || o.Lifetime < 0 || o.PageSize < 0 || o.PageSize > model.ListLimitMax {
		return nil, fmt.Errorf("console: Idle, Lifetime and PageSize must not be negative (PageSize at most %d)", model.ListLimitMax)
	}
	if o.PageSize == 0 {
		o.PageSize = PageSizeDefault
	}
	if o.SampleEvery == 0 {
		o.SampleEvery = DefaultSampleEvery
	}
	if o.SampleEvery < time.Second || o.SampleEvery > historyWindow {
		return nil, fmt.Errorf("console: SampleEvery must be between 1s and %s, got %s", historyWindow, o.SampleEvery)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	c := &Console{backend: o.Backend, clock: o.Clock, sessions: newSessions(o.Clock, o.Random, o.Idle, o.Lifetime),
		pageSize: o.PageSize, log: o.Logger, origin: http.NewCrossOriginProtection(), pages: pages}
	c.origin.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.log.Warn("console: cross-origin request refused", "method", r.Method, "path", r.URL.Path, "origin", r.Header.Get("Origin"))
		c.refuse(w, r, nil, http.StatusForbidden, "This request came from another origin and was refused; nothing was changed.")
	}))
	c.routes()
	c.sampleEvery = o.SampleEvery
	c.history = newHistory(min(samplesMax, int(historyWindow/o.SampleEvery)+1))
	ctx, stop := context.WithCancel(context.Background())
	c.stop, c.stopped = stop, make(chan struct{})
	go func() {
		defer close(c.stopped)
		c.sampleLoop(ctx)
	}()
	return c, nil
}

// Close stops the console's sampling of the queue's metrics and waits
// for it to end. The pages still answer, with the history taken so far.
func (c *Console) Close() {
	c.stop()
	<-c.stopped
}

// ServeHTTP serves the console: security headers on every answer, then the
// cross-origin check of every unsafe request before any route runs.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	c.origin.Handler(c.mux).ServeHTTP(w, r)
}

func (c *Console) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/tasks", http.StatusSeeOther)
	})
	m.HandleFunc("GET /ui/style.css", c.style)
	m.HandleFunc("GET /ui/signin", c.signinPage)
	m.HandleFunc("POST /ui/signin", c.signin)
	m.HandleFunc("POST /ui/signout", c.action(c.signout))
	m.HandleFunc("GET /ui/tasks", c.page(c.tasksPage))
	m.HandleFunc("GET /ui/tasks/{id}", c.page(c.taskPage))
	m.HandleFunc("POST /ui/tasks/{id}/cancel", c.action(c.cancel))
	m.HandleFunc("POST /ui/tasks/{id}/approve", c.action(c.approve))
	m.HandleFunc("POST /ui/tasks/{id}/reject", c.action(c.reject))
	m.HandleFunc("POST /ui/tasks/{id}/requeue", c.action(c.requeue))
	m.HandleFunc("POST /ui/tasks/{id}/resolve", c.action(c.resolve))
	m.HandleFunc("POST /ui/tasks/{id}/settle", c.action(c.settle))
	m.HandleFunc("GET /ui/approvals", c.page(c.approvalsPage))
	m.HandleFunc("GET /ui/inspect", c.page(c.inspectPage))
	m.HandleFunc("GET /ui/schedules", c.page(c.schedulesPage))
	m.HandleFunc("POST /ui/schedules", c.action(c.addSchedule))
	m.HandleFunc("POST /ui/schedules/{id}/remove", c.action(c.removeSchedule))
	m.HandleFunc("GET /ui/limits", c.page(c.limitsPage))
	m.HandleFunc("POST /ui/limits", c.action(c.setLimits))
	m.HandleFunc("POST /ui/limits/users", c.action(c.setUserLimit))
	m.HandleFunc("GET /ui/live", c.page(c.livePage))
	m.HandleFunc("GET /ui/submit", c.page(c.submitPage))
	m.HandleFunc("POST /ui/submit", c.action(c.submit))
	m.HandleFunc("POST /ui/submit/bulk", c.action(c.submitBulk))
	m.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		c.refuse(w, r, nil, http.StatusNotFound, "There is no such page.")
	})
	c.mux = m
}

// request is a signed-in request: its session and whom it acts as.
type request struct {
	id  string // the session ID, from the cookie
	ses *session
	p   Principal
}

// signedIn returns the request's signed-in session, if it has one.
func (c *Console) signedIn(r *http.Request) (*request, bool) {
	cookie, err := r.Cookie(cookieName)
	if err != nil {
		return nil, false
	}
	ses, ok := c.sessions.get(cookie.Value)
	if !ok || ses.principal == nil {
		return nil, false
	}
	return &request{id: cookie.Value, ses: ses, p: *ses.principal}, true
}

// page wraps a GET page: without a signed-in session it sends the browser
// to sign in.
func (c *Console) page(h func(w http.ResponseWriter, r *http.Request, req *request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req, ok := c.signedIn(r)
		if !ok {
			http.Redirect(w, r, "/ui/signin", http.StatusSeeOther)
			return
		}
		if err := h(w, r, req); err != nil {
			c.fail(w, r, req, err)
		}
	}
}

// action wraps a POST: it needs a signed-in session and the session's
// CSRF token in the form, and refuses with 403, before anything is done,
// when either is missing or wrong. The action runs to its end even if the
// browser goes away, so that a write gets a durable answer.
func (c *Console) action(h func(w http.ResponseWriter, r *http.Request, req *request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req, ok := c.signedIn(r)
		if !ok {
			c.refuse(w, r, nil, http.StatusForbidden, "You are not signed in (or your session expired); nothing was changed.")
			return
		}
		if !c.checkForm(w, r, req.ses) {
			return
		}
		r = r.WithContext(context.WithoutCancel(r.Context()))
		if err := h(w, r, req); err != nil {
			c.fail(w, r, req, err)
		}
	}
}

// checkForm reads the form (bounded) and compares its CSRF token with the
// session's in constant time. It answers the refusal itself.
func (c *Console) checkForm(w http.ResponseWriter, r *http.Request, ses *session) bool {
	r.Body = http.MaxBytesReader(w, r.Body, formBytesMax)
	if err := r.ParseForm(); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			c.refuse(w, r, nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("The form is larger than %d bytes; nothing was changed.", formBytesMax))
			return false
		}
		c.refuse(w, r, nil, http.StatusBadRequest, "The form could not be read; nothing was changed.")
		return false
	}
	got := r.PostForm.Get("csrf")
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(ses.csrf)) != 1 {
		c.log.Warn("console: form with a wrong CSRF token refused", "method", r.Method, "path", r.URL.Path)
		c.refuse(w, r, nil, http.StatusForbidden, "The form's security token did not match your session; nothing was changed. Reload the page and try again.")
		return false
	}
	return true
}

// setCookie gives the browser a session ID; an empty id clears it.
func setCookie(w http.ResponseWriter, r *http.Request, id string) {
	cookie := &http.Cookie{Name: cookieName, Value: id, Path: Prefix, HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode}
	if id == "" {
		cookie.MaxAge = -1
	}
	http.SetCookie(w, cookie)
}

// statusOf maps a Backend error to the HTTP status the API answers.
func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, model.ErrInvalidInput):
		return http.StatusBadRequest
	case errors.Is(err, model.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, model.ErrIdempotencyConflict), errors.Is(err, model.ErrVersionMismatch),
		errors.Is(err, model.ErrInvalidTransition), errors.Is(err, model.ErrEffectReceipted):
		return http.StatusConflict
	case errors.Is(err, model.ErrQueueFull):
		return http.StatusTooManyRequests
	}
	return http.StatusServiceUnavailable
}

// fail answers a Backend error as a page saying what was refused and why.
// A storage failure is logged and shown without its detail.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, req *request, err error) {
	status := statusOf(err)
	msg := oneLine(err.Error())
	switch status {
	case http.StatusServiceUnavailable:
		c.log.Warn("console: request failed in storage", "method", r.Method, "path", r.URL.Path, "error", msg)
		msg = "The queue's storage is unavailable; nothing is known to have changed. Retry later."
	case http.StatusNotFound:
		msg = "There is no such task, or it is not one your token may see."
	}
	c.refuse(w, r, req, status, "Refused: "+msg)
}

// refuse renders the refusal page with status.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, req *request, status int, msg string) {
	v := c.view(req, "Refused")
	v.Error = msg
	v.Back = backLink(r)
	c.render(w, status, "refused", v)
}

// backLink is where the refusal page's link leads: the task the request
// concerned, the settings page it came from, or the task list.
func backLink(r *http.Request) string {
	switch {
	case strings.HasPrefix(r.URL.Path, "/ui/schedules"):
		return "/ui/schedules"
	case strings.HasPrefix(r.URL.Path, "/ui/limits"):
		return "/ui/limits"
	}
	if id := r.PathValue("id"); id != "" && model.CheckTaskID(id) == nil {
		return "/ui/tasks/" + id
	}
	return "/ui/tasks"
}

// oneLine keeps the first line of a message, bounded.
func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

//go:embed templates/*.html.tmpl templates/style.css
var files embed.FS
