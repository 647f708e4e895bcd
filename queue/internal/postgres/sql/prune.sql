-- Retention (queue/prune.go), as SQLite's prune.sql: the statements of one
-- prune pass, run in one transaction, and the dry run's counts. Migration
-- 0002 says what the schema allows: a task, its events and effects are
-- deleted only while the transaction's leasehold.prune_cutoff is set, only
-- for a terminal task settled at or before it, an effect only with its
-- receipt. :ids is a JSON array of task IDs, the pass's batch.
--
-- The newest task (the highest seq) is never pruned here either, so the
-- two stores prune alike; PostgreSQL's sequences never give a number
-- twice, so its prune_event_insert is event_insert's (see SQLite's).

-- name: prune_gate_open
SELECT set_config('leasehold.prune_cutoff', (:cutoff::BIGINT)::TEXT, true);

-- name: prune_gate_close
SELECT set_config('leasehold.prune_cutoff', '', true);

-- name: prune_scan
-- Tasks in submission order from the pass's cursor, with whether each has
-- an effect without its receipt. Read in Go, which stops at the first task
-- created after the cutoff (none after it can have settled before it, but
-- for the clock skew between machines, which only delays a prune).
SELECT t.seq, t.id, t.state, t.created_at, t.updated_at,
       (SELECT COUNT(*) FROM effects e WHERE e.task_id = t.id AND e.receipt_at = 0)
FROM tasks t
WHERE t.seq > :after
ORDER BY t.seq
LIMIT :limit;

-- name: prune_take
-- The batch, checked again and locked: terminal, settled at or before the
-- cutoff, every effect receipted. A task another prune holds is skipped
-- (that prune removes it), so two machines' housekeeping never wait on
-- each other.
SELECT t.id, t.state FROM tasks t
WHERE t.id IN (SELECT jsonb_array_elements_text(:ids::jsonb))
  AND t.state IN ('completed', 'failed', 'cancelled') AND t.updated_at <= :cutoff
  AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.task_id = t.id AND e.receipt_at = 0)
  AND t.seq < (SELECT MAX(seq) FROM tasks)
ORDER BY t.seq
FOR UPDATE OF t SKIP LOCKED;

-- name: prune_events_top
-- The highest event number before the pass removes any: the pass's own
-- event is numbered above it (prune_event_insert).
SELECT COALESCE(MAX(seq), 0) FROM events;

-- name: prune_event_insert
-- The pass's pruned event: events_seq never gives a number twice, so it is
-- event_insert's (:top, which SQLite's needs, is not used).
WITH writing AS (SELECT pg_advisory_xact_lock_shared(7424602, hashtext(current_schema())) AS locked)
INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
SELECT :task_id, :kind, :attempt, :fence, :op_id, :from_state, :to_state, :reason, :actor, :at, :detail, :scope
FROM writing;

-- name: prune_tombstones
INSERT INTO idem_tombstones (user_id, idem_key, request_hash, task_id, state, settled_at, pruned_at, expires_at)
SELECT user_id, idem_key, request_hash, id, state, updated_at, :now, :expires_at
FROM tasks WHERE id IN (SELECT jsonb_array_elements_text(:ids::jsonb));

-- name: prune_effects
DELETE FROM effects WHERE task_id IN (SELECT jsonb_array_elements_text(:ids::jsonb));

-- name: prune_events
-- The batch's events, by their tasks' trails (migration 0004): run before
-- prune_tasks.
DELETE FROM events WHERE seq IN (SELECT unnest(t.trail) FROM tasks t
                                 WHERE t.id IN (SELECT jsonb_array_elements_text(:ids::jsonb)));

-- name: prune_tasks
DELETE FROM tasks WHERE id IN (SELECT jsonb_array_elements_text(:ids::jsonb));

-- name: prune_expired_any
-- Whether a tombstone's window has passed: with no task to remove either,
-- housekeeping's pass writes nothing (queue/prune.go, pruneLook).
SELECT EXISTS (SELECT 1 FROM idem_tombstones WHERE expires_at <= :now);

-- name: prune_expire
-- Tombstones whose window has passed, oldest first, a batch at a time;
-- one another prune holds is skipped.
DELETE FROM idem_tombstones
WHERE (user_id, idem_key) IN (SELECT user_id, idem_key FROM idem_tombstones
                              WHERE expires_at <= :now ORDER BY expires_at, user_id COLLATE "C", idem_key COLLATE "C" LIMIT :limit
                              FOR UPDATE SKIP LOCKED);

-- name: prune_count_tasks
-- The dry run: the terminal tasks a prune at the cutoff would remove, by
-- state.
SELECT t.state, COUNT(*) FROM tasks t
WHERE t.state IN ('completed', 'failed', 'cancelled') AND t.updated_at <= :cutoff
  AND NOT EXISTS (SELECT 1 FROM effects e WHERE e.task_id = t.id AND e.receipt_at = 0)
  AND t.seq < (SELECT MAX(seq) FROM tasks)
GROUP BY t.state ORDER BY t.state COLLATE "C";

-- name: prune_kept
-- The dry run: the first terminal tasks past the cutoff that stay for an
-- effect without its receipt.
SELECT t.id FROM tasks t
WHERE t.state IN ('completed', 'failed', 'cancelled') AND t.updated_at <= :cutoff
  AND EXISTS (SELECT 1 FROM effects e WHERE e.task_id = t.id AND e.receipt_at = 0)
ORDER BY t.seq LIMIT :limit;

-- name: prune_count_rest
-- The dry run: their events and effects, the terminal tasks past the
-- cutoff kept for an effect without its receipt, and the tombstones whose
-- window has passed.
SELECT
    (SELECT COUNT(*) FROM events WHERE seq IN (
        SELECT unnest(t.trail) FROM tasks t
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

-- name: tally_compact
-- tally_deltas gains a row per counter change (see the baseline); this
-- folds the oldest :limit rows into one row per name, in one statement, so
-- that the table stays small. Rows a concurrent transaction inserts are not
-- in the statement's snapshot and stay as they are; two compactions at
-- once fold disjoint rows (a row the other deleted is skipped), and every
-- sum over the table is the same before and after.
WITH gone AS (
    DELETE FROM tally_deltas
    WHERE id IN (SELECT id FROM tally_deltas ORDER BY id LIMIT :limit FOR UPDATE SKIP LOCKED)
    RETURNING name, n, sum_ms
)
INSERT INTO tally_deltas (name, n, sum_ms)
SELECT name, SUM(n)::BIGINT, SUM(sum_ms)::BIGINT FROM gone GROUP BY name ORDER BY name COLLATE "C";

-- name: tally_rows
-- How many rows tally_deltas holds, up to :limit + 1: compaction runs only
-- once there are more than :limit.
SELECT COUNT(*) FROM (SELECT 1 FROM tally_deltas LIMIT :limit + 1) r;
