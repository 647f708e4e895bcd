package console

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/httpapi"
	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// The live view's failures: those of the last recentWindow, from at most
// recentPagesMax pages of the audit trail.
const (
	recentWindow   = time.Hour
	recentPagesMax = 4
)

// FromAPI is the Backend of the HTTP API's server s: every read and action
// of the console is one of the API's handler cores, with the API's
// authentication (and its slowing of failed attempts), scopes and user
// bindings. The console adds no rule of its own.
// The live view's list of recent failures reads q's audit trail, on
// clock, and shows only the tasks the API's Task core lets the principal
// see.
func FromAPI(s *httpapi.Server, q *queue.Queue, clock clockwork.Clock) Backend {
	return apiBackend{s: s, q: q, clock: clock}
}

type apiBackend struct {
	s     *httpapi.Server
	q     *queue.Queue
	clock clockwork.Clock
}

var _ Backend = apiBackend{}

func apiPrincipal(p Principal) httpapi.Principal {
	return httpapi.Principal{Name: p.Name, Scopes: slices.Clone(p.Scopes), Users: slices.Clone(p.Users)}
}

// sentinel keeps an API error's message and makes it also match the
// console's sentinel of the same meaning.
type sentinel struct {
	err, as error
}

func (e *sentinel) Error() string   { return e.err.Error() }
func (e *sentinel) Unwrap() []error { return []error{e.err, e.as} }

// mapped adds the console's sentinel to the API's refusals.
func mapped(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, httpapi.ErrForbidden):
		return &sentinel{err: err, as: ErrForbidden}
	case errors.Is(err, httpapi.ErrUnauthorized):
		return &sentinel{err: err, as: ErrUnauthorized}
	}
	return err
}

func (b apiBackend) Authenticate(ctx context.Context, secret, remoteAddr string) (Principal, error) {
	p, err := b.s.Authenticate(ctx, secret, remoteAddr)
	if err != nil {
		return Principal{}, mapped(err)
	}
	return Principal{Name: p.Name, Scopes: slices.Clone(p.Scopes), Users: slices.Clone(p.Users)}, nil
}

func (b apiBackend) Submit(ctx context.Context, p Principal, req model.SubmitRequest) (model.SubmitResult, error) {
	res, err := b.s.Submit(ctx, apiPrincipal(p), req)
	return res, mapped(err)
}

func (b apiBackend) SubmitMany(ctx context.Context, p Principal, reqs []model.SubmitRequest) ([]model.SubmitResult, error) {
	res, err := b.s.SubmitMany(ctx, apiPrincipal(p), reqs)
	return res, mapped(err)
}

func (b apiBackend) Task(ctx context.Context, p Principal, id string) (model.Task, error) {
	t, err := b.s.Task(ctx, apiPrincipal(p), id)
	return t, mapped(err)
}

// TaskByKey looks the key up for a user the principal acts for, and
// returns the task as the API's Task core lets the principal see it.
func (b apiBackend) TaskByKey(ctx context.Context, p Principal, user, key string) (model.Task, error) {
	if err := model.CheckName("user", user); err != nil {
		return model.Task{}, err
	}
	if !p.ActsFor(user) {
		return model.Task{}, fmt.Errorf("a task of user %s under that key: %w", user, model.ErrNotFound)
	}
	t, err := b.q.TaskByKey(ctx, user, key)
	if err != nil {
		return model.Task{}, err
	}
	return b.Task(ctx, p, t.ID)
}

// List pages through the API's List core, oldest first. The API lists no
// other way, so the newest first reads the queue's pages directly under
// the core's rules: the core first checks the principal and the filter
// (reading one row), then the page holds only the users the principal
// acts for (its users, or every user for "*"), after the API's cursor.
func (b apiBackend) List(ctx context.Context, p Principal, f TaskFilter) (TaskPage, error) {
	core := httpapi.ListFilter{State: f.State, User: f.User, After: f.After, Limit: f.Limit}
	if f.Newest {
		core.After, core.Limit = "", 1
	}
	page, err := b.s.List(ctx, apiPrincipal(p), core)
	if err != nil {
		return TaskPage{}, mapped(err)
	}
	if !f.Newest {
		return TaskPage{Tasks: page.Tasks, Next: page.Next}, nil
	}
	var after int64
	if f.After != "" {
		n, err := strconv.ParseInt(f.After, 10, 64)
		if err != nil || n < 1 {
			return TaskPage{}, &model.ValidationError{Field: "after", Problem: "not a cursor a page returned as next"}
		}
		after = n
	}
	var users []string // nil: every user
	if !p.AllUsers() {
		users = append([]string{}, p.Users...)
	}
	newest, err := b.q.ListPage(ctx, queue.PageFilter{State: f.State, User: f.User, Users: users, After: after, Limit: f.Limit, Newest: true})
	if err != nil {
		return TaskPage{}, err
	}
	out := TaskPage{Tasks: newest.Tasks}
	if newest.Next != 0 {
		out.Next = strconv.FormatInt(newest.Next, 10)
	}
	return out, nil
}

func (b apiBackend) Events(ctx context.Context, p Principal, id string) ([]model.Event, error) {
	events, err := b.s.Events(ctx, apiPrincipal(p), id)
	return events, mapped(err)
}

func (b apiBackend) Effects(ctx context.Context, p Principal, id string) ([]model.Effect, error) {
	effects, err := b.s.Effects(ctx, apiPrincipal(p), id)
	return effects, mapped(err)
}

