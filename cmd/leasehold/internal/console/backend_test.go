package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"slices"
	"strconv"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue"
)

// testToken is one credential of testBackend.
type testToken struct {
	p      Principal
	digest [32]byte
}

// testBackend is a Backend over a real queue for the console's tests,
// with the API's rules: a scope per action, a token acting only for its
// users, another user's task not found. The serve wiring uses the HTTP
// API's own cores instead.
type testBackend struct {
	q      *queue.Queue
	clock  clockwork.Clock
	tokens []testToken
	auths  int // Authenticate calls, to check sign-in calls it once
}

var _ Backend = (*testBackend)(nil)

func (b *testBackend) addToken(name, secret string, scopes, users []string) {
	b.tokens = append(b.tokens, testToken{p: Principal{Name: name, Scopes: scopes, Users: users}, digest: sha256.Sum256([]byte(secret))})
}

func (b *testBackend) Authenticate(_ context.Context, secret, _ string) (Principal, error) {
	b.auths++
	d := sha256.Sum256([]byte(secret))
	for _, t := range b.tokens {
		if subtle.ConstantTimeCompare(d[:], t.digest[:]) == 1 {
			return t.p, nil
		}
	}
	return Principal{}, ErrUnauthorized
}

func need(p Principal, scopes ...string) error {
	for _, s := range scopes {
		if p.Can(s) {
			return nil
		}
	}
	return fmt.Errorf("token %s lacks the %v scope: %w", p.Name, scopes, ErrForbidden)
}

func scoped(ctx context.Context, p Principal, scopes ...string) context.Context {
	for _, s := range scopes {
		if p.Can(s) {
			return model.WithScope(ctx, s)
		}
	}
	return ctx
}

// visible reads a task the principal may see; another user's is not found.
func (b *testBackend) visible(ctx context.Context, p Principal, id string) (model.Task, error) {
	t, err := b.q.Task(ctx, id)
	if err != nil {
		return t, err
	}
	if !p.ActsFor(t.User) {
		return model.Task{}, fmt.Errorf("task %s: %w", id, model.ErrNotFound)
	}
	return t, nil
}

func (b *testBackend) Submit(ctx context.Context, p Principal, req model.SubmitRequest) (model.SubmitResult, error) {
	if err := need(p, model.ScopeSubmit); err != nil {
		return model.SubmitResult{}, err
	}
	if !p.ActsFor(req.User) {
		return model.SubmitResult{}, fmt.Errorf("token %s may not submit for user %s: %w", p.Name, req.User, ErrForbidden)
	}
	return b.q.Submit(scoped(ctx, p, model.ScopeSubmit), req)
}

func (b *testBackend) SubmitMany(ctx context.Context, p Principal, reqs []model.SubmitRequest) ([]model.SubmitResult, error) {
	if err := need(p, model.ScopeSubmit); err != nil {
		return nil, err
	}
	for i, r := range reqs {
		if !p.ActsFor(r.User) {
			return nil, &model.BatchItemError{Index: i, Err: fmt.Errorf("token %s may not submit for user %s: %w", p.Name, r.User, ErrForbidden)}
		}
	}
	return b.q.SubmitMany(scoped(ctx, p, model.ScopeSubmit), reqs)
}

func (b *testBackend) Task(ctx context.Context, p Principal, id string) (model.Task, error) {
	return b.visible(ctx, p, id)
}

func (b *testBackend) List(ctx context.Context, p Principal, f TaskFilter) (TaskPage, error) {
	var after int64
	if f.After != "" {
		n, err := strconv.ParseInt(f.After, 10, 64)
		if err != nil {
			return TaskPage{}, &model.ValidationError{Field: "after", Problem: "not a cursor"}
		}
		after = n
	}
	pf := queue.PageFilter{State: f.State, User: f.User, After: after, Limit: f.Limit}
	if !p.AllUsers() {
		pf.Users = append([]string{}, p.Users...)
	}
	page, err := b.q.ListPage(ctx, pf)
	if err != nil {
		return TaskPage{}, err
	}
	out := TaskPage{Tasks: page.Tasks}
	if page.Next != 0 {
		out.Next = strconv.FormatInt(page.Next, 10)
	}
	return out, nil
}

func (b *testBackend) Events(ctx context.Context, p Principal, id string) ([]model.Event, error) {
	if _, err := b.visible(ctx, p, id); err != nil {
		return nil, err
	}
	return b.q.Events(ctx, id)
}

func (b *testBackend) Effects(ctx context.Context, p Principal, id string) ([]model.Effect, error) {
	if _, err := b.visible(ctx, p, id); err != nil {
		return nil, err
	}
	return b.q.Effects(ctx, id)
}

