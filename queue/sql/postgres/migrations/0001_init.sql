-- leasehold PostgreSQL schema, version 1: the SQLite schema at its version 4
-- in PostgreSQL's dialect. Committed migrations never change: a test pins
-- this file's checksum. Times are BIGINT Unix milliseconds (UTC), 0 meaning
-- "not set", always bound from the queue's injected clock: no now(), no
-- time defaults. The user column is user_id (user is reserved here).
--
-- Where PostgreSQL differs from SQLite, it is for many writers on many
-- machines at once (SQLite has one writer at a time):
--   * A claim locks its candidate tasks with FOR UPDATE SKIP LOCKED and then
--     its users' counter rows (users, in user_id order, FOR UPDATE) and
--     checks each user's running count under that lock, so queued tasks
--     carry no blocked or limited flag: keeping such flags would make one
--     claim update every queued task of its user, rows another claimer may
--     hold, and deadlock.
--   * The counters are not one shared row per name, which every write would
--     update and so serialise on (and deadlock over, in a group commit):
--     tally_deltas gains a row per change, and readers sum them by name.
--   * An events cursor must never pass an event whose transaction may still
--     commit (sequence order is not commit order): every event insert holds
--     a shared advisory lock until its transaction ends, and a follower
--     takes the exclusive one before reading, so every event numbered below
--     the sequence's last value is then committed or gone (queries.sql:
--     event_insert, events_after_lock, events_after).

CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);

INSERT INTO settings (key, value) VALUES
    ('depth_max', 100000),
    ('user_depth_max', 10000),
    ('user_running_max', 0),
    ('attempts_max', 3),
    ('grant_cost_max', 10000),
    ('grant_steps_max', 1000),
    ('claim_batch_max', 16);

-- users holds each user's limits (-1 inherits the default in settings, 0 is
-- unlimited) and its counters, kept by the triggers below: running tasks
-- and active (queued, running or waiting) tasks. A claim locks its users'
-- rows before it checks running against the limit.
CREATE TABLE users (
    user_id     TEXT PRIMARY KEY,
    running     BIGINT NOT NULL DEFAULT 0 CHECK (running >= 0),
    active      BIGINT NOT NULL DEFAULT 0 CHECK (active >= 0),
    running_max BIGINT NOT NULL DEFAULT -1 CHECK (running_max >= -1),
    depth_max   BIGINT NOT NULL DEFAULT -1 CHECK (depth_max >= -1)
);

CREATE VIEW user_caps AS
SELECT user_id, running, active,
       CASE WHEN running_max >= 0 THEN running_max
            ELSE (SELECT value FROM settings WHERE key = 'user_running_max') END AS running_limit,
       CASE WHEN depth_max >= 0 THEN depth_max
            ELSE (SELECT value FROM settings WHERE key = 'user_depth_max') END AS depth_limit
FROM users;

CREATE SEQUENCE tasks_seq;

