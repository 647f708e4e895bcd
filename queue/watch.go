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

// TrailEvent is an audit event with the user and the kind of its task
// beside it ("" for an event that concerns no task).
type TrailEvent struct {
	model.Event
	User     string
	TaskKind string
}

// EventsSince returns up to f.Limit of the events f selects with a
// sequence number above f.After, in sequence order.
//
// In SQLite one transaction writes at a time, so an event's sequence
// number is given in commit order: once a reader has seen event n, no
// event below n can still appear, and a reader that resumes after the
// last sequence number it saw misses nothing and repeats nothing.
func (q *Queue) EventsSince(ctx context.Context, f EventFilter) ([]TrailEvent, error) {
	events, _, err := q.EventsThrough(ctx, f)
	return events, err
}

// eventsScanWindow bounds how far past its cursor one read of the trail
// for some users (EventFilter.Users) looks. Their events may be few among
// everyone's: read to the end each time, a follower of quiet users in a
// busy queue read every event since their last one on every poll, a range
// that only grew. A read looks at most this far, and says how far it
// looked (EventsThrough), so that the next starts there.
const eventsScanWindow = 4096

// EventsScanWindow is eventsScanWindow, for the reference model's reads
// of the trail that the conformance suite compares with the queue's.
const EventsScanWindow = eventsScanWindow

// EventsThrough is EventsSince, and also returns how far the read looked:
// a sequence number at or above f.After up to which every event f selects
// has been returned, so that the next read may start after it (and pass
// events of other users that it did not return). For a selection of some
// users, one read looks at most eventsScanWindow (or Options.TrailWindow)
// past f.After, and no further than the events that can no longer appear
// behind a cursor (see readSettled); otherwise it is the last event
// returned, or f.After.
func (q *Queue) EventsThrough(ctx context.Context, f EventFilter) ([]TrailEvent, int64, error) {
	limit, err := model.ListFilter{Limit: f.Limit}.CheckedLimit()
	if err != nil {
		return nil, 0, err
	}
	if f.After < 0 {
		return nil, 0, &model.ValidationError{Field: "after", Problem: fmt.Sprintf("must be 0 or a sequence number, got %d", f.After)}
	}
	var out []TrailEvent
	scan := func(rows *sql.Rows) (err error) {
		out, err = scanTrail(rows)
		return err
	}
	through := f.After
	switch {
	case f.TaskID != "":
		err = q.readSettled(ctx, qTrailByTaskAfter, scan, sql.Named("task_id", f.TaskID),
			sql.Named("after", f.After), sql.Named("limit", limit))
	case f.Users == nil:
		err = q.readSettled(ctx, qTrailAfter, scan, sql.Named("after", f.After), sql.Named("limit", limit))
	case len(f.Users) == 0:
		return []TrailEvent{}, f.After, nil
	default:
		users, uerr := usersArg(f.Users)
		if uerr != nil {
			return nil, 0, uerr
		}
		err = q.readSettledSteps(ctx, "trail_after_for_users", func(read readFunc) error {
			rows, err := read(qTrailThrough, sql.Named("after", f.After), sql.Named("window", q.trailWindow))
			if err != nil {
				return err
			}
			if err := scanOne(rows, &through); err != nil {
				return fmt.Errorf("queue: trail_through: %w", err)
			}
			rows, err = read(qTrailAfterForUsers, sql.Named("users", users), sql.Named("after", f.After),
				sql.Named("through", through), sql.Named("limit", limit))
			if err != nil {
				return err
			}
			return scan(rows)
		})
		if err == nil && len(out) < limit {
			return out, through, nil
		}
	}
	if err != nil {
		return nil, 0, err
	}
	if len(out) > 0 {
		through = out[len(out)-1].Seq
	}
	return out, through, nil
}

// scanOne reads the single value of rows into dst.
func scanOne(rows *sql.Rows, dst any) error {
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := rows.Scan(dst); err != nil {
		return err
	}
	return rows.Close()
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
			&reason, &e.Actor, &at, &e.Detail, &e.Scope, &e.User, &e.TaskKind); err != nil {
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
	if err := q.readRow(ctx, qTaskLastEventSeq, sql.Named("task_id", taskID)).Scan(&seq); err != nil {
		return 0, fmt.Errorf("queue: last event of %s: %w", taskID, err)
	}
	return seq, nil
}

// WaitEvents returns the events f selects as soon as there is at least
// one, waiting for it if need be until ctx ends (then it returns ctx's
// error). A write by this process wakes it at once; a write by another
// process is seen within WaitPollInterval of the queue's clock.
func (q *Queue) WaitEvents(ctx context.Context, f EventFilter) ([]TrailEvent, error) {
	events, _, err := q.WaitEventsThrough(ctx, f)
	return events, err
}

// WaitTask returns task id once it has an event past afterSeq (at once
// if it has one already), waiting for it until ctx ends; with the
// sequence number of its latest event, read before the task, so that the
// task is at least as new and the next wait starts after it. When ctx
// ends first it returns ctx's error: a caller that waits with a timeout
// reads the task again if it wants it unchanged. A task that does not
// exist is ErrNotFound. It is the library's long-poll, as GET
// /v1/tasks/{id}?wait= is the API's:
//
//	task, seq, err := q.WaitTask(ctx, id, 0)
//	for err == nil && !task.State.Terminal() {
//		task, seq, err = q.WaitTask(ctx, id, seq)
//	}
func (q *Queue) WaitTask(ctx context.Context, id string, afterSeq int64) (model.Task, int64, error) {
	if afterSeq < 0 {
		return model.Task{}, 0, &model.ValidationError{Field: "after_seq", Problem: fmt.Sprintf("must be 0 or more, got %d", afterSeq)}
	}
	if _, err := q.Task(ctx, id); err != nil {
		return model.Task{}, 0, err
	}
	if _, err := q.WaitEvents(ctx, EventFilter{TaskID: id, After: afterSeq, Limit: 1}); err != nil {
		return model.Task{}, 0, err
	}
	seq, err := q.LastEventSeq(ctx, id)
	if err != nil {
		return model.Task{}, 0, err
	}
	t, err := q.Task(ctx, id)
	return t, seq, err
}

// WaitEventsThrough is WaitEvents, and also returns how far it looked
// (see EventsThrough), with its events and also when ctx ends: a follower
// resumes after it, not after the last event it was sent. On a storage
// error it returns f.After.
func (q *Queue) WaitEventsThrough(ctx context.Context, f EventFilter) ([]TrailEvent, int64, error) {
	start := f.After
	for {
		// Take the signal before reading, so a commit between the read and
		// the wait still wakes this waiter.
		woken := q.commits.wait()
		events, through, err := q.EventsThrough(ctx, f)
		if err != nil {
			return nil, start, err
		}
		if len(events) > 0 {
			return events, through, nil
		}
		more := f.Users != nil && through >= f.After+q.trailWindow // looked a whole window: look on
		f.After = through
		if more {
			continue
		}
		poll := q.clock.NewTimer(WaitPollInterval)
		select {
		case <-ctx.Done():
			poll.Stop()
			return nil, f.After, fmt.Errorf("queue: wait for events: %w", ctx.Err())
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
