-- leasehold schema, version 1. Committed migrations never change: a test
-- pins this file's checksum. Times are INTEGER Unix milliseconds (UTC);
-- 0 means "not set". No column defaults to a time: the queue binds every
-- timestamp from its injected clock.

CREATE TABLE settings (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;

INSERT INTO settings (key, value) VALUES
    ('depth_max', 100000),
    ('user_depth_max', 10000),
    ('user_running_max', 0),
    ('attempts_max', 3),
    ('grant_cost_max', 10000),
    ('grant_steps_max', 1000),
    ('claim_batch_max', 16);

-- users holds each user's limits (-1 inherits the default in settings, 0 is
-- unlimited) and counters kept by triggers: running tasks and active
-- (queued, running or waiting) tasks.
CREATE TABLE users (
    user        TEXT PRIMARY KEY,
    running     INTEGER NOT NULL DEFAULT 0 CHECK (running >= 0),
    active      INTEGER NOT NULL DEFAULT 0 CHECK (active >= 0),
    running_max INTEGER NOT NULL DEFAULT -1 CHECK (running_max >= -1),
    depth_max   INTEGER NOT NULL DEFAULT -1 CHECK (depth_max >= -1)
) WITHOUT ROWID;

CREATE VIEW user_caps AS
SELECT user, running, active,
       CASE WHEN running_max >= 0 THEN running_max
            ELSE (SELECT value FROM settings WHERE key = 'user_running_max') END AS running_limit,
       CASE WHEN depth_max >= 0 THEN depth_max
            ELSE (SELECT value FROM settings WHERE key = 'user_depth_max') END AS depth_limit
FROM users;

CREATE TABLE tasks (
    seq              INTEGER PRIMARY KEY, -- insertion order, the claim order's tiebreaker
    id               TEXT NOT NULL UNIQUE,
    user             TEXT NOT NULL REFERENCES users (user),
    idem_key         TEXT NOT NULL,
    request_hash     TEXT NOT NULL,
    payload          TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('queued', 'running', 'waiting_for_approval',
                         'needs_review', 'completed', 'failed', 'cancelled')),
    reason           TEXT NOT NULL DEFAULT '' CHECK (reason IN ('', 'budget_exhausted',
                         'steps_exhausted', 'permanent_error', 'cancelled_by_caller',
                         'approval_rejected', 'attempts_exhausted', 'uncertain_effect',
                         'deadline_exceeded', 'operator_resolved')),
    priority         INTEGER NOT NULL,
    run_at           INTEGER NOT NULL,
    deadline         INTEGER NOT NULL DEFAULT 0,
    version          INTEGER NOT NULL DEFAULT 0, -- the fence token; only a claim increments it
    attempts_charged INTEGER NOT NULL DEFAULT 0,
    attempts_max     INTEGER NOT NULL CHECK (attempts_max >= 1),
    owner            TEXT NOT NULL DEFAULT '',
    lease_until      INTEGER NOT NULL DEFAULT 0,
    heartbeat_at     INTEGER NOT NULL DEFAULT 0,
    claimed_at       INTEGER NOT NULL DEFAULT 0,
    queued_at        INTEGER NOT NULL,
    cost_budget      INTEGER NOT NULL CHECK (cost_budget >= 1),
    cost_used        INTEGER NOT NULL DEFAULT 0 CHECK (cost_used >= 0 AND cost_used <= cost_budget),
    steps_max        INTEGER NOT NULL CHECK (steps_max >= 1),
    steps_used       INTEGER NOT NULL DEFAULT 0 CHECK (steps_used >= 0 AND steps_used <= steps_max),
    checkpoint       TEXT NOT NULL DEFAULT '',
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    cancelled_by     TEXT NOT NULL DEFAULT '',
    approved_by      TEXT NOT NULL DEFAULT '',
    approval_gate    TEXT NOT NULL DEFAULT '',
    approval_version INTEGER NOT NULL DEFAULT 0,
    schedule_id      TEXT NOT NULL DEFAULT '',
    schedule_run     INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT NOT NULL DEFAULT '',
    -- blocked is 1 while the task is queued and its user runs as many tasks
    -- as its limit allows; triggers keep it, so the claim index skips such
    -- tasks without reading them.
    blocked          INTEGER NOT NULL DEFAULT 0 CHECK (blocked IN (0, 1)),
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    UNIQUE (user, idem_key),
    CHECK ((state = 'running') = (owner != '')),
    CHECK ((state = 'running') = (lease_until != 0))
);

-- The claim: equality on (state, blocked), then the claim order, so the
-- first eligible row is an index search with no sort.
CREATE INDEX tasks_claim ON tasks (state, blocked, priority DESC, run_at, seq);
-- The reaper's lease scan.
CREATE INDEX tasks_lease ON tasks (state, lease_until);
-- The reaper's deadline scan, over active tasks that have a deadline.
CREATE INDEX tasks_deadline ON tasks (deadline)
    WHERE deadline != 0 AND state IN ('queued', 'running', 'waiting_for_approval');
-- A user's tasks by state: listing, and re-blocking when a limit is crossed.
CREATE INDEX tasks_user_state ON tasks (user, state);
-- Each periodic run (schedule, k) is enqueued at most once.
CREATE UNIQUE INDEX tasks_schedule_run ON tasks (schedule_id, schedule_run) WHERE schedule_id != '';

-- state_counts holds the number of tasks in each state, kept by triggers.
CREATE TABLE state_counts (
    state TEXT PRIMARY KEY,
    n     INTEGER NOT NULL CHECK (n >= 0)
) WITHOUT ROWID;

