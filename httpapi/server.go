package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
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
	// ReadHeader, Read, Write and Idle are http.Server's timeouts, which
	// Serve sets.
	ReadHeader, Read, Write, Idle time.Duration
}

// DefaultTimeouts are the timeouts a server has where Options.Timeouts
// leaves a field zero.
func DefaultTimeouts() Timeouts {
	return Timeouts{Request: 10 * time.Second, ReadHeader: 5 * time.Second, Read: 15 * time.Second,
		Write: 20 * time.Second, Idle: 60 * time.Second}
}

// orDefault is t with each zero field replaced by d's; a negative field
// is an error naming it.
func (t Timeouts) orDefault(d Timeouts) (Timeouts, error) {
	fields := []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"Request", &t.Request, d.Request}, {"ReadHeader", &t.ReadHeader, d.ReadHeader}, {"Read", &t.Read, d.Read},
		{"Write", &t.Write, d.Write}, {"Idle", &t.Idle, d.Idle}}
	for _, f := range fields {
		switch {
		case *f.v < 0:
			return t, fmt.Errorf("httpapi: Timeouts.%s must not be negative, got %s", f.name, *f.v)
		case *f.v == 0:
			*f.v = f.def
		}
	}
	return t, nil
}

// Options configures New. Queue and Tokens are required; every other
// field's zero value works.
type Options struct {
	// Queue is the queue the API serves.
	Queue *queue.Queue
	// Tokens are the bearer tokens it accepts (ParseTokens, LoadTokens),
	// each bound to its scopes and users. New warns once for each token
	// whose line names no users.
	Tokens []Token
	// Validators, by kind, check the payload of each task the API is
	// asked to make, after the request's own fields are checked and
	// before the queue sees it: a submit, each item of a batch (the batch
	// refused, naming the item), and a schedule's template. A validator
	// is given the payload in canonical form. A refusal is a 400 naming
	// payload, or the path inside it that a *model.ValidationError names
	// (queue.PayloadError); nothing is written. Its messages must name
	// fields and rules, never quote a value. A kind without one leaves
	// its payloads to the queue's own check (queue.Options.Validators),
	// which runs in any case.
	Validators map[string]model.PayloadValidator
	// Kinds are the kinds /metrics names in its kind label (the depth by
	// kind, leasehold_queued_tasks_by_kind, and every outcome counter,
	// leasehold_completions_total and the rest) and GET /v1/metrics in
	// its counts by kind; the tasks of every other kind count as "other"
	// (wire.KindOther), so the kinds named stay bounded. Nil names the
	// kinds of Validators and the synthetic kind.
	Kinds []string
	// Logger receives one line per request and the refusals an operator
	// should see, never a secret or a payload; nil discards them.
	Logger *slog.Logger
	// Clock runs waits, pings and the slowing of failed authentication;
	// nil is the real clock.
	Clock clockwork.Clock
	// AuthDelay is the delay of a repeated failed authentication from one
	// host: zero is AuthDelayDefault, a negative one turns the slowing
	// off.
	AuthDelay time.Duration
	// StreamsPerToken bounds the event streams one token holds open; zero
	// is StreamsPerTokenDefault.
	StreamsPerToken int
	// Timeouts are the server's timeouts; a zero field is
	// DefaultTimeouts'.
	Timeouts Timeouts
}

// Server is the HTTP face of one queue.
type Server struct {
	q          *queue.Queue
	tokens     []Token
	validators map[string]model.PayloadValidator // by kind; Options.Validators
	kinds      []string                          // Options.Kinds, sorted
	log        *slog.Logger
	clock      clockwork.Clock
	gate       *authGate
	// streamsMax bounds the event streams one token holds open.
	streamsMax int
	streamsMu  sync.Mutex
	streams    map[string][]*streamSlot // each token's open streams, oldest first
	// closing is cancelled by Close: open long-polls and streams end on
	// it.
	closing  context.Context
	close    context.CancelFunc
	timeouts Timeouts
	handler  http.Handler // the routes, built once by New
}

// New returns the server of o.Queue for o.Tokens. A missing queue or
// token, two tokens sharing a name or a secret, or a negative bound, is
// an error naming it.
func New(o Options) (*Server, error) {
	if o.Queue == nil {
		return nil, errors.New("httpapi: Options.Queue is required")
	}
	if len(o.Tokens) == 0 {
		return nil, errors.New("httpapi: Options.Tokens is required: at least one token")
	}
	if err := distinct(o.Tokens); err != nil {
		return nil, err
	}
	if o.StreamsPerToken < 0 {
		return nil, fmt.Errorf("httpapi: Options.StreamsPerToken must not be negative, got %d", o.StreamsPerToken)
	}
	timeouts, err := o.Timeouts.orDefault(DefaultTimeouts())
	if err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	switch {
	case o.AuthDelay == 0:
		o.AuthDelay = AuthDelayDefault
	case o.AuthDelay < 0:
		o.AuthDelay = 0
	}
	if o.StreamsPerToken == 0 {
		o.StreamsPerToken = StreamsPerTokenDefault
	}
	s := &Server{q: o.Queue, tokens: slices.Clone(o.Tokens), validators: maps.Clone(o.Validators), kinds: metricKinds(o),
		log: o.Logger, clock: o.Clock,
		gate: &authGate{base: o.AuthDelay, clock: o.Clock}, streamsMax: o.StreamsPerToken,
		streams: map[string][]*streamSlot{}, timeouts: timeouts}
	s.closing, s.close = context.WithCancel(context.Background())
	for _, t := range s.tokens {
		if t.implicit {
			s.log.Warn("token names no users: it acts for every user (add a USERS field, or serve --strict-tokens to refuse such lines)",
				"token", t.name)
		}
	}
	s.handler = s.routes()
	return s, nil
}

