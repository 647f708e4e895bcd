-- leasehold PostgreSQL schema, version 9: a claim's lock on its users'
-- counter rows no longer holds off a submit for those users.
--
-- claim_batch (migrations 0003, 0006) locks the counter rows of its
-- candidates' users, in users order and skipping rows another transaction
-- holds, and keeps them until its transaction ends, so that claims of one
-- user take turns at its running count. It locked them FOR UPDATE, the
-- strongest row lock, which also conflicts with the FOR KEY SHARE lock
-- the foreign key of tasks takes on a user's row when a task of that user
-- is inserted: a submit for a user waited for any claim of that user's
-- tasks in flight to commit, its WAL flush included.
--
-- Now the claim locks them FOR NO KEY UPDATE. Claims still exclude each
-- other (NO KEY UPDATE conflicts with itself, and the UPDATE that raises
-- a user's count takes the same lock), a skipped row is still skipped, and
-- every argument of migration 0003 about the per-user limit holds; a
-- submit's key check no longer waits. Deleting or re-keying a user's row
-- still waits for the claim. Nothing else changes: the function's text is
-- migration 0006's, with the two settings of migration 0007.

CREATE OR REPLACE FUNCTION claim_batch(p_now BIGINT, p_due BIGINT, p_alive BIGINT, p_max INTEGER,
                                       p_owner TEXT, p_lease_until BIGINT, p_user_limits BOOLEAN)
RETURNS SETOF tasks
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_bitmapscan = off
AS $$
DECLARE
    cand_seqs BIGINT[];
    cand_users TEXT[];
    locked TEXT[];
    room_users TEXT[];
    room_left BIGINT[];
    d_running BIGINT[];
    d_active BIGINT[];
    took BIGINT[];
    taken BIGINT[] := '{}';
    i INTEGER;
    k INTEGER;
    n BIGINT;
BEGIN
    -- The candidates, exactly as in version 5.
    SELECT COALESCE(array_agg(q.seq ORDER BY q.priority DESC, q.run_at, q.seq), '{}'),
           COALESCE(array_agg(q.user_id ORDER BY q.priority DESC, q.run_at, q.seq), '{}')
    INTO cand_seqs, cand_users
    FROM (
        WITH room AS (
            SELECT u.user_id,
                   CASE WHEN NOT p_user_limits OR u.running_limit <= 0 THEN CAST(p_max AS BIGINT)
                        ELSE LEAST(CAST(p_max AS BIGINT), u.running_limit - u.running) END AS n
            FROM user_caps u
            WHERE NOT p_user_limits OR u.running_limit <= 0 OR u.running < u.running_limit
        )
        SELECT tasks.seq, tasks.user_id, tasks.priority, tasks.run_at FROM tasks
        WHERE tasks.seq = ANY(ARRAY(
                SELECT e.seq FROM room r CROSS JOIN LATERAL (
                    SELECT t.seq FROM tasks t
                    WHERE t.user_id = r.user_id AND t.state = 'queued'
                      AND t.run_at <= p_due AND (t.deadline = 0 OR t.deadline >= p_alive)
                    ORDER BY t.priority DESC, t.run_at, t.seq
                    LIMIT r.n) e))
          AND COALESCE(tasks.state, '') = 'queued' AND tasks.run_at <= p_due
          AND (tasks.deadline = 0 OR tasks.deadline >= p_alive)
        ORDER BY tasks.priority DESC, tasks.run_at, tasks.seq
        LIMIT p_max
        FOR UPDATE SKIP LOCKED) AS q;
    IF cardinality(cand_seqs) = 0 THEN
        RETURN;
    END IF;

    -- The counter rows of the candidates' users, locked in user order, each
    -- skipped when another transaction holds it.
    SELECT COALESCE(array_agg(l.user_id), '{}') INTO locked
    FROM (SELECT u.user_id FROM users u
          WHERE u.user_id = ANY(cand_users)
          ORDER BY u.user_id COLLATE "C"
          FOR NO KEY UPDATE OF u SKIP LOCKED) AS l;
    IF cardinality(locked) = 0 THEN
        RETURN;
    END IF;

    -- The locked users' deltas, deleted and summed, and each user's room.
    WITH gone AS (
        DELETE FROM user_deltas WHERE user_id = ANY(locked)
        RETURNING user_id, running, active
    ), sums AS (
        SELECT user_id, SUM(running) AS running, SUM(active) AS active FROM gone GROUP BY user_id
    )
    SELECT array_agg(r.user_id ORDER BY r.user_id COLLATE "C"),
           array_agg(CASE WHEN r.running_limit > 0 THEN r.running_limit - r.running
                          ELSE CAST(4611686018427387904 AS BIGINT) END ORDER BY r.user_id COLLATE "C"),
           array_agg(r.d_running ORDER BY r.user_id COLLATE "C"),
           array_agg(r.d_active ORDER BY r.user_id COLLATE "C")
    INTO room_users, room_left, d_running, d_active
    FROM (SELECT u.user_id, u.running + COALESCE(s.running, 0) AS running,
                 COALESCE(s.running, 0) AS d_running, COALESCE(s.active, 0) AS d_active,
                 CASE WHEN u.running_max >= 0 THEN u.running_max
                      ELSE (SELECT value FROM settings WHERE key = 'user_running_max') END AS running_limit
          FROM users u LEFT JOIN sums s ON s.user_id = u.user_id
          WHERE u.user_id = ANY(locked)) AS r;
    took := array_fill(CAST(0 AS BIGINT), ARRAY[cardinality(room_users)]);

    -- The tasks taken, in claim order: each of a locked user with room.
    FOR i IN 1 .. cardinality(cand_seqs) LOOP
        k := array_position(room_users, cand_users[i]);
        CONTINUE WHEN k IS NULL;
        CONTINUE WHEN p_user_limits AND room_left[k] <= 0;
        room_left[k] := room_left[k] - 1;
        took[k] := took[k] + 1;
        taken := array_append(taken, cand_seqs[i]);
    END LOOP;

    -- The users' rows gain their deltas and the tasks taken, in user order.
    UPDATE users u
    SET running = u.running + x.d_running + x.took, active = u.active + x.d_active
    FROM unnest(room_users, d_running, d_active, took) AS x(user_id, d_running, d_active, took)
    WHERE u.user_id = x.user_id AND (x.d_running <> 0 OR x.d_active <> 0 OR x.took <> 0);
    IF cardinality(taken) = 0 THEN
        RETURN;
    END IF;

    -- Taken, and returned as they were (o: the rows before this update);
    -- the users' running counts are raised above, not by tasks_moved.
    PERFORM set_config('leasehold.claim_counted', 'on', true);
    RETURN QUERY
    UPDATE tasks
    SET state = 'running', version = tasks.version + 1, owner = p_owner, lease_until = p_lease_until,
        claimed_at = p_now, heartbeat_at = p_now, updated_at = p_now
    FROM tasks AS o
    WHERE tasks.seq = ANY(taken) AND o.seq = tasks.seq AND COALESCE(tasks.state, '') = 'queued'
    RETURNING o.*;
    GET DIAGNOSTICS n = ROW_COUNT;
    PERFORM set_config('leasehold.claim_counted', '', true);
    IF n <> cardinality(taken) THEN
        RAISE EXCEPTION 'claim_batch: took % tasks, expected %', n, cardinality(taken);
    END IF;
END
$$;