INSERT INTO state_counts (state, n) VALUES
    ('queued', 0), ('running', 0), ('waiting_for_approval', 0), ('needs_review', 0),
    ('completed', 0), ('failed', 0), ('cancelled', 0);

CREATE TRIGGER tasks_inserted AFTER INSERT ON tasks
BEGIN
    UPDATE state_counts SET n = n + 1 WHERE state = NEW.state;
    UPDATE users SET active = active + 1 WHERE user = NEW.user;
    UPDATE tasks SET blocked = (SELECT running_limit > 0 AND running >= running_limit
                                FROM user_caps WHERE user = NEW.user)
    WHERE seq = NEW.seq;
END;

CREATE TRIGGER tasks_moved AFTER UPDATE OF state ON tasks
WHEN OLD.state != NEW.state
BEGIN
    UPDATE state_counts SET n = n - 1 WHERE state = OLD.state;
    UPDATE state_counts SET n = n + 1 WHERE state = NEW.state;
    UPDATE users
    SET running = running + (NEW.state = 'running') - (OLD.state = 'running'),
        active = active
            + (NEW.state IN ('queued', 'running', 'waiting_for_approval'))
            - (OLD.state IN ('queued', 'running', 'waiting_for_approval'))
    WHERE user = NEW.user;
    UPDATE tasks SET blocked = (SELECT running_limit > 0 AND running >= running_limit
                                FROM user_caps WHERE user = NEW.user)
    WHERE seq = NEW.seq AND NEW.state = 'queued';
END;

-- When a user's running count crosses its limit, its queued tasks are
-- blocked or unblocked together.
CREATE TRIGGER users_crossed AFTER UPDATE OF running ON users
WHEN (SELECT running_limit FROM user_caps WHERE user = NEW.user) > 0
 AND (OLD.running >= (SELECT running_limit FROM user_caps WHERE user = NEW.user))
  != (NEW.running >= (SELECT running_limit FROM user_caps WHERE user = NEW.user))
BEGIN
    UPDATE tasks SET blocked = (NEW.running >= (SELECT running_limit FROM user_caps WHERE user = NEW.user))
    WHERE user = NEW.user AND state = 'queued';
END;

-- events is the append-only audit trail. It never holds payload contents
-- or credentials.
CREATE TABLE events (
    seq        INTEGER PRIMARY KEY,
    task_id    TEXT NOT NULL,
    kind       TEXT NOT NULL,
    attempt    INTEGER NOT NULL,
    fence      INTEGER NOT NULL,
    op_id      TEXT NOT NULL,
    from_state TEXT NOT NULL,
    to_state   TEXT NOT NULL,
    reason     TEXT NOT NULL,
    actor      TEXT NOT NULL,
    at         INTEGER NOT NULL,
    detail     TEXT NOT NULL
);

CREATE INDEX events_task ON events (task_id, seq);
CREATE INDEX events_actor ON events (actor, seq);
CREATE INDEX events_at ON events (at);

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;

-- event_counts tallies events by kind and transition, for metrics that do
-- not rescan the trail.
CREATE TABLE event_counts (
    kind       TEXT NOT NULL,
    from_state TEXT NOT NULL,
    to_state   TEXT NOT NULL,
    reason     TEXT NOT NULL,
    n          INTEGER NOT NULL,
    PRIMARY KEY (kind, from_state, to_state, reason)
) WITHOUT ROWID;

CREATE TRIGGER events_counted AFTER INSERT ON events
BEGIN
    INSERT INTO event_counts (kind, from_state, to_state, reason, n)
    VALUES (NEW.kind, NEW.from_state, NEW.to_state, NEW.reason, 1)
    ON CONFLICT (kind, from_state, to_state, reason) DO UPDATE SET n = n + 1;
END;

-- histograms holds the queue-wait and run-time distributions.
CREATE TABLE histograms (
    name   TEXT NOT NULL,
    bucket INTEGER NOT NULL,
    n      INTEGER NOT NULL,
    sum_ms INTEGER NOT NULL,
    PRIMARY KEY (name, bucket)
) WITHOUT ROWID;

-- effects is the ledger of customer-visible operations: intent before the
-- call, receipt after. An intent without a receipt is uncertain.
CREATE TABLE effects (
    op_id         TEXT PRIMARY KEY,
    task_id       TEXT NOT NULL REFERENCES tasks (id),
    step          INTEGER NOT NULL,
    intent_fence  INTEGER NOT NULL,
    intent_at     INTEGER NOT NULL,
    receipt_fence INTEGER NOT NULL DEFAULT 0,
    receipt_at    INTEGER NOT NULL DEFAULT 0,
    receipt_by    TEXT NOT NULL DEFAULT '',
    result        TEXT NOT NULL DEFAULT '',
    UNIQUE (task_id, step)
) WITHOUT ROWID;

-- schedules are anchored periodic work: run k is due at origin + k·period.
CREATE TABLE schedules (
    id          TEXT PRIMARY KEY,
    user        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    cost_budget INTEGER NOT NULL,
    steps_max   INTEGER NOT NULL,
    priority    INTEGER NOT NULL,
    origin      INTEGER NOT NULL,
    period_ms   INTEGER NOT NULL CHECK (period_ms > 0),
    last_run    INTEGER NOT NULL DEFAULT -1,
    created_at  INTEGER NOT NULL
) WITHOUT ROWID;
