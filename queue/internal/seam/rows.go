package seam

import (
	"database/sql"
	"fmt"

	"github.com/leasehold/leasehold/model"
)

// Scanner is a *sql.Row or *sql.Rows.
type Scanner interface {
	Scan(dest ...any) error
}

// ScanTask reads the {task_columns} of one row.
func ScanTask(s Scanner) (model.Task, error) {
	var t model.Task
	var state, reason string
	var runAt, deadline, leaseUntil, heartbeatAt, claimedAt, queuedAt, createdAt, updatedAt int64
	var cancelRequested int
	err := s.Scan(&t.Seq, &t.ID, &t.User, &t.Key, &t.RequestHash, &t.Payload, &state, &reason,
		&t.Priority, &runAt, &deadline, &t.Version, &t.AttemptsCharged, &t.AttemptsMax, &t.Owner,
		&leaseUntil, &heartbeatAt, &claimedAt, &queuedAt, &t.CostBudget, &t.CostUsed, &t.StepsMax,
		&t.StepsUsed, &t.Checkpoint, &cancelRequested, &t.CancelledBy, &t.ApprovedBy, &t.ApprovalGate,
		&t.ApprovalVersion, &t.ScheduleID, &t.ScheduleRun, &t.LastError, &createdAt, &updatedAt, &t.AttemptsFailed, &t.Kind)
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

// ScanTasks reads every row of rows as ScanTask does, and closes rows.
func ScanTasks(rows *sql.Rows) ([]model.Task, error) {
	defer rows.Close()
	var out []model.Task
	for rows.Next() {
		t, err := ScanTask(rows)
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
