package queue

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/leasehold/leasehold/model"
)

// Task returns one task.
func (q *Queue) Task(ctx context.Context, id string) (model.Task, error) {
	t, err := scanTask(q.readRow(ctx, "task_by_id", sql.Named("id", id)))
	if err != nil {
		return model.Task{}, notFound(err, "task "+id)
	}
	return t, nil
}

// List returns tasks in submission order, filtered by state and user.
func (q *Queue) List(ctx context.Context, f model.ListFilter) ([]model.Task, error) {
	limit, err := f.CheckedLimit()
	if err != nil {
		return nil, err
	}
	args := []any{sql.Named("limit", limit)}
	name := "list_all"
	switch {
	case f.State != "" && f.User != "":
		name = "list_by_user_state"
	case f.State != "":
		name = "list_by_state"
	case f.User != "":
		name = "list_by_user"
	}
	if f.State != "" {
		args = append(args, sql.Named("state", string(f.State)))
	}
	if f.User != "" {
		args = append(args, sql.Named("user", f.User))
	}
	rows, err := q.readRows(ctx, name, args...)
	if err != nil {
		return nil, err
	}
	return scanTasks(rows)
}

// Events returns one task's audit events in order; an empty ID returns
// every event.
func (q *Queue) Events(ctx context.Context, taskID string) ([]model.Event, error) {
	var rows *sql.Rows
	var err error
	if taskID == "" {
		rows, err = q.readRows(ctx, "events_all")
	} else {
		rows, err = q.readRows(ctx, "events_by_task", sql.Named("task_id", taskID))
	}
	if err != nil {
		return nil, err
	}
	return scanEvents(rows)
}

// Effects returns one task's effects ledger by step; an empty ID returns
// every row, by task then step.
func (q *Queue) Effects(ctx context.Context, taskID string) ([]model.Effect, error) {
	var rows *sql.Rows
	var err error
	if taskID == "" {
		rows, err = q.readRows(ctx, "effects_all")
	} else {
		rows, err = q.readRows(ctx, "effects_by_task", sql.Named("task_id", taskID))
	}
	if err != nil {
		return nil, err
	}
	return scanEffects(rows)
}

// Metrics returns a snapshot: depth by state, age of the oldest due queued
// task, outcome counts from the audit trail, and the queue-wait and
// run-time distributions. It reads in one read transaction so the figures
// agree with each other.
func (q *Queue) Metrics(ctx context.Context) (model.Metrics, error) {
	m := model.Metrics{Depth: map[model.State]int64{}, QueueWait: model.NewHistogram(), RunTime: model.NewHistogram()}
	tx, err := q.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return m, fmt.Errorf("queue: metrics: begin: %w", err)
	}
	defer tx.Rollback()
	stmt := func(name string) *sql.Stmt { return tx.StmtContext(ctx, q.stmts[name]) }

	rows, err := stmt("state_counts").QueryContext(ctx)
	if err != nil {
		return m, fmt.Errorf("queue: metrics: %w", err)
	}
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			rows.Close()
			return m, fmt.Errorf("queue: metrics: %w", err)
		}
		m.Depth[model.State(state)] = n
	}
	rows.Close()

	rows, err = stmt("event_counts").QueryContext(ctx)
	if err != nil {
		return m, fmt.Errorf("queue: metrics: %w", err)
	}
	for rows.Next() {
		var kind, from, to, reason string
		var n int64
		if err := rows.Scan(&kind, &from, &to, &reason, &n); err != nil {
			rows.Close()
			return m, fmt.Errorf("queue: metrics: %w", err)
		}
		model.Tally(&m, model.EventKind(kind), model.State(from), model.State(to), model.Reason(reason), n)
	}
	rows.Close()

	rows, err = stmt("histograms_all").QueryContext(ctx)
	if err != nil {
		return m, fmt.Errorf("queue: metrics: %w", err)
	}
	for rows.Next() {
		var name string
		var bucket int
		var n, sum int64
		if err := rows.Scan(&name, &bucket, &n, &sum); err != nil {
			rows.Close()
			return m, fmt.Errorf("queue: metrics: %w", err)
		}
		h := &m.QueueWait
		if name == histRunTime {
			h = &m.RunTime
		}
		if bucket >= 0 && bucket < len(h.Counts) {
			h.Counts[bucket] += n
		}
		h.Count += n
		h.SumMs += sum
	}
	rows.Close()

	now := q.now()
	var oldest sql.NullInt64
	if err := stmt("oldest_queued").QueryRowContext(ctx, sql.Named("now", model.Millis(now))).Scan(&oldest); err != nil {
		return m, fmt.Errorf("queue: metrics: %w", err)
	}
	if oldest.Valid {
		m.OldestQueuedAge = now.Sub(model.FromMillis(oldest.Int64))
	}
	return m, nil
}

// CheckCounters compares the counters the triggers keep (tasks per state,
// running and active tasks per user, the blocked flags) with a recount of
// the tasks, and returns an error describing any disagreement.
func (q *Queue) CheckCounters(ctx context.Context) error {
	var states, users, blocked int
	if err := q.readRow(ctx, "counters_check").Scan(&states, &users, &blocked); err != nil {
		return fmt.Errorf("queue: check counters: %w", err)
	}
	if states != 0 || users != 0 || blocked != 0 {
		return fmt.Errorf("queue: counters disagree with the tasks: %d state counts, %d users, %d blocked flags", states, users, blocked)
	}
	return nil
}
