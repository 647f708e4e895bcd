package queue

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/model"
)

// Task returns one task.
func (q *Queue) Task(ctx context.Context, id string) (model.Task, error) {
	t, err := scanTask(q.readRow(ctx, qTaskByID, sql.Named("id", id)))
	if err != nil {
		return model.Task{}, taskNotFound(err, id)
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
	name := qListAll
	switch {
	case f.State != "" && f.User != "":
		name = qListByUserState
	case f.State != "":
		name = qListByState
	case f.User != "":
		name = qListByUser
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
		rows, err = q.readRows(ctx, qEventsAll)
	} else {
		rows, err = q.readRows(ctx, qEventsByTask, sql.Named("task_id", taskID))
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
		rows, err = q.readRows(ctx, qEffectsAll)
	} else {
		rows, err = q.readRows(ctx, qEffectsByTask, sql.Named("task_id", taskID))
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
	m := model.Metrics{Depth: map[model.State]int64{}, ByKind: map[string]model.Counts{}, QueueWait: model.NewHistogram(),
		RunTime: model.NewHistogram()}
	if err := q.checkOpen("metrics"); err != nil {
		return m, err
	}
	tx, err := q.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return m, fmt.Errorf("queue: metrics: begin: %w", err)
	}
	t := &txn{q: q, ctx: ctx, tx: tx, now: q.now()}
	defer q.prepareLater(ctx, t)
	defer tx.Rollback()

	rows, err := t.query(qTalliesAll)
	if err != nil {
		return m, fmt.Errorf("queue: metrics: %w", err)
	}
	for rows.Next() {
		var name string
		var n, sum int64
		if err := rows.Scan(&name, &n, &sum); err != nil {
			rows.Close()
			return m, fmt.Errorf("queue: metrics: %w", err)
		}
		if err := addTally(&m, name, n, sum); err != nil {
			rows.Close()
			return m, fmt.Errorf("queue: metrics: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		rows.Close()
		return m, fmt.Errorf("queue: metrics: %w", err)
	}
	rows.Close()

	now := q.now()
	var oldest sql.NullInt64
	if err := t.queryRow(qOldestQueued, sql.Named("now", model.Millis(now))).Scan(&oldest); err != nil {
		return m, fmt.Errorf("queue: metrics: %w", err)
	}
	if oldest.Valid {
		m.OldestQueuedAge = now.Sub(model.FromMillis(oldest.Int64))
	}
	return m, nil
}

// addTally adds one row of the tallies table to m. Its name says what it
// counts (see the stores' migrations): state:STATE; the events of a kind
// and transition, by the kind of their task (TASK_KIND, empty for none)
// as event:KIND:FROM:TO:REASON:TASK_KIND, or, where a store counts the
// totals and the kinds apart (PostgreSQL), as event:KIND:FROM:TO:REASON
// for the totals and kind:TASK_KIND:KIND:FROM:TO:REASON for the kinds;
// the tasks pruned as pruned:STATE:TASK_KIND (pruned:STATE before the
// counts had kinds); and queue_wait:BUCKET and run_time:BUCKET.
func addTally(m *model.Metrics, name string, n, sum int64) error {
	parts := strings.Split(name, ":")
	switch {
	case parts[0] == "state" && len(parts) == 2:
		m.Depth[model.State(parts[1])] = n
	case parts[0] == "pruned" && len(parts) == 2:
		m.Pruned += n
	case parts[0] == "pruned" && len(parts) == 3:
		m.Pruned += n
		m.AddKind(parts[2], model.Counts{Pruned: n})
	case parts[0] == "event" && len(parts) == 5:
		model.Tally(m, model.EventKind(parts[1]), model.State(parts[2]), model.State(parts[3]), model.Reason(parts[4]), n)
	case parts[0] == "event" && len(parts) == 6:
		model.TallyKind(m, parts[5], model.EventKind(parts[1]), model.State(parts[2]), model.State(parts[3]), model.Reason(parts[4]), n)
	case parts[0] == "kind" && len(parts) == 6:
		m.AddKind(parts[1], model.EventCounts(model.EventKind(parts[2]), model.State(parts[3]), model.State(parts[4]), model.Reason(parts[5]), n))
	case (parts[0] == "queue_wait" || parts[0] == "run_time") && len(parts) == 2:
		h := &m.QueueWait
		if parts[0] == "run_time" {
			h = &m.RunTime
		}
		bucket, err := strconv.Atoi(parts[1])
		if err != nil || bucket < 0 || bucket >= len(h.Counts) {
			return fmt.Errorf("tally %q: bad bucket", name)
		}
		h.Counts[bucket] += n
		h.Count += n
		h.SumMs += sum
	default:
		return fmt.Errorf("unknown tally %q", name)
	}
	return nil
}

// CheckCounters compares the counters the triggers keep (tasks per state,
// running and active tasks per user, and the store's third check: on
// SQLite the blocked and limited flags of queued tasks, on PostgreSQL,
// which keeps no such flags, that no user runs more tasks than it has
// active) with a recount of the tasks, and returns an error describing any
// disagreement in the store's own terms.
func (q *Queue) CheckCounters(ctx context.Context) error {
	if err := checkCounters(q.readRow(ctx, qCountersCheck), thirdCheck(q.store.Capabilities())); err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	return nil
}

// thirdCheck names what the third count of a dialect's counters_check
// counts, for the message that reports it.
func thirdCheck(c capabilities) string {
	if c.RunningOverActive {
		return "users counted running more tasks than they have active"
	}
	return "queued tasks' blocked or limited flags"
}

// checkCounters reads the row of counters_check (counts of disagreements,
// each zero when the counters are right) and describes any disagreement,
// the third count as third says. Queue.CheckCounters and snapshot
// verification both use it.
func checkCounters(r interface{ Scan(...any) error }, third string) error {
	var states, users, other int
	if err := r.Scan(&states, &users, &other); err != nil {
		return fmt.Errorf("check counters: %w", err)
	}
	if states != 0 || users != 0 || other != 0 {
		return fmt.Errorf("counters disagree with the tasks: %d state counts, %d users, %d %s", states, users, other, third)
	}
	return nil
}

// QueuedByKind returns how many tasks of each kind are queued (a kind
// with none is absent): the metrics' depth by kind. It reads the queued
// tasks' kind index, so its cost grows with the queued tasks, not with
// the tasks that have ended.
func (q *Queue) QueuedByKind(ctx context.Context) (map[string]int64, error) {
	rows, err := q.readRows(ctx, qQueuedByKind)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var kind string
		var n int64
		if err := rows.Scan(&kind, &n); err != nil {
			return nil, fmt.Errorf("queue: queued by kind: %w", err)
		}
		out[kind] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue: queued by kind: %w", err)
	}
	return out, nil
}
