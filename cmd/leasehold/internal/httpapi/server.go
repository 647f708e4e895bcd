// Package httpapi is leasehold's HTTP JSON API over one queue: the routes
// of /v1, bearer tokens and their scopes, request bodies and their
// refusals, /metrics for Prometheus and /healthz.
package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leasehold/leasehold/cmd/leasehold/internal/view"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// Request bounds.
const (
	requestBytesMax = model.PayloadBytesMax + 16<<10 // a payload and the fields around it
	requestTimeout  = 10 * time.Second
)

// Token is one credential: who it is (the actor in audit events) and what
// it may do. The secret is kept only as its SHA-256.
type Token struct {
	name   string
	scopes map[string]bool
	digest [32]byte
}

// ParseTokens reads "NAME SCOPE[,SCOPE...] SECRET" lines ('#' comments).
// Names must be valid actor names, scopes known, secrets at least 16
// characters, and no two tokens may share a name or a secret.
func ParseTokens(text string) ([]Token, error) {
	var out []Token
	names, secrets := map[string]bool{}, map[[32]byte]bool{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return nil, fmt.Errorf("tokens line %d: want NAME SCOPES SECRET", i+1)
		}
		if err := model.CheckName("token name", fields[0]); err != nil {
			return nil, fmt.Errorf("tokens line %d: %w", i+1, err)
		}
		t := Token{name: fields[0], scopes: map[string]bool{}, digest: sha256.Sum256([]byte(fields[2]))}
		for _, s := range strings.Split(fields[1], ",") {
			if s != model.ScopeSubmit && s != model.ScopeApprove && s != model.ScopeOperate {
				return nil, fmt.Errorf("tokens line %d: unknown scope %q (want submit, approve or operate)", i+1, s)
			}
			t.scopes[s] = true
		}
		if len(fields[2]) < 16 {
			return nil, fmt.Errorf("tokens line %d: secret shorter than 16 characters", i+1)
		}
		if names[t.name] || secrets[t.digest] {
			return nil, fmt.Errorf("tokens line %d: token name or secret used twice", i+1)
		}
		names[t.name], secrets[t.digest] = true, true
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, errors.New("no tokens configured")
	}
	return out, nil
}

// LoadTokens reads the tokens from a file, or from LEASEHOLD_TOKENS when
// file is "". Its errors name the --tokens flag.
func LoadTokens(file string) ([]Token, error) {
	if file != "" {
		st, err := os.Stat(file)
		if err != nil {
			return nil, fmt.Errorf("--tokens: %w", err)
		}
		if st.Size() > 1<<20 {
			return nil, fmt.Errorf("--tokens: %s is larger than 1 MiB", file)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--tokens: %w", err)
		}
		return ParseTokens(string(b))
	}
	if env := os.Getenv("LEASEHOLD_TOKENS"); env != "" {
		return ParseTokens(strings.ReplaceAll(env, ";", "\n"))
	}
	return nil, errors.New("--tokens: required (a file of NAME SCOPES SECRET lines, or LEASEHOLD_TOKENS)")
}

// Server is the HTTP face of one queue.
type Server struct {
	q      *queue.Queue
	tokens []Token
	log    *slog.Logger
}

// New returns the server of q for tokens, logging requests (never a
// secret) to log.
func New(q *queue.Queue, tokens []Token, log *slog.Logger) *Server {
	return &Server{q: q, tokens: tokens, log: log}
}

// authenticate finds the token presented in the Authorization header
// ("Bearer SECRET"; the scheme's name is case-insensitive, as HTTP says).
// Each configured secret's digest is compared in constant time, all of
// them every time, so timing says nothing about which came close.
func (s *Server) authenticate(r *http.Request) (Token, bool) {
	scheme, secret, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return Token{}, false
	}
	digest := sha256.Sum256([]byte(secret))
	var found Token
	matched := 0
	for _, t := range s.tokens {
		if subtle.ConstantTimeCompare(digest[:], t.digest[:]) == 1 {
			found, matched = t, matched+1
		}
	}
	return found, matched == 1
}

// apiError is the JSON body of every refusal.
type apiError struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	var maxBytes *http.MaxBytesError
	switch {
	case errors.As(err, &maxBytes):
		return http.StatusRequestEntityTooLarge
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

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	body := apiError{Error: oneLine(err.Error())}
	var v *model.ValidationError
	var maxBytes *http.MaxBytesError
	switch {
	case errors.As(err, &v):
		body.Field = v.Field
	case errors.As(err, &maxBytes):
		body.Field = "body"
	default:
		body.Field = refusedField(err, r)
	}
	if status == http.StatusServiceUnavailable {
		s.log.Warn("request failed in storage", "method", r.Method, "path", r.URL.Path, "error", body.Error)
		body.Error = "storage unavailable; retry later"
	}
	writeJSON(w, status, body)
}