func (b *testBackend) Cancel(ctx context.Context, p Principal, id string) (model.Task, error) {
	if err := need(p, model.ScopeSubmit, model.ScopeOperate); err != nil {
		return model.Task{}, err
	}
	if _, err := b.visible(ctx, p, id); err != nil {
		return model.Task{}, err
	}
	return b.q.Cancel(scoped(ctx, p, model.ScopeSubmit, model.ScopeOperate), id, p.Name)
}

func (b *testBackend) Approve(ctx context.Context, p Principal, id string, version int64) error {
	if err := need(p, model.ScopeApprove); err != nil {
		return err
	}
	if _, err := b.visible(ctx, p, id); err != nil {
		return err
	}
	return b.q.Approve(scoped(ctx, p, model.ScopeApprove), id, version, p.Name)
}

func (b *testBackend) Reject(ctx context.Context, p Principal, id string) error {
	if err := need(p, model.ScopeApprove); err != nil {
		return err
	}
	if _, err := b.visible(ctx, p, id); err != nil {
		return err
	}
	return b.q.Reject(scoped(ctx, p, model.ScopeApprove), id, p.Name)
}

func (b *testBackend) Requeue(ctx context.Context, p Principal, id string, g model.Grant) error {
	if err := need(p, model.ScopeOperate); err != nil {
		return err
	}
	if _, err := b.visible(ctx, p, id); err != nil {
		return err
	}
	return b.q.Requeue(scoped(ctx, p, model.ScopeOperate), id, g, p.Name)
}

func (b *testBackend) Resolve(ctx context.Context, p Principal, id string, as model.State) error {
	if err := need(p, model.ScopeOperate); err != nil {
		return err
	}
	if _, err := b.visible(ctx, p, id); err != nil {
		return err
	}
	return b.q.Resolve(scoped(ctx, p, model.ScopeOperate), id, as, p.Name)
}

func (b *testBackend) Inspect(ctx context.Context, p Principal) ([]Inspection, error) {
	if err := need(p, model.ScopeOperate); err != nil {
		return nil, err
	}
	now := b.clock.Now()
	var out []Inspection
	for _, state := range []model.State{model.Running, model.NeedsReview} {
		tasks, err := b.q.List(ctx, model.ListFilter{State: state, Limit: model.ListLimitMax})
		if err != nil {
			return nil, err
		}
		for _, t := range tasks {
			if !p.ActsFor(t.User) {
				continue
			}
			in := Inspection{Task: t, Advice: "requeue with a grant, or resolve"}
			if t.State == model.Running {
				in.LeaseAge, in.HeartbeatAge, in.LeaseExpired = now.Sub(t.ClaimedAt), now.Sub(t.HeartbeatAt), now.After(t.LeaseUntil)
				in.Advice = "wait for the reaper"
			}
			effects, err := b.q.Effects(ctx, t.ID)
			if err != nil {
				return nil, err
			}
			for _, e := range effects {
				if !e.Receipted() {
					in.Unreceipted = append(in.Unreceipted, e.OpID)
				}
			}
			out = append(out, in)
		}
	}
	return out, nil
}

func (b *testBackend) Limits(ctx context.Context, p Principal) (model.Limits, []model.UserLimit, error) {
	if err := need(p, model.ScopeOperate); err != nil {
		return model.Limits{}, nil, err
	}
	return b.q.Limits(ctx)
}

func (b *testBackend) Schedules(ctx context.Context, p Principal) ([]model.Schedule, error) {
	if err := need(p, model.ScopeOperate); err != nil {
		return nil, err
	}
	return b.q.Schedules(ctx)
}

func (b *testBackend) Metrics(ctx context.Context, p Principal) (model.Metrics, error) {
	if err := need(p, model.ScopeOperate); err != nil {
		return model.Metrics{}, err
	}
	return b.q.Metrics(ctx)
}

func (b *testBackend) RecentFailures(ctx context.Context, p Principal, limit int) ([]model.Task, error) {
	if err := need(p, model.ScopeOperate); err != nil {
		return nil, err
	}
	var out []model.Task
	for _, state := range []model.State{model.Failed, model.NeedsReview} {
		tasks, err := b.q.List(ctx, model.ListFilter{State: state, Limit: model.ListLimitMax})
		if err != nil {
			return nil, err
		}
		out = append(out, tasks...)
	}
	slices.SortStableFunc(out, func(a, b model.Task) int { return b.UpdatedAt.Compare(a.UpdatedAt) })
	return out[:min(limit, len(out))], nil
}
