// Package httpapi is leasehold's HTTP JSON API over one queue: the routes
// of /v1, bearer tokens bound to users and their scopes, request bodies
// and their refusals, long-polls and the audit trail as Server-Sent
// Events, the OpenAPI document, /metrics for Prometheus and /healthz.
//
// The handlers' cores (Server.Submit, Server.List, Server.Approve, ...)
// are plain Go calls taking a Principal, so another face (the console)
// authorizes exactly as the API does.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/wire"
)

// Request bounds.
const (
	requestBytesMax = model.PayloadBytesMax + 16<<10 // a payload and the fields around it
	batchBytesMax   = 32 << 20                       // a batch of SubmitBatchMax ordinary submits
)

// Timeouts bound the server's connections and requests. The long-poll
// and the event stream are exempt from Request and Write (they lift the
// connection's write deadline and run outside the request timeout); every
// other route keeps both.
type Timeouts struct {
	// Request bounds an ordinary route's handling: past it the caller gets
	// 503 with code timeout (http.TimeoutHandler).
	Request time.Duration
	// ReadHeader, Read, Write and Idle are http.Server's timeouts.
	ReadHeader, Read, Write, Idle time.Duration
}

// DefaultTimeouts are the timeouts a server has unless WithTimeouts
// changes them.
func DefaultTimeouts() Timeouts {
	return Timeouts{Request: 10 * time.Second, ReadHeader: 5 * time.Second, Read: 15 * time.Second,
		Write: 20 * time.Second, Idle: 60 * time.Second}
}

// Server is the HTTP face of one queue.
type Server struct {
	q      *queue.Queue
	tokens []Token
	log    *slog.Logger
	clock  clockwork.Clock
	gate   *authGate
	// streamsMax bounds the event streams one token holds open.
	streamsMax int
	streamsMu  sync.Mutex
	streams    map[string][]*streamSlot // each token's open streams, oldest first
	// closing is cancelled when the server begins to shut down: open
	// long-polls and streams end on it.
	closing context.Context
	close   context.CancelFunc
	// mount, if set, is given the mux to add routes of its own (the
	// console).
	mount    func(*http.ServeMux)
	timeouts Timeouts
}

// Option changes a Server.
type Option func(*Server)

// WithClock runs waits, pings and the slowing of failed authentication on
// clock (the real clock by default).
func WithClock(clock clockwork.Clock) Option { return func(s *Server) { s.clock = clock } }

// WithAuthDelay sets the delay of a repeated failed authentication from
// one host (AuthDelayDefault by default; 0 disables the slowing).
func WithAuthDelay(d time.Duration) Option { return func(s *Server) { s.gate.base = d } }

// WithStreamsPerToken bounds the event streams one token holds open
// (StreamsPerTokenDefault by default).
func WithStreamsPerToken(n int) Option { return func(s *Server) { s.streamsMax = n } }

// WithTimeouts sets the server's timeouts (DefaultTimeouts by default);
// each must be positive.
func WithTimeouts(t Timeouts) Option { return func(s *Server) { s.timeouts = t } }

// WithMount lets mount add routes to the server's mux (the console at
// /ui/); they get neither the API's authentication nor its error bodies.
func WithMount(mount func(*http.ServeMux)) Option { return func(s *Server) { s.mount = mount } }

// New returns the server of q for tokens, logging requests (never a
// secret) to log. It warns once for each token whose line names no users.
func New(q *queue.Queue, tokens []Token, log *slog.Logger, opts ...Option) *Server {
	s := &Server{q: q, tokens: tokens, log: log, clock: clockwork.NewRealClock(), gate: &authGate{base: AuthDelayDefault},
		streamsMax: StreamsPerTokenDefault, streams: map[string][]*streamSlot{}, timeouts: DefaultTimeouts()}
	s.closing, s.close = context.WithCancel(context.Background())
	for _, opt := range opts {
		opt(s)
	}
	s.gate.clock = s.clock
	for _, t := range tokens {
		if t.implicit {
			log.Warn("token names no users: it acts for every user (add a USERS field, or serve --strict-tokens to refuse such lines)",
				"token", t.name)
		}
	}
	return s
}

