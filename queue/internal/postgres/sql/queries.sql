-- Queries of the PostgreSQL store, under the same names as the SQLite
-- store's (a test compares the two lists). Each starts with a "-- name: NAME"
-- line and runs to the next one. {task_columns} expands to the fragment of
-- that name, the column order rows are scanned in. Parameters are written
-- :name, as in SQLite's file, and rewritten to $n when the file loads.
-- Text is ordered with COLLATE "C", so the order does not depend on the
-- server's locale. {broken:VARIANT|safe|broken} is the safe text in every
-- build; the leasehold_broken build also loads the query with the broken
-- text, run while that variant is switched on (the same variants as
-- SQLite's file: a test compares them).

-- The advisory locks are keyed by a constant and the schema, so queues in
-- different schemas of one database do not wait on each other.

-- name: task_columns
seq, id, user_id, idem_key, request_hash, payload, state, reason, priority, run_at, deadline,
version, attempts_charged, attempts_max, owner, lease_until, heartbeat_at, claimed_at,
queued_at, cost_budget, cost_used, steps_max, steps_used, checkpoint, cancel_requested,
cancelled_by, approved_by, approval_gate, approval_version, schedule_id, schedule_run,
last_error, created_at, updated_at, attempts_failed, kind

-- name: schema_version
SELECT COALESCE(MAX(version), 0) FROM schema_migrations;

-- name: engine_version
SELECT 'PostgreSQL ' || current_setting('server_version');

-- name: settings_all
SELECT key, value FROM settings;

-- name: setting_set
UPDATE settings SET value = :value WHERE key = :key;

-- name: task_by_id
SELECT {task_columns} FROM tasks WHERE id = :id;

-- name: task_by_key
-- The task under a user's key, or the tombstone a prune left of it (see
-- prune.sql), so that a replay is recognised after its task is pruned.
-- Keys are looked up in task_keys.
SELECT t.id, t.request_hash FROM task_keys k JOIN tasks t ON t.seq = k.seq
WHERE k.user_id = :user AND k.idem_key = :key
UNION ALL
SELECT task_id, request_hash FROM idem_tombstones WHERE user_id = :user AND idem_key = :key
LIMIT 1;

-- name: user_ensure
-- Admission (functions.sql's admission: a slot of its own far from every
-- cap, the exclusive path near one), then the user's row. It runs before
-- the submit writes anything, so it may wait for the exclusive path, and
-- the depth checks that follow (user_depth, a statement of its own and so
-- reading after admission; active_total for a batch) see every task
-- admitted before: the caps cannot be raced by submits on other
-- connections or machines. Claims and settles only lower the counts, and
-- do not take it. The users' pending count changes are folded once they
-- pile up (fold_user_deltas).
WITH admission AS (SELECT admission(ARRAY[CAST(:user AS TEXT)]) AS path),
folded AS (SELECT fold_user_deltas(leasehold_fold_rows()) AS done FROM admission)
INSERT INTO users (user_id) SELECT :user FROM admission, folded
ON CONFLICT (user_id) DO NOTHING;

-- name: user_depth
-- The user's active tasks and depth limit, and, when :total, the queue's
-- active tasks (active_total's figure; 0 otherwise): what a submit is
-- admitted against, in one statement.
SELECT active, depth_limit, CASE WHEN :total THEN active_tasks(leasehold_fold_rows()) ELSE 0 END
FROM user_caps WHERE user_id = :user;

-- name: active_total
-- The queue's active tasks, by its state counts (functions.sql's
-- active_tasks, which folds their rows once they pile up): read under
-- admission's lock, after users_ensure.
SELECT active_tasks(leasehold_fold_rows());

-- name: queued_by_kind
-- The queued tasks of each kind (metrics by kind): one scan of
-- tasks_claim_kind, the queued tasks' index, however many tasks have
-- ended.
SELECT kind, COUNT(*) FROM tasks WHERE state = 'queued' GROUP BY kind ORDER BY kind COLLATE "C";

