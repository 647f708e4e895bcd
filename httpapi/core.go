package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
	"github.com/leasehold/leasehold/wire"
)

// The handler cores: what each route does once its request is read, as
// plain Go calls taking the caller's Principal. Each checks the scope and
// the user binding before it touches the queue: ErrForbidden for a
// missing scope or a submit for another user, model.ErrNotFound (worded
// as for a task that does not exist) for another user's task, so that IDs
// cannot be probed. The actor recorded is the principal's name.

// Scope sets of the routes.
var (
	anyScope     = []string{model.ScopeSubmit, model.ScopeApprove, model.ScopeOperate}
	submitScope  = []string{model.ScopeSubmit}
	cancelScope  = []string{model.ScopeSubmit, model.ScopeOperate}
	approveScope = []string{model.ScopeApprove}
	operateScope = []string{model.ScopeOperate}
)

// authorize returns ctx carrying the first of scopes the principal holds
// (the scope the audit trail records) and its name as the actor, or
// ErrForbidden when it holds none.
func authorize(ctx context.Context, p Principal, scopes []string) (context.Context, error) {
	for _, sc := range scopes {
		if p.Can(sc) {
			return model.WithActor(model.WithScope(ctx, sc), p.Name), nil
		}
	}
	return ctx, fmt.Errorf("token %s lacks the %s scope: %w", p.Name, strings.Join(scopes, " or "), ErrForbidden)
}

// notFound is the refusal of a task the principal may not see, worded as
// the queue words a task that does not exist.
func notFound(id string) error { return fmt.Errorf("task %s: %w", id, model.ErrNotFound) }

// visibleTask reads a task the principal may see.
func (s *Server) visibleTask(ctx context.Context, p Principal, id string) (model.Task, error) {
	if err := model.CheckTaskID(id); err != nil {
		return model.Task{}, pathError("id", err)
	}
	t, err := s.q.Task(ctx, id)
	if err != nil {
		return model.Task{}, err
	}
	if !p.ActsFor(t.User) {
		return model.Task{}, notFound(id)
	}
	return t, nil
}

// forUser refuses a principal acting for a user its token does not name.
// A user that is not a valid user ID is left for the queue to refuse
// (400, naming the field).
func forUser(p Principal, field, user string) error {
	if p.ActsFor(user) || model.CheckName("user", user) != nil {
		return nil
	}
	return &userRefusal{field: field, token: p.Name, user: user}
}

// userRefusal is ErrForbidden for acting for another user, naming the
// field that named the user.
type userRefusal struct{ field, token, user string }

func (e *userRefusal) Error() string {
	return fmt.Sprintf("%s: token %s does not act for user %s", e.field, e.token, model.Quote(e.user, 64))
}

func (e *userRefusal) Unwrap() error { return ErrForbidden }

// Submit submits one task for a user the principal acts for.
func (s *Server) Submit(ctx context.Context, p Principal, req model.SubmitRequest) (model.SubmitResult, error) {
	ctx, err := authorize(ctx, p, submitScope)
	if err != nil {
		return model.SubmitResult{}, err
	}
	if err := forUser(p, "user", req.User); err != nil {
		return model.SubmitResult{}, err
	}
	if err := s.checkRequest(req); err != nil {
		return model.SubmitResult{}, err
	}
	return s.q.Submit(ctx, req)
}

// SubmitMany submits a batch in one transaction; an item for a user the
// principal does not act for refuses the batch naming its index.
func (s *Server) SubmitMany(ctx context.Context, p Principal, reqs []model.SubmitRequest) ([]model.SubmitResult, error) {
	ctx, err := authorize(ctx, p, submitScope)
	if err != nil {
		return nil, err
	}
	for i, r := range reqs {
		if err := forUser(p, fmt.Sprintf("tasks[%d].user", i), r.User); err != nil {
			return nil, err
		}
	}
	for i, r := range reqs {
		if err := s.checkRequest(r); err != nil {
			return nil, &model.BatchItemError{Index: i, Err: err}
		}
	}
	return s.q.SubmitMany(ctx, reqs)
}

// checkRequest runs the validator of req's kind (Options.Validators), if
// it has one, once the request's own fields pass the queue's intake rules
// (the queue checks them again, and refuses first what they refuse).
func (s *Server) checkRequest(req model.SubmitRequest) error {
	if len(s.validators) == 0 {
		return nil
	}
	n, err := s.q.Normalize(req)
	if err != nil {
		return err
	}
	return s.checkPayload(n.Kind, n.Payload)
}