// refusedField names what a refusal that is not a validation error is
// about: the field that conflicts, or the path value naming what was not
// found or is in the wrong state. "" for a queue-wide refusal (queue full)
// and for storage failures.
func refusedField(err error, r *http.Request) string {
	switch {
	case errors.Is(err, model.ErrVersionMismatch):
		return "version"
	case errors.Is(err, model.ErrIdempotencyConflict):
		return "key"
	case errors.Is(err, model.ErrNotFound), errors.Is(err, model.ErrInvalidTransition), errors.Is(err, model.ErrEffectReceipted):
		for _, name := range []string{"id", "op", "user"} {
			if r.PathValue(name) != "" {
				return name
			}
		}
	}
	return ""
}

// handler is one route's work, given the caller's token.
type handler func(w http.ResponseWriter, r *http.Request, who Token) error

// route wraps a handler with authentication, scope checks, the body limit
// and request logging (which never includes the token).
func (s *Server) route(scopes []string, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		actor := "-"
		defer func() {
			s.log.Info("request", "method", r.Method, "path", r.URL.Path, "status", rec.status, "actor", actor,
				"duration_ms", time.Since(start).Milliseconds())
		}()
		who, ok := s.authenticate(r)
		if !ok {
			rec.Header().Set("WWW-Authenticate", `Bearer realm="leasehold"`)
			writeJSON(rec, http.StatusUnauthorized, apiError{Error: "a valid bearer token is required"})
			return
		}
		actor = who.name
		used := ""
		for _, sc := range scopes {
			if who.scopes[sc] && used == "" {
				used = sc
			}
		}
		if used == "" {
			writeJSON(rec, http.StatusForbidden, apiError{Error: fmt.Sprintf("token %s lacks the %s scope", who.name, strings.Join(scopes, " or "))})
			return
		}
		r.Body = http.MaxBytesReader(rec, r.Body, requestBytesMax)
		// The queue's writes run to the end even if the client goes away:
		// a cancelled transaction is rolled back asynchronously, and a
		// caller must get a durable answer or an error, never a guess.
		r = r.WithContext(model.WithScope(context.WithoutCancel(r.Context()), used))
		if err := h(rec, r, who); err != nil {
			s.fail(rec, r, err)
		}
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// taskID reads and checks the {id} path value.
func taskID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if err := model.CheckTaskID(id); err != nil {
		return "", pathError("id", err)
	}
	return id, nil
}

// submitBody is POST /v1/tasks.
type submitBody struct {
	User       string          `json:"user"`
	Key        string          `json:"key"`
	Payload    json.RawMessage `json:"payload"`
	CostBudget int64           `json:"cost_budget"`
	StepsMax   int             `json:"steps_max"`
	Priority   int             `json:"priority"`
	RunAt      string          `json:"run_at"`
	Deadline   string          `json:"deadline"`
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request, _ Token) error {
	var b submitBody
	if err := decode(r, &b, submitRanges); err != nil {
		return err
	}
	req := model.SubmitRequest{User: b.User, Key: b.Key, Payload: string(b.Payload), CostBudget: b.CostBudget,
		StepsMax: b.StepsMax, Priority: b.Priority}
	var err error
	if req.RunAt, err = view.ParseTime("run_at", b.RunAt); err != nil {
		return err
	}
	if req.Deadline, err = view.ParseTime("deadline", b.Deadline); err != nil {
		return err
	}
	res, err := s.q.Submit(r.Context(), req)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if res.Replay {
		status = http.StatusOK
	}
	writeJSON(w, status, map[string]any{"task_id": res.TaskID, "replay": res.Replay})
	return nil
}

func (s *Server) getTask(w http.ResponseWriter, r *http.Request, _ Token) error {
	id, err := taskID(r)
	if err != nil {
		return err
	}
	t, err := s.q.Task(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view.TaskOf(t))
	return nil
}

