package model

import (
	"context"
	"fmt"
)

// Reading the audit trail from a cursor, as the queue's followers do
// (queue/events.go, queue/watch.go).

// EventsAfter returns up to limit events with a sequence number above
// after, in order.
func (r *Reference) EventsAfter(_ context.Context, after int64, limit int) ([]Event, error) {
	if limit < 1 || limit > ListLimitMax {
		return nil, invalid("limit", "must be between 1 and %d, got %d", ListLimitMax, limit)
	}
	var out []Event
	for _, e := range r.events {
		if e.Seq > after {
			out = append(out, e)
			if len(out) == limit {
				break
			}
		}
	}
	return out, nil
}

// EventsThrough reads the trail for the tasks of users as the queue's
// EventsThrough does for a filter naming users: up to limit of their
// events numbered above after and at most window past it (and no further
// than the last event there is), in order, and how far the read looked:
// the last event returned when limit of them were, otherwise the end of
// the window, so that the next read may start after it. Every event is
// committed in the reference, so none can still appear behind the cursor.
// With no users it returns nothing and looks no further than after.
func (r *Reference) EventsThrough(_ context.Context, users []string, after int64, limit, window int) ([]Event, int64, error) {
	if limit < 1 || limit > ListLimitMax {
		return nil, 0, invalid("limit", "must be between 1 and %d, got %d", ListLimitMax, limit)
	}
	if after < 0 {
		return nil, 0, invalid("after", "must be 0 or a sequence number, got %d", after)
	}
	if window < 1 {
		return nil, 0, fmt.Errorf("model: trail window %d: %w", window, ErrInvalidInput)
	}
	if len(users) == 0 {
		return []Event{}, after, nil
	}
	var last int64
	if n := len(r.events); n > 0 {
		last = r.events[n-1].Seq
	}
	through := max(after, min(after+int64(window), last))
	want := map[string]bool{}
	for _, u := range users {
		want[u] = true
	}
	out := []Event{}
	for _, e := range r.events {
		if e.Seq <= after || e.Seq > through || e.TaskID == "" {
			continue
		}
		if t, ok := r.tasks[e.TaskID]; !ok || !want[t.User] {
			continue
		}
		out = append(out, e)
		if len(out) == limit {
			return out, e.Seq, nil
		}
	}
	return out, through, nil
}