// checkSchedule runs the validator of a schedule's kind, if it has one,
// on its template's payload.
func (s *Server) checkSchedule(spec model.ScheduleSpec) error {
	if len(s.validators) == 0 {
		return nil
	}
	spec, err := s.q.ScheduleDefaults(spec).Validate()
	if err != nil {
		return err
	}
	return s.checkPayload(spec.Kind, spec.Payload)
}

// checkPayload runs kind's validator, if it has one, on a canonical
// payload.
func (s *Server) checkPayload(kind, payload string) error {
	validate := s.validators[kind]
	if validate == nil {
		return nil
	}
	if err := validate(json.RawMessage(payload)); err != nil {
		return queue.PayloadError(err)
	}
	return nil
}

// Task returns a task the principal may see.
func (s *Server) Task(ctx context.Context, p Principal, id string) (model.Task, error) {
	if _, err := authorize(ctx, p, anyScope); err != nil {
		return model.Task{}, err
	}
	return s.visibleTask(ctx, p, id)
}

// WaitMax bounds a long-poll's wait.
const WaitMax = 60 * time.Second

// WaitTask returns a task the principal may see as soon as it has an
// event past afterSeq, or when wait (at most WaitMax) runs out on the
// server's clock or the server shuts down, unchanged; with the sequence
// number of its latest event.
func (s *Server) WaitTask(ctx context.Context, p Principal, id string, afterSeq int64, wait time.Duration) (model.Task, int64, error) {
	if _, err := authorize(ctx, p, anyScope); err != nil {
		return model.Task{}, 0, err
	}
	if wait <= 0 || wait > WaitMax {
		return model.Task{}, 0, &model.ValidationError{Field: "wait", Problem: fmt.Sprintf("must be more than 0s and at most %s, got %s", WaitMax, wait)}
	}
	if afterSeq < 0 {
		return model.Task{}, 0, &model.ValidationError{Field: "after_seq", Problem: fmt.Sprintf("must be 0 or more, got %d", afterSeq)}
	}
	if _, err := s.visibleTask(ctx, p, id); err != nil {
		return model.Task{}, 0, err
	}
	wctx, cancel := withTimeout(ctx, s.clock, wait)
	defer cancel()
	defer context.AfterFunc(s.closing, cancel)()
	if _, err := s.q.WaitEvents(wctx, queue.EventFilter{TaskID: id, After: afterSeq, Limit: 1}); err != nil && wctx.Err() == nil {
		return model.Task{}, 0, err
	}
	// The number first, then the record: the record is at least as new.
	seq, err := s.q.LastEventSeq(ctx, id)
	if err != nil {
		return model.Task{}, 0, err
	}
	t, err := s.q.Task(ctx, id)
	return t, seq, err
}

// ListFilter selects a page of tasks for List.
type ListFilter struct {
	State        model.State // "": every state
	User         string      // "": every user the principal may act for
	CreatedFrom  time.Time
	CreatedUntil time.Time // exclusive
	ScheduleID   string
	Kind         string // "": every kind
	After        string // a page's Next; "": from the start
	Limit        int    // 0: model.ListLimitDefault
	// Newest lists the newest task first, each page's Next leading to
	// older tasks; otherwise the oldest first.
	Newest bool
}

// Page is one page of tasks and the cursor of the next ("" at the end).
type Page struct {
	Tasks []model.Task
	Next  string
}

// List returns a page of the tasks of the users the principal acts for.
// A user filter naming another user lists nothing.
func (s *Server) List(ctx context.Context, p Principal, f ListFilter) (Page, error) {
	if _, err := authorize(ctx, p, anyScope); err != nil {
		return Page{}, err
	}
	var after int64
	if f.After != "" {
		n, err := strconv.ParseInt(f.After, 10, 64)
		if err != nil || n < 1 {
			return Page{}, &model.ValidationError{Field: "after", Problem: fmt.Sprintf("%s is not a cursor a page returned as next", model.Quote(f.After, 32))}
		}
		after = n
	}
	if f.User != "" {
		if err := model.CheckName("user", f.User); err != nil {
			return Page{}, err
		}
	}
	page, err := s.q.ListPage(ctx, queue.PageFilter{State: f.State, User: f.User, Users: p.visible(),
		CreatedFrom: f.CreatedFrom, CreatedUntil: f.CreatedUntil, ScheduleID: f.ScheduleID, Kind: f.Kind, After: after, Limit: f.Limit,
		Newest: f.Newest})
	if err != nil {
		return Page{}, err
	}
	out := Page{Tasks: page.Tasks}
	if page.Next != 0 {
		out.Next = strconv.FormatInt(page.Next, 10)
	}
	return out, nil
}

