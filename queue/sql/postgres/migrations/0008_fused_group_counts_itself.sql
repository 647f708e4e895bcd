-- leasehold PostgreSQL schema, version 8: a fused group counts its own
-- moves and events, once, instead of four statement triggers counting
-- them.
--
-- complete_and_claim (migration 0006) is four writing statements: the
-- completions' UPDATE of tasks, the completed events, claim_batch's UPDATE
-- of tasks and the claimed events. Each fired its counting trigger
-- (tasks_moved, events_counted): a PL/pgSQL call that joined or grouped
-- the statement's transition rows and inserted their sums into
-- tally_deltas and user_deltas. Measured with a copy of tasks holding
-- 20,000 rows (updates of eight rows, alternating schemas, three runs):
-- tasks_moved cost 20-30 µs a row claimed and 12-20 µs a row completed,
-- about a sixth of the server's time a task in the work PostgreSQL 10
-- workers cell.
--
-- Now complete_and_claim runs with leasehold.counted set to on (a SET of
-- the function: PostgreSQL restores the setting when the function
-- returns or fails, so it never outlives the statement), and both
-- triggers are skipped while it is on (their WHEN). The function adds
-- what they would have added itself, from what its statements return:
--
--   * state:running less one and state:completed one more for each task
--     completed, and run_time by bucket (the completion's time less the
--     claim's, at least zero), as tasks_moved counts a move from running;
--   * state:queued less one and state:running one more for each task
--     claimed, and queue_wait by bucket (the claim's time less the later
--     of queued_at and run_at, at least zero), as it counts a claim;
--   * event:KIND:FROM:TO:REASON for each completed and claimed event, as
--     events_counted counts them;
--   * for each user of the tasks completed, a user_deltas row lowering its
--     running and active counts by its tasks completed (completed is not
--     active), as tasks_moved records them; a claim's raise of a user's
--     running count is claim_batch's own, under the user's lock, as since
--     migration 0006.
--
-- The sums are the triggers' sums, in the same transaction, into the same
-- rows' tables: a name that nets to zero (state:running, when a group
-- completes as many as it claims) adds no row, as before. Every other
-- statement, the claim alone and a hand-made UPDATE included, is counted
-- by the triggers as before: only a session that sets leasehold.counted
-- itself could stop them, and the counters' check (counters_check) would
-- find what it left out.
DROP TRIGGER tasks_moved ON tasks;
CREATE TRIGGER tasks_moved AFTER UPDATE ON tasks
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT
WHEN (current_setting('leasehold.counted', true) IS DISTINCT FROM 'on')
EXECUTE FUNCTION tasks_moved();

DROP TRIGGER events_counted ON events;
CREATE TRIGGER events_counted AFTER INSERT ON events
REFERENCING NEW TABLE AS appended
FOR EACH STATEMENT
WHEN (current_setting('leasehold.counted', true) IS DISTINCT FROM 'on')
EXECUTE FUNCTION events_counted();

-- complete_and_claim as in version 6, its checks, locks, writes and result
-- unchanged, counting as above. The tasks taken are gathered once, so the
-- claimed events, the counts and the result read the same rows.
CREATE OR REPLACE FUNCTION complete_and_claim(p_claims JSONB, p_events JSONB, p_now BIGINT, p_due BIGINT, p_alive BIGINT,
                                              p_max INTEGER, p_owner TEXT, p_lease_until BIGINT, p_user_limits BOOLEAN,
                                              p_at_lease_until BOOLEAN, p_scope TEXT)
RETURNS SETOF tasks
LANGUAGE plpgsql VOLATILE
SET enable_bitmapscan = off
SET leasehold.counted = 'on'
AS $$
DECLARE
    n BIGINT;
    done_users TEXT[];
    done_runs BIGINT[];
    taken tasks[] := '{}';
BEGIN
    WITH done AS (
        UPDATE tasks SET state = 'completed', reason = '', owner = '', lease_until = 0, updated_at = c.now
        FROM (SELECT e ->> 0 AS id, (e ->> 1)::bigint AS fence, (e ->> 2)::bigint AS now
              FROM jsonb_array_elements(p_claims) AS e) AS c
        WHERE tasks.id = ANY(ARRAY(SELECT e ->> 0 FROM jsonb_array_elements(p_claims) AS e))
          AND tasks.id = c.id AND tasks.version = c.fence AND COALESCE(tasks.state, '') = 'running'
          AND (tasks.lease_until > c.now OR (p_at_lease_until AND tasks.lease_until = c.now))
        RETURNING tasks.user_id, GREATEST(0, tasks.updated_at - tasks.claimed_at) AS run_time
    )
    SELECT COUNT(*), COALESCE(array_agg(d.user_id), '{}'), COALESCE(array_agg(d.run_time), '{}')
    INTO n, done_users, done_runs
    FROM done d;
    IF n <> jsonb_array_length(p_claims) THEN
        RAISE EXCEPTION 'complete_and_claim: % of % claims matched', n, jsonb_array_length(p_claims)
            USING ERRCODE = 'LH001';
    END IF;

    -- The completions' users, each a running and an active task fewer.
    INSERT INTO user_deltas (user_id, running, active)
    SELECT u.user_id, -COUNT(*), -COUNT(*) FROM unnest(done_users) AS u(user_id)
    GROUP BY u.user_id ORDER BY u.user_id COLLATE "C";

    PERFORM pg_advisory_xact_lock_shared(7424602, hashtext(current_schema()));
    INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
    SELECT e ->> 0, e ->> 1, (e ->> 2)::bigint, (e ->> 3)::bigint, e ->> 4, e ->> 5, e ->> 6, e ->> 7,
           e ->> 8, (e ->> 9)::bigint, e ->> 10, e ->> 11
    FROM jsonb_array_elements(p_events) WITH ORDINALITY AS x(e, k)
    ORDER BY x.k;

    IF p_max >= 1 THEN
        SELECT COALESCE(array_agg(t ORDER BY t.priority DESC, t.run_at, t.seq), '{}') INTO taken
        FROM claim_batch(p_now, p_due, p_alive, p_max, p_owner, p_lease_until, p_user_limits) AS t;
        INSERT INTO events (task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
        SELECT t.id, 'claimed', t.version + 1, t.version + 1, '', 'queued', 'running', '', p_owner, p_now, '', p_scope
        FROM unnest(taken) WITH ORDINALITY AS t
        ORDER BY t.ordinality;
    END IF;

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
