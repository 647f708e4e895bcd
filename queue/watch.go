package queue

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/leasehold/leasehold/model"
)

// WaitPollInterval is how often WaitEvents reads the audit trail while it
// waits: the fallback for writes made by another process, which the
// in-process notifier cannot see. The interval runs on the queue's clock.
const WaitPollInterval = 250 * time.Millisecond

// EventFilter selects audit events past a sequence number, for
// EventsSince and WaitEvents.
type EventFilter struct {
	// TaskID selects one task's events; "" selects every task's.
	TaskID string
	// Users, when not nil, keeps only the events of tasks of these users
	// (and so leaves out events that concern no task). It applies when
	// TaskID is "": a caller checks a task's user before asking for its
	// events.
	Users []string
	// After is the sequence number of the last event already seen.
	After int64
	Limit int // 0 means model.ListLimitDefault
}

// EventsSince returns up to f.Limit of the events f selects with a
// sequence number above f.After, in sequence order.
//
// In SQLite one transaction writes at a time, so an event's sequence
// number is given in commit order: once a reader has seen event n, no
// event below n can still appear, and a reader that resumes after the
// last sequence number it saw misses nothing and repeats nothing.
func (q *Queue) EventsSince(ctx context.Context, f EventFilter) ([]model.Event, error) {
	limit, err := model.ListFilter{Limit: f.Limit}.CheckedLimit()
	if err != nil {
		return nil, err
	}
	if f.After < 0 {
		return nil, &model.ValidationError{Field: "after", Problem: fmt.Sprintf("must be 0 or a sequence number, got %d", f.After)}
	}
	var rows *sql.Rows
	switch {
	case f.TaskID != "":
		rows, err = q.readRows(ctx, "events_by_task_after", sql.Named("task_id", f.TaskID),
			sql.Named("after", f.After), sql.Named("limit", limit))
	case f.Users == nil:
		rows, err = q.readRows(ctx, "events_after", sql.Named("after", f.After), sql.Named("limit", limit))
	case len(f.Users) == 0:
		return []model.Event{}, nil
	default:
		users, uerr := usersArg(f.Users)
		if uerr != nil {
			return nil, uerr
		}
		rows, err = q.readRows(ctx, "events_after_for_users", sql.Named("users", users),
			sql.Named("after", f.After), sql.Named("limit", limit))
	}
	if err != nil {
		return nil, err
	}
	events, err := scanEvents(rows)
	if events == nil && err == nil {
		events = []model.Event{}
	}
	return events, err
}

// WaitEvents returns the events f selects as soon as there is at least
// one, waiting for it if need be until ctx ends (then it returns ctx's
// error). A write by this process wakes it at once; a write by another
// process is seen within WaitPollInterval of the queue's clock.
func (q *Queue) WaitEvents(ctx context.Context, f EventFilter) ([]model.Event, error) {
	for {
		// Take the signal before reading, so a commit between the read and
		// the wait still wakes this waiter.
		woken := q.commits.wait()
		events, err := q.EventsSince(ctx, f)
		if err != nil || len(events) > 0 {
			return events, err
		}
		poll := q.clock.NewTimer(WaitPollInterval)
		select {
		case <-ctx.Done():
			poll.Stop()
			return nil, fmt.Errorf("queue: wait for events: %w", ctx.Err())
		case <-woken:
		case <-poll.Chan():
		}
		poll.Stop()
	}
}

// notifier wakes every waiter when a write of this process ends. Its zero
// value is ready to use.
type notifier struct {
	mu sync.Mutex
	ch chan struct{} // closed and replaced at each broadcast; nil until a waiter asks
}

// wait returns a channel closed at the next broadcast.
func (n *notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

// broadcast wakes every waiter. A write that ends in an error also calls
// it: a waiter woken for nothing reads once more and waits again.
func (n *notifier) broadcast() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}