// TaskByKey returns the task user submitted under the idempotency key
// key, refused as not found, like Task, when the principal may not see
// it (the console's search by key).
func (s *Server) TaskByKey(ctx context.Context, p Principal, user, key string) (model.Task, error) {
	if _, err := authorize(ctx, p, anyScope); err != nil {
		return model.Task{}, err
	}
	if err := model.CheckName("user", user); err != nil {
		return model.Task{}, err
	}
	if !p.ActsFor(user) {
		return model.Task{}, fmt.Errorf("a task of user %s under that key: %w", user, model.ErrNotFound)
	}
	t, err := s.q.TaskByKey(ctx, user, key)
	if err != nil {
		return model.Task{}, err
	}
	return s.visibleTask(ctx, p, t.ID)
}

// Events returns the audit events of a task the principal may see.
func (s *Server) Events(ctx context.Context, p Principal, id string) ([]model.Event, error) {
	if _, err := authorize(ctx, p, anyScope); err != nil {
		return nil, err
	}
	if _, err := s.visibleTask(ctx, p, id); err != nil {
		return nil, err
	}
	return s.q.Events(ctx, id)
}

// Effects returns the effects ledger of a task the principal may see.
func (s *Server) Effects(ctx context.Context, p Principal, id string) ([]model.Effect, error) {
	if _, err := authorize(ctx, p, anyScope); err != nil {
		return nil, err
	}
	if _, err := s.visibleTask(ctx, p, id); err != nil {
		return nil, err
	}
	return s.q.Effects(ctx, id)
}

// Cancel cancels a task the principal may see.
func (s *Server) Cancel(ctx context.Context, p Principal, id string) (model.Task, error) {
	ctx, err := authorize(ctx, p, cancelScope)
	if err != nil {
		return model.Task{}, err
	}
	if _, err := s.visibleTask(ctx, p, id); err != nil {
		return model.Task{}, err
	}
	return s.q.Cancel(ctx, id, p.Name)
}

// Approve approves a task at its gate, naming the version shown.
func (s *Server) Approve(ctx context.Context, p Principal, id string, version int64) error {
	ctx, err := authorize(ctx, p, approveScope)
	if err != nil {
		return err
	}
	if _, err := s.visibleTask(ctx, p, id); err != nil {
		return err
	}
	return s.q.Approve(ctx, id, version, p.Name)
}

// Reject rejects a task at its gate, naming the version shown; a stale
// version is refused with model.ErrVersionMismatch and writes nothing.
func (s *Server) Reject(ctx context.Context, p Principal, id string, version int64) error {
	ctx, err := authorize(ctx, p, approveScope)
	if err != nil {
		return err
	}
	if _, err := s.visibleTask(ctx, p, id); err != nil {
		return err
	}
	return s.q.Reject(ctx, id, version, p.Name)
}

// Requeue puts a task in review back in the queue with a grant (at most
// the limits' grant maximum).
func (s *Server) Requeue(ctx context.Context, p Principal, id string, g model.Grant) error {
	ctx, err := authorize(ctx, p, operateScope)
	if err != nil {
		return err
	}
	if _, err := s.visibleTask(ctx, p, id); err != nil {
		return err
	}
	return s.q.Requeue(ctx, id, g, p.Name)
}

// Resolve settles a task in review as completed, failed or cancelled.
func (s *Server) Resolve(ctx context.Context, p Principal, id string, as model.State) error {
	ctx, err := authorize(ctx, p, operateScope)
	if err != nil {
		return err
	}
	if _, err := s.visibleTask(ctx, p, id); err != nil {
		return err
	}
	return s.q.Resolve(ctx, id, as, p.Name)
}

// SettleEffect records the provider's word on an effect of a task the
// principal may see.
func (s *Server) SettleEffect(ctx context.Context, p Principal, op string, applied bool) error {
	ctx, err := authorize(ctx, p, operateScope)
	if err != nil {
		return err
	}
	if err := model.CheckOperationID(op); err != nil {
		return pathError("op", err)
	}
	task, _, _ := strings.Cut(op, ".s")
	t, err := s.q.Task(ctx, task)
	if err != nil || !p.ActsFor(t.User) {
		return fmt.Errorf("effect %s: %w", op, model.ErrNotFound)
	}
	return s.q.SettleEffect(ctx, op, applied, p.Name)
}

