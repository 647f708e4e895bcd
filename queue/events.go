package queue

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/leasehold/leasehold/model"
)

// EventsAfter returns up to limit events with a sequence number above
// after, in order: a reader that remembers the last one it saw follows the
// audit trail incrementally.
func (q *Queue) EventsAfter(ctx context.Context, after int64, limit int) ([]model.Event, error) {
	if limit < 1 || limit > model.ListLimitMax {
		return nil, &model.ValidationError{Field: "limit", Problem: fmt.Sprintf("must be between 1 and %d, got %d", model.ListLimitMax, limit)}
	}
	var out []model.Event
	err := q.readSettled(ctx, qEventsAfter, func(rows *sql.Rows) (err error) {
		out, err = scanEvents(rows)
		return err
	}, sql.Named("after", after), sql.Named("limit", limit))
	return out, err
}

// AuditFilter selects audit events. Zero values select everything; Until
// is exclusive.
type AuditFilter struct {
	TaskID string
	Actor  string
	Since  time.Time
	Until  time.Time
	Limit  int // 0: model.ListLimitMax
}

// Audit returns the audit events a filter selects, in order.
func (q *Queue) Audit(ctx context.Context, f AuditFilter) ([]model.Event, error) {
	limit := f.Limit
	if limit == 0 {
		limit = model.ListLimitMax
	}
	if limit < 1 || limit > model.ListLimitMax {
		return nil, &model.ValidationError{Field: "limit", Problem: fmt.Sprintf("must be between 1 and %d, got %d", model.ListLimitMax, limit)}
	}
	until := int64(math.MaxInt64)
	if !f.Until.IsZero() {
		until = model.Millis(f.Until)
	}
	args := []any{sql.Named("since", model.Millis(f.Since)), sql.Named("until", until), sql.Named("limit", limit)}
	name := auditQuery(f)
	switch name {
	case qAuditByTask:
		args = append(args, sql.Named("task_id", f.TaskID), sql.Named("actor", f.Actor))
	case qAuditByActor:
		args = append(args, sql.Named("actor", f.Actor))
	}
	rows, err := q.readRows(ctx, name, args...)
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

// auditQuery names the form of the audit query that serves f from an
// index: by task (the narrowest, the actor then a filter), by actor, by
// time window, or the whole trail.
func auditQuery(f AuditFilter) queryName {
	switch {
	case f.TaskID != "":
		return qAuditByTask
	case f.Actor != "":
		return qAuditByActor
	case !f.Since.IsZero() || !f.Until.IsZero():
		return qAuditByTime
	}
	return qAuditAll
}

// RecordOperatorEvent appends an operator action that concerns no task
// (a restore, a migration) to the audit trail, with the actor and the
// scope the context carries.
func (q *Queue) RecordOperatorEvent(ctx context.Context, kind model.EventKind, actor, detail string) error {
	if err := model.CheckName("actor", actor); err != nil {
		return err
	}
	return q.write(ctx, string(kind), func(t *txn) error {
		return t.emit(model.Event{Kind: kind, Actor: actor, Detail: detail})
	})
}