func (s *Server) taskEvents(w http.ResponseWriter, r *http.Request, _ Token) error {
	id, err := taskID(r)
	if err != nil {
		return err
	}
	if _, err := s.q.Task(r.Context(), id); err != nil {
		return err
	}
	events, err := s.q.Events(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view.All(events, view.EventOf))
	return nil
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request, who Token) error {
	id, err := taskID(r)
	if err != nil {
		return err
	}
	t, err := s.q.Cancel(r.Context(), id, who.name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view.TaskOf(t))
	return nil
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request, who Token) error {
	id, err := taskID(r)
	if err != nil {
		return err
	}
	var b struct {
		Version *int64 `json:"version"`
	}
	if err := decode(r, &b, approveRanges); err != nil {
		return err
	}
	if b.Version == nil {
		return &model.ValidationError{Field: "version", Problem: "required: the version recorded at the gate"}
	}
	if err := checkRange(approveRanges, "version", *b.Version); err != nil {
		return err
	}
	if err := s.q.Approve(r.Context(), id, *b.Version, who.name); err != nil {
		return err
	}
	return s.getTask(w, r, who)
}

func (s *Server) reject(w http.ResponseWriter, r *http.Request, who Token) error {
	id, err := taskID(r)
	if err != nil {
		return err
	}
	if err := s.q.Reject(r.Context(), id, who.name); err != nil {
		return err
	}
	return s.getTask(w, r, who)
}

func (s *Server) requeue(w http.ResponseWriter, r *http.Request, who Token) error {
	id, err := taskID(r)
	if err != nil {
		return err
	}
	var b struct {
		GrantCost  *int64 `json:"grant_cost"`
		GrantSteps *int   `json:"grant_steps"`
	}
	if err := decode(r, &b, requeueRanges); err != nil {
		return err
	}
	if b.GrantCost == nil || b.GrantSteps == nil {
		return &model.ValidationError{Field: "grant_cost", Problem: "grant_cost and grant_steps are required (0 grants nothing)"}
	}
	if err := s.q.Requeue(r.Context(), id, model.Grant{Cost: *b.GrantCost, Steps: *b.GrantSteps}, who.name); err != nil {
		return err
	}
	return s.getTask(w, r, who)
}

func (s *Server) resolve(w http.ResponseWriter, r *http.Request, who Token) error {
	id, err := taskID(r)
	if err != nil {
		return err
	}
	var b struct {
		As string `json:"as"`
	}
	if err := decode(r, &b, noIntegerFields); err != nil {
		return err
	}
	if err := s.q.Resolve(r.Context(), id, model.State(b.As), who.name); err != nil {
		return err
	}
	return s.getTask(w, r, who)
}

func (s *Server) settle(w http.ResponseWriter, r *http.Request, who Token) error {
	op := r.PathValue("op")
	if err := model.CheckOperationID(op); err != nil {
		return pathError("op", err)
	}
	var b struct {
		Applied *bool `json:"applied"`
	}
	if err := decode(r, &b, noIntegerFields); err != nil {
		return err
	}
	if b.Applied == nil {
		return &model.ValidationError{Field: "applied", Problem: "required: true or false, as the provider reports"}
	}
	if err := s.q.SettleEffect(r.Context(), op, *b.Applied, who.name); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"op_id": op, "applied": *b.Applied, "by": who.name})
	return nil
}

func (s *Server) inspect(w http.ResponseWriter, r *http.Request, _ Token) error {
	out, err := view.Inspect(r.Context(), s.q, time.Now())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getLimits(w http.ResponseWriter, r *http.Request, _ Token) error {
	limits, users, err := s.q.Limits(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view.LimitsOf(limits, users))
	return nil
}

// setLimits replaces the limits (PUT /v1/limits) or one user's (PUT
// /v1/limits/users/{user}).
func (s *Server) setLimits(w http.ResponseWriter, r *http.Request, who Token) error {
	var l view.Limits
	if err := decode(r, &l, limitsRanges); err != nil {
		return err
	}
	if err := s.q.SetLimits(r.Context(), model.Limits(l), who.name); err != nil {
		return err
	}
	return s.getLimits(w, r, who)
}

func (s *Server) setUserLimit(w http.ResponseWriter, r *http.Request, who Token) error {
	var b struct {
		RunningMax *int `json:"running_max"`
		DepthMax   *int `json:"depth_max"`
	}
	if err := decode(r, &b, userLimitRanges); err != nil {
		return err
	}
	u := model.UserLimit{User: r.PathValue("user"), RunningMax: model.Inherit, DepthMax: model.Inherit}
	if b.RunningMax != nil {
		u.RunningMax = *b.RunningMax
	}
	if b.DepthMax != nil {
		u.DepthMax = *b.DepthMax
	}
	if err := s.q.SetUserLimit(r.Context(), u, who.name); err != nil {
		return err
	}
	return s.getLimits(w, r, who)
}

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request, _ Token) error {
	schedules, err := s.q.Schedules(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view.All(schedules, view.ScheduleOf))
	return nil
}