// Inspect returns the stuck and uncertain tasks of the principal's users.
func (s *Server) Inspect(ctx context.Context, p Principal) ([]wire.Inspection, error) {
	if _, err := authorize(ctx, p, operateScope); err != nil {
		return nil, err
	}
	all, err := Inspect(ctx, s.q, s.clock.Now())
	if err != nil {
		return nil, err
	}
	out := []wire.Inspection{}
	for _, in := range all {
		if p.ActsFor(in.Task.User) {
			out = append(out, in)
		}
	}
	return out, nil
}

// Limits returns the queue-wide limits and the overrides of the
// principal's users.
func (s *Server) Limits(ctx context.Context, p Principal) (model.Limits, []model.UserLimit, error) {
	if _, err := authorize(ctx, p, operateScope); err != nil {
		return model.Limits{}, nil, err
	}
	limits, users, err := s.q.Limits(ctx)
	if err != nil {
		return model.Limits{}, nil, err
	}
	mine := []model.UserLimit{}
	for _, u := range users {
		if p.ActsFor(u.User) {
			mine = append(mine, u)
		}
	}
	return limits, mine, nil
}

// SetLimits replaces the queue-wide limits: only a token for every user
// may.
func (s *Server) SetLimits(ctx context.Context, p Principal, l model.Limits) error {
	ctx, err := authorize(ctx, p, operateScope)
	if err != nil {
		return err
	}
	if !p.AllUsers() {
		return fmt.Errorf("queue-wide limits: token %s acts for only some users: %w", p.Name, ErrForbidden)
	}
	return s.q.SetLimits(ctx, l, p.Name)
}

// UpdateLimits changes the queue-wide limits c names, leaving the others
// as they are: only a token for every user may. A change naming no limit
// is refused. (The limits are read and written in two steps: of two
// changes made at the same moment, the later one's write carries the
// limits it read.)
func (s *Server) UpdateLimits(ctx context.Context, p Principal, c model.LimitsChange) error {
	if _, err := authorize(ctx, p, operateScope); err != nil {
		return err
	}
	if c.Empty() {
		return &model.ValidationError{Field: "body", Problem: "name at least one limit to change"}
	}
	limits, _, err := s.q.Limits(ctx)
	if err != nil {
		return err
	}
	return s.SetLimits(ctx, p, c.Apply(limits))
}

// UpdateUserLimit changes the limits c names of a user the principal acts
// for; a limit c leaves nil keeps the user's override (or inherits).
func (s *Server) UpdateUserLimit(ctx context.Context, p Principal, user string, c model.UserLimitChange) error {
	if _, err := authorize(ctx, p, operateScope); err != nil {
		return err
	}
	if c.Empty() {
		return &model.ValidationError{Field: "body", Problem: "name running_max or depth_max (-1 inherits the queue-wide limit)"}
	}
	_, users, err := s.q.Limits(ctx)
	if err != nil {
		return err
	}
	return s.SetUserLimit(ctx, p, c.Apply(model.UserLimitOf(users, user)))
}

// SetUserLimit sets the limits of a user the principal acts for.
func (s *Server) SetUserLimit(ctx context.Context, p Principal, u model.UserLimit) error {
	ctx, err := authorize(ctx, p, operateScope)
	if err != nil {
		return err
	}
	if err := forUser(p, "user", u.User); err != nil {
		return err
	}
	return s.q.SetUserLimit(ctx, u, p.Name)
}

// Schedules returns the schedules of the principal's users.
func (s *Server) Schedules(ctx context.Context, p Principal) ([]model.Schedule, error) {
	if _, err := authorize(ctx, p, operateScope); err != nil {
		return nil, err
	}
	all, err := s.q.Schedules(ctx)
	if err != nil {
		return nil, err
	}
	out := []model.Schedule{}
	for _, sch := range all {
		if p.ActsFor(sch.User) {
			out = append(out, sch)
		}
	}
	return out, nil
}

