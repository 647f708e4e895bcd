-- leasehold PostgreSQL schema, version 16: a submit folds the users'
-- pending count changes once they pile up.
--
-- A user's running and active counts are its users row plus its rows in
-- user_deltas (user_caps, migration 0003): every submit adds a row there,
-- and so does every group of completions, so that no writer waits on
-- another's lock of the users row. Only a claim folded them, for the users
-- whose rows it locked. While nothing was claimed (no worker running, a
-- backlog building) the table only grew, and every submit summed all of it
-- for the queue's depth cap and the user's rows of it for the user's:
-- quadratic intake. Profiled on the server (intake PostgreSQL one at a
-- time, 8,000 submits): a fifth of its CPU in the sequential scans and
-- sums of user_deltas.
--
-- fold_user_deltas(p_rows) does a claim's fold for every user it can: when
-- the table's rows may number p_rows or more (the span of its ids, read
-- from the primary key), it locks the rows in users of the users with
-- pending changes, in user order, skipping a row another transaction holds
-- (a claim folds that user's itself), then deletes their changes and adds
-- their sums to their rows, reading them under the locks as a claim does.
-- A fold never changes a user's count (its row plus its changes) nor the
-- queue's total, whichever snapshot reads them; and every change it folds
-- was committed after the changes it undoes, so no count goes below zero.
--
-- Every submit calls it with 256 after taking admission's lock (so folds
-- run one at a time): submit_one, user_ensure and users_ensure. The table
-- then holds about 256 rows at most between claims, wherever the rows of a
-- held user are not.

CREATE FUNCTION fold_user_deltas(p_rows BIGINT) RETURNS VOID
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    locked TEXT[];
BEGIN
    IF (SELECT COALESCE(MAX(d.id) - MIN(d.id) + 1, 0) FROM user_deltas d) < p_rows THEN
        RETURN;
    END IF;
    SELECT COALESCE(array_agg(l.user_id), '{}') INTO locked
    FROM (SELECT u.user_id FROM users u
          WHERE u.user_id IN (SELECT d.user_id FROM user_deltas d)
          ORDER BY u.user_id COLLATE "C"
          FOR NO KEY UPDATE OF u SKIP LOCKED) AS l;
    IF cardinality(locked) = 0 THEN
        RETURN;
    END IF;
    WITH gone AS (
        DELETE FROM user_deltas WHERE user_id = ANY(locked)
        RETURNING user_id, running, active
    ), sums AS (
        SELECT g.user_id, SUM(g.running) AS running, SUM(g.active) AS active FROM gone g GROUP BY g.user_id
    )
    UPDATE users u SET running = u.running + s.running, active = u.active + s.active
    FROM sums s WHERE u.user_id = s.user_id;
END
$$;

-- submit_one, version 15's, folding after admission's lock.
CREATE OR REPLACE FUNCTION submit_one(p_id TEXT, p_user TEXT, p_key TEXT, p_hash TEXT, p_payload TEXT, p_priority BIGINT,
                           p_run_at BIGINT, p_deadline BIGINT, p_now BIGINT, p_cost_budget BIGINT,
                           p_steps_max BIGINT, p_schedule_id TEXT, p_schedule_run BIGINT, p_actor TEXT,
                           p_scope TEXT, p_timely BOOLEAN, p_replay_any_hash BOOLEAN, p_depth_slack BIGINT)
RETURNS TABLE (outcome TEXT, task_id TEXT, n BIGINT, lim BIGINT)
LANGUAGE plpgsql VOLATILE
SET leasehold.counted = 'on'
AS $$
DECLARE
    found_id TEXT;
    found_hash TEXT;
    depth_max BIGINT;
    attempts BIGINT;
    mine BIGINT;
    mine_limit BIGINT;
    total BIGINT;
