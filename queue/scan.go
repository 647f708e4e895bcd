package queue

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/model"
)

// scanner is a *sql.Row or *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// scanTask reads the {task_columns} of one row.
func scanTask(s scanner) (model.Task, error) {
	var t model.Task
	var state, reason string
	var runAt, deadline, leaseUntil, heartbeatAt, claimedAt, queuedAt, createdAt, updatedAt int64
	var cancelRequested int
	err := s.Scan(&t.Seq, &t.ID, &t.User, &t.Key, &t.RequestHash, &t.Payload, &state, &reason,
		&t.Priority, &runAt, &deadline, &t.Version, &t.AttemptsCharged, &t.AttemptsMax, &t.Owner,
		&leaseUntil, &heartbeatAt, &claimedAt, &queuedAt, &t.CostBudget, &t.CostUsed, &t.StepsMax,
		&t.StepsUsed, &t.Checkpoint, &cancelRequested, &t.CancelledBy, &t.ApprovedBy, &t.ApprovalGate,
		&t.ApprovalVersion, &t.ScheduleID, &t.ScheduleRun, &t.LastError, &createdAt, &updatedAt, &t.AttemptsFailed)
	if err != nil {
		return model.Task{}, err
	}
	t.State, t.Reason = model.State(state), model.Reason(reason)
	t.Attempt = int(t.Version)
	t.RunAt, t.Deadline = model.FromMillis(runAt), model.FromMillis(deadline)
	t.LeaseUntil, t.HeartbeatAt = model.FromMillis(leaseUntil), model.FromMillis(heartbeatAt)
	t.ClaimedAt, t.QueuedAt = model.FromMillis(claimedAt), model.FromMillis(queuedAt)
	t.CreatedAt, t.UpdatedAt = model.FromMillis(createdAt), model.FromMillis(updatedAt)
	t.CancelRequested = cancelRequested != 0
	return t, nil
}

func scanTasks(rows *sql.Rows) ([]model.Task, error) {
	defer rows.Close()
	var out []model.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, fmt.Errorf("queue: scan task: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue: read tasks: %w", err)
	}
	return out, nil
}

func scanEvents(rows *sql.Rows) ([]model.Event, error) {
	defer rows.Close()
	var out []model.Event
	for rows.Next() {
		var e model.Event
		var kind, from, to, reason string
		var at int64
		if err := rows.Scan(&e.Seq, &e.TaskID, &kind, &e.Attempt, &e.Fence, &e.OpID, &from, &to,
			&reason, &e.Actor, &at, &e.Detail, &e.Scope); err != nil {
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

func scanEffect(s scanner) (model.Effect, error) {
	var e model.Effect
	var intentAt, receiptAt int64
	err := s.Scan(&e.OpID, &e.TaskID, &e.Step, &e.IntentFence, &intentAt, &e.ReceiptFence,
		&receiptAt, &e.ReceiptBy, &e.Result)
	e.IntentAt, e.ReceiptAt = model.FromMillis(intentAt), model.FromMillis(receiptAt)
	return e, err
}

func scanEffects(rows *sql.Rows) ([]model.Effect, error) {
	defer rows.Close()
	var out []model.Effect
	for rows.Next() {
		e, err := scanEffect(rows)
		if err != nil {
			return nil, fmt.Errorf("queue: scan effect: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue: read effects: %w", err)
	}
	return out, nil
}

// notFound turns sql.ErrNoRows into ErrNotFound naming what was missing.
func notFound(err error, what string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, model.ErrNotFound)
	}
	return fmt.Errorf("queue: read %s: %w", what, err)
}
