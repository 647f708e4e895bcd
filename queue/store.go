package queue

import (
	"context"

	"github.com/leasehold/leasehold/model"
)

// Store is the queue's whole contract. The SQLite Queue implements it, and
// so does model.Reference, the in-memory oracle; the conformance suite in
// queuetest runs against any Store, so a PostgreSQL store can follow behind
// the same seam.
type Store interface {
	// Callers.
	Submit(ctx context.Context, req model.SubmitRequest) (model.SubmitResult, error)
	SubmitMany(ctx context.Context, reqs []model.SubmitRequest) ([]model.SubmitResult, error)
	Cancel(ctx context.Context, id, actor string) (model.Task, error)
	Task(ctx context.Context, id string) (model.Task, error)
	List(ctx context.Context, f model.ListFilter) ([]model.Task, error)
	Events(ctx context.Context, taskID string) ([]model.Event, error)
	Effects(ctx context.Context, taskID string) ([]model.Effect, error)

	// Workers: every write but Claim names its claim and is fenced.
	WorkerWrites

	// Approvers.
	Approve(ctx context.Context, id string, version int64, actor string) error
	Reject(ctx context.Context, id string, version int64, actor string) error

	// Operators.
	Requeue(ctx context.Context, id string, g model.Grant, actor string) error
	Resolve(ctx context.Context, id string, to model.State, actor string) error
	SettleEffect(ctx context.Context, opID string, applied bool, actor string) error
	Limits(ctx context.Context) (model.Limits, []model.UserLimit, error)
	SetLimits(ctx context.Context, l model.Limits, actor string) error
	SetUserLimit(ctx context.Context, u model.UserLimit, actor string) error
	AddSchedule(ctx context.Context, spec model.ScheduleSpec, actor string) (model.Schedule, error)
	Schedules(ctx context.Context) ([]model.Schedule, error)
	RemoveSchedule(ctx context.Context, id, actor string) error
	Metrics(ctx context.Context) (model.Metrics, error)

	// Housekeeping, run by workers.
	Reap(ctx context.Context) (model.ReapResult, error)
	EnqueueDue(ctx context.Context) (model.EnqueueResult, error)
}

var (
	_ Store = (*Queue)(nil)
	_ Store = (*model.Reference)(nil)
)