func (b apiBackend) Cancel(ctx context.Context, p Principal, id string) (model.Task, error) {
	t, err := b.s.Cancel(ctx, apiPrincipal(p), id)
	return t, mapped(err)
}

func (b apiBackend) Approve(ctx context.Context, p Principal, id string, version int64) error {
	return mapped(b.s.Approve(ctx, apiPrincipal(p), id, version))
}

func (b apiBackend) Reject(ctx context.Context, p Principal, id string, version int64) error {
	return mapped(b.s.Reject(ctx, apiPrincipal(p), id, version))
}

func (b apiBackend) Requeue(ctx context.Context, p Principal, id string, g model.Grant) error {
	return mapped(b.s.Requeue(ctx, apiPrincipal(p), id, g))
}

func (b apiBackend) Resolve(ctx context.Context, p Principal, id string, as model.State) error {
	return mapped(b.s.Resolve(ctx, apiPrincipal(p), id, as))
}

func (b apiBackend) SettleEffect(ctx context.Context, p Principal, op string, applied bool) error {
	return mapped(b.s.SettleEffect(ctx, apiPrincipal(p), op, applied))
}

// Inspect reads the API's inspect report and each reported task as the
// principal may see it.
func (b apiBackend) Inspect(ctx context.Context, p Principal) ([]Inspection, error) {
	ap := apiPrincipal(p)
	report, err := b.s.Inspect(ctx, ap)
	if err != nil {
		return nil, mapped(err)
	}
	out := make([]Inspection, 0, len(report))
	for _, in := range report {
		t, err := b.s.Task(ctx, ap, in.Task.ID)
		if errors.Is(err, model.ErrNotFound) {
			continue // pruned since the report was read
		}
		if err != nil {
			return nil, mapped(err)
		}
		out = append(out, Inspection{Task: t, LeaseAge: time.Duration(in.LeaseAgeMs) * time.Millisecond,
			HeartbeatAge: time.Duration(in.HeartbeatAgeMs) * time.Millisecond, LeaseExpired: in.LeaseExpired,
			Unreceipted: in.Unreceipted, QueuedFor: time.Duration(in.QueuedForMs) * time.Millisecond, Advice: in.Advice})
	}
	return out, nil
}

func (b apiBackend) Limits(ctx context.Context, p Principal) (model.Limits, []model.UserLimit, error) {
	l, users, err := b.s.Limits(ctx, apiPrincipal(p))
	return l, users, mapped(err)
}

func (b apiBackend) SetLimits(ctx context.Context, p Principal, l model.Limits) error {
	return mapped(b.s.SetLimits(ctx, apiPrincipal(p), l))
}

func (b apiBackend) SetUserLimit(ctx context.Context, p Principal, u model.UserLimit) error {
	return mapped(b.s.SetUserLimit(ctx, apiPrincipal(p), u))
}

func (b apiBackend) Schedules(ctx context.Context, p Principal) ([]model.Schedule, error) {
	s, err := b.s.Schedules(ctx, apiPrincipal(p))
	return s, mapped(err)
}

func (b apiBackend) AddSchedule(ctx context.Context, p Principal, spec model.ScheduleSpec) (model.Schedule, error) {
	s, err := b.s.AddSchedule(ctx, apiPrincipal(p), spec)
	return s, mapped(err)
}

func (b apiBackend) RemoveSchedule(ctx context.Context, p Principal, id string) error {
	return mapped(b.s.RemoveSchedule(ctx, apiPrincipal(p), id))
}

func (b apiBackend) Metrics(ctx context.Context, p Principal) (model.Metrics, error) {
	if !p.Can(model.ScopeOperate) {
		return model.Metrics{}, &sentinel{err: errors.New("the live view needs the operate scope"), as: ErrForbidden}
	}
	m, err := b.s.Metrics(ctx, apiPrincipal(p))
	return m, mapped(err)
}

// QueueMetrics reads the queue's metrics, as the API's Metrics core does.
func (b apiBackend) QueueMetrics(ctx context.Context) (model.Metrics, error) {
	return b.q.Metrics(ctx)
}

// RecentFailures reads the audit trail of the last recentWindow (at most
// recentPagesMax pages of model.ListLimitMax events, walking to the
// newest) for tasks that failed or went to review, newest first, and
// keeps those the API's Task core lets the principal see that are still
// failed or in review: one requeued since, or resolved otherwise, is no
// longer a failure.
func (b apiBackend) RecentFailures(ctx context.Context, p Principal, limit int) ([]model.Task, error) {
	if !p.Can(model.ScopeOperate) {
		return nil, &sentinel{err: errors.New("the live view needs the operate scope"), as: ErrForbidden}
	}
	var ids []string // newest last
	f := queue.AuditFilter{Since: b.clock.Now().Add(-recentWindow), Limit: model.ListLimitMax}
	var last int64
	for range recentPagesMax {
		events, err := b.q.Audit(ctx, f)
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
	ap := apiPrincipal(p)
	var out []model.Task
	for _, id := range slices.Backward(ids) {
		if len(out) == limit {
			break
		}
		t, err := b.s.Task(ctx, ap, id)
		if errors.Is(err, model.ErrNotFound) {
			continue // another user's, or pruned
		}
		if err != nil {
			return nil, mapped(err)
		}
		if t.State != model.Failed && t.State != model.NeedsReview {
			continue
		}
		out = append(out, t)
	}
	return out, nil
}
