-- Retention (queue/prune.go): the statements of one prune pass, run in one
-- write transaction, and the dry run's counts. Migration 0006 says what the
-- schema allows: a task, its events and effects are deleted only while
-- prune_gate holds the pass's cutoff, only for a terminal task settled at
-- or before it, an effect only with its receipt. :ids is a JSON array of
-- task IDs, the pass's batch.
--
-- Sequence numbers are never given twice. The newest task (the highest
-- seq) is never pruned, and the pass's own event is numbered above every
-- event there was (prune_event_insert): SQLite numbers a new row one above
-- the highest remaining one, so removing the newest rows would hand their
-- numbers out again, behind a follower's or a lister's cursor.
--
-- LIMIT +:limit: see queries.sql's head.

-- name: prune_gate_open
INSERT INTO prune_gate (cutoff) VALUES (:cutoff);

-- name: prune_gate_close
DELETE FROM prune_gate;

-- name: prune_scan
-- Tasks in submission order from the pass's cursor, with whether each has
-- an effect without its receipt. Read in Go, which stops at the first task
-- created after the cutoff (none after it can have settled before it).
SELECT t.seq, t.id, t.state, t.created_at, t.updated_at,
       (SELECT COUNT(*) FROM effects e WHERE e.task_id = t.id AND e.receipt_at = 0)
FROM tasks t
WHERE t.seq > :after
ORDER BY t.seq
LIMIT +:limit;

-- name: prune_take
-- The batch, checked again in the pass's transaction: terminal, settled at
-- or before the cutoff, every effect receipted.
SELECT t.id, t.state FROM tasks t
WHERE t.id IN (SELECT value FROM json_each(:ids))
  AND t.state IN ('completed', 'failed', 'cancelled') AND t.updated_at <= :cutoff
  AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.task_id = t.id AND e.receipt_at = 0)
  AND t.seq < (SELECT MAX(seq) FROM tasks)
ORDER BY t.seq;

-- name: prune_events_top
-- The highest event number before the pass removes any: the pass's own
-- event is numbered above it (prune_event_insert).
SELECT COALESCE(MAX(seq), 0) FROM events;

-- name: prune_event_insert
-- The pass's pruned event, numbered above every event there was before the
-- pass (:top) and every one there is: SQLite would otherwise number it
-- after the highest remaining row, which may be below events the pass
-- removed, and a follower past those would never see it or what follows.
-- It concerns no task, so no prune removes it, and it stays the floor.
INSERT INTO events (seq, task_id, task_seq, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
VALUES (MAX(:top, (SELECT COALESCE(MAX(seq), 0) FROM events)) + 1,
        :task_id, COALESCE((SELECT t.seq FROM tasks t WHERE t.id = :task_id), 0), :kind, :attempt, :fence, :op_id, :from_state, :to_state, :reason, :actor, :at, :detail, :scope);

-- name: prune_tombstones
INSERT INTO idem_tombstones (user_id, idem_key, request_hash, task_id, state, settled_at, pruned_at, expires_at)
SELECT user_id, idem_key, request_hash, id, state, updated_at, :now, :expires_at
FROM tasks WHERE id IN (SELECT value FROM json_each(:ids));

-- name: prune_effects
DELETE FROM effects WHERE task_id IN (SELECT value FROM json_each(:ids));

-- name: prune_events
-- By events_task_seq (migration 0008): the tasks' seqs, and their IDs checked.
DELETE FROM events
WHERE task_seq IN (SELECT t.seq FROM tasks t WHERE t.id IN (SELECT value FROM json_each(:ids)))
  AND task_id IN (SELECT value FROM json_each(:ids));

-- name: prune_tasks
DELETE FROM tasks WHERE id IN (SELECT value FROM json_each(:ids));

-- name: prune_expired_any
-- Whether a tombstone's window has passed: with no task to remove either,
-- housekeeping's pass writes nothing (queue/prune.go, pruneLook).
SELECT EXISTS (SELECT 1 FROM idem_tombstones WHERE expires_at <= :now);

-- name: prune_expire
-- Tombstones whose window has passed, oldest first, a batch at a time.
DELETE FROM idem_tombstones
WHERE (user_id, idem_key) IN (SELECT user_id, idem_key FROM idem_tombstones
                              WHERE expires_at <= :now ORDER BY expires_at, user_id, idem_key LIMIT +:limit);

-- name: prune_count_tasks
-- The dry run: the terminal tasks a prune at the cutoff would remove, by
-- state.
SELECT t.state, COUNT(*) FROM tasks t
WHERE t.state IN ('completed', 'failed', 'cancelled') AND t.updated_at <= :cutoff
  AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.task_id = t.id AND e.receipt_at = 0)
  AND t.seq < (SELECT MAX(seq) FROM tasks)
GROUP BY t.state ORDER BY t.state;

-- name: prune_kept
-- The dry run: the first terminal tasks past the cutoff that stay for an
-- effect without its receipt.
SELECT t.id FROM tasks t
WHERE t.state IN ('completed', 'failed', 'cancelled') AND t.updated_at <= :cutoff
  AND EXISTS (SELECT 1 FROM effects e WHERE e.task_id = t.id AND e.receipt_at = 0)
ORDER BY t.seq LIMIT +:limit;

-- name: prune_count_rest
-- The dry run: their events and effects, the terminal tasks past the
-- cutoff kept for an effect without its receipt, and the tombstones whose
-- window has passed.
SELECT
    (SELECT COUNT(*) FROM events WHERE task_seq IN (
        SELECT t.seq FROM tasks t
        WHERE t.state IN ('completed', 'failed', 'cancelled') AND t.updated_at <= :cutoff
          AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.task_id = t.id AND e.receipt_at = 0)
          AND t.seq < (SELECT MAX(seq) FROM tasks))),
    (SELECT COUNT(*) FROM effects WHERE task_id IN (
        SELECT t.id FROM tasks t
        WHERE t.state IN ('completed', 'failed', 'cancelled') AND t.updated_at <= :cutoff
          AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.task_id = t.id AND e.receipt_at = 0)
          AND t.seq < (SELECT MAX(seq) FROM tasks))),
    (SELECT COUNT(*) FROM tasks t
        WHERE t.state IN ('completed', 'failed', 'cancelled') AND t.updated_at <= :cutoff
          AND EXISTS (SELECT 1 FROM effects e WHERE e.task_id = t.id AND e.receipt_at = 0)),
    (SELECT COUNT(*) FROM idem_tombstones WHERE expires_at <= :now);
