-- leasehold schema, version 2: the hot paths (claim, settle) change fewer
-- pages and run fewer statements. Every page a write transaction changes is
-- one more WAL frame written (and, under synchronous=FULL, synced) at
-- commit. Nothing observable changes: the same rows, events and metrics
-- come out.

-- 1. Indexes a state change need not maintain.

-- The claim index covers queued tasks only: a claim deletes one entry, and
-- settling a running task does not touch it. The claim query names
-- state = 'queued' literally, so the planner can use it.
DROP INDEX tasks_claim;
CREATE INDEX tasks_claim_queued ON tasks (blocked, priority DESC, run_at, seq) WHERE state = 'queued';

-- The reaper's lease scan covers running tasks only.
DROP INDEX tasks_lease;
CREATE INDEX tasks_lease_running ON tasks (lease_until) WHERE state = 'running';

-- A user's tasks in submission order, for listing and for re-evaluating a
-- user's tasks when its limit is changed: user never changes, so no state
-- change touches this index.
DROP INDEX tasks_user_state;
CREATE INDEX tasks_user ON tasks (user, seq);

-- limited is 1 while the task is queued and its user has a running limit;
-- the triggers below keep it, as they keep blocked. Only limited users'
-- queued tasks are ever blocked or unblocked when a running count crosses
-- the limit, so the index that finds them covers those alone, and claiming
-- a task of a user without a limit (the default) does not touch it.
ALTER TABLE tasks ADD COLUMN limited INTEGER NOT NULL DEFAULT 0 CHECK (limited IN (0, 1));
UPDATE tasks SET limited = (SELECT running_limit > 0 FROM user_caps c WHERE c.user = tasks.user)
WHERE state = 'queued';
CREATE INDEX tasks_limited_queued ON tasks (user) WHERE state = 'queued' AND limited = 1;

-- No query reads events by actor or by time: the audit trail is read by
-- task (events_task) and in order (its primary key).
DROP INDEX events_actor;
DROP INDEX events_at;

