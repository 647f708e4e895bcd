package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/model"
)

// ScheduleDefaults returns spec with the defaults of its kind
// (Options.Defaults) filling the cost budget and step limit it names none
// of, as AddSchedule stores it.
func (q *Queue) ScheduleDefaults(spec model.ScheduleSpec) model.ScheduleSpec {
	return spec.WithDefaults(q.defaults)
}

// AddSchedule stores a periodic schedule anchored at spec.Origin.
func (q *Queue) AddSchedule(ctx context.Context, spec model.ScheduleSpec, actor string) (model.Schedule, error) {
	if err := model.CheckName("actor", actor); err != nil {
		return model.Schedule{}, err
	}
	spec, err := q.ScheduleDefaults(spec).Validate()
	if err != nil {
		return model.Schedule{}, err
	}
	if err := q.checkPayload(spec.Kind, spec.Payload); err != nil {
		return model.Schedule{}, err
	}
	var s model.Schedule
	err = q.write(ctx, "add schedule", func(t *txn) error {
		var count int
		if err := t.queryRow(qScheduleCount).Scan(&count); err != nil {
			return fmt.Errorf("queue: add schedule: %w", err)
		}
		if count >= model.SchedulesMax {
			return fmt.Errorf("%d schedules (limit %d): %w", count, model.SchedulesMax, model.ErrQueueFull)
		}
		id, err := q.newID(model.ScheduleIDPrefix, model.ScheduleKey(spec))
		if err != nil {
			return err
		}
		s = model.Schedule{ID: id, ScheduleSpec: spec, LastRun: -1, CreatedAt: t.now}
		if err := t.execOne(qScheduleInsert, sql.Named("id", s.ID), sql.Named("user", s.User),
			sql.Named("kind", s.Kind), sql.Named("payload", s.Payload), sql.Named("cost_budget", s.CostBudget),
			sql.Named("steps_max", s.StepsMax), sql.Named("priority", s.Priority),
			sql.Named("origin", model.Millis(s.Origin)), sql.Named("period_ms", s.Period.Milliseconds()),
			sql.Named("now", model.Millis(t.now))); err != nil {
			return err
		}
		return t.emit(model.Event{Kind: model.EventScheduleAdded, Actor: actor, Detail: model.DetailSchedule(s.ID)})
	})
	return s, err
}

func scanSchedules(rows *sql.Rows) ([]model.Schedule, error) {
	defer rows.Close()
	out := []model.Schedule{}
	for rows.Next() {
		var s model.Schedule
		var origin, period, created int64
		if err := rows.Scan(&s.ID, &s.User, &s.Kind, &s.Payload, &s.CostBudget, &s.StepsMax, &s.Priority,
			&origin, &period, &s.LastRun, &created); err != nil {
			return nil, fmt.Errorf("queue: scan schedule: %w", err)
		}
		s.Origin, s.Period, s.CreatedAt = model.FromMillis(origin), time.Duration(period)*time.Millisecond, model.FromMillis(created)
		out = append(out, s)
	}
	return out, rows.Err()
}

// Schedules returns the schedules by ID.
func (q *Queue) Schedules(ctx context.Context) ([]model.Schedule, error) {
	rows, err := q.readRows(ctx, qSchedulesAll)
	if err != nil {
		return nil, err
	}
	return scanSchedules(rows)
}

// RemoveSchedule deletes a schedule; runs already enqueued stay.
func (q *Queue) RemoveSchedule(ctx context.Context, id, actor string) error {
	if err := model.CheckName("actor", actor); err != nil {
		return err
	}
	return q.write(ctx, "remove schedule", func(t *txn) error {
		n, err := t.exec(qScheduleDelete, sql.Named("id", id))
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("schedule %s: %w", id, model.ErrNotFound)
		}
		return t.emit(model.Event{Kind: model.EventScheduleRemoved, Actor: actor, Detail: model.DetailSchedule(id)})
	})
}

// EnqueueDue enqueues, for each schedule, its latest due run k (due at
// origin + k·period) unless run k was already enqueued. Missed runs are
// collapsed: after downtime only the latest is enqueued and the skipped
// ones are counted. Each run goes in under the key (schedule, k), unique in
// the database, and the pass runs in one transaction, so two schedulers or
// a restart never enqueue a run twice. A run refused by admission is tried
// again on the next pass.
//
// Like Claim and Reap, a pass with nothing to do costs one read and takes
// no write lock: the schedules are read first without a transaction, and
// the write transaction, which reads them again under its lock, is begun
// only when some schedule has a due run not yet enqueued.
func (q *Queue) EnqueueDue(ctx context.Context) (model.EnqueueResult, error) {
	rows, err := q.readRows(ctx, qSchedulesAll)
	if err != nil {
		return model.EnqueueResult{}, err
	}
	schedules, err := scanSchedules(rows)
	if err != nil {
		return model.EnqueueResult{}, err
	}
	if !anyDue(schedules, q.now()) {
		return model.EnqueueResult{}, nil
	}
	var res model.EnqueueResult
	err = q.write(ctx, "enqueue due", func(t *txn) error {
		rows, err := t.query(qSchedulesAll)
		if err != nil {
			return err
		}
		schedules, err := scanSchedules(rows)
		if err != nil {
			return err
		}
		for _, s := range schedules {
			k := s.DueRun(t.now)
			if k <= s.LastRun {
				continue
			}
			n, err := model.Normalize(model.SubmitRequest{User: s.User, Key: model.RunKey(s.ID, k), Kind: s.Kind, Payload: s.Payload,
				CostBudget: s.CostBudget, StepsMax: s.StepsMax, Priority: s.Priority,
				RunAt: s.Origin.Add(time.Duration(k) * s.Period), ScheduleID: s.ID, ScheduleRun: k})
			if err != nil {
				return fmt.Errorf("queue: schedule %s: %w", s.ID, err)
			}
			sub, err := t.submitSavepoint(n, "schedule:"+s.ID)
			if errors.Is(err, model.ErrQueueFull) {
				res.Refused++
				continue
			}
			if err != nil {
				return err
			}
			if err := t.execOne(qScheduleRan, sql.Named("id", s.ID), sql.Named("k", k)); err != nil {
				return err
			}
			if !sub.Replay {
				res.Enqueued++
				res.Collapsed += k - s.LastRun - 1
			}
		}
		return nil
	})
	return res, err
}

// anyDue reports whether some schedule has a run due at now that it has
// not enqueued yet.
func anyDue(schedules []model.Schedule, now time.Time) bool {
	for _, s := range schedules {
		if s.DueRun(now) > s.LastRun {
			return true
		}
	}
	return false
}

// submitSavepoint submits inside a savepoint, so a refused run leaves no
// partial write behind while the rest of the pass goes on. Storage errors
// still abort the pass.
func (t *txn) submitSavepoint(n model.Normalized, actor string) (model.SubmitResult, error) {
	if _, err := t.exec(qSavepoint); err != nil {
		return model.SubmitResult{}, err
	}
	res, err := t.submit(n, actor)
	if err != nil {
		if _, rerr := t.exec(qSavepointRollback); rerr != nil {
			return res, rerr
		}
	}
	if _, rerr := t.exec(qSavepointRelease); rerr != nil {
		return res, rerr
	}
	return res, err
}
