-- leasehold PostgreSQL schema, version 4: the counters are kept once per
-- statement, not once per row. Before, every task inserted, every state
-- change and every event ran a row trigger that inserted its own rows into
-- tally_deltas and user_deltas: a group commit claiming eight tasks ran
-- thirty-two inserts from inside claim_task, and completing them as many
-- from inside complete_batch, most of each statement's time.
--
-- Now each trigger runs once per statement over its transition tables
-- (the rows the statement inserted, or each changed row's old and new
-- versions, joined by seq, which no statement changes) and inserts one row
-- per counter name and one per user, their sums. The sums are exactly the
-- row triggers' (a counter is the SUM of its rows; a sum of zero is left
-- out, as it adds nothing), in the same transaction, so every reader and
-- every argument of migration 0003 about when a user's count moves holds
-- as before. A transition table cannot go with a column list, so the
-- update trigger fires for every UPDATE of tasks and finds the rows whose
-- state changed itself.
--
-- The counts are the same as before the upgrade: no counter row is
-- touched, only the triggers that add to them are replaced.

DROP TRIGGER tasks_inserted ON tasks;
DROP TRIGGER tasks_moved ON tasks;
DROP TRIGGER events_counted ON events;
DROP TRIGGER tasks_pruned ON tasks;
DROP FUNCTION tasks_inserted();
DROP FUNCTION tasks_moved();
DROP FUNCTION events_counted();
DROP FUNCTION tasks_pruned();

-- tasks_inserted counts the tasks a statement inserted in their states and
-- their users' active tasks.
CREATE FUNCTION tasks_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tally_deltas (name, n)
    SELECT name, n FROM (SELECT 'state:' || state AS name, COUNT(*) AS n FROM inserted GROUP BY state) c
    ORDER BY name COLLATE "C";
    INSERT INTO user_deltas (user_id, running, active)
    SELECT user_id, 0, COUNT(*) FROM inserted
    WHERE leasehold_active(state) != 0
    GROUP BY user_id ORDER BY user_id COLLATE "C";
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_inserted AFTER INSERT ON tasks
REFERENCING NEW TABLE AS inserted
FOR EACH STATEMENT EXECUTE FUNCTION tasks_inserted();

-- tasks_moved counts the state changes of a statement: the states'
-- tallies, the users' running and active counts, and the queue-wait
-- (queued -> running: from when the task became eligible to its claim)
-- and run-time (running -> anything: from the claim to the end of that
-- claim) distributions.
CREATE FUNCTION tasks_moved() RETURNS trigger
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
            FROM moved GROUP BY user_id) s
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

CREATE TRIGGER tasks_moved AFTER UPDATE ON tasks
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION tasks_moved();

-- events_counted counts the events a statement appended by kind and
-- transition.
CREATE FUNCTION events_counted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tally_deltas (name, n)
    SELECT name, n FROM (
        SELECT 'event:' || kind || ':' || from_state || ':' || to_state || ':' || reason AS name, COUNT(*) AS n
        FROM appended GROUP BY 1) c
    ORDER BY name COLLATE "C";
    RETURN NULL;
END
$$;

CREATE TRIGGER events_counted AFTER INSERT ON events
REFERENCING NEW TABLE AS appended
FOR EACH STATEMENT EXECUTE FUNCTION events_counted();

-- tasks_pruned moves the tasks a prune removed out of the state tallies
-- and into pruned:STATE, so that the depths and the tasks pruned still
-- account for every task submitted.
CREATE FUNCTION tasks_pruned() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tally_deltas (name, n)
    SELECT name, SUM(n) FROM (
        SELECT 'state:' || state AS name, -1 AS n FROM removed
        UNION ALL SELECT 'pruned:' || state, 1 FROM removed) c
    GROUP BY name ORDER BY name COLLATE "C";
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_pruned AFTER DELETE ON tasks
REFERENCING OLD TABLE AS removed
FOR EACH STATEMENT EXECUTE FUNCTION tasks_pruned();
