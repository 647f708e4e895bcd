-- leasehold PostgreSQL schema, version 15: a lone submit counts itself.
--
-- submit_one (migration 0011) inserted the task, its key and its event by
-- statements of their own, and two statement triggers counted them:
-- tasks_inserted (the state's tally and the user's active count) and
-- events_counted (the event's tally), each a PL/pgSQL call running its
-- own INSERTs over the statement's transition rows. Every statement pays
-- its executor's start and end whatever it writes; a submit of one task
-- ran seven of them after its checks. Intake PostgreSQL one at a time
-- (make bench-peers, same run): 1,181-1,358 submits a second against
-- River's 1,835-2,317, with 580 µs of the server's CPU a submit against
-- River's 260.
--
-- Now submit_one runs with leasehold.counted set to on (a SET of the
-- function, gone when it returns or fails), tasks_inserted is skipped
-- while it is on as tasks_moved and events_counted have been since
-- version 8, and the task, its key, the user's active count, its event
-- and the event's and the state's tallies are one statement, each a WITH
-- query: the same rows in the same tables as before. The event is still
-- numbered after the events' shared advisory lock is held (the INSERT
-- reads the lock's row first, as event_insert does). Every other insert
-- of a task (task_insert, tasks_insert, a hand-made one) is counted by
-- tasks_inserted as before.

DROP TRIGGER tasks_inserted ON tasks;
CREATE TRIGGER tasks_inserted AFTER INSERT ON tasks
REFERENCING NEW TABLE AS inserted
FOR EACH STATEMENT
WHEN (current_setting('leasehold.counted', true) IS DISTINCT FROM 'on')
EXECUTE FUNCTION tasks_inserted();

-- submit_one, version 13's checks in the same order, writing as above.
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