// Authenticate returns the principal of the token whose secret is
// secret, presented from remoteAddr; ErrUnauthorized if there is none.
// A failure is logged with the remote host and never the secret, and a
// repeated failure from one host is answered only after a delay.
func (s *Server) Authenticate(ctx context.Context, secret, remoteAddr string) (Principal, error) {
	t, ok := match(s.tokens, secret)
	if ok {
		return t.Principal(), nil
	}
	host := hostOf(remoteAddr)
	delay := s.gate.failed(host)
	s.log.Warn("authentication failed", "remote", host, "delay_ms", delay.Milliseconds())
	s.gate.wait(ctx, delay)
	return Principal{}, ErrUnauthorized
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, code := classify(err)
	body := wire.Error{Error: oneLine(err.Error()), Code: code}
	var v *model.ValidationError
	var maxBytes *http.MaxBytesError
	var item *model.BatchItemError
	switch {
	case errors.As(err, &item) && errors.As(err, &v):
		body.Field = fmt.Sprintf("tasks[%d].%s", item.Index, v.Field)
	case errors.As(err, &item):
		body.Field = fmt.Sprintf("tasks[%d]", item.Index)
	case errors.As(err, &v):
		body.Field = v.Field
	case errors.As(err, &maxBytes):
		body.Field = "body"
	default:
		body.Field = refusedField(err, r)
	}
	switch status {
	case http.StatusInternalServerError:
		s.log.Error("request failed: the server is misconfigured", "method", r.Method, "path", r.URL.Path, "error", body.Error)
		body.Error = "the server is misconfigured (see its log); nothing was written"
	case http.StatusServiceUnavailable:
		s.log.Warn("request failed in storage", "method", r.Method, "path", r.URL.Path, "error", body.Error)
		body.Error = "storage unavailable; retry later"
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="leasehold"`)
	case http.StatusTooManyRequests:
		// A depth cap or the stream cap: room comes back by itself. The
		// schedules' cap does not (only removing one makes room), so a
		// refused schedule is told no time.
		if r.URL.Path != "/v1/schedules" {
			w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
		}
	}
	writeJSON(w, status, body)
}

// refusedField names what a refusal that is not a validation error is
// about: the field that conflicts or names another user, or the path
// value naming what was not found or is in the wrong state. "" for a
// queue-wide refusal (queue full), a missing scope and storage failures.
func refusedField(err error, r *http.Request) string {
	switch {
	case errors.Is(err, model.ErrVersionMismatch):
		return "version"
	case errors.Is(err, model.ErrIdempotencyConflict):
		return "key"
	case errors.As(err, new(*userRefusal)):
		var u *userRefusal
		errors.As(err, &u)
		return u.field
	case errors.Is(err, model.ErrNotFound), errors.Is(err, model.ErrInvalidTransition), errors.Is(err, model.ErrEffectReceipted):
		for _, name := range []string{"id", "op", "user"} {
			if r.PathValue(name) != "" {
				return name
			}
		}
	}
	return ""
}

// handler is one route's work, given the caller's principal.
type handler func(w http.ResponseWriter, r *http.Request, p Principal) error

// route wraps a handler with authentication, the body limit and request
// logging (which never includes the secret). The handler's context is
// not cancelled when the client goes away: the queue's writes run to the
// end (a cancelled transaction is rolled back asynchronously, and a
// caller must get a durable answer or an error, never a guess).
func (s *Server) route(scopes []string, h handler) http.HandlerFunc {
	return s.wrap(scopes, h, requestBytesMax, false)
}

// stream is route for the long-lived reads (long-polls and event
// streams): their context ends when the client goes away.
func (s *Server) stream(scopes []string, h handler) http.HandlerFunc {
	return s.wrap(scopes, h, requestBytesMax, true)
}

// wrap is route with a body limit of bodyMax. A principal holding none of
// scopes is refused before its request is read (the core checks again).
func (s *Server) wrap(scopes []string, h handler, bodyMax int64, cancellable bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := s.clock.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		actor := "-"
		defer func() {
			s.log.Info("request", "method", r.Method, "path", r.URL.Path, "status", rec.status, "actor", actor,
				"duration_ms", s.clock.Since(start).Milliseconds())
		}()
		p, err := s.Authenticate(r.Context(), bearer(r), r.RemoteAddr)
		if err != nil {
			s.fail(rec, r, err)
			return
		}
		actor = p.Name
		if _, err := authorize(r.Context(), p, scopes); err != nil {
			s.fail(rec, r, err)
			return
		}
		r.Body = http.MaxBytesReader(rec, r.Body, bodyMax)
		if !cancellable {
			r = r.WithContext(context.WithoutCancel(r.Context()))
		}
		if err := h(rec, r, p); err != nil {
			s.fail(rec, r, err)
		}
	}
}

// bearer is the secret of an "Authorization: Bearer SECRET" header (the
// scheme's name is case-insensitive, as HTTP says), or "".
func bearer(r *http.Request) string {
	scheme, secret, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return secret
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (to flush a
// stream and lift its write deadline).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// healthz answers 200 while the queue takes writes, and 503 with the
// storage failure's class (disk_full, busy, io_error, ...; see
// queue.ClassOf) while its probe fails or since a write failed in storage
// (see queue.Queue.Health).
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.q.Health(ctx); err != nil {
		class := string(queue.ClassOf(err))
		switch {
		case class != "":
		case errors.Is(err, context.DeadlineExceeded):
			class = "timeout"
		default:
			class = "unknown"
		}
		s.log.Warn("health check failed", "class", class, "error", oneLine(err.Error()))
		writeJSON(w, http.StatusServiceUnavailable, wire.Health{Status: "unavailable", Class: class})
		return
	}
	writeJSON(w, http.StatusOK, wire.Health{Status: "ok"})
}

// Handler is the routes: the /v1 API, /openapi.json, /metrics and
// /healthz (and what WithMount adds). Every route but the long-poll and
// the event stream runs under a request timeout; those two lift the
// connection's write deadline and end when the server shuts down.
func (s *Server) Handler() http.Handler {
	m := http.NewServeMux()
	m.Handle("POST /v1/tasks", s.route(submitScope, s.submit))
	m.Handle("GET /v1/tasks", s.route(anyScope, s.listTasks))
	m.Handle("POST /v1/tasks/batch", s.wrap(submitScope, s.submitBatch, batchBytesMax, false))
	m.Handle("GET /v1/tasks/{id}", s.stream(anyScope, s.getTask))
	m.Handle("GET /v1/tasks/{id}/events", s.route(anyScope, s.taskEvents))
	m.Handle("POST /v1/tasks/{id}/cancel", s.route(cancelScope, s.cancel))
	m.Handle("POST /v1/tasks/{id}/approve", s.route(approveScope, s.approve))
	m.Handle("POST /v1/tasks/{id}/reject", s.route(approveScope, s.reject))
	m.Handle("POST /v1/tasks/{id}/requeue", s.route(operateScope, s.requeue))
	m.Handle("POST /v1/tasks/{id}/resolve", s.route(operateScope, s.resolve))
	m.Handle("POST /v1/effects/{op}/settle", s.route(operateScope, s.settle))
	m.Handle("GET /v1/events", s.stream(anyScope, s.followEvents))
	m.Handle("GET /v1/inspect", s.route(operateScope, s.inspect))
	m.Handle("GET /v1/limits", s.route(operateScope, s.getLimits))
	m.Handle("PUT /v1/limits", s.route(operateScope, s.setLimits))
	m.Handle("PUT /v1/limits/users/{user}", s.route(operateScope, s.setUserLimit))
	m.Handle("GET /v1/schedules", s.route(operateScope, s.listSchedules))
	m.Handle("POST /v1/schedules", s.route(operateScope, s.addSchedule))
	m.Handle("DELETE /v1/schedules/{id}", s.route(operateScope, s.removeSchedule))
	m.HandleFunc("GET /openapi.json", serveDocument)
	reg := prometheus.NewRegistry()
	reg.MustRegister(&queueCollector{q: s.q, log: s.log})
	m.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}))
	m.HandleFunc("GET /healthz", s.healthz)
	if s.mount != nil {
		s.mount(m)
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { s.noRoute(m, w, r) })
	timed := http.TimeoutHandler(m, s.timeouts.Request, `{"error":"request timed out","code":"timeout"}`)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := dotSegment(r); err != nil {
			s.fail(w, r, err)
			return
		}
		if longLived(r) {
			m.ServeHTTP(w, r)
			return
		}
		timed.ServeHTTP(timeoutJSON{w}, r)
	})
}

// dotSegment refuses a path with a segment "." or ".." (percent-encoded
// or not), which names no resource of its own: the mux would redirect
// /v1/limits/users/.. to /v1/limits, a request for another resource, and
// a path value such as a user's name may never be one (model.CheckName).
func dotSegment(r *http.Request) error {
	for _, segment := range strings.Split(r.URL.EscapedPath(), "/") {
		if name, err := url.PathUnescape(segment); err == nil && model.IsDotSegment(name) {
			return &model.ValidationError{Field: "path", Problem: "a segment . or .. names no resource"}
		}
	}
	return nil
}

// timeoutJSON labels the request timeout's 503 as the JSON it is:
// http.TimeoutHandler writes its body with no Content-Type of its own.
type timeoutJSON struct{ http.ResponseWriter }

func (w timeoutJSON) WriteHeader(code int) {
	if code == http.StatusServiceUnavailable && w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (w timeoutJSON) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// longLived reports whether r is a long-poll or an event stream, exempt
// from the request timeout.
func longLived(r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	if r.URL.Path == "/v1/events" {
		return true
	}
	q := r.URL.Query()
	return strings.HasPrefix(r.URL.Path, "/v1/tasks/") && q.Has("wait")
}

// noRoute answers a request no route takes: 405 with Allow when the path
// is a route's under another method, else 404; both as JSON.
func (s *Server) noRoute(m *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = method
		if _, pattern := m.Handler(probe); pattern != "/" && pattern != "" {
			allow = append(allow, method)
		}
	}
	if len(allow) == 0 {
		s.fail(w, r, fmt.Errorf("%s: %w", model.Quote(r.URL.Path, 64), errNoRoute))
		return
	}
	if slices.Contains(allow, http.MethodGet) {
		allow = append(allow, http.MethodHead)
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	s.fail(w, r, fmt.Errorf("%s %s: %w (allowed: %s)", r.Method, model.Quote(r.URL.Path, 64), errMethodNotAllowed, strings.Join(allow, ", ")))
}

// Serve runs s on ln until ctx is done, then shuts it down gracefully:
// open long-polls answer and event streams end at once.
func Serve(ctx context.Context, ln net.Listener, s *Server) error {
	t := s.timeouts
	if t.Request <= 0 || t.ReadHeader <= 0 || t.Read <= 0 || t.Write <= 0 || t.Idle <= 0 {
		return fmt.Errorf("serve: every timeout must be positive, got %+v", t)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read,
		WriteTimeout: t.Write, IdleTimeout: t.Idle, MaxHeaderBytes: 16 << 10,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	srv.RegisterOnShutdown(s.close)
	s.log.Info("serving", "addr", ln.Addr().String(), "tokens", len(s.tokens))
	errs := make(chan error, 1)
	go func() { errs <- srv.Serve(ln) }()
	select {
	case err := <-errs:
		s.close()
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-errs; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// pathError is a refused path value, as a validation error of the path
// value's name with the check's problem.
func pathError(name string, err error) error {
	problem := err.Error()
	var v *model.ValidationError
	if errors.As(err, &v) {
		problem = v.Problem
	}
	return &model.ValidationError{Field: name, Problem: problem}
}

// oneLine is s with its runs of white space made one space.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
