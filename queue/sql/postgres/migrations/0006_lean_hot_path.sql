-- leasehold PostgreSQL schema, version 6: a task's claim and its completion
-- write fewer rows and index entries. Every claim and every completion is a
-- new version of the task's row (a state change is never a HOT update: state
-- is indexed), so each index of tasks gains an entry at each, and each event
-- gains one in each index of events; each entry is a WAL record, written and
-- then synced at commit. Measured before this version (work PostgreSQL 10
-- workers, pg_stat_wal): 33.5 WAL records a task, claimed and completed.
--
-- 1. The audit trail's indexes by actor and by time (events_actor,
--    events_at) cost two entries an event, four a task, and serve only the
--    operator's audit by actor or by time. The time of an event follows its
--    seq closely (each machine's clock at its insert), so a BRIN index on at
--    (a few pages for millions of events, and an entry only when a range of
--    pages is summarised) finds a window of time; an audit by actor reads
--    that window, or the whole trail when no window is given.
DROP INDEX events_actor;
DROP INDEX events_at;
CREATE INDEX events_at_brin ON events USING brin (at);

-- 2. Listing by state (tasks_state) took an entry at every state change. A
--    running task is listed through tasks_lease_running, and completed, the
--    state most tasks end in, is most of the table: a scan in seq order finds
--    a page of them at once. So the index covers the other states alone, and
--    neither a claim nor a completion adds to it.
DROP INDEX tasks_state;
CREATE INDEX tasks_state_listed ON tasks (state, seq) WHERE state NOT IN ('running', 'completed');

-- 3. No query reads tally_deltas by name (the counters are summed over the
--    whole table, compaction goes by id), so its index by name is dropped.
DROP INDEX tally_deltas_name;

-- 4. A claim moves its users' running counts itself. It holds the users'
--    rows locked already (to check the per-user limit under the lock, since
--    version 3), so it adds the tasks it took to their running counts in the
--    same UPDATE that folds the users' deltas, instead of leaving a delta row
--    per user for the next claim to fold (three WAL records a row, and its
--    delete). Its UPDATE of the tasks runs with leasehold.claim_counted set
--    for that statement alone, and tasks_moved then leaves its moves from
--    queued to running out of user_deltas; any other statement's moves, a
--    hand-made one included, are counted there as before. Nothing else
--    changes: the same users are locked in the same order, every argument of
--    version 3 about the limit holds (the count a claim raises is raised under
--    the lock, as the fold was), and active does not move from queued to
--    running.
CREATE OR REPLACE FUNCTION tasks_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    WITH moved AS (
        SELECT n.user_id, o.state AS old_state, n.state AS new_state,
               CASE WHEN o.state = 'queued' AND n.state = 'running'
                    THEN GREATEST(0, n.claimed_at - GREATEST(n.queued_at, n.run_at)) END AS queue_wait,
               CASE WHEN o.state = 'running'
                    THEN GREATEST(0, n.updated_at - o.claimed_at) END AS run_time
        FROM old_rows o JOIN new_rows n ON n.seq = o.seq
        WHERE o.state IS DISTINCT FROM n.state
    ), users_moved AS (
        INSERT INTO user_deltas (user_id, running, active)
        SELECT user_id, running, active FROM (
            SELECT user_id,
                   SUM((CASE WHEN new_state = 'running' THEN 1 ELSE 0 END)
                     - (CASE WHEN old_state = 'running' THEN 1 ELSE 0 END)) AS running,
                   SUM(leasehold_active(new_state) - leasehold_active(old_state)) AS active
            FROM moved
            WHERE NOT (old_state = 'queued' AND new_state = 'running'
                       AND COALESCE(current_setting('leasehold.claim_counted', true), '') = 'on')
            GROUP BY user_id) s
        WHERE running != 0 OR active != 0
        ORDER BY user_id COLLATE "C"
    )
    INSERT INTO tally_deltas (name, n, sum_ms)
    SELECT name, SUM(n), SUM(sum_ms) FROM (
        SELECT 'state:' || old_state AS name, -1 AS n, 0 AS sum_ms FROM moved
        UNION ALL SELECT 'state:' || new_state, 1, 0 FROM moved
        UNION ALL SELECT 'queue_wait:' || leasehold_bucket(queue_wait), 1, queue_wait FROM moved
                  WHERE queue_wait IS NOT NULL
        UNION ALL SELECT 'run_time:' || leasehold_bucket(run_time), 1, run_time FROM moved
                  WHERE run_time IS NOT NULL) c
    GROUP BY name
    HAVING SUM(n) != 0 OR SUM(sum_ms) != 0
    ORDER BY name COLLATE "C";
    RETURN NULL;
END
$$;

-- claim_batch as in version 5, but for the fold: the locked users' deltas
-- are deleted and summed first (a statement of its own, so its snapshot is
-- taken after the lock, as before), each user's room is its row's running
-- count plus its deltas, and once the tasks are taken one UPDATE of the
-- users' rows adds both the deltas and the tasks taken.
CREATE OR REPLACE FUNCTION claim_batch(p_now BIGINT, p_due BIGINT, p_alive BIGINT, p_max INTEGER,
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
          FOR UPDATE OF u SKIP LOCKED) AS l;
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

-- 5. A group of completions and the claims that follow them in one
--    statement (batch.go: fused groups). Before, such a group of a worker's
--    slots (each completing its task and claiming its next) was five round
--    trips: BEGIN, complete_batch, claim_batch, the events, COMMIT, each
--    waiting for the last. complete_and_claim does all of it in one
--    statement, run as a transaction of its own (no BEGIN, no COMMIT: the
--    statement's end commits it):
--
--      * the claims of p_claims ([id, fence, now] each, as complete_batch
--        takes them) are completed under complete_batch's checks, fence,
--        state and lease, claim by claim; if any does not match, nothing is
--        written and the statement fails with SQLSTATE LH001, and the caller
--        runs the group the usual way, where Complete's own path says why
--        and records the refusal;
--      * their completed events (p_events, event_insert_batch's rows) are
--        appended under event_insert's shared advisory lock;
--      * up to p_max tasks are claimed as claim_batch claims them (it is
--        claim_batch), and a claimed event is appended for each, in claim
--        order, with what the protocol's claim records (queue/claim.go):
--        attempt and fence the new version, queued to running, the owner as
--        actor, p_now and p_scope;
--      * the tasks taken are returned as they were (queued), as claim_batch
--        returns them.
--
--    p_at_lease_until is false save in a build made to break the lease
--    check (write-at-lease-until), as complete_batch's text is.
CREATE FUNCTION complete_and_claim(p_claims JSONB, p_events JSONB, p_now BIGINT, p_due BIGINT, p_alive BIGINT,
                                   p_max INTEGER, p_owner TEXT, p_lease_until BIGINT, p_user_limits BOOLEAN,
                                   p_at_lease_until BOOLEAN, p_scope TEXT)
RETURNS SETOF tasks
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    n BIGINT;
BEGIN
    UPDATE tasks SET state = 'completed', reason = '', owner = '', lease_until = 0, updated_at = c.now
    FROM (SELECT e ->> 0 AS id, (e ->> 1)::bigint AS fence, (e ->> 2)::bigint AS now
          FROM jsonb_array_elements(p_claims) AS e) AS c
    WHERE tasks.id = ANY(ARRAY(SELECT e ->> 0 FROM jsonb_array_elements(p_claims) AS e))
      AND tasks.id = c.id AND tasks.version = c.fence AND COALESCE(tasks.state, '') = 'running'
      AND (tasks.lease_until > c.now OR (p_at_lease_until AND tasks.lease_until = c.now));
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n <> jsonb_array_length(p_claims) THEN
        RAISE EXCEPTION 'complete_and_claim: % of % claims matched', n, jsonb_array_length(p_claims)
            USING ERRCODE = 'LH001';
    END IF;

    PERFORM pg_advisory_xact_lock_shared(7424602, hashtext(current_schema()));
    INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
    SELECT e ->> 0, e ->> 1, (e ->> 2)::bigint, (e ->> 3)::bigint, e ->> 4, e ->> 5, e ->> 6, e ->> 7,
           e ->> 8, (e ->> 9)::bigint, e ->> 10, e ->> 11
    FROM jsonb_array_elements(p_events) WITH ORDINALITY AS x(e, k)
    ORDER BY x.k;

    IF p_max < 1 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH taken AS (
        SELECT * FROM claim_batch(p_now, p_due, p_alive, p_max, p_owner, p_lease_until, p_user_limits)
    ), claimed AS (
        INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
        SELECT t.id, 'claimed', t.version + 1, t.version + 1, '', 'queued', 'running', '', p_owner, p_now, '', p_scope
        FROM taken t
        ORDER BY t.priority DESC, t.run_at, t.seq
    )
    SELECT * FROM taken;
END
$$;
