package queue

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/model"
	"github.com/leasehold/leasehold/queue/internal/seam"
)

// scanTask and scanTasks read the {task_columns} of rows: the typed task
// rows every store returns (seam.ScanTask).
type scanner = seam.Scanner

var (
	scanTask  = seam.ScanTask
	scanTasks = seam.ScanTasks
)

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
	return notFoundAs(err, what, model.ErrNotFound)
}

// taskNotFound is notFound for a task read by its ID: ErrTaskNotFound.
func taskNotFound(err error, id string) error {
	return notFoundAs(err, "task "+id, model.ErrTaskNotFound)
}

// notFoundAs turns sql.ErrNoRows into sentinel naming what was missing.
func notFoundAs(err error, what string, sentinel error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, sentinel)
	}
	return fmt.Errorf("queue: read %s: %w", what, err)
}
