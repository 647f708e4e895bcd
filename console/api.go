package console

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/leasehold/leasehold/httpapi"
	"github.com/leasehold/leasehold/model"
)

// recentWindow is how far back the live view's failures go.
const recentWindow = time.Hour

// FromAPI is the Backend of the HTTP API's server s: every read and action
// of the console is one of the API's handler cores, with the API's
// authentication (and its slowing of failed attempts), scopes and user
// bindings. The console adds no rule of its own and reads nothing but
// through s.
func FromAPI(s *httpapi.Server) Backend { return apiBackend{s: s} }

type apiBackend struct{ s *httpapi.Server }

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

func (b apiBackend) TaskByKey(ctx context.Context, p Principal, user, key string) (model.Task, error) {
	t, err := b.s.TaskByKey(ctx, apiPrincipal(p), user, key)
	return t, mapped(err)
}

func (b apiBackend) List(ctx context.Context, p Principal, f TaskFilter) (TaskPage, error) {
	page, err := b.s.List(ctx, apiPrincipal(p), httpapi.ListFilter{State: f.State, User: f.User, Kind: f.Kind, After: f.After, Limit: f.Limit, Newest: f.Newest})
	if err != nil {
		return TaskPage{}, mapped(err)
	}
	return TaskPage{Tasks: page.Tasks, Next: page.Next}, nil
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

func (b apiBackend) MetricKinds() []string { return b.s.MetricKinds() }

func (b apiBackend) QueueMetrics(ctx context.Context) (model.Metrics, error) {
	return b.s.QueueMetrics(ctx)
}

// RecentFailures is the API's RecentFailures core over the last
// recentWindow on the API's clock.
func (b apiBackend) RecentFailures(ctx context.Context, p Principal, limit int) ([]model.Task, error) {
	if !p.Can(model.ScopeOperate) {
		return nil, &sentinel{err: errors.New("the live view needs the operate scope"), as: ErrForbidden}
	}
	tasks, err := b.s.RecentFailures(ctx, apiPrincipal(p), b.s.Clock().Now().Add(-recentWindow), limit)
	return tasks, mapped(err)
}
