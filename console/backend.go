package console

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/leasehold/leasehold/model"
)

// Principal is whom a signed-in person acts as: the token's name (the
// actor in the audit trail), its scopes and the users it may act for.
type Principal struct {
	Name   string
	Scopes []string
	// Users are the users the token may act for; "*" stands for all.
	Users []string
}

// Can reports whether the principal holds scope.
func (p Principal) Can(scope string) bool { return slices.Contains(p.Scopes, scope) }

// AllUsers reports whether the principal may act for every user.
func (p Principal) AllUsers() bool { return slices.Contains(p.Users, "*") }

// ActsFor reports whether the principal may act for user.
func (p Principal) ActsFor(user string) bool { return p.AllUsers() || slices.Contains(p.Users, user) }

// Errors a Backend returns beside the model's sentinels (model.ErrNotFound,
// model.ErrVersionMismatch, model.ErrInvalidInput, ...).
var (
	// ErrUnauthorized means the token presented at sign-in is not valid.
	ErrUnauthorized = errors.New("token not recognised")
	// ErrForbidden means the principal may not do what it asked: it lacks
	// the scope, or it asked to act for a user its token does not name.
	ErrForbidden = errors.New("not allowed for this token")
)

// TaskFilter selects a page of tasks.
type TaskFilter struct {
	State model.State // "": every state
	User  string      // "": every user the principal may act for
	Kind  string      // "": every kind
	After string      // a page's Next; "": from the start
	Limit int
	// Newest lists the newest task first (and each page's Next leads to
	// older ones); otherwise the oldest first.
	Newest bool
}

// TaskPage is one page of tasks and the cursor of the next ("" at the end).
type TaskPage struct {
	Tasks []model.Task
	Next  string
}

// Inspection is the operator's view of one stuck or uncertain task.
type Inspection struct {
	Task         model.Task
	LeaseAge     time.Duration // since the lease began, while running
	HeartbeatAge time.Duration // since the last heartbeat, while running
	LeaseExpired bool
	Unreceipted  []string // operation IDs of effects with intent and no receipt
	QueuedFor    time.Duration
	Advice       string
}

// Backend is what the console calls, with the signed-in principal: the
// API's authorization and handler cores. Each method refuses what the
// principal may not do (ErrForbidden for a missing scope or another
// user's submit; model.ErrNotFound for another user's task, so that IDs
// cannot be probed) before touching the queue.
type Backend interface {
	// Authenticate checks a token's secret presented by remoteAddr; it
	// returns ErrUnauthorized (possibly after a delay) when it is not valid.
	Authenticate(ctx context.Context, secret, remoteAddr string) (Principal, error)
	Submit(ctx context.Context, p Principal, req model.SubmitRequest) (model.SubmitResult, error)
	SubmitMany(ctx context.Context, p Principal, reqs []model.SubmitRequest) ([]model.SubmitResult, error)
	Task(ctx context.Context, p Principal, id string) (model.Task, error)
	// TaskByKey returns the task user submitted under the idempotency key
	// key, refused as not found like Task when the principal may not see it.
	TaskByKey(ctx context.Context, p Principal, user, key string) (model.Task, error)
	List(ctx context.Context, p Principal, f TaskFilter) (TaskPage, error)
	Events(ctx context.Context, p Principal, id string) ([]model.Event, error)
	Effects(ctx context.Context, p Principal, id string) ([]model.Effect, error)
	Cancel(ctx context.Context, p Principal, id string) (model.Task, error)
	Approve(ctx context.Context, p Principal, id string, version int64) error
	Reject(ctx context.Context, p Principal, id string, version int64) error
	Requeue(ctx context.Context, p Principal, id string, g model.Grant) error
	Resolve(ctx context.Context, p Principal, id string, as model.State) error
	// SettleEffect records an uncertain effect's outcome as the provider
	// reports it.
	SettleEffect(ctx context.Context, p Principal, op string, applied bool) error
	Inspect(ctx context.Context, p Principal) ([]Inspection, error)
	Limits(ctx context.Context, p Principal) (model.Limits, []model.UserLimit, error)
	// SetLimits replaces the queue-wide limits (a token for every user
	// only); SetUserLimit sets one user's override.
	SetLimits(ctx context.Context, p Principal, l model.Limits) error
	SetUserLimit(ctx context.Context, p Principal, u model.UserLimit) error
	Schedules(ctx context.Context, p Principal) ([]model.Schedule, error)
	AddSchedule(ctx context.Context, p Principal, spec model.ScheduleSpec) (model.Schedule, error)
	// RemoveSchedule removes a schedule; the tasks it made stay.
	RemoveSchedule(ctx context.Context, p Principal, id string) error
	Metrics(ctx context.Context, p Principal) (model.Metrics, error)
	// MetricKinds are the kinds the Live page names in its outcomes by
	// kind, as /metrics names them; every other kind's counts (and those
	// of no known kind) are shown together as other.
	MetricKinds() []string
	// QueueMetrics reads the queue's metrics for the console itself, for
	// no principal: the samples of the Live page's history, which only a
	// principal that may see Metrics is shown.
	QueueMetrics(ctx context.Context) (model.Metrics, error)
	// RecentFailures returns up to limit of the principal's tasks that
	// most recently failed or went to review, the latest first.
	RecentFailures(ctx context.Context, p Principal, limit int) ([]model.Task, error)
}
