-- leasehold PostgreSQL schema, version 21: a completed task keeps no
-- last error.
--
-- last_error holds the message of a task's last failed attempt. A task
-- that failed transiently and then completed kept it, so its record read
-- "completed" beside an error. Every completion now clears it: the
-- fenced completion and the batch's (queries.sql), settle's to completed
-- (an operator's resolve), and here the fused group's completions,
-- complete_and_claim as version 17 left it, with that one column added.

CREATE OR REPLACE FUNCTION complete_and_claim(p_claims JSONB, p_events JSONB, p_now BIGINT, p_due BIGINT, p_alive BIGINT,
                                              p_max INTEGER, p_owner TEXT, p_lease_until BIGINT, p_user_limits BOOLEAN,
                                              p_at_lease_until BOOLEAN, p_scope TEXT)
RETURNS SETOF tasks
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_bitmapscan = off
SET leasehold.counted = 'on'
AS $$
DECLARE
    n BIGINT;
    done_users TEXT[];
    done_runs BIGINT[];
    cand tasks[];
    cand_seqs BIGINT[];
    cand_users TEXT[];
    locked TEXT[];
    room_users TEXT[];
    room_left BIGINT[];
    d_running BIGINT[];
    d_active BIGINT[];
    took BIGINT[];
    taken tasks[] := '{}';
    taken_seqs BIGINT[] := '{}';
    i INTEGER;
    k INTEGER;
BEGIN
    WITH done AS (
        UPDATE tasks SET state = 'completed', reason = '', owner = '', lease_until = 0, last_error = '', updated_at = c.now
        FROM (SELECT e ->> 0 AS id, (e ->> 1)::bigint AS fence, (e ->> 2)::bigint AS now
              FROM jsonb_array_elements(p_claims) AS e) AS c
        WHERE tasks.id = ANY(ARRAY(SELECT e ->> 0 FROM jsonb_array_elements(p_claims) AS e))
          AND tasks.id = c.id AND tasks.version = c.fence AND COALESCE(tasks.state, '') = 'running'
          AND (tasks.lease_until > c.now OR (p_at_lease_until AND tasks.lease_until = c.now))
        RETURNING tasks.user_id, GREATEST(0, tasks.updated_at - tasks.claimed_at) AS run_time
    ), deltas AS (
        -- The completions' users, each a running and an active task fewer.
        INSERT INTO user_deltas (user_id, running, active)
        SELECT d.user_id, -COUNT(*), -COUNT(*) FROM done d
        GROUP BY d.user_id ORDER BY d.user_id COLLATE "C"
    )
    SELECT COUNT(*), COALESCE(array_agg(d.user_id), '{}'), COALESCE(array_agg(d.run_time), '{}')
    INTO n, done_users, done_runs
    FROM done d;
    IF n <> jsonb_array_length(p_claims) THEN
        RAISE EXCEPTION 'complete_and_claim: % of % claims matched', n, jsonb_array_length(p_claims)
            USING ERRCODE = 'LH001';
    END IF;

    IF p_max >= 1 THEN
        -- The candidates, as claim_batch finds and locks them, read whole.
        SELECT COALESCE(array_agg(q.t ORDER BY q.priority DESC, q.run_at, q.seq), '{}'),
               COALESCE(array_agg(q.seq ORDER BY q.priority DESC, q.run_at, q.seq), '{}'),
               COALESCE(array_agg(q.user_id ORDER BY q.priority DESC, q.run_at, q.seq), '{}')
        INTO cand, cand_seqs, cand_users
        FROM (
            SELECT tasks AS t, tasks.seq, tasks.user_id, tasks.priority, tasks.run_at FROM tasks
            WHERE tasks.state = 'queued' AND tasks.run_at <= p_due
              AND (tasks.deadline = 0 OR tasks.deadline >= p_alive)
            ORDER BY tasks.priority DESC, tasks.run_at, tasks.seq
            LIMIT p_max
            FOR UPDATE SKIP LOCKED) AS q;
        IF p_user_limits AND cardinality(cand_seqs) > 0 AND EXISTS (
                SELECT 1 FROM (SELECT c.user_id, COUNT(*) AS cnt FROM unnest(cand_users) AS c(user_id) GROUP BY c.user_id) AS c
                JOIN user_caps u ON u.user_id = c.user_id
                WHERE u.running_limit > 0 AND u.running_limit - u.running < c.cnt) THEN
            SELECT COALESCE(array_agg(q.t ORDER BY q.priority DESC, q.run_at, q.seq), '{}'),
                   COALESCE(array_agg(q.seq ORDER BY q.priority DESC, q.run_at, q.seq), '{}'),
                   COALESCE(array_agg(q.user_id ORDER BY q.priority DESC, q.run_at, q.seq), '{}')
            INTO cand, cand_seqs, cand_users
            FROM (
                WITH room AS (
                    SELECT u.user_id,
                           CASE WHEN NOT p_user_limits OR u.running_limit <= 0 THEN CAST(p_max AS BIGINT)
                                ELSE LEAST(CAST(p_max AS BIGINT), u.running_limit - u.running) END AS n
                    FROM user_caps u
                    WHERE NOT p_user_limits OR u.running_limit <= 0 OR u.running < u.running_limit
                )
                SELECT tasks AS t, tasks.seq, tasks.user_id, tasks.priority, tasks.run_at FROM tasks
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
        END IF;

        IF cardinality(cand_seqs) > 0 THEN
            -- The counter rows of the candidates' users, locked in user
            -- order, each skipped when another transaction holds it.
            SELECT COALESCE(array_agg(l.user_id), '{}') INTO locked
            FROM (SELECT u.user_id FROM users u
                  WHERE u.user_id = ANY(cand_users)
                  ORDER BY u.user_id COLLATE "C"
                  FOR NO KEY UPDATE OF u SKIP LOCKED) AS l;
        END IF;

        IF cardinality(locked) > 0 THEN
            -- The locked users' deltas, deleted and summed, and each
            -- user's room.
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

            -- The tasks taken, in claim order: each of a locked user with
            -- room.
            FOR i IN 1 .. cardinality(cand_seqs) LOOP
                k := array_position(room_users, cand_users[i]);
                CONTINUE WHEN k IS NULL;
                CONTINUE WHEN p_user_limits AND room_left[k] <= 0;
                room_left[k] := room_left[k] - 1;
                took[k] := took[k] + 1;
                taken_seqs := array_append(taken_seqs, cand_seqs[i]);
            END LOOP;
            IF cardinality(taken_seqs) = cardinality(cand_seqs) THEN
                taken := cand;
            ELSE
                SELECT COALESCE(array_agg(cand[j] ORDER BY j), '{}') INTO taken
                FROM generate_subscripts(cand, 1) AS j
                WHERE cand_seqs[j] = ANY(taken_seqs);
            END IF;

            -- The users' rows gain their deltas and the tasks taken, in
            -- user order; and the tasks taken move.
            WITH counted AS (
                UPDATE users u
                SET running = u.running + x.d_running + x.took, active = u.active + x.d_active
                FROM unnest(room_users, d_running, d_active, took) AS x(user_id, d_running, d_active, took)
                WHERE u.user_id = x.user_id AND (x.d_running <> 0 OR x.d_active <> 0 OR x.took <> 0)
            ), moved AS (
                UPDATE tasks
                SET state = 'running', version = version + 1, owner = p_owner, lease_until = p_lease_until,
                    claimed_at = p_now, heartbeat_at = p_now, updated_at = p_now
                WHERE seq = ANY(taken_seqs) AND COALESCE(state, '') = 'queued'
                RETURNING 1
            )
            SELECT COUNT(*) INTO k FROM moved;
            IF k <> cardinality(taken_seqs) THEN
                RAISE EXCEPTION 'complete_and_claim: took % tasks, expected %', k, cardinality(taken_seqs);
            END IF;
        END IF;
    END IF;

    -- The events, numbered after the events' shared lock is held (as
    -- event_insert), and the counts.
    WITH writing AS (
        SELECT pg_advisory_xact_lock_shared(7424602, hashtext(current_schema())) AS locked
    ), appended AS (
        INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
        SELECT v.task_id, v.kind, v.attempt, v.fence, v.op_id, v.from_state, v.to_state, v.reason, v.actor, v.at,
               v.detail, v.scope
        FROM writing, (
            SELECT 1 AS part, x.k, e ->> 0 AS task_id, e ->> 1 AS kind, (e ->> 2)::bigint AS attempt,
                   (e ->> 3)::bigint AS fence, e ->> 4 AS op_id, e ->> 5 AS from_state, e ->> 6 AS to_state,
                   e ->> 7 AS reason, e ->> 8 AS actor, (e ->> 9)::bigint AS at, e ->> 10 AS detail, e ->> 11 AS scope
            FROM jsonb_array_elements(p_events) WITH ORDINALITY AS x(e, k)
            UNION ALL
            SELECT 2, t.ordinality, t.id, 'claimed', t.version + 1, t.version + 1, '', 'queued', 'running', '',
                   p_owner, p_now, '', p_scope
            FROM unnest(taken) WITH ORDINALITY AS t) v
        ORDER BY v.part, v.k
    )
    INSERT INTO tally_deltas (name, n, sum_ms)
    SELECT c.name, SUM(c.n), SUM(c.sum_ms) FROM (
        SELECT 'state:running' AS name, cardinality(taken) - n AS n, CAST(0 AS BIGINT) AS sum_ms
        UNION ALL SELECT 'state:completed', n, 0
        UNION ALL SELECT 'state:queued', -cardinality(taken), 0
        UNION ALL SELECT 'run_time:' || leasehold_bucket(r.ms), 1, r.ms FROM unnest(done_runs) AS r(ms)
        UNION ALL SELECT 'queue_wait:' || leasehold_bucket(w.ms), 1, w.ms
                  FROM (SELECT GREATEST(0, p_now - GREATEST(t.queued_at, t.run_at)) AS ms FROM unnest(taken) AS t) w
        UNION ALL SELECT 'event:' || (e ->> 1) || ':' || (e ->> 5) || ':' || (e ->> 6) || ':' || (e ->> 7), 1, 0
                  FROM jsonb_array_elements(p_events) AS e
        UNION ALL SELECT 'event:claimed:queued:running:', cardinality(taken), 0) c
    GROUP BY c.name
    HAVING SUM(c.n) != 0 OR SUM(c.sum_ms) != 0
    ORDER BY c.name COLLATE "C";

    RETURN QUERY SELECT * FROM unnest(taken);
END
$$;
