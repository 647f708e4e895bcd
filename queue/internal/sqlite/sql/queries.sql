-- Queries of the SQLite store. Each starts with a "-- name: NAME" line and
-- runs to the next one. {task_columns} expands to the fragment of that name,
-- the column order rows are scanned in. {broken:VARIANT|safe|broken} is
-- the safe text in every build; the leasehold_broken build also loads the
-- query with the broken text, run while that variant is switched on.
--
-- A JSON array of arrays or objects given as a parameter is walked with
-- jsonb_each, never json_each, wherever its elements are read with ->>:
-- json_each hands each element back as JSON text, which every ->> then
-- parses again, and a batch of events has twelve fields an element. The
-- results are the same (->> takes either form). Measured (work FULL 10
-- workers and intake NORMAL bulk, 3,000 jobs, alternating builds): about
-- 5,500 against 6,700 jobs/s, and 20,000 against 28,000.
--
-- Every LIMIT is written LIMIT +:limit. SQLite's planner reads a bare
-- bound LIMIT parameter's value, and a statement planned with one value
-- is compiled again (parsed and planned) before it runs with another; the
-- unary plus keeps the parameter out of planning, so a statement prepared
-- once runs with any limit. The limit applied is the same.

-- name: task_columns
seq, id, user_id, idem_key, request_hash, payload, state, reason, priority, run_at, deadline,
version, attempts_charged, attempts_max, owner, lease_until, heartbeat_at, claimed_at,
queued_at, cost_budget, cost_used, steps_max, steps_used, checkpoint, cancel_requested,
cancelled_by, approved_by, approval_gate, approval_version, schedule_id, schedule_run,
last_error, created_at, updated_at, attempts_failed, kind

-- name: schema_version
SELECT COALESCE(MAX(version), 0) FROM schema_migrations;

-- name: engine_version
SELECT 'SQLite ' || sqlite_version();

-- name: settings_all
SELECT key, value FROM settings;

-- name: setting_set
UPDATE settings SET value = :value WHERE key = :key;

-- name: task_by_id
SELECT {task_columns} FROM tasks WHERE id = :id;

-- name: task_by_key
-- The task under a user's key, or the tombstone a prune left of it (see
-- prune.sql), so that a replay is recognised after its task is pruned.
SELECT id, request_hash FROM tasks WHERE user_id = :user AND idem_key = :key
UNION ALL
SELECT task_id, request_hash FROM idem_tombstones WHERE user_id = :user AND idem_key = :key {broken:replay-ignores-tombstone||AND 0}
LIMIT 1;

-- name: user_ensure
INSERT INTO users (user_id) VALUES (:user) ON CONFLICT (user_id) DO NOTHING;