// AddSchedule adds a schedule for a user the principal acts for.
func (s *Server) AddSchedule(ctx context.Context, p Principal, spec model.ScheduleSpec) (model.Schedule, error) {
	ctx, err := authorize(ctx, p, operateScope)
	if err != nil {
		return model.Schedule{}, err
	}
	if err := forUser(p, "user", spec.User); err != nil {
		return model.Schedule{}, err
	}
	if err := s.checkSchedule(spec); err != nil {
		return model.Schedule{}, err
	}
	return s.q.AddSchedule(ctx, spec, p.Name)
}

// RemoveSchedule removes a schedule of a user the principal acts for.
func (s *Server) RemoveSchedule(ctx context.Context, p Principal, id string) error {
	ctx, err := authorize(ctx, p, operateScope)
	if err != nil {
		return err
	}
	if err := model.CheckName("schedule", id); err != nil {
		return pathError("id", err)
	}
	if !p.AllUsers() {
		all, err := s.q.Schedules(ctx)
		if err != nil {
			return err
		}
		mine := false
		for _, sch := range all {
			mine = mine || (sch.ID == id && p.ActsFor(sch.User))
		}
		if !mine {
			return fmt.Errorf("schedule %s: %w", id, model.ErrNotFound)
		}
	}
	return s.q.RemoveSchedule(ctx, id, p.Name)
}

// Bounds of RecentFailures: the audit pages it reads at most.
const recentPagesMax = 4

// RecentFailures returns up to limit of the principal's tasks that failed
// or went to review since since, the latest first, and are still failed
// or in review (one requeued since, or resolved otherwise, is no longer a
// failure). It reads the audit trail from since, at most recentPagesMax
// pages of model.ListLimitMax events.
func (s *Server) RecentFailures(ctx context.Context, p Principal, since time.Time, limit int) ([]model.Task, error) {
	if _, err := authorize(ctx, p, operateScope); err != nil {
		return nil, err
	}
	if limit < 1 || limit > model.ListLimitMax {
		return nil, &model.ValidationError{Field: "limit", Problem: fmt.Sprintf("must be from 1 to %d, got %d", model.ListLimitMax, limit)}
	}
	var ids []string // newest last
	f := queue.AuditFilter{Since: since, Limit: model.ListLimitMax}
	var last int64
	for range recentPagesMax {
		events, err := s.q.Audit(ctx, f)
		if err != nil {
			return nil, err
		}
		for _, e := range events {
			if e.Seq > last && e.TaskID != "" && e.From != e.To && (e.To == model.Failed || e.To == model.NeedsReview) {
				ids = append(slices.DeleteFunc(ids, func(id string) bool { return id == e.TaskID }), e.TaskID)
			}
			last = max(last, e.Seq)
		}
		if len(events) < model.ListLimitMax {
			break
		}
		f.Since = events[len(events)-1].At
	}
	var out []model.Task
	for _, id := range slices.Backward(ids) {
		if len(out) == limit {
			break
		}
		t, err := s.visibleTask(ctx, p, id)
		if errors.Is(err, model.ErrNotFound) {
			continue // another user's, or pruned
		}
		if err != nil {
			return nil, err
		}
		if t.State == model.Failed || t.State == model.NeedsReview {
			out = append(out, t)
		}
	}
	return out, nil
}

// QueueMetrics returns the queue's metrics snapshot for a face's own use,
// for no principal: the console's samples for its charts, which it shows
// only to a principal that may see Metrics. /metrics serves the same
// queue-wide counts without a token.
func (s *Server) QueueMetrics(ctx context.Context) (model.Metrics, error) {
	return s.q.Metrics(ctx)
}

// Metrics returns the queue's metrics snapshot (queue-wide counts, as
// /metrics shows them).
func (s *Server) Metrics(ctx context.Context, p Principal) (model.Metrics, error) {
	if _, err := authorize(ctx, p, anyScope); err != nil {
		return model.Metrics{}, err
	}
	return s.q.Metrics(ctx)
}

// MetricKinds returns the kinds the server names in its counts by kind
// (Options.Kinds, sorted): every other kind's counts are summed under
// wire.KindOther, as /metrics and GET /v1/metrics show them.
func (s *Server) MetricKinds() []string {
	return slices.Clone(s.kinds)
}

// withTimeout is ctx cancelled, with the cause context.DeadlineExceeded,
// after d on clock. Its cancel stops the timer, so a fake clock keeps no
// waiter for it (clockwork.WithTimeout leaves its timer behind).
func withTimeout(ctx context.Context, clock clockwork.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	timer := clock.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	return ctx, func() {
		timer.Stop()
		cancel(context.Canceled)
	}
}