CREATE TABLE tasks (
    seq              BIGINT PRIMARY KEY DEFAULT nextval('tasks_seq'), -- insertion order, the claim order's tiebreaker
    id               TEXT NOT NULL UNIQUE,
    user_id          TEXT NOT NULL REFERENCES users (user_id),
    idem_key         TEXT NOT NULL,
    request_hash     TEXT NOT NULL,
    payload          TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('queued', 'running', 'waiting_for_approval',
                         'needs_review', 'completed', 'failed', 'cancelled')),
    reason           TEXT NOT NULL DEFAULT '' CHECK (reason IN ('', 'budget_exhausted',
                         'steps_exhausted', 'permanent_error', 'cancelled_by_caller',
                         'approval_rejected', 'attempts_exhausted', 'uncertain_effect',
                         'deadline_exceeded', 'operator_resolved')),
    priority         BIGINT NOT NULL,
    run_at           BIGINT NOT NULL,
    deadline         BIGINT NOT NULL DEFAULT 0,
    version          BIGINT NOT NULL DEFAULT 0, -- the fence token; only a claim increments it
    attempts_charged BIGINT NOT NULL DEFAULT 0,
    attempts_max     BIGINT NOT NULL CHECK (attempts_max >= 1),
    owner            TEXT NOT NULL DEFAULT '',
    lease_until      BIGINT NOT NULL DEFAULT 0,
    heartbeat_at     BIGINT NOT NULL DEFAULT 0,
    claimed_at       BIGINT NOT NULL DEFAULT 0,
    queued_at        BIGINT NOT NULL,
    cost_budget      BIGINT NOT NULL CHECK (cost_budget >= 1),
    cost_used        BIGINT NOT NULL DEFAULT 0 CHECK (cost_used >= 0 AND cost_used <= cost_budget),
    steps_max        BIGINT NOT NULL CHECK (steps_max >= 1),
    steps_used       BIGINT NOT NULL DEFAULT 0 CHECK (steps_used >= 0 AND steps_used <= steps_max),
    checkpoint       TEXT NOT NULL DEFAULT '',
    cancel_requested BIGINT NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    cancelled_by     TEXT NOT NULL DEFAULT '',
    approved_by      TEXT NOT NULL DEFAULT '',
    approval_gate    TEXT NOT NULL DEFAULT '',
    approval_version BIGINT NOT NULL DEFAULT 0,
    schedule_id      TEXT NOT NULL DEFAULT '',
    schedule_run     BIGINT NOT NULL DEFAULT 0,
    last_error       TEXT NOT NULL DEFAULT '',
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    attempts_failed  BIGINT NOT NULL DEFAULT 0 CHECK (attempts_failed >= 0),
    UNIQUE (user_id, idem_key),
    CHECK ((state = 'running') = (owner != '')),
    CHECK ((state = 'running') = (lease_until != 0))
);

-- The claim: queued tasks in claim order, so the first eligible rows are an
-- index scan with no sort.
CREATE INDEX tasks_claim_queued ON tasks (priority DESC, run_at, seq) WHERE state = 'queued';
-- The reaper's lease scan.
CREATE INDEX tasks_lease_running ON tasks (lease_until) WHERE state = 'running';
-- The reaper's deadline scan, over active tasks that have a deadline.
CREATE INDEX tasks_deadline ON tasks (deadline)
    WHERE deadline != 0 AND state IN ('queued', 'running', 'waiting_for_approval');
-- A user's tasks in submission order.
CREATE INDEX tasks_user ON tasks (user_id, seq);
-- Listing by state.
CREATE INDEX tasks_state ON tasks (state, seq);
-- Each periodic run (schedule, k) is enqueued at most once.
CREATE UNIQUE INDEX tasks_schedule_run ON tasks (schedule_id, schedule_run) WHERE schedule_id != '';

-- tally_deltas holds the counters as changes, one row per change, summed by
-- name when read (tallies_all). Names, as SQLite's tallies:
--   state:STATE                        tasks in STATE (n)
--   event:KIND:FROM:TO:REASON          events of that kind and transition (n)
--   queue_wait:BUCKET, run_time:BUCKET observations (n) and their sum (sum_ms)
-- BUCKET indexes model.HistogramBounds; leasehold_bucket repeats those bounds
-- and a test proves they agree.
CREATE TABLE tally_deltas (
    id     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name   TEXT NOT NULL,
    n      BIGINT NOT NULL,
    sum_ms BIGINT NOT NULL DEFAULT 0
);

CREATE INDEX tally_deltas_name ON tally_deltas (name);

INSERT INTO tally_deltas (name, n) VALUES
    ('state:queued', 0), ('state:running', 0), ('state:waiting_for_approval', 0),
    ('state:needs_review', 0), ('state:completed', 0), ('state:failed', 0), ('state:cancelled', 0);

CREATE FUNCTION leasehold_bucket(ms BIGINT) RETURNS INTEGER
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN ms <= 10 THEN 0 WHEN ms <= 50 THEN 1 WHEN ms <= 100 THEN 2
        WHEN ms <= 250 THEN 3 WHEN ms <= 500 THEN 4 WHEN ms <= 1000 THEN 5
        WHEN ms <= 2500 THEN 6 WHEN ms <= 5000 THEN 7 WHEN ms <= 10000 THEN 8
        WHEN ms <= 30000 THEN 9 WHEN ms <= 60000 THEN 10 WHEN ms <= 300000 THEN 11
        WHEN ms <= 1800000 THEN 12 ELSE 13 END
$$;

CREATE FUNCTION leasehold_active(state TEXT) RETURNS BIGINT
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN state IN ('queued', 'running', 'waiting_for_approval') THEN 1 ELSE 0 END
$$;