func (s *Server) addSchedule(w http.ResponseWriter, r *http.Request, who Token) error {
	var b struct {
		User       string          `json:"user"`
		Payload    json.RawMessage `json:"payload"`
		CostBudget int64           `json:"cost_budget"`
		StepsMax   int             `json:"steps_max"`
		Priority   int             `json:"priority"`
		Origin     string          `json:"origin"`
		PeriodMs   int64           `json:"period_ms"`
	}
	if err := decode(r, &b, scheduleRanges); err != nil {
		return err
	}
	// Checked before the conversion to a duration, which would overflow.
	if err := checkRange(scheduleRanges, "period_ms", b.PeriodMs); err != nil {
		return err
	}
	origin, err := view.ParseTime("origin", b.Origin)
	if err != nil {
		return err
	}
	sch, err := s.q.AddSchedule(r.Context(), model.ScheduleSpec{User: b.User, Payload: string(b.Payload),
		CostBudget: b.CostBudget, StepsMax: b.StepsMax, Priority: b.Priority, Origin: origin,
		Period: durationMs(b.PeriodMs)}, who.name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, view.ScheduleOf(sch))
	return nil
}

func (s *Server) removeSchedule(w http.ResponseWriter, r *http.Request, who Token) error {
	id := r.PathValue("id")
	if err := model.CheckName("schedule", id); err != nil {
		return pathError("id", err)
	}
	if err := s.q.RemoveSchedule(r.Context(), id, who.name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

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
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "class": class})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// Handler is the routes: the /v1 API, /metrics and /healthz.
func (s *Server) Handler() http.Handler {
	reads := []string{model.ScopeSubmit, model.ScopeApprove, model.ScopeOperate}
	submit, approve, operate := []string{model.ScopeSubmit}, []string{model.ScopeApprove}, []string{model.ScopeOperate}
	m := http.NewServeMux()
	m.Handle("POST /v1/tasks", s.route(submit, s.submit))
	m.Handle("GET /v1/tasks/{id}", s.route(reads, s.getTask))
	m.Handle("GET /v1/tasks/{id}/events", s.route(reads, s.taskEvents))
	m.Handle("POST /v1/tasks/{id}/cancel", s.route([]string{model.ScopeSubmit, model.ScopeOperate}, s.cancel))
	m.Handle("POST /v1/tasks/{id}/approve", s.route(approve, s.approve))
	m.Handle("POST /v1/tasks/{id}/reject", s.route(approve, s.reject))
	m.Handle("POST /v1/tasks/{id}/requeue", s.route(operate, s.requeue))
	m.Handle("POST /v1/tasks/{id}/resolve", s.route(operate, s.resolve))
	m.Handle("POST /v1/effects/{op}/settle", s.route(operate, s.settle))
	m.Handle("GET /v1/inspect", s.route(operate, s.inspect))
	m.Handle("GET /v1/limits", s.route(operate, s.getLimits))
	m.Handle("PUT /v1/limits", s.route(operate, s.setLimits))
	m.Handle("PUT /v1/limits/users/{user}", s.route(operate, s.setUserLimit))
	m.Handle("GET /v1/schedules", s.route(operate, s.listSchedules))
	m.Handle("POST /v1/schedules", s.route(operate, s.addSchedule))
	m.Handle("DELETE /v1/schedules/{id}", s.route(operate, s.removeSchedule))
	reg := prometheus.NewRegistry()
	reg.MustRegister(&queueCollector{q: s.q, log: s.log})
	m.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}))
	m.HandleFunc("GET /healthz", s.healthz)
	return http.TimeoutHandler(m, requestTimeout, `{"error":"request timed out"}`)
}

// Serve runs s on ln until ctx is done, then shuts it down gracefully.
func Serve(ctx context.Context, ln net.Listener, s *Server) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second,
		WriteTimeout: 20 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	s.log.Info("serving", "addr", ln.Addr().String(), "tokens", len(s.tokens))
	errs := make(chan error, 1)
	go func() { errs <- srv.Serve(ln) }()
	select {
	case err := <-errs:
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