// Close ends the server's open long-polls (each answers with the task as
// it is) and event streams (each sends "event: end"), and makes those
// opened later end at once; the other routes keep answering. Serve calls
// it when it shuts down; a program running its own http.Server registers
// it with RegisterOnShutdown, since http.Server.Shutdown waits for open
// requests.
func (s *Server) Close() { s.close() }

// Clock is the server's clock (Options.Clock).
func (s *Server) Clock() clockwork.Clock { return s.clock }

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

// Handler is the API alone: the /v1 routes, /openapi.json, /metrics and
// /healthz, a JSON 404 or 405 for any other request, and a 400 for a
// path with a "." or ".." segment. Every route but the long-poll and the
// event stream runs under the request timeout; those two lift the
// connection's write deadline and end when the server is closed.
func (s *Server) Handler() http.Handler { return s.handler }

// Mount adds the API to mux under its own paths: /v1/, /openapi.json,
// /metrics and /healthz, each served by Handler; the program's other
// routes (the console at /ui/, its own pages) stay its own. Like any
// ServeMux registration, it panics if mux already has a pattern for one
// of those paths. A ServeMux sends a request whose path has a "." or ".."
// segment to the cleaned path (307, method and body kept) before any
// handler sees it, which under /v1/ names another resource (PUT
// /v1/limits/users/.. is PUT /v1/limits): Serve refuses such a path, and a
// program with an http.Server of its own serves RefuseDotSegments(mux).
func (s *Server) Mount(mux *http.ServeMux) {
	for _, pattern := range mountPatterns {
		mux.Handle(pattern, s.handler)
	}
}

// mountPatterns are the paths Mount registers.
var mountPatterns = []string{"/v1/", "/openapi.json", "/metrics", "/healthz"}

// routes builds the API's handler (New calls it once: /metrics registers
// its collector in a registry of its own).
func (s *Server) routes() http.Handler {
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
	m.Handle("GET /v1/metrics", s.route(anyScope, s.metrics))
	m.Handle("GET /v1/limits", s.route(operateScope, s.getLimits))
	m.Handle("PUT /v1/limits", s.route(operateScope, s.setLimits))
	m.Handle("PUT /v1/limits/users/{user}", s.route(operateScope, s.setUserLimit))
	m.Handle("GET /v1/schedules", s.route(operateScope, s.listSchedules))
	m.Handle("POST /v1/schedules", s.route(operateScope, s.addSchedule))
	m.Handle("DELETE /v1/schedules/{id}", s.route(operateScope, s.removeSchedule))
	m.HandleFunc("GET /openapi.json", serveDocument)
	reg := prometheus.NewRegistry()
	reg.MustRegister(&queueCollector{q: s.q, log: s.log, kinds: s.kinds})
	m.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}))
	m.HandleFunc("GET /healthz", s.healthz)
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

// RefuseDotSegments answers a request under /v1/ whose path has a "." or
// ".." segment with the API's 400, before h (a ServeMux the API is
// mounted on, which would redirect it to another resource) sees it.
// Serve applies it; a program serving its mux itself wraps the mux in it.
func (s *Server) RefuseDotSegments(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			if err := dotSegment(r); err != nil {
				s.fail(w, r, err)
				return
			}
		}
		h.ServeHTTP(w, r)
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

// Serve runs h on ln with the server's timeouts until ctx is done, then
// shuts down gracefully: Close ends open long-polls and event streams at
// once, and the other requests are given up to shutdownGrace to finish.
// h is the program's handler with the server mounted on it (Mount), or
// nil for the API alone (Handler); a path under /v1/ with a "." or ".."
// segment is refused with 400 before h sees it.
func (s *Server) Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	if h == nil {
		h = s.handler
	}
	t := s.timeouts
	srv := &http.Server{Handler: s.RefuseDotSegments(h), ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read,
		WriteTimeout: t.Write, IdleTimeout: t.Idle, MaxHeaderBytes: headerBytesMax,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	srv.RegisterOnShutdown(s.Close)
	s.log.Info("serving", "addr", ln.Addr().String(), "tokens", len(s.tokens))
	errs := make(chan error, 1)
	go func() { errs <- srv.Serve(ln) }()
	select {
	case err := <-errs:
		s.Close()
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-errs; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Serve's bounds.
const (
	// headerBytesMax bounds a request's header.
	headerBytesMax = 16 << 10
	// shutdownGrace is how long Serve waits for open requests once its
	// context is done.
	shutdownGrace = 10 * time.Second
)

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

// metricKinds is the sorted, deduplicated list of the kinds /metrics
// names: Options.Kinds, or, when nil, the synthetic kind and those of
// Options.Validators. A kind named other is left out: its tasks are
// counted under the other label, which is theirs anyway.
func metricKinds(o Options) []string {
	kinds := slices.Clone(o.Kinds)
	if kinds == nil {
		kinds = append([]string{model.KindSynthetic}, slices.Collect(maps.Keys(o.Validators))...)
	}
	return wire.MetricKinds(kinds)
}
