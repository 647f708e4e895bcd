package client

import (
	"time"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/wire"
)

// The records the API returns are package wire's, which the server
// sends; these names keep the client's calls readable.
type (
	// Time is a time on the wire: RFC 3339 in UTC, or "" for none.
	Time = wire.Time
	// Task is a task as the API returns it; Task's LastEventSeq is what
	// WaitTask waits past.
	Task = wire.Task
	// Event is one audit event, with its task's user.
	Event = wire.Event
	// SubmitResult is the answer to a submit: the task's ID, and whether
	// the request replayed an earlier one under the same key.
	SubmitResult = wire.SubmitResult
	// TaskPage is one page of tasks; Next is the cursor of the page after
	// it, "" when this page is the last.
	TaskPage = wire.TaskPage
	// Inspection is one stuck or uncertain task, as GET /v1/inspect
	// reports it.
	Inspection = wire.Inspection
	// Limits are the queue-wide limits.
	Limits = wire.Limits
	// UserLimit is one user's override; model.Inherit (-1) inherits the
	// queue-wide limit.
	UserLimit = wire.UserLimit
	// LimitsChange names the queue-wide limits to change (UpdateLimits):
	// each field set replaces its limit; a nil field leaves its limit as
	// it is.
	LimitsChange = wire.LimitsChange
	// UserLimitChange names a user's limits to change (UpdateUserLimit);
	// a nil field keeps the user's override (or inherits). model.Inherit
	// (-1) inherits the queue-wide limit, 0 is unlimited.
	UserLimitChange = wire.UserLimitChange
	// LimitsView is the queue-wide limits and every user's override.
	LimitsView = wire.LimitsView
	// Schedule is a periodic task.
	Schedule = wire.Schedule
	// Settled is the answer to SettleEffect.
	Settled = wire.Settled
	// Metrics is the queue's metrics snapshot (GET /v1/metrics).
	Metrics = wire.Metrics
	// Counts are the outcome counters of one kind of task, as
	// Metrics.ByKind holds them.
	Counts = wire.Counts
	// Histogram is a distribution of durations in milliseconds.
	Histogram = wire.Histogram
	// Health is GET /healthz: status "ok", or "unavailable" with the
	// storage failure's class.
	Health = wire.Health
)

// KindOther is the key of Metrics.ByKind that sums the counts of every
// kind the server does not name, and of no known kind.
const KindOther = wire.KindOther

// ListOptions selects tasks for List. Zero values select everything,
// oldest first.
type ListOptions struct {
	State        model.State
	User         string
	CreatedFrom  time.Time
	CreatedUntil time.Time // exclusive
	ScheduleID   string
	Kind         string // "": every kind
	Limit        int    // 0: the server's default
	After        string // the Next of the previous page
	// Newest lists the newest task first, each page's Next leading to
	// older tasks.
	Newest bool
}

// Value returns a pointer to v, for the fields of LimitsChange and
// UserLimitChange: client.LimitsChange{DepthMax: client.Value(2)}.
func Value[T any](v T) *T { return &v }

// ScheduleSpec is a schedule to add.
type ScheduleSpec struct {
	User       string
	Kind       string // each run's kind; empty is synthetic
	Payload    string // JSON
	CostBudget int64
	StepsMax   int
	Priority   int
	Origin     time.Time // the first run (required)
	Period     time.Duration
}
