package queue

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/leasehold/leasehold/model"
)

// EventsAfter returns up to limit events with a sequence number above
// after, in order: a reader that remembers the last one it saw follows the
// audit trail incrementally.
func (q *Queue) EventsAfter(ctx context.Context, after int64, limit int) ([]model.Event, error) {
	if limit < 1 || limit > model.ListLimitMax {
		return nil, &model.ValidationError{Field: "limit", Problem: fmt.Sprintf("must be between 1 and %d, got %d", model.ListLimitMax, limit)}
	}
	rows, err := q.readRows(ctx, "events_after", sql.Named("after", after), sql.Named("limit", limit))
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}