-- 2. One table, one page, for the counters every state change updates.
--
-- tallies replaces state_counts, event_counts and histograms, which were
-- three tables and so three pages per transaction. Names:
--   state:STATE                        tasks in STATE (n)
--   event:KIND:FROM:TO:REASON          events of that kind and transition (n)
--   queue_wait:BUCKET, run_time:BUCKET observations (n) and their sum (sum_ms)
-- BUCKET indexes model.HistogramBounds; the CASEs below repeat those bounds
-- and a test proves they agree.
CREATE TABLE tallies (
    name   TEXT PRIMARY KEY,
    n      INTEGER NOT NULL CHECK (n >= 0),
    sum_ms INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

INSERT INTO tallies (name, n) SELECT 'state:' || state, n FROM state_counts;
INSERT INTO tallies (name, n)
SELECT 'event:' || kind || ':' || from_state || ':' || to_state || ':' || reason, n FROM event_counts;
INSERT INTO tallies (name, n, sum_ms) SELECT name || ':' || bucket, n, sum_ms FROM histograms;

DROP TRIGGER tasks_inserted;
DROP TRIGGER tasks_moved;
DROP TRIGGER users_crossed;
DROP TRIGGER events_counted;
DROP TABLE state_counts;
DROP TABLE event_counts;
DROP TABLE histograms;

-- 3. The triggers, on tallies. Equality updates throughout: an IN list on
-- a key builds a temporary index on every call.

CREATE TRIGGER tasks_inserted AFTER INSERT ON tasks
BEGIN
    UPDATE tallies SET n = n + 1 WHERE name = 'state:' || NEW.state;
    UPDATE users SET active = active + 1 WHERE user = NEW.user;
    UPDATE tasks
    SET blocked = (SELECT running_limit > 0 AND running >= running_limit FROM user_caps WHERE user = NEW.user),
        limited = (SELECT running_limit > 0 FROM user_caps WHERE user = NEW.user)
    WHERE seq = NEW.seq;
END;

-- A state change is counted by one of two triggers that exclude each other,
-- so the order their statements run in is fixed: a task entering queued
-- has its flags set after its user's counts have moved.
CREATE TRIGGER tasks_moved AFTER UPDATE OF state ON tasks
WHEN OLD.state != NEW.state AND NEW.state != 'queued'
BEGIN
    UPDATE tallies SET n = n - 1 WHERE name = 'state:' || OLD.state;
    UPDATE tallies SET n = n + 1 WHERE name = 'state:' || NEW.state;
    UPDATE users
    SET running = running + (NEW.state = 'running') - (OLD.state = 'running'),
        active = active
            + (NEW.state IN ('queued', 'running', 'waiting_for_approval'))
            - (OLD.state IN ('queued', 'running', 'waiting_for_approval'))
    WHERE user = NEW.user;
END;

CREATE TRIGGER tasks_requeued AFTER UPDATE OF state ON tasks
WHEN OLD.state != NEW.state AND NEW.state = 'queued'
BEGIN
    UPDATE tallies SET n = n - 1 WHERE name = 'state:' || OLD.state;
    UPDATE tallies SET n = n + 1 WHERE name = 'state:queued';
    UPDATE users
    SET running = running + (NEW.state = 'running') - (OLD.state = 'running'),
        active = active
            + (NEW.state IN ('queued', 'running', 'waiting_for_approval'))
            - (OLD.state IN ('queued', 'running', 'waiting_for_approval'))
    WHERE user = NEW.user;
    UPDATE tasks
    SET blocked = (SELECT running_limit > 0 AND running >= running_limit FROM user_caps WHERE user = NEW.user),
        limited = (SELECT running_limit > 0 FROM user_caps WHERE user = NEW.user)
    WHERE seq = NEW.seq;
END;

-- When a user's running count crosses its limit, its queued tasks are
-- blocked or unblocked together. A user with a limit has all its queued
-- tasks flagged limited, so tasks_limited_queued finds them.
CREATE TRIGGER users_crossed AFTER UPDATE OF running ON users
WHEN NEW.running != OLD.running
 AND (SELECT running_limit FROM user_caps WHERE user = NEW.user) > 0
 AND (OLD.running >= (SELECT running_limit FROM user_caps WHERE user = NEW.user))
  != (NEW.running >= (SELECT running_limit FROM user_caps WHERE user = NEW.user))
BEGIN
    UPDATE tasks SET blocked = (NEW.running >= (SELECT running_limit FROM user_caps WHERE user = NEW.user))
    WHERE user = NEW.user AND state = 'queued' AND limited = 1;
END;

-- Queue wait: from when the task became eligible (queued and due) to its
-- claim.
CREATE TRIGGER tasks_claimed AFTER UPDATE OF state ON tasks
WHEN OLD.state = 'queued' AND NEW.state = 'running'
BEGIN
    INSERT INTO tallies (name, n, sum_ms)
    SELECT 'queue_wait:' || CASE
               WHEN ms <= 10 THEN 0 WHEN ms <= 50 THEN 1 WHEN ms <= 100 THEN 2
               WHEN ms <= 250 THEN 3 WHEN ms <= 500 THEN 4 WHEN ms <= 1000 THEN 5
               WHEN ms <= 2500 THEN 6 WHEN ms <= 5000 THEN 7 WHEN ms <= 10000 THEN 8
               WHEN ms <= 30000 THEN 9 WHEN ms <= 60000 THEN 10 WHEN ms <= 300000 THEN 11
               WHEN ms <= 1800000 THEN 12 ELSE 13 END, 1, ms
    FROM (SELECT MAX(0, NEW.claimed_at - MAX(NEW.queued_at, NEW.run_at)) AS ms)
    WHERE true
    ON CONFLICT (name) DO UPDATE SET n = n + 1, sum_ms = sum_ms + excluded.sum_ms;
END;

-- Run time: from a claim to the end of that claim (settled, paused,
-- released or expired).
CREATE TRIGGER tasks_claim_ended AFTER UPDATE OF state ON tasks
WHEN OLD.state = 'running' AND NEW.state != 'running'
BEGIN
    INSERT INTO tallies (name, n, sum_ms)
    SELECT 'run_time:' || CASE
               WHEN ms <= 10 THEN 0 WHEN ms <= 50 THEN 1 WHEN ms <= 100 THEN 2
               WHEN ms <= 250 THEN 3 WHEN ms <= 500 THEN 4 WHEN ms <= 1000 THEN 5
               WHEN ms <= 2500 THEN 6 WHEN ms <= 5000 THEN 7 WHEN ms <= 10000 THEN 8
               WHEN ms <= 30000 THEN 9 WHEN ms <= 60000 THEN 10 WHEN ms <= 300000 THEN 11
               WHEN ms <= 1800000 THEN 12 ELSE 13 END, 1, ms
    FROM (SELECT MAX(0, NEW.updated_at - OLD.claimed_at) AS ms)
    WHERE true
    ON CONFLICT (name) DO UPDATE SET n = n + 1, sum_ms = sum_ms + excluded.sum_ms;
END;

CREATE TRIGGER events_counted AFTER INSERT ON events
BEGIN
    INSERT INTO tallies (name, n)
    VALUES ('event:' || NEW.kind || ':' || NEW.from_state || ':' || NEW.to_state || ':' || NEW.reason, 1)
    ON CONFLICT (name) DO UPDATE SET n = n + 1;
END;
