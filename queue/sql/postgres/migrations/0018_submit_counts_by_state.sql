-- leasehold PostgreSQL schema, version 18: a submit counts the queue's
-- active tasks by its state counts, not user by user.
--
-- With the queue's depth cap on (depth_max, 100,000 by default), every
-- submit summed the active count of every users row, and of user_deltas,
-- under admission's lock: a sequential scan of users on every submit.
-- With 20,000 users (a task each) that sum took 1.9 ms of a lone submit's
-- 3.7 ms; SubmitMany's active_total and the usual way's user_depth read
-- it the same way.
--
-- The same figure is the sum of the state counts of the active states
-- (queued, running, waiting_for_approval: leasehold_active's), which
-- tally_deltas keeps as rows of changes, written in the same transactions
-- as the tasks they count (counters_check holds them to a count of the
-- tasks), and which SQLite's admission already reads. active_tasks
-- (p_rows) returns that sum, and, once those rows number p_rows or more,
-- folds them into one row a name, deleting them and adding their sums, as
-- tally_compact does for the whole table: rows another transaction holds
-- (a compaction under way) are skipped, and no sum changes. Called under
-- admission's lock (so folds by submits run one at a time) by submit_one,
-- and by the usual way's user_depth and SubmitMany's active_total
-- (queries.sql), each with 256: the rows it sums stay about that many
-- between folds, whatever the number of users. Claims and settles add
-- such rows as before, and only lower the sum, as they lowered the users'.

CREATE FUNCTION active_tasks(p_rows BIGINT) RETURNS BIGINT
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    total BIGINT;
    counted BIGINT;
BEGIN
    SELECT COALESCE(SUM(t.n), 0)::BIGINT, COUNT(*) INTO total, counted
    FROM tally_deltas t WHERE t.name IN ('state:queued', 'state:running', 'state:waiting_for_approval');
    IF counted >= p_rows THEN
        WITH gone AS (
            DELETE FROM tally_deltas
            WHERE id IN (SELECT t.id FROM tally_deltas t
                         WHERE t.name IN ('state:queued', 'state:running', 'state:waiting_for_approval')
                         FOR UPDATE SKIP LOCKED)
            RETURNING name, n, sum_ms
        )
        INSERT INTO tally_deltas (name, n, sum_ms)
        SELECT g.name, SUM(g.n)::BIGINT, SUM(g.sum_ms)::BIGINT FROM gone g GROUP BY g.name ORDER BY g.name COLLATE "C";
    END IF;
    RETURN total;
END
$$;

-- submit_one, version 16's, with the queue's total from active_tasks.
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
    SELECT c.active, c.depth_limit INTO mine, mine_limit FROM user_caps c WHERE c.user_id = p_user;
    total := CASE WHEN depth_max <> 0 THEN active_tasks(256) ELSE 0 END;
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