BEGIN
    SELECT k.id, k.request_hash INTO found_id, found_hash FROM (
        SELECT t.id, t.request_hash FROM task_keys tk JOIN tasks t ON t.seq = tk.seq
        WHERE tk.user_id = p_user AND tk.idem_key = p_key
        UNION ALL
        SELECT s.task_id, s.request_hash FROM idem_tombstones s WHERE s.user_id = p_user AND s.idem_key = p_key
        LIMIT 1) k;
    IF found_id IS NOT NULL THEN
        IF found_hash = p_hash OR p_replay_any_hash THEN
            RETURN QUERY SELECT 'replay', found_id, CAST(0 AS BIGINT), CAST(0 AS BIGINT);
        ELSE
            RETURN QUERY SELECT 'conflict', found_id, CAST(0 AS BIGINT), CAST(0 AS BIGINT);
        END IF;
        RETURN;
    END IF;
    IF NOT p_timely THEN
        RETURN QUERY SELECT 'untimely', CAST(NULL AS TEXT), CAST(0 AS BIGINT), CAST(0 AS BIGINT);
        RETURN;
    END IF;

    PERFORM pg_advisory_xact_lock(7424601, hashtext(current_schema()));
    PERFORM fold_user_deltas(256);
    INSERT INTO users (user_id) VALUES (p_user) ON CONFLICT (user_id) DO NOTHING;
    SELECT COALESCE(MAX(CASE WHEN s.key = 'depth_max' THEN s.value END), 0),
           COALESCE(MAX(CASE WHEN s.key = 'attempts_max' THEN s.value END), 0)
    INTO depth_max, attempts
    FROM settings s WHERE s.key IN ('depth_max', 'attempts_max');
    SELECT c.active, c.depth_limit,
           CASE WHEN depth_max <> 0
                THEN (COALESCE((SELECT SUM(u.active) FROM users u), 0)
                      + COALESCE((SELECT SUM(d.active) FROM user_deltas d), 0))::BIGINT
                ELSE 0 END
    INTO mine, mine_limit, total
    FROM user_caps c WHERE c.user_id = p_user;
    mine := mine - p_depth_slack;
    IF mine_limit > 0 AND mine >= mine_limit THEN
        RETURN QUERY SELECT 'user_full', CAST(NULL AS TEXT), mine, mine_limit;
        RETURN;
    END IF;
    IF depth_max <> 0 AND total >= depth_max THEN
        RETURN QUERY SELECT 'queue_full', CAST(NULL AS TEXT), total, depth_max;
        RETURN;
    END IF;

    -- The task, its key, its submitted event (numbered after the events'
    -- shared lock is held, as event_insert numbers it) and their counts,
    -- as tasks_inserted and events_counted would add them.
    WITH task AS (
        INSERT INTO tasks (id, user_id, idem_key, request_hash, payload, state, priority, run_at, deadline,
                           attempts_max, queued_at, cost_budget, steps_max, schedule_id, schedule_run,
                           created_at, updated_at)
        VALUES (p_id, p_user, p_key, p_hash, p_payload, 'queued', p_priority, p_run_at, p_deadline,
                attempts, p_now, p_cost_budget, p_steps_max, p_schedule_id, p_schedule_run, p_now, p_now)
        RETURNING seq
    ), keyed AS (
        INSERT INTO task_keys (user_id, idem_key, seq) SELECT p_user, p_key, task.seq FROM task
    ), active AS (
        INSERT INTO user_deltas (user_id, running, active) VALUES (p_user, 0, 1)
    ), writing AS (
        SELECT pg_advisory_xact_lock_shared(7424602, hashtext(current_schema())) AS locked
    ), appended AS (
        INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
        SELECT p_id, 'submitted', 0, 0, '', '', 'queued', '', p_actor, p_now, '', p_scope FROM writing
    )
    INSERT INTO tally_deltas (name, n) VALUES ('state:queued', 1), ('event:submitted::queued:', 1);
    IF p_run_at <= p_now THEN
        PERFORM pg_notify('leasehold_ready', current_schema());
    END IF;
    RETURN QUERY SELECT 'inserted', p_id, CAST(0 AS BIGINT), CAST(0 AS BIGINT);
END
$$;
