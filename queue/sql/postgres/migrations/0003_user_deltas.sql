-- leasehold PostgreSQL schema, version 3: each user's counters (running
-- and active tasks) as changes, for group commit across machines. Before,
-- every claim, settle and submit updated its user's row in users and held
-- that row lock until commit: a group commit completing tasks of users a
-- and b in one transaction, and another machine's group completing b's and
-- a's, then waited on each other in a cycle (a deadlock), and every write
-- of a user queued behind the commit of the one before.
--
-- Now the triggers insert a row per change into user_deltas and lock no
-- users row. A user's count is its users row plus its deltas (user_caps).
-- Only a claim locks a users row (claim_users_lock, SKIP LOCKED: it never
-- waits on one, it leaves that user's tasks for this time) and, holding it,
-- folds the user's deltas into the row (claim_users_fold, a statement of
-- its own and so reading after the lock) and reads the count from the row:
-- every claim of the user that committed is in it (a claim moves a count
-- up only while it holds the lock), and what it misses of settles that
-- commit meanwhile only lowers the count, so the per-user running limit
-- cannot be raced. Admission still reads active under its advisory lock
-- (user_ensure), which every submit holds until it commits.
--
-- The counts are the same as before the upgrade: the rows of users are
-- untouched, and user_deltas starts empty.

CREATE TABLE user_deltas (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id TEXT NOT NULL,
    running BIGINT NOT NULL,
    active  BIGINT NOT NULL
);

CREATE INDEX user_deltas_user ON user_deltas (user_id);

CREATE OR REPLACE VIEW user_caps AS
SELECT u.user_id,
       u.running + COALESCE(d.running, 0) AS running,
       u.active + COALESCE(d.active, 0) AS active,
       CASE WHEN u.running_max >= 0 THEN u.running_max
            ELSE (SELECT value FROM settings WHERE key = 'user_running_max') END AS running_limit,
       CASE WHEN u.depth_max >= 0 THEN u.depth_max
            ELSE (SELECT value FROM settings WHERE key = 'user_depth_max') END AS depth_limit
FROM users u
LEFT JOIN LATERAL (SELECT SUM(running)::BIGINT AS running, SUM(active)::BIGINT AS active
                   FROM user_deltas WHERE user_id = u.user_id) d ON TRUE;

CREATE OR REPLACE FUNCTION tasks_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tally_deltas (name, n) VALUES ('state:' || NEW.state, 1);
    IF leasehold_active(NEW.state) != 0 THEN
        INSERT INTO user_deltas (user_id, running, active) VALUES (NEW.user_id, 0, leasehold_active(NEW.state));
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION tasks_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ms BIGINT;
    d_running BIGINT;
    d_active BIGINT;
BEGIN
    INSERT INTO tally_deltas (name, n) VALUES ('state:' || OLD.state, -1), ('state:' || NEW.state, 1);
    d_running := (CASE WHEN NEW.state = 'running' THEN 1 ELSE 0 END)
             - (CASE WHEN OLD.state = 'running' THEN 1 ELSE 0 END);
    d_active := leasehold_active(NEW.state) - leasehold_active(OLD.state);
    IF d_running != 0 OR d_active != 0 THEN
        INSERT INTO user_deltas (user_id, running, active) VALUES (NEW.user_id, d_running, d_active);
    END IF;
    IF OLD.state = 'queued' AND NEW.state = 'running' THEN
        ms := GREATEST(0, NEW.claimed_at - GREATEST(NEW.queued_at, NEW.run_at));
        INSERT INTO tally_deltas (name, n, sum_ms) VALUES ('queue_wait:' || leasehold_bucket(ms), 1, ms);
    END IF;
    IF OLD.state = 'running' THEN
        ms := GREATEST(0, NEW.updated_at - OLD.claimed_at);
        INSERT INTO tally_deltas (name, n, sum_ms) VALUES ('run_time:' || leasehold_bucket(ms), 1, ms);
    END IF;
    RETURN NULL;
END
$$;

-- The claim's candidates per user in claim order (claim_next reads each
-- user's first few with a bounded index scan, whatever the statistics).
CREATE INDEX tasks_claim_user ON tasks (user_id, priority DESC, run_at, seq) WHERE state = 'queued';