-- tasks_inserted counts a new task in its state and its user's active tasks.
CREATE FUNCTION tasks_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tally_deltas (name, n) VALUES ('state:' || NEW.state, 1);
    UPDATE users SET active = active + leasehold_active(NEW.state) WHERE user_id = NEW.user_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_inserted AFTER INSERT ON tasks
FOR EACH ROW EXECUTE FUNCTION tasks_inserted();

-- tasks_moved counts a state change: the states' tallies, the user's
-- running and active counts, and the queue-wait (queued -> running: from
-- when the task became eligible to its claim) and run-time (running ->
-- anything: from the claim to the end of that claim) distributions.
CREATE FUNCTION tasks_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ms BIGINT;
BEGIN
    INSERT INTO tally_deltas (name, n) VALUES ('state:' || OLD.state, -1), ('state:' || NEW.state, 1);
    UPDATE users
    SET running = running + (CASE WHEN NEW.state = 'running' THEN 1 ELSE 0 END)
                          - (CASE WHEN OLD.state = 'running' THEN 1 ELSE 0 END),
        active = active + leasehold_active(NEW.state) - leasehold_active(OLD.state)
    WHERE user_id = NEW.user_id;
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

CREATE TRIGGER tasks_moved AFTER UPDATE OF state ON tasks
FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION tasks_moved();

-- events is the append-only audit trail. It never holds payload contents
-- or credentials. Its seq is the cursor order, not the commit order: see
-- the header.
CREATE SEQUENCE events_seq;

CREATE TABLE events (
    seq        BIGINT PRIMARY KEY DEFAULT nextval('events_seq'),
    task_id    TEXT NOT NULL,
    kind       TEXT NOT NULL,
    attempt    BIGINT NOT NULL,
    fence      BIGINT NOT NULL,
    op_id      TEXT NOT NULL,
    from_state TEXT NOT NULL,
    to_state   TEXT NOT NULL,
    reason     TEXT NOT NULL,
    actor      TEXT NOT NULL,
    at         BIGINT NOT NULL,
    detail     TEXT NOT NULL,
    scope      TEXT NOT NULL DEFAULT ''
);

CREATE INDEX events_task ON events (task_id, seq);
CREATE INDEX events_actor ON events (actor, seq);
CREATE INDEX events_at ON events (at, seq);

CREATE FUNCTION events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only';
END
$$;

CREATE TRIGGER events_no_update BEFORE UPDATE OR DELETE ON events
FOR EACH ROW EXECUTE FUNCTION events_append_only();

CREATE FUNCTION events_counted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tally_deltas (name, n)
    VALUES ('event:' || NEW.kind || ':' || NEW.from_state || ':' || NEW.to_state || ':' || NEW.reason, 1);
    RETURN NULL;
END
$$;

CREATE TRIGGER events_counted AFTER INSERT ON events
FOR EACH ROW EXECUTE FUNCTION events_counted();

-- effects is the ledger of customer-visible operations: intent before the
-- call, receipt after. An intent without a receipt is uncertain.
CREATE TABLE effects (
    op_id         TEXT PRIMARY KEY,
    task_id       TEXT NOT NULL REFERENCES tasks (id),
    step          BIGINT NOT NULL,
    intent_fence  BIGINT NOT NULL,
    intent_at     BIGINT NOT NULL,
    receipt_fence BIGINT NOT NULL DEFAULT 0,
    receipt_at    BIGINT NOT NULL DEFAULT 0,
    receipt_by    TEXT NOT NULL DEFAULT '',
    result        TEXT NOT NULL DEFAULT '',
    UNIQUE (task_id, step)
);

-- schedules are anchored periodic work: run k is due at origin + k·period.
CREATE TABLE schedules (
    id          TEXT PRIMARY KEY,
    user_id     TEXT NOT NULL,
    payload     TEXT NOT NULL,
    cost_budget BIGINT NOT NULL,
    steps_max   BIGINT NOT NULL,
    priority    BIGINT NOT NULL,
    origin      BIGINT NOT NULL,
    period_ms   BIGINT NOT NULL CHECK (period_ms > 0),
    last_run    BIGINT NOT NULL DEFAULT -1,
    created_at  BIGINT NOT NULL
);