-- name: task_insert
-- The task and its key (task_keys: a used key fails here, unique_violation).
WITH task AS (
    INSERT INTO tasks (id, user_id, idem_key, request_hash, kind, payload, state, priority, run_at, deadline,
                       attempts_max, queued_at, cost_budget, steps_max, schedule_id, schedule_run,
                       created_at, updated_at)
    VALUES (:id, :user, :key, :hash, :kind, :payload, 'queued', :priority, :run_at, :deadline,
            :attempts_max, :now, :cost_budget, :steps_max, :schedule_id, :schedule_run, :now, :now)
    RETURNING seq
)
INSERT INTO task_keys (user_id, idem_key, seq) SELECT :user, :key, seq FROM task;

-- name: event_insert
-- The shared advisory lock, held until the transaction ends, is taken
-- before the row's seq is drawn: see events_after_lock.
WITH writing AS (SELECT pg_advisory_xact_lock_shared(7424602, hashtext(current_schema())) AS locked)
INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
SELECT :task_id, :kind, :attempt, :fence, :op_id, :from_state, :to_state, :reason, :actor, :at, :detail, :scope
FROM writing;

-- name: tasks_by_keys
-- SubmitMany's task_by_key for a whole batch: the tasks, then the
-- tombstones, under the (user, key) pairs of :pairs, a JSON array of
-- [user, key] arrays, each row with the index of its pair and its source
-- (0 a task, 1 a tombstone).
SELECT b.ord - 1, t.id, t.request_hash, 0
FROM json_array_elements((:pairs::text)::json) WITH ORDINALITY AS b(value, ord)
JOIN task_keys AS k ON k.user_id = b.value ->> 0 AND k.idem_key = b.value ->> 1
JOIN tasks AS t ON t.seq = k.seq
UNION ALL
SELECT b.ord - 1, s.task_id, s.request_hash, 1
FROM json_array_elements((:pairs::text)::json) WITH ORDINALITY AS b(value, ord)
JOIN idem_tombstones AS s ON s.user_id = b.value ->> 0 AND s.idem_key = b.value ->> 1;

-- name: users_ensure
-- user_ensure for the users of :users, a JSON array of user IDs naming
-- each user once for each task of the batch that may be new: admission
-- for them all, the fold, then the users' rows.
WITH admission AS (SELECT admission(ARRAY(SELECT json_array_elements_text((:users::text)::json))) AS path),
folded AS (SELECT fold_user_deltas(leasehold_fold_rows()) AS done FROM admission)
INSERT INTO users (user_id)
SELECT DISTINCT b.value FROM admission, folded, json_array_elements_text((:users::text)::json) AS b(value)
ON CONFLICT (user_id) DO NOTHING;

-- name: users_depth
-- user_depth for each user of :users, a JSON array of user IDs.
SELECT c.user_id, c.active, c.depth_limit
FROM json_array_elements_text((:users::text)::json) AS b(value)
JOIN user_caps AS c ON c.user_id = b.value;

-- name: tasks_insert
-- task_insert for each new task of a batch, in the batch's order: :rows is
-- a JSON array of objects (see batchRow in submit_many.go), each parsed
-- once; and their keys, as task_insert.
WITH task AS (
    INSERT INTO tasks (id, user_id, idem_key, request_hash, kind, payload, state, priority, run_at, deadline,
                       attempts_max, queued_at, cost_budget, steps_max, schedule_id, schedule_run,
                       created_at, updated_at)
    SELECT b.i, b.u, b.k, b.h, b.kd, b.p, 'queued', b.r, b.t, b.d, :attempts_max::BIGINT, :now::BIGINT,
           b.c, b.s, b.si, b.sr, :now::BIGINT, :now::BIGINT
    FROM ROWS FROM (json_to_recordset((:rows::text)::json)
             AS (i TEXT, u TEXT, k TEXT, h TEXT, kd TEXT, p TEXT, r BIGINT, t BIGINT, d BIGINT, c BIGINT, s BIGINT,
                 si TEXT, sr BIGINT))
         WITH ORDINALITY AS b(i, u, k, h, kd, p, r, t, d, c, s, si, sr, ord)
    ORDER BY b.ord
    RETURNING user_id, idem_key, seq
)
INSERT INTO task_keys (user_id, idem_key, seq) SELECT user_id, idem_key, seq FROM task ORDER BY seq;