-- name: user_depth
-- The user's active tasks and depth limit, and, when :total, the active
-- tasks of every user (active_total's figure; 0 otherwise): what a submit
-- is admitted against, in one statement.
SELECT active, depth_limit,
       CASE WHEN :total THEN (SELECT COALESCE(SUM(n), 0) FROM tallies WHERE name IN ('state:queued', 'state:running', 'state:waiting_for_approval')) ELSE 0 END
FROM user_caps WHERE user_id = :user;

-- name: active_total
SELECT SUM(n) FROM tallies WHERE name IN ('state:queued', 'state:running', 'state:waiting_for_approval');

-- name: queued_by_kind
-- The queued tasks of each kind (metrics by kind): one scan of
-- tasks_claim_kind, the queued tasks' index, however many tasks have
-- ended.
SELECT kind, COUNT(*) FROM tasks WHERE state = 'queued' GROUP BY kind ORDER BY kind;

-- name: task_insert
INSERT INTO tasks (id, user_id, idem_key, request_hash, kind, payload, state, priority, run_at, deadline,
                   attempts_max, queued_at, cost_budget, steps_max, schedule_id, schedule_run,
                   created_at, updated_at)
VALUES (:id, :user, :key, :hash, :kind, :payload, 'queued', :priority, :run_at, :deadline,
        :attempts_max, :now, :cost_budget, :steps_max, :schedule_id, :schedule_run, :now, :now);

-- name: event_insert
-- task_seq is the seq of the task the event concerns (0: none), which
-- events_task_seq keys on (migration 0008): every statement that inserts
-- an event sets it so, after the task's row is written.
INSERT INTO events (task_id, task_seq, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
VALUES (:task_id, COALESCE((SELECT t.seq FROM tasks t WHERE t.id = :task_id), 0),
        :kind, :attempt, :fence, :op_id, :from_state, :to_state, :reason, :actor, :at, :detail, :scope);

-- name: tasks_by_keys
-- SubmitMany's task_by_key for a whole batch: the tasks, then the
-- tombstones, under the (user, key) pairs of :pairs, a JSON array of
-- [user, key] arrays, each row with the index of its pair and its source
-- (0 a task, 1 a tombstone).
SELECT b.key, t.id, t.request_hash, 0 FROM jsonb_each(:pairs) AS b
JOIN tasks AS t ON t.user_id = b.value ->> 0 AND t.idem_key = b.value ->> 1
UNION ALL
SELECT b.key, s.task_id, s.request_hash, 1 FROM jsonb_each(:pairs) AS b
JOIN idem_tombstones AS s ON s.user_id = b.value ->> 0 AND s.idem_key = b.value ->> 1 {broken:replay-ignores-tombstone||AND 0};

-- name: users_ensure
-- user_ensure for each user of :users, a JSON array of user IDs.
INSERT INTO users (user_id) SELECT value FROM json_each(:users) WHERE true
ON CONFLICT (user_id) DO NOTHING;

-- name: users_depth
-- user_depth for each user of :users, a JSON array of user IDs.
SELECT c.user_id, c.active, c.depth_limit FROM json_each(:users) AS b
JOIN user_caps AS c ON c.user_id = b.value;

-- name: tasks_insert
-- task_insert for each new task of a batch, in the batch's order: :rows is
-- a JSON array of objects (see batchRow in submit_many.go).
INSERT INTO tasks (id, user_id, idem_key, request_hash, kind, payload, state, priority, run_at, deadline,
                   attempts_max, queued_at, cost_budget, steps_max, schedule_id, schedule_run,
                   created_at, updated_at)
SELECT value ->> 'i', value ->> 'u', value ->> 'k', value ->> 'h', value ->> 'kd', value ->> 'p', 'queued',
       value ->> 'r', value ->> 't', value ->> 'd', :attempts_max, :now, value ->> 'c', value ->> 's',
       value ->> 'si', value ->> 'sr', :now, :now
FROM jsonb_each(:rows) WHERE true ORDER BY key;

-- name: events_insert
-- event_insert of each new task's submitted event, in the batch's order:
-- :events is a JSON array of objects (see submittedEvent in submit_many.go).
INSERT INTO events (task_id, task_seq, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
SELECT value ->> 'i', COALESCE((SELECT t.seq FROM tasks t WHERE t.id = value ->> 'i'), 0),
       :kind, 0, 0, '', '', :to_state, '', value ->> 'a', :at, '', :scope
FROM jsonb_each(:events) WHERE true ORDER BY key;

-- name: claim_next
-- The next :limit tasks in claim order whose users are not at their
-- running limit (blocked, kept by triggers), or fewer.
SELECT {task_columns} FROM tasks
WHERE state = 'queued' {broken:no-user-limit|AND blocked = 0|}
  AND run_at {broken:claim-exclusive-run-at|<=|<} :now
  {broken:claim-past-deadline|AND (deadline = 0 OR deadline >= :now)|}
ORDER BY priority DESC, run_at, seq
LIMIT +:limit;

-- name: claim_next_kinds
-- claim_next for a claim that names its kinds (:kinds, a JSON array): each
-- kind's first :limit tasks in claim order, by one descent of
-- tasks_claim_kind a kind, then the first :limit of them all, so that no
-- task of another kind is read.
SELECT {task_columns} FROM tasks
WHERE seq IN (
    SELECT s.seq FROM (SELECT DISTINCT value AS kind FROM json_each(:kinds)) AS k, tasks AS s
    WHERE s.seq IN (SELECT t.seq FROM tasks AS t
                    WHERE t.kind = k.kind AND t.state = 'queued' AND t.blocked = 0
                      AND t.run_at <= :now AND (t.deadline = 0 OR t.deadline >= :now)
                    ORDER BY t.priority DESC, t.run_at, t.seq LIMIT +:limit))
ORDER BY priority DESC, run_at, seq
LIMIT +:limit;

-- name: claim_room
-- Each user's running count and running limit (0: none), for the users
-- of a claim's candidates (:users, a JSON array).
SELECT user_id, running, running_limit FROM user_caps
WHERE user_id IN (SELECT value FROM json_each(:users));

-- name: claim_any
-- Whether any task is claimable, read without a transaction, so that an
-- idle worker's poll does not take the write lock. It visits the
-- priorities of the queued tasks from the highest, one descent of
-- tasks_claim_queued each (at most 201: model.PriorityMin to
-- PriorityMax), and looks for a due task at each, so that tasks waiting
-- for a later run_at are not read: as one scan in claim order, a poll
-- read every task not yet due before answering no (100,000 tasks due the
-- next day: 11-19 ms a poll, against 0.2 ms for 1,000).
WITH RECURSIVE prio(p) AS (
    SELECT (SELECT priority FROM tasks WHERE state = 'queued' {broken:no-user-limit|AND blocked = 0|}
            ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT priority FROM tasks WHERE state = 'queued' {broken:no-user-limit|AND blocked = 0|}
              AND priority < prio.p ORDER BY priority DESC LIMIT 1)
    FROM prio WHERE prio.p IS NOT NULL
)
SELECT 1 FROM prio
WHERE prio.p IS NOT NULL AND EXISTS (
    SELECT 1 FROM tasks
    WHERE state = 'queued' {broken:no-user-limit|AND blocked = 0|} AND priority = prio.p
      AND run_at {broken:claim-exclusive-run-at|<=|<} :now
      {broken:claim-past-deadline|AND (deadline = 0 OR deadline >= :now)|})
LIMIT 1;

-- name: claim_any_kinds
-- claim_any for a claim that names its kinds (:kinds, a JSON array): the
-- same walk of the priorities, kind by kind, by tasks_claim_kind.
WITH RECURSIVE k(kind) AS (SELECT DISTINCT value FROM json_each(:kinds)),
prio(kind, p) AS (
    SELECT k.kind, (SELECT priority FROM tasks WHERE kind = k.kind AND state = 'queued' AND blocked = 0
                    ORDER BY priority DESC LIMIT 1)
    FROM k
    UNION ALL
    SELECT prio.kind, (SELECT priority FROM tasks WHERE kind = prio.kind AND state = 'queued' AND blocked = 0
                         AND priority < prio.p ORDER BY priority DESC LIMIT 1)
    FROM prio WHERE prio.p IS NOT NULL
)
SELECT 1 FROM prio
WHERE prio.p IS NOT NULL AND EXISTS (
    SELECT 1 FROM tasks
    WHERE kind = prio.kind AND state = 'queued' AND blocked = 0 AND priority = prio.p
      AND run_at <= :now AND (deadline = 0 OR deadline >= :now))
LIMIT 1;

-- name: claim_task
-- Takes one task claim_next found. Claim applies the same changes to the
-- snapshot it returns (RETURNING would cost more than the rest of the
-- statement: SQLite buffers returned rows in a temporary table).
UPDATE tasks
SET state = 'running', version = version + 1, owner = :owner, lease_until = :lease_until,
    claimed_at = :now, heartbeat_at = :now, updated_at = :now
WHERE seq = :seq AND state = 'queued';

-- name: claim_tasks
-- Takes several tasks claim_next found (:seqs, a JSON array), as
-- claim_task takes one; the triggers run for each row.
UPDATE tasks
SET state = 'running', version = version + 1, owner = :owner, lease_until = :lease_until,
    claimed_at = :now, heartbeat_at = :now, updated_at = :now
WHERE seq IN (SELECT value FROM json_each(:seqs)) AND state = 'queued';

-- name: heartbeat
UPDATE tasks SET lease_until = :lease_until, heartbeat_at = :now, updated_at = :now
WHERE id = :id AND version = :fence AND state = 'running' AND {broken:write-after-lease-expiry|lease_until|:now + 1} {broken:write-at-lease-until|>|>=} :now;

-- name: step_apply
UPDATE tasks
SET steps_used = steps_used + 1, cost_used = cost_used + :cost, checkpoint = :checkpoint, updated_at = :now
WHERE id = :id AND version = :fence AND state = 'running' AND {broken:write-after-lease-expiry|lease_until|:now + 1} {broken:write-at-lease-until|>|>=} :now
  AND steps_used = :index;

-- name: touch
UPDATE tasks SET updated_at = :now WHERE id = :id;

-- name: pause_apply
UPDATE tasks
SET state = 'waiting_for_approval', owner = '', lease_until = 0, steps_used = steps_used + 1,
    approval_gate = :gate, approval_version = version, updated_at = :now
    {broken:pause-charges-attempt||, attempts_charged = attempts_charged + 1}
WHERE id = :id AND version = :fence AND state = 'running' AND {broken:write-after-lease-expiry|lease_until|:now + 1} {broken:write-at-lease-until|>|>=} :now
  AND steps_used = :index;

-- name: complete_fenced
-- Complete's fenced write: what settle does for running -> completed, under
-- the checks fenced makes (fence current, running, lease unexpired).
UPDATE tasks SET state = 'completed', reason = '', owner = '', lease_until = 0, last_error = '', updated_at = :now
WHERE id = :id AND version = :fence AND state = 'running'
  AND lease_until {broken:write-at-lease-until|>|>=} :now;

-- name: complete_batch
-- complete_fenced for many claims in one statement (a group's completions,
-- batch.go): :claims is a JSON array of [id, fence, now], one a claim, no
-- id twice. It returns the ids it completed; a claim it did not match is
-- left to Complete's own path, which says why.
UPDATE tasks SET state = 'completed', reason = '', owner = '', lease_until = 0, last_error = '', updated_at = c.now
FROM (SELECT value ->> 0 AS id, value ->> 1 AS fence, value ->> 2 AS now FROM jsonb_each(:claims)) AS c
WHERE tasks.id = c.id AND tasks.version = c.fence AND tasks.state = 'running'
  AND tasks.lease_until {broken:write-at-lease-until|>|>=} c.now
RETURNING tasks.id;

-- name: event_insert_batch
-- Many events in one statement, in order (a group's batched completions
-- and the claims after them, batch.go): :events is a JSON array of
-- [task_id, kind, attempt, fence, op_id, from_state, to_state, reason,
-- actor, at, detail, scope], event_insert's values.
INSERT INTO events (task_id, task_seq, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
SELECT value ->> 0, COALESCE((SELECT t.seq FROM tasks t WHERE t.id = value ->> 0), 0),
       value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5, value ->> 6, value ->> 7,
       value ->> 8, value ->> 9, value ->> 10, value ->> 11
FROM jsonb_each(:events) ORDER BY key;

-- name: settle
UPDATE tasks
SET state = :to_state, reason = :reason, owner = '', lease_until = 0, run_at = :run_at,
    queued_at = CASE WHEN :to_state = 'queued' THEN :now ELSE queued_at END,
    attempts_charged = :attempts_charged, attempts_failed = :attempts_failed, last_error = :last_error, cancelled_by = :cancelled_by,
    approved_by = :approved_by, cost_budget = :cost_budget, steps_max = :steps_max, updated_at = :now
WHERE id = :id AND state = :from_state AND version = :version;

-- name: cancel_request
UPDATE tasks SET cancel_requested = 1, cancelled_by = :actor, updated_at = :now
WHERE id = :id AND state = 'running' AND cancel_requested = 0;

-- name: effect_by_op
SELECT op_id, task_id, step, intent_fence, intent_at, receipt_fence, receipt_at, receipt_by, result
FROM effects WHERE op_id = :op_id;

-- name: effect_insert
INSERT INTO effects (op_id, task_id, step, intent_fence, intent_at)
VALUES (:op_id, :task_id, :step, :fence, :now);

-- name: effect_receipt
UPDATE effects
SET {broken:receipt-not-stored|receipt_fence = :fence, receipt_at = :now, receipt_by = :by, result = :result|receipt_at = 0}
WHERE op_id = :op_id AND receipt_at = 0;

-- name: effect_delete
DELETE FROM effects WHERE op_id = :op_id AND receipt_at = 0;

-- name: effects_by_task
SELECT e.op_id, e.task_id, e.step, e.intent_fence, e.intent_at, e.receipt_fence, e.receipt_at,
       e.receipt_by, e.result
FROM effects e WHERE e.task_id = :task_id ORDER BY e.step;

-- name: effects_all
SELECT e.op_id, e.task_id, e.step, e.intent_fence, e.intent_at, e.receipt_fence, e.receipt_at,
       e.receipt_by, e.result
FROM effects e JOIN tasks t ON t.id = e.task_id ORDER BY t.seq, e.step;

-- name: reap_deadlines
SELECT {task_columns} FROM tasks
WHERE deadline != 0 AND state IN ('queued', 'running', 'waiting_for_approval') AND deadline < :now
ORDER BY seq LIMIT +:limit;

-- name: reap_any
-- Whether the reaper has anything to do, read without a transaction.
SELECT EXISTS (SELECT 1 FROM tasks WHERE deadline != 0 AND state IN ('queued', 'running', 'waiting_for_approval') AND deadline < :now)
    OR EXISTS (SELECT 1 FROM tasks WHERE state = 'running' AND lease_until <= :now);

-- name: reap_leases
SELECT {task_columns} FROM tasks
WHERE state = 'running' AND lease_until <= :now
ORDER BY seq LIMIT +:limit;

-- name: list_all
SELECT {task_columns} FROM tasks ORDER BY seq LIMIT +:limit;

-- name: list_by_state
SELECT {task_columns} FROM tasks WHERE state = :state ORDER BY seq LIMIT +:limit;

-- name: list_by_user
SELECT {task_columns} FROM tasks WHERE user_id = :user ORDER BY seq LIMIT +:limit;

-- name: list_by_user_state
SELECT {task_columns} FROM tasks WHERE user_id = :user AND state = :state ORDER BY seq LIMIT +:limit;

-- name: events_by_task
-- events_task_seq (task_seq, seq) gives one task's events in seq order;
-- the task's ID is checked too.
SELECT seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope
FROM events WHERE task_seq = (SELECT t.seq FROM tasks t WHERE t.id = :task_id) AND task_id = :task_id
ORDER BY seq;

-- name: events_all
SELECT seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope
FROM events ORDER BY seq;

-- name: user_limits
SELECT user_id, running_max, depth_max FROM users WHERE running_max >= 0 OR depth_max >= 0 ORDER BY user_id;

-- name: user_limit_set
INSERT INTO users (user_id, running_max, depth_max) VALUES (:user, :running_max, :depth_max)
ON CONFLICT (user_id) DO UPDATE SET running_max = excluded.running_max, depth_max = excluded.depth_max;

-- name: reblock_user
UPDATE tasks
SET blocked = (SELECT running_limit > 0 AND running >= running_limit FROM user_caps WHERE user_id = :user),
    limited = (SELECT running_limit > 0 FROM user_caps WHERE user_id = :user)
WHERE user_id = :user AND state = 'queued';

-- name: reblock_all
UPDATE tasks
SET blocked = (SELECT running_limit > 0 AND running >= running_limit FROM user_caps c WHERE c.user_id = tasks.user_id),
    limited = (SELECT running_limit > 0 FROM user_caps c WHERE c.user_id = tasks.user_id)
WHERE state = 'queued';

-- name: schedule_insert
INSERT INTO schedules (id, user_id, kind, payload, cost_budget, steps_max, priority, origin, period_ms, created_at)
VALUES (:id, :user, :kind, :payload, :cost_budget, :steps_max, :priority, :origin, :period_ms, :now);

-- name: schedule_count
SELECT COUNT(*) FROM schedules;

-- name: schedules_all
SELECT id, user_id, kind, payload, cost_budget, steps_max, priority, origin, period_ms, last_run, created_at
FROM schedules ORDER BY id;

-- name: schedule_delete
DELETE FROM schedules WHERE id = :id;

-- name: schedule_ran
UPDATE schedules SET last_run = :k WHERE id = :id AND last_run < :k;

-- name: tallies_all
SELECT name, n, sum_ms FROM tallies;

-- name: oldest_queued
SELECT MIN(MAX(queued_at, run_at)) FROM tasks WHERE state = 'queued' AND run_at <= :now;

-- name: counters_check
SELECT
    (SELECT COUNT(*) FROM tallies s
        LEFT JOIN (SELECT 'state:' || state AS name, COUNT(*) AS n FROM tasks GROUP BY state) c ON c.name = s.name
        WHERE s.name GLOB 'state:*' AND s.n != COALESCE(c.n, 0)),
    (SELECT COUNT(*) FROM users u
        WHERE u.running != (SELECT COUNT(*) FROM tasks t WHERE t.user_id = u.user_id AND t.state = 'running')
           OR u.active != (SELECT COUNT(*) FROM tasks t WHERE t.user_id = u.user_id
                               AND t.state IN ('queued', 'running', 'waiting_for_approval'))),
    (SELECT COUNT(*) FROM tasks t JOIN user_caps c ON c.user_id = t.user_id WHERE t.state = 'queued'
        AND (t.blocked != (c.running_limit > 0 AND c.running >= c.running_limit)
             OR t.limited != (c.running_limit > 0)));

-- name: migrations_table
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    checksum   TEXT NOT NULL,
    applied_at INTEGER NOT NULL
);

-- name: migrations_table_exists
SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations';

-- name: migrations_applied
SELECT version, name, checksum FROM schema_migrations ORDER BY version;

-- name: migration_record
INSERT INTO schema_migrations (version, name, checksum, applied_at)
VALUES (:version, :name, :checksum, :now);

-- name: savepoint
SAVEPOINT submit_one;

-- name: savepoint_rollback
ROLLBACK TO submit_one;

-- name: savepoint_release
RELEASE submit_one;

-- name: group_savepoint
-- Each operation of a group commit runs inside its own savepoint (left on
-- the stack: the COMMIT releases them all).
SAVEPOINT group_member;

-- name: group_rollback
-- Rolls back the operation just run, and only it (the innermost
-- group_member savepoint).
ROLLBACK TO group_member;

-- name: events_after
SELECT seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope
FROM events WHERE seq > :after ORDER BY seq LIMIT +:limit;

-- name: health
-- The health probe: a counter that changes on every probe, so that its
-- transaction writes a page and commits it (a statement that changes no
-- bytes writes nothing, and succeeds on a full disk). Limits ignore the key.
INSERT INTO settings (key, value) VALUES ('health_probe', 1)
ON CONFLICT (key) DO UPDATE SET value = value + 1;

-- name: session_settings
-- The PRAGMAs of the connection it runs on (Queue.SessionSettings).
SELECT 'busy_timeout', CAST(timeout AS TEXT) FROM pragma_busy_timeout
UNION ALL SELECT 'journal_mode', journal_mode FROM pragma_journal_mode
UNION ALL SELECT 'journal_size_limit', CAST(journal_size_limit AS TEXT) FROM pragma_journal_size_limit
UNION ALL SELECT 'synchronous', CAST(synchronous AS TEXT) FROM pragma_synchronous
UNION ALL SELECT 'foreign_keys', CAST(foreign_keys AS TEXT) FROM pragma_foreign_keys
UNION ALL SELECT 'temp_store', CAST(temp_store AS TEXT) FROM pragma_temp_store;

-- name: wal_truncate
-- After a write failed with a full disk (queue/sqlite.go,
-- truncateLogAfterDiskFull): copy the log into the database and empty the
-- -wal file. Returns busy (1 if a reader or writer kept it from
-- finishing), the log's frames and the frames copied.
PRAGMA wal_checkpoint(TRUNCATE);

-- The audit trail filtered by task, actor and time (at in [since, until)),
-- in seq order. Audit picks one form by the filter, each able to use an
-- index of migration 0003, 0008 or 0001 and none sorting in a temporary B-tree
-- (TestAuditQueriesUseIndexes checks the plans). Where the form's index
-- already selects rows, the time filter is written +at so the planner
-- cannot prefer events_at, whose order is not seq's.

-- name: audit_by_task
-- events_task_seq (task_seq, seq) gives one task's events in seq order
-- (events_by_task).
SELECT seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope
FROM events
WHERE task_seq = (SELECT t.seq FROM tasks t WHERE t.id = :task_id) AND task_id = :task_id
  AND (:actor = '' OR actor = :actor) AND +at >= :since AND +at < :until
ORDER BY seq
LIMIT +:limit;

-- name: audit_by_actor
-- events_actor (actor, seq) gives one actor's events in seq order.
SELECT seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope
FROM events
WHERE actor = :actor AND +at >= :since AND +at < :until
ORDER BY seq
LIMIT +:limit;

-- name: audit_by_time
-- events_at (at, seq) orders by time, not seq (the clocks of several
-- processes need not agree), so it only finds the seqs in the window,
-- reading the index alone; the IN list keeps them in order, and the rows
-- are read by primary key in seq order, up to the limit.
SELECT seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope
FROM events
WHERE seq IN (SELECT seq FROM events WHERE at >= :since AND at < :until)
ORDER BY seq
LIMIT +:limit;

-- name: audit_all
-- No filter but the default window: the trail in primary-key order, up to
-- the limit.
SELECT seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope
FROM events
WHERE +at >= :since AND +at < :until
ORDER BY seq
LIMIT +:limit;
