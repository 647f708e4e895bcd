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

// TrailEvent is an audit event with the user of its task beside it (""
// for an event that concerns no task).
type TrailEvent struct {
	model.Event
	User string
}

// EventsSince returns up to f.Limit of the events f selects with a
// sequence number above f.After, in sequence order.
//
// In SQLite one transaction writes at a time, so an event's sequence
// number is given in commit order: once a reader has seen event n, no
// event below n can still appear, and a reader that resumes after the
// last sequence number it saw misses nothing and repeats nothing.
func (q *Queue) EventsSince(ctx context.Context, f EventFilter) ([]TrailEvent, error) {
	limit, err := model.ListFilter{Limit: f.Limit}.CheckedLimit()
	if err != nil {
		return nil, err
	}
	if f.After < 0 {
		return nil, &model.ValidationError{Field: "after", Problem: fmt.Sprintf("must be 0 or a sequence number, got %d", f.After)}
	}
	var out []TrailEvent
	scan := func(rows *sql.Rows) (err error) {
		out, err = scanTrail(rows)
		return err
	}
	switch {
	case f.TaskID != "":
		err = q.readSettled(ctx, "trail_by_task_after", scan, sql.Named("task_id", f.TaskID),
			sql.Named("after", f.After), sql.Named("limit", limit))
	case f.Users == nil:
		err = q.readSettled(ctx, "trail_after", scan, sql.Named("after", f.After), sql.Named("limit", limit))
	case len(f.Users) == 0:
		return []TrailEvent{}, nil
	default:
		users, uerr := usersArg(f.Users)
		if uerr != nil {
			return nil, uerr
		}
		err = q.readSettled(ctx, "trail_after_for_users", scan, sql.Named("users", users),
			sql.Named("after", f.After), sql.Named("limit", limit))
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// scanTrail reads rows of the trail_* queries.
func scanTrail(rows *sql.Rows) ([]TrailEvent, error) {
	defer rows.Close()
	out := []TrailEvent{}
	for rows.Next() {
		var e TrailEvent
		var kind, from, to, reason string
		var at int64
		if err := rows.Scan(&e.Seq, &e.TaskID, &kind, &e.Attempt, &e.Fence, &e.OpID, &from, &to,
			&reason, &e.Actor, &at, &e.Detail, &e.Scope, &e.User); err != nil {
			return nil, fmt.Errorf("queue: scan event: %w", err)
		}
		e.Kind, e.From, e.To, e.Reason = model.EventKind(kind), model.State(from), model.State(to), model.Reason(reason)
		e.At = model.FromMillis(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue: read events: %w", err)
	}
	return out, nil
}

// LastEventSeq returns the sequence number of a task's latest event (0
// if it has none): what a caller waiting for the task's next change waits
// past.
func (q *Queue) LastEventSeq(ctx context.Context, taskID string) (int64, error) {
	var seq int64
	if err := q.readRow(ctx, "task_last_event_seq", sql.Named("task_id", taskID)).Scan(&seq); err != nil {
		return 0, fmt.Errorf("queue: last event of %s: %w", taskID, err)
	}
	return seq, nil
}

// WaitEvents returns the events f selects as soon as there is at least
// one, waiting for it if need be until ctx ends (then it returns ctx's
// error). A write by this process wakes it at once; a write by another
// process is seen within WaitPollInterval of the queue's clock.
func (q *Queue) WaitEvents(ctx context.Context, f EventFilter) ([]TrailEvent, error) {
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
