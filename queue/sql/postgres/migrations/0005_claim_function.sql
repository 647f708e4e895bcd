-- leasehold PostgreSQL schema, version 5: a claim is one statement from the
-- client. Before, a claim sent four (the candidates, locked SKIP LOCKED;
-- their users' counter rows, locked SKIP LOCKED; the fold of those users'
-- counter changes; the update that takes the tasks), each a round trip
-- and a parse, bind and execute on both sides: in a group commit of ten
-- slots' completions and claims, four of its eight round trips.
--
-- claim_batch runs the same four statements, in the same order, inside
-- the server. A PL/pgSQL function that is VOLATILE takes a new snapshot
-- for each statement it runs at READ COMMITTED, so the fold still reads
-- after the users' rows are locked, and every argument of migration 0003
-- about the per-user running limit holds as it did: every claim of a
-- locked user that committed is counted, none can commit until this
-- transaction ends, and a user whose row another transaction holds is
-- skipped (its tasks are left for this time), so a claim never waits on a
-- users row.
--
-- Its arguments are the claim's: p_now its time, p_max how many tasks it
-- may take, p_owner and p_lease_until what it sets. A task is due when
-- run_at <= p_due and within its deadline when deadline = 0 or deadline >=
-- p_alive (both p_now, save in builds made to break the claim's checks,
-- which is also why p_user_limits, the per-user running limits held, is an
-- argument). It returns the tasks it took as they were before (queued),
-- in claim order; the caller records each claim.

CREATE FUNCTION claim_batch(p_now BIGINT, p_due BIGINT, p_alive BIGINT, p_max INTEGER,
                            p_owner TEXT, p_lease_until BIGINT, p_user_limits BOOLEAN)
RETURNS SETOF tasks
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    cand_seqs BIGINT[];
    cand_users TEXT[];
    locked TEXT[];
    room_users TEXT[];
    room_left BIGINT[];
    taken BIGINT[] := '{}';
    i INTEGER;
    k INTEGER;
    n BIGINT;
BEGIN
    -- The candidates: the next tasks in claim order, locked, skipping those
    -- another claimer holds. A user below its running limit by n
    -- contributes at most its first n eligible tasks (counted from this
    -- statement's snapshot); the decision is made below, under the lock of
    -- the user's row. Each user's first n are one bounded scan of the index
    -- tasks_claim_user (ARRAY), so the plan is the same with or without
    -- statistics. The outer WHERE repeats the eligibility test, which
    -- PostgreSQL re-checks on the newest version of a row that changed
    -- while the statement waited; its state test matches no partial index
    -- (COALESCE), so that the rows are read by seq through the primary key.
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
          FOR UPDATE OF u SKIP LOCKED) AS l;
    IF cardinality(locked) = 0 THEN
        RETURN;
    END IF;

    -- The locked users' counter changes folded into their rows (a statement
    -- of its own, so its snapshot is taken after the lock), and each one's
    -- room: how many more tasks it may run now.
    WITH gone AS (
        DELETE FROM user_deltas WHERE user_id = ANY(locked)
        RETURNING user_id, running, active
    ), sums AS (
        SELECT user_id, SUM(running) AS running, SUM(active) AS active FROM gone GROUP BY user_id
    ), folded AS (
        UPDATE users u SET running = u.running + s.running, active = u.active + s.active
        FROM sums s WHERE u.user_id = s.user_id
        RETURNING u.user_id, u.running
    )
    SELECT array_agg(r.user_id),
           array_agg(CASE WHEN r.running_limit > 0 THEN r.running_limit - r.running
                          ELSE CAST(4611686018427387904 AS BIGINT) END)
    INTO room_users, room_left
    FROM (SELECT u.user_id, COALESCE(f.running, u.running) AS running,
                 CASE WHEN u.running_max >= 0 THEN u.running_max
                      ELSE (SELECT value FROM settings WHERE key = 'user_running_max') END AS running_limit
          FROM users u LEFT JOIN folded f ON f.user_id = u.user_id
          WHERE u.user_id = ANY(locked)) AS r;

    -- The tasks taken, in claim order: each of a locked user with room.
    FOR i IN 1 .. cardinality(cand_seqs) LOOP
        k := array_position(room_users, cand_users[i]);
        CONTINUE WHEN k IS NULL;
        CONTINUE WHEN p_user_limits AND room_left[k] <= 0;
        room_left[k] := room_left[k] - 1;
        taken := array_append(taken, cand_seqs[i]);
    END LOOP;
    IF cardinality(taken) = 0 THEN
        RETURN;
    END IF;

    -- Taken, and returned as they were (o: the rows before this update).
    RETURN QUERY
    UPDATE tasks
    SET state = 'running', version = tasks.version + 1, owner = p_owner, lease_until = p_lease_until,
        claimed_at = p_now, heartbeat_at = p_now, updated_at = p_now
    FROM tasks AS o
    WHERE tasks.seq = ANY(taken) AND o.seq = tasks.seq AND COALESCE(tasks.state, '') = 'queued'
    RETURNING o.*;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> cardinality(taken) THEN
        RAISE EXCEPTION 'claim_batch: took % tasks, expected %', n, cardinality(taken);
    END IF;
END
$$;