-- name: events_insert
-- event_insert of each new task's submitted event, in the batch's order,
-- under event_insert's shared lock: :events is a JSON array of objects
-- (see submittedEvent in submit_many.go).
WITH writing AS (SELECT pg_advisory_xact_lock_shared(7424602, hashtext(current_schema())) AS locked)
INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
SELECT b.i, :kind::TEXT, 0, 0, '', '', :to_state::TEXT, '', b.a, :at::BIGINT, '', :scope::TEXT
FROM writing, ROWS FROM (json_to_recordset((:events::text)::json) AS (i TEXT, a TEXT))
     WITH ORDINALITY AS b(i, a, ord)
ORDER BY b.ord;

-- name: claim_batch
-- A claim, whole, in one statement (functions.sql's claim_batch): the next
-- tasks in claim order, locked, skipping those another claimer holds;
-- their users' counter rows, locked, skipping those another transaction
-- holds; those users' counter changes folded; and the tasks of users with
-- room taken (running, version + 1, the owner and lease). It returns the
-- tasks taken as they were before, sorted here in claim order.
-- :kinds is '' (every kind) or a JSON array of the kinds the claim serves.
SELECT {task_columns} FROM claim_batch(:now, :max, :owner, :lease_until, NULLIF(:kinds, '')::jsonb)
ORDER BY priority DESC, run_at, seq;

-- name: submit_batch
-- tasks_insert and events_insert of a batch in one statement
-- (functions.sql's submit_batch): the tasks with their trails, their keys
-- and their submitted events; it returns how many it inserted.
SELECT submit_batch(:rows, :attempts_max, :now, :scope);

-- name: submit_one
-- A Submit alone in its group in one statement, its own transaction
-- (functions.sql's submit_one): the key's lookup, admission and the task
-- with its submitted event, or the refusal's outcome with nothing written.
SELECT outcome, task_id, n, lim FROM submit_one(:id, :user, :key, :hash, :kind, :payload, :priority, :run_at,
    :deadline, :now, :cost_budget, :steps_max, :schedule_id, :schedule_run, :actor, :scope, :timely);

-- name: complete_and_claim
-- A fused group (batch.go) in one statement, its own transaction
-- (functions.sql's complete_and_claim): the claims of :claims completed
-- (complete_batch's checks) with their events (:events), then up to :max
-- tasks claimed as claim_batch claims them, each with its claimed event.
-- It fails with SQLSTATE LH001, having written nothing, when a claim does
-- not match. It returns the tasks taken as they were before, sorted here
-- in claim order.
SELECT {task_columns} FROM complete_and_claim(:claims::jsonb, :events::jsonb, :now, :max, :owner, :lease_until, :scope,
    NULLIF(:kinds, '')::jsonb)
ORDER BY priority DESC, run_at, seq;

-- name: claim_any
-- Whether any task is claimable, read without a transaction, so that an
-- idle worker's poll takes no lock. It visits the priorities of the
-- queued tasks from the highest, one descent of tasks_claim_queued each
-- (at most 201: model.PriorityMin to PriorityMax), and looks for a due
-- task at each, so that tasks waiting for a later run_at are not read (as
-- SQLite's claim_any; read as one scan, 100,000 tasks due the next day
-- cost a poll 1.5 ms, against 0.4 ms for 1,000).
WITH RECURSIVE prio(p) AS (
    SELECT (SELECT priority FROM tasks WHERE state = 'queued' ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT priority FROM tasks WHERE state = 'queued' AND priority < prio.p ORDER BY priority DESC LIMIT 1)
    FROM prio WHERE prio.p IS NOT NULL
)
SELECT 1 FROM prio CROSS JOIN LATERAL (
    -- LIMIT keeps the planner from joining it apart from prio: each
    -- priority's look is its own descent.
    SELECT 1 FROM tasks
    WHERE state = 'queued' AND priority = prio.p
      AND run_at {broken:claim-exclusive-run-at|<=|<} :now {broken:claim-past-deadline|AND (deadline = 0 OR deadline >= :now)|}
      {broken:no-user-limit|AND user_id IN (SELECT user_id FROM user_caps WHERE running_limit <= 0 OR running < running_limit)|}
    LIMIT 1) AS due
WHERE prio.p IS NOT NULL
LIMIT 1;

-- name: claim_any_kinds
-- claim_any for a claim that names its kinds (:kinds, a JSON array): the
-- same walk of the priorities, kind by kind, by tasks_claim_kind, so that
-- no task of another kind is read.
WITH RECURSIVE k(kind) AS (SELECT DISTINCT jsonb_array_elements_text(:kinds::jsonb)),
prio(kind, p) AS (
    SELECT k.kind, (SELECT priority FROM tasks WHERE kind = k.kind AND state = 'queued' ORDER BY priority DESC LIMIT 1)
    FROM k
    UNION ALL
    SELECT prio.kind, (SELECT priority FROM tasks WHERE kind = prio.kind AND state = 'queued' AND priority < prio.p
                       ORDER BY priority DESC LIMIT 1)
    FROM prio WHERE prio.p IS NOT NULL
)
SELECT 1 FROM prio CROSS JOIN LATERAL (
    SELECT 1 FROM tasks
    WHERE kind = prio.kind AND state = 'queued' AND priority = prio.p
      AND run_at <= :now AND (deadline = 0 OR deadline >= :now)
    -- The order is tasks_claim_kind's: without it the planner may read
    -- this as a scan of tasks, every kind's.
    ORDER BY run_at LIMIT 1) AS due
WHERE prio.p IS NOT NULL
LIMIT 1;

-- name: heartbeat
UPDATE tasks SET lease_until = :lease_until, heartbeat_at = :now, updated_at = :now
WHERE id = :id AND version = :fence AND state = 'running' AND {broken:write-after-lease-expiry|lease_until|(:now::BIGINT + 1)} {broken:write-at-lease-until|>|>=} :now;

-- name: step_apply
UPDATE tasks
SET steps_used = steps_used + 1, cost_used = cost_used + :cost, checkpoint = :checkpoint, updated_at = :now
WHERE id = :id AND version = :fence AND state = 'running' AND {broken:write-after-lease-expiry|lease_until|(:now::BIGINT + 1)} {broken:write-at-lease-until|>|>=} :now
  AND steps_used = :index;

-- name: touch
UPDATE tasks SET updated_at = :now WHERE id = :id;

-- name: pause_apply
UPDATE tasks
SET state = 'waiting_for_approval', owner = '', lease_until = 0, steps_used = steps_used + 1,
    approval_gate = :gate, approval_version = version, updated_at = :now
    {broken:pause-charges-attempt||, attempts_charged = attempts_charged + 1}
WHERE id = :id AND version = :fence AND state = 'running' AND {broken:write-after-lease-expiry|lease_until|(:now::BIGINT + 1)} {broken:write-at-lease-until|>|>=} :now
  AND steps_used = :index;

-- name: complete_fenced
UPDATE tasks SET state = 'completed', reason = '', owner = '', lease_until = 0, last_error = '', updated_at = :now
WHERE id = :id AND version = :fence AND state = 'running'
  AND lease_until {broken:write-at-lease-until|>|>=} :now;

-- name: complete_batch
-- complete_fenced for many claims in one statement (a group's completions,
-- batch.go): :claims is a JSON array of [id, fence, now], one a claim, no
-- id twice. It returns the ids it completed; a claim it did not match is
-- left to Complete's own path, which says why. The rows are found by id
-- (id = ANY, the unique index), and the state test matches no partial
-- index (COALESCE): the planner, taking an unanalysed table's index of
-- running tasks for tiny, read every entry of it, dead ones included (731
-- entries and 64 heap blocks for a group of ten, against 18 and 2 by id).
UPDATE tasks SET state = 'completed', reason = '', owner = '', lease_until = 0, last_error = '', updated_at = c.now
FROM (SELECT e ->> 0 AS id, (e ->> 1)::bigint AS fence, (e ->> 2)::bigint AS now
      FROM jsonb_array_elements(:claims::jsonb) AS e) AS c
WHERE tasks.id = ANY(ARRAY(SELECT e ->> 0 FROM jsonb_array_elements(:claims::jsonb) AS e))
  AND tasks.id = c.id AND tasks.version = c.fence AND COALESCE(tasks.state, '') = 'running'
  AND tasks.lease_until {broken:write-at-lease-until|>|>=} c.now
RETURNING tasks.id;

-- name: event_insert_batch
-- Many events in one statement, in order (a group's batched completions
-- and the claims after them, batch.go): :events is a JSON array of
-- [task_id, kind, attempt, fence, op_id, from_state, to_state, reason,
-- actor, at, detail, scope], event_insert's values. The shared advisory
-- lock is event_insert's.
WITH writing AS (SELECT pg_advisory_xact_lock_shared(7424602, hashtext(current_schema())) AS locked)
INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
SELECT e ->> 0, e ->> 1, (e ->> 2)::bigint, (e ->> 3)::bigint, e ->> 4, e ->> 5, e ->> 6, e ->> 7,
       e ->> 8, (e ->> 9)::bigint, e ->> 10, e ->> 11
FROM writing, jsonb_array_elements(:events::jsonb) WITH ORDINALITY AS x(e, n)
ORDER BY x.n;

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
-- The reaper's statements lock the tasks they return, skipping any row
-- another session holds (SKIP LOCKED): a session cut off inside a
-- transaction (a partitioned worker) holds its tasks' rows until the
-- server ends it (idle_in_transaction_session_timeout), and a reaper that
-- waited for them would hold up every write grouped with it. A task
-- skipped is reaped by a later pass.
SELECT {task_columns} FROM tasks
WHERE deadline != 0 AND state IN ('queued', 'running', 'waiting_for_approval') AND deadline < :now
ORDER BY seq LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: reap_any
SELECT EXISTS (SELECT 1 FROM tasks WHERE deadline != 0 AND state IN ('queued', 'running', 'waiting_for_approval') AND deadline < :now)
    OR EXISTS (SELECT 1 FROM tasks WHERE state = 'running' AND lease_until <= :now);

-- name: reap_leases
-- As reap_deadlines: rows another session holds are skipped.
SELECT {task_columns} FROM tasks
WHERE state = 'running' AND lease_until <= :now
ORDER BY seq LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: list_all
SELECT {task_columns} FROM tasks ORDER BY seq LIMIT :limit;

-- name: list_by_state
SELECT {task_columns} FROM tasks WHERE state = :state ORDER BY seq LIMIT :limit;

-- name: list_by_user
-- A user's tasks in order, walked by task_keys_user, each
-- task read by its seq (the LIMIT 1 keeps the read a lookup a key: joined
-- as a whole, the planner may walk tasks_pkey from its start to the
-- user's first key).
SELECT {task_columns} FROM (
    SELECT t.* FROM task_keys k
    CROSS JOIN LATERAL (SELECT * FROM tasks WHERE tasks.seq = k.seq LIMIT 1) t
    WHERE k.user_id = :user ORDER BY k.seq LIMIT :limit) AS tasks
ORDER BY seq;

-- name: list_by_user_state
SELECT {task_columns} FROM (
    SELECT t.* FROM task_keys k
    CROSS JOIN LATERAL (SELECT * FROM tasks WHERE tasks.seq = k.seq LIMIT 1) t
    WHERE k.user_id = :user AND t.state = :state ORDER BY k.seq LIMIT :limit) AS tasks
ORDER BY seq;

-- name: events_by_task
-- A task's events by the seqs its trail holds (migration 0004).
SELECT seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope
FROM events WHERE seq IN (SELECT unnest(t.trail) FROM tasks t WHERE t.id = :task_id) ORDER BY seq;

-- name: events_all
SELECT seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope
FROM events ORDER BY seq;

-- name: user_limits
SELECT user_id, running_max, depth_max FROM users WHERE running_max >= 0 OR depth_max >= 0
ORDER BY user_id COLLATE "C";

-- name: user_limit_set
INSERT INTO users (user_id, running_max, depth_max) VALUES (:user, :running_max, :depth_max)
ON CONFLICT (user_id) DO UPDATE SET running_max = excluded.running_max, depth_max = excluded.depth_max;

-- name: schedule_insert
INSERT INTO schedules (id, user_id, kind, payload, cost_budget, steps_max, priority, origin, period_ms, created_at)
VALUES (:id, :user, :kind, :payload, :cost_budget, :steps_max, :priority, :origin, :period_ms, :now);

-- name: schedule_count
SELECT COUNT(*) FROM schedules;

-- name: schedules_all
SELECT id, user_id, kind, payload, cost_budget, steps_max, priority, origin, period_ms, last_run, created_at
FROM schedules ORDER BY id COLLATE "C";

-- name: schedule_delete
DELETE FROM schedules WHERE id = :id;

-- name: schedule_ran
UPDATE schedules SET last_run = :k WHERE id = :id AND last_run < :k;

-- name: tallies_all
SELECT name, SUM(n)::BIGINT, SUM(sum_ms)::BIGINT FROM tally_deltas GROUP BY name ORDER BY name COLLATE "C";

-- name: oldest_queued
SELECT MIN(GREATEST(queued_at, run_at)) FROM tasks WHERE state = 'queued' AND run_at <= :now;

-- name: counters_check
-- Three counts that are zero when the counters agree with the tasks: state
-- tallies that differ from a count of the tasks, users whose running or
-- active count differs, and users counted running more tasks than they
-- have active ones (a user may run more than its limit: the limit may
-- have been lowered since the claims; PostgreSQL keeps no blocked flags,
-- the third of SQLite's counts).
SELECT
    (SELECT COUNT(*) FROM (SELECT name, SUM(n) AS n FROM tally_deltas WHERE name LIKE 'state:%' GROUP BY name) s
        LEFT JOIN (SELECT 'state:' || state AS name, COUNT(*) AS n FROM tasks GROUP BY state) c ON c.name = s.name
        WHERE s.n != COALESCE(c.n, 0)),
    (SELECT COUNT(*) FROM user_caps u
        LEFT JOIN (SELECT t.user_id, COUNT(*) FILTER (WHERE t.state = 'running') AS running,
                          COUNT(*) FILTER (WHERE t.state IN ('queued', 'running', 'waiting_for_approval')) AS active
                   FROM tasks t GROUP BY t.user_id) c ON c.user_id = u.user_id
        WHERE u.running != COALESCE(c.running, 0) OR u.active != COALESCE(c.active, 0)),
    (SELECT COUNT(*) FROM user_caps WHERE running > active);

-- name: migrations_lock
-- The first statement of the migration transaction: one process at a time
-- plans and applies migrations to a schema (several starting at once on an
-- empty one would otherwise race to create the same tables, and all but
-- one fail on the catalog). The lock ends with the transaction; whoever
-- waited then plans again and finds the migrations applied.
SELECT pg_advisory_xact_lock(7424603, hashtext(current_schema()));

-- name: migrations_table
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    BIGINT PRIMARY KEY,
    name       TEXT NOT NULL,
    checksum   TEXT NOT NULL,
    applied_at BIGINT NOT NULL
);

-- name: migrations_table_exists
SELECT COUNT(*) FROM pg_catalog.pg_tables WHERE schemaname = current_schema() AND tablename = 'schema_migrations';

-- name: migrations_applied
SELECT version, name, checksum FROM schema_migrations ORDER BY version;

-- name: migration_record
INSERT INTO schema_migrations (version, name, checksum, applied_at)
VALUES (:version, :name, :checksum, :now);

-- name: migrations_forget
-- The pre-baseline history, replaced by the baseline's row (fold.go).
DELETE FROM schema_migrations;

-- name: functions_table
-- The version and checksum of the functions installed (functions.sql):
-- one row.
CREATE TABLE IF NOT EXISTS schema_functions (
    version    BIGINT NOT NULL,
    checksum   TEXT NOT NULL,
    applied_at BIGINT NOT NULL
);

-- name: functions_table_exists
SELECT COUNT(*) FROM pg_catalog.pg_tables WHERE schemaname = current_schema() AND tablename = 'schema_functions';

-- name: functions_applied
SELECT version, checksum FROM schema_functions;

-- name: functions_record
WITH gone AS (DELETE FROM schema_functions)
INSERT INTO schema_functions (version, checksum, applied_at) VALUES (:version, :checksum, :now);

-- name: group_savepoint
-- Each operation of a group commit runs inside its own savepoint (left on
-- the stack: the COMMIT releases them all).
SAVEPOINT group_member;

-- name: group_rollback
-- Rolls back the operation just run, and only it (the innermost
-- group_member savepoint).
ROLLBACK TO group_member;

-- name: savepoint
SAVEPOINT submit_one;

-- name: savepoint_rollback
ROLLBACK TO submit_one;

-- name: savepoint_release
RELEASE submit_one;

-- name: events_after_lock
-- A follower's first statement, in a transaction of its own: it waits for
-- every transaction that is inserting events (each holds the shared lock
-- from its first event_insert until it ends), and holds new ones off until
-- the follower's transaction ends. events_after, the next statement, then
-- reads a snapshot in which every event numbered at or below the
-- sequence's last value is committed or rolled back: none can appear
-- behind the cursor later.
SELECT pg_advisory_xact_lock(7424602, hashtext(current_schema()));

-- name: events_after
SELECT seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope
FROM events
WHERE seq > :after AND seq <= (SELECT last_value FROM events_seq)
ORDER BY seq LIMIT :limit;

-- name: session_settings
-- The settings of the session it runs on, as the server reports them
-- (Queue.SessionSettings); one it does not know (idle_session_timeout
-- before PostgreSQL 14) is empty.
SELECT s.name, COALESCE(current_setting(s.name, true), '')
FROM unnest(ARRAY['idle_in_transaction_session_timeout', 'tcp_keepalives_idle', 'tcp_keepalives_interval',
                  'tcp_keepalives_count', 'tcp_user_timeout', 'lock_timeout', 'statement_timeout',
                  'idle_session_timeout']) WITH ORDINALITY AS s(name, n)
ORDER BY s.n;

-- name: health
-- The health probe: a write that commits.
INSERT INTO settings (key, value) VALUES ('health_probe', 1)
ON CONFLICT (key) DO UPDATE SET value = settings.value + 1;

-- name: audit_by_task
SELECT seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope
FROM events
WHERE seq IN (SELECT unnest(t.trail) FROM tasks t WHERE t.id = :task_id)
  AND (:actor = '' OR actor = :actor) AND at >= :since AND at < :until
ORDER BY seq
LIMIT :limit;

-- name: audit_by_actor
SELECT seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope
FROM events
WHERE actor = :actor AND at >= :since AND at < :until
ORDER BY seq
LIMIT :limit;

-- name: audit_by_time
SELECT seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope
FROM events
WHERE at >= :since AND at < :until
ORDER BY seq
LIMIT :limit;

-- name: audit_all
SELECT seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope
FROM events
WHERE at >= :since AND at < :until
ORDER BY seq
LIMIT :limit;
