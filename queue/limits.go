package queue

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/leasehold/leasehold/model"
)

// settingKeys maps the settings table to Limits.
func settingFields(l *model.Limits) map[string]any {
	return map[string]any{
		"depth_max":        &l.DepthMax,
		"user_depth_max":   &l.UserDepthMax,
		"user_running_max": &l.UserRunningMax,
		"attempts_max":     &l.AttemptsMax,
		"grant_cost_max":   &l.GrantCostMax,
		"grant_steps_max":  &l.GrantStepsMax,
		"claim_batch_max":  &l.ClaimBatchMax,
	}
}

func readLimits(rows *sql.Rows) (model.Limits, error) {
	defer rows.Close()
	var l model.Limits
	fields := settingFields(&l)
	for rows.Next() {
		var key string
		var value int64
		if err := rows.Scan(&key, &value); err != nil {
			return l, fmt.Errorf("queue: read settings: %w", err)
		}
		switch p := fields[key].(type) {
		case *int:
			*p = int(value)
		case *int64:
			*p = value
		}
	}
	return l, rows.Err()
}

// limits reads the limits inside the transaction.
func (t *txn) limits() (model.Limits, error) {
	rows, err := t.query(qSettingsAll)
	if err != nil {
		return model.Limits{}, err
	}
	return readLimits(rows)
}

// Limits returns the limits and the per-user overrides, by user.
func (q *Queue) Limits(ctx context.Context) (model.Limits, []model.UserLimit, error) {
	rows, err := q.readRows(ctx, qSettingsAll)
	if err != nil {
		return model.Limits{}, nil, err
	}
	limits, err := readLimits(rows)
	if err != nil {
		return model.Limits{}, nil, err
	}
	rows, err = q.readRows(ctx, qUserLimits)
	if err != nil {
		return model.Limits{}, nil, err
	}
	defer rows.Close()
	users := []model.UserLimit{}
	for rows.Next() {
		var u model.UserLimit
		if err := rows.Scan(&u.User, &u.RunningMax, &u.DepthMax); err != nil {
			return model.Limits{}, nil, fmt.Errorf("queue: read user limits: %w", err)
		}
		users = append(users, u)
	}
	return limits, users, rows.Err()
}

// SetLimits replaces the limits; every process reads them from the
// database, so all enforce the same ones.
func (q *Queue) SetLimits(ctx context.Context, l model.Limits, actor string) error {
	if err := model.CheckName("actor", actor); err != nil {
		return err
	}
	if err := l.Validate(); err != nil {
		return err
	}
	return q.write(ctx, "set limits", func(t *txn) error {
		for key, p := range settingFields(&l) {
			var value int64
			switch v := p.(type) {
			case *int:
				value = int64(*v)
			case *int64:
				value = *v
			}
			if err := t.execOne(qSettingSet, sql.Named("key", key), sql.Named("value", value)); err != nil {
				return err
			}
		}
		if err := t.reblock(qReblockAll); err != nil {
			return err
		}
		return t.emit(model.Event{Kind: model.EventLimitsSet, Actor: actor, Detail: model.DetailLimits(l)})
	})
}

// SetUserLimit sets one user's overrides (model.Inherit keeps a default).
func (q *Queue) SetUserLimit(ctx context.Context, u model.UserLimit, actor string) error {
	if err := model.CheckName("actor", actor); err != nil {
		return err
	}
	if err := u.Validate(); err != nil {
		return err
	}
	return q.write(ctx, "set user limit", func(t *txn) error {
		if _, err := t.exec(qUserLimitSet, sql.Named("user", u.User),
			sql.Named("running_max", u.RunningMax), sql.Named("depth_max", u.DepthMax)); err != nil {
			return err
		}
		if err := t.reblock(qReblockUser, sql.Named("user", u.User)); err != nil {
			return err
		}
		return t.emit(model.Event{Kind: model.EventLimitsSet, Actor: actor, Detail: model.DetailUserLimit(u)})
	})
}

// reblock re-evaluates the blocked flags of queued tasks after a limit
// changed, in a store that keeps such flags (SQLite's triggers do). A store
// whose claim reads each user's limit and running count under the user's
// row lock (PostgreSQL's) keeps none, and its SQL has no reblock queries.
func (t *txn) reblock(name queryName, args ...any) error {
	if !t.q.store.Capabilities().BlockedFlags {
		return nil
	}
	_, err := t.exec(name, args...)
	return err
}
