-- Queries used only by broken variants (build tag leasehold_broken), which
-- remove one safety mechanism each so the simulator can show it catches
-- the bug. Never compiled into a normal build.

-- name: claim_next_any_user
-- The claim without the per-user limit: blocked tasks are claimed too.
SELECT {task_columns} FROM tasks
WHERE state = 'queued' AND run_at <= :now AND (deadline = 0 OR deadline >= :now)
ORDER BY priority DESC, run_at, seq
LIMIT 1;

-- name: claim_any_any_user
SELECT 1 FROM tasks
WHERE state = 'queued' AND run_at <= :now AND (deadline = 0 OR deadline >= :now)
LIMIT 1;

-- name: heartbeat_after_expiry
-- Fenced writes that no longer check the lease.
UPDATE tasks SET lease_until = :lease_until, heartbeat_at = :now, updated_at = :now
WHERE id = :id AND version = :fence AND state = 'running';

-- name: step_apply_after_expiry
UPDATE tasks
SET steps_used = steps_used + 1, cost_used = cost_used + :cost, checkpoint = :checkpoint, updated_at = :now
WHERE id = :id AND version = :fence AND state = 'running' AND steps_used = :index;

-- name: pause_apply_after_expiry
UPDATE tasks
SET state = 'waiting_for_approval', owner = '', lease_until = 0, steps_used = steps_used + 1,
    approval_gate = :gate, approval_version = version, updated_at = :now
WHERE id = :id AND version = :fence AND state = 'running' AND steps_used = :index;

-- name: claim_next_past_deadline
-- The claim without the deadline: tasks past it are claimed too.
SELECT {task_columns} FROM tasks
WHERE state = 'queued' AND blocked = 0 AND run_at <= :now
ORDER BY priority DESC, run_at, seq
LIMIT 1;

-- name: claim_any_past_deadline
SELECT 1 FROM tasks
WHERE state = 'queued' AND blocked = 0 AND run_at <= :now
LIMIT 1;

-- name: claim_next_after_run_at
-- The claim with run_at exclusive: a task is skipped at exactly its run_at.
SELECT {task_columns} FROM tasks
WHERE state = 'queued' AND blocked = 0 AND run_at < :now AND (deadline = 0 OR deadline >= :now)
ORDER BY priority DESC, run_at, seq
LIMIT 1;

-- name: claim_any_after_run_at
SELECT 1 FROM tasks
WHERE state = 'queued' AND blocked = 0 AND run_at < :now AND (deadline = 0 OR deadline >= :now)
LIMIT 1;

-- name: charge_attempt
-- Charges an attempt outside the settle (pause-charges-attempt).
UPDATE tasks SET attempts_charged = attempts_charged + 1 WHERE id = :id;

-- name: heartbeat_at_lease_until
-- Fenced writes whose lease check is inclusive: a write at exactly
-- lease_until, when the lease has run out, is still accepted.
UPDATE tasks SET lease_until = :lease_until, heartbeat_at = :now, updated_at = :now
WHERE id = :id AND version = :fence AND state = 'running' AND lease_until >= :now;

-- name: step_apply_at_lease_until
UPDATE tasks
SET steps_used = steps_used + 1, cost_used = cost_used + :cost, checkpoint = :checkpoint, updated_at = :now
WHERE id = :id AND version = :fence AND state = 'running' AND lease_until >= :now AND steps_used = :index;

-- name: pause_apply_at_lease_until
UPDATE tasks
SET state = 'waiting_for_approval', owner = '', lease_until = 0, steps_used = steps_used + 1,
    approval_gate = :gate, approval_version = version, updated_at = :now
WHERE id = :id AND version = :fence AND state = 'running' AND lease_until >= :now AND steps_used = :index;

-- name: complete_fenced_at_lease_until
UPDATE tasks SET state = 'completed', reason = '', owner = '', lease_until = 0, updated_at = :now
WHERE id = :id AND version = :fence AND state = 'running' AND lease_until >= :now;
