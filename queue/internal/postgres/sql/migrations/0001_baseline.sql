-- leasehold PostgreSQL schema, version 1 (the baseline). Tables, domains,
-- sequences, indexes and views only: the functions and the triggers that
-- call them are code, in functions.sql, installed after the migrations.
-- Committed migrations never change: a test pins this file's checksum.
--
-- Times are BIGINT Unix milliseconds (UTC), 0 meaning "not set", always
-- bound from the queue's injected clock: no now(), no time defaults. The
-- user column is user_id (user is reserved here). docs/ARCHITECTURE.md
-- says how this store differs from SQLite's and why.

-- Rules on one column are domains: PostgreSQL reads a domain's rule once
-- per connection and checks it only for the columns a statement assigns,
-- where a table's CHECK constraints are read for every statement.
CREATE DOMAIN leasehold_flag AS BIGINT CHECK (VALUE IN (0, 1));
CREATE DOMAIN leasehold_positive AS BIGINT CHECK (VALUE >= 1);
CREATE DOMAIN leasehold_count AS BIGINT CHECK (VALUE >= 0);
CREATE DOMAIN leasehold_cap AS BIGINT CHECK (VALUE >= -1);
CREATE DOMAIN task_reason AS TEXT CONSTRAINT tasks_reason_check CHECK (VALUE IN ('', 'budget_exhausted',
    'steps_exhausted', 'permanent_error', 'cancelled_by_caller', 'approval_rejected', 'attempts_exhausted',
    'uncertain_effect', 'deadline_exceeded', 'operator_resolved'));

-- settings holds the queue's limits and policies; the values here are the
-- defaults.
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
    ('claim_batch_max', 16),
    ('prune_older_than_ms', 0),
    ('prune_keep_keys_ms', 2592000000);

-- users holds each user's limits (-1 inherits the default in settings, 0
-- is unlimited) and its counters as last folded: running tasks and active
-- (queued, running or waiting) tasks. The changes since are rows of
-- user_deltas, so that concurrent writers never wait on one user's row.
CREATE TABLE users (
    user_id     TEXT PRIMARY KEY,
    running     leasehold_count NOT NULL DEFAULT 0,
    active      leasehold_count NOT NULL DEFAULT 0,
    running_max leasehold_cap NOT NULL DEFAULT -1,
    depth_max   leasehold_cap NOT NULL DEFAULT -1
);

CREATE TABLE user_deltas (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id TEXT NOT NULL,
    running BIGINT NOT NULL,
    active  BIGINT NOT NULL
);

CREATE INDEX user_deltas_user ON user_deltas (user_id);

-- user_caps is each user's counts (its row plus its deltas) and limits.
CREATE VIEW user_caps AS
SELECT u.user_id, u.running + COALESCE(d.running, 0) AS running, u.active + COALESCE(d.active, 0) AS active,
       CASE WHEN u.running_max >= 0 THEN u.running_max
            ELSE (SELECT value FROM settings WHERE key = 'user_running_max') END AS running_limit,
       CASE WHEN u.depth_max >= 0 THEN u.depth_max
            ELSE (SELECT value FROM settings WHERE key = 'user_depth_max') END AS depth_limit
FROM users u
LEFT JOIN LATERAL (SELECT CAST(SUM(running) AS BIGINT) AS running, CAST(SUM(active) AS BIGINT) AS active
                   FROM user_deltas WHERE user_deltas.user_id = u.user_id) d ON true;

CREATE SEQUENCE tasks_seq;

CREATE TABLE tasks (
    seq              BIGINT PRIMARY KEY DEFAULT nextval('tasks_seq'), -- insertion order, the claim order's tiebreaker
    id               TEXT NOT NULL UNIQUE,
    user_id          TEXT NOT NULL REFERENCES users (user_id),
    idem_key         TEXT NOT NULL,
    request_hash     TEXT NOT NULL,
    payload          TEXT NOT NULL,
    state            TEXT NOT NULL,
    reason           task_reason NOT NULL DEFAULT '',
    priority         BIGINT NOT NULL,
    run_at           BIGINT NOT NULL,
    deadline         BIGINT NOT NULL DEFAULT 0,
    version          BIGINT NOT NULL DEFAULT 0, -- the fence token; only a claim increments it
    attempts_charged BIGINT NOT NULL DEFAULT 0,
    attempts_max     leasehold_positive NOT NULL,
    owner            TEXT NOT NULL DEFAULT '',
    lease_until      BIGINT NOT NULL DEFAULT 0,
    heartbeat_at     BIGINT NOT NULL DEFAULT 0,
    claimed_at       BIGINT NOT NULL DEFAULT 0,
    queued_at        BIGINT NOT NULL,
    cost_budget      leasehold_positive NOT NULL,
    cost_used        BIGINT NOT NULL DEFAULT 0,
    steps_max        leasehold_positive NOT NULL,
    steps_used       BIGINT NOT NULL DEFAULT 0,
    checkpoint       TEXT NOT NULL DEFAULT '',
    cancel_requested leasehold_flag NOT NULL DEFAULT 0,
    cancelled_by     TEXT NOT NULL DEFAULT '',
    approved_by      TEXT NOT NULL DEFAULT '',
    approval_gate    TEXT NOT NULL DEFAULT '',
    approval_version BIGINT NOT NULL DEFAULT 0,
    schedule_id      TEXT NOT NULL DEFAULT '',
    schedule_run     BIGINT NOT NULL DEFAULT 0,
    last_error       TEXT NOT NULL DEFAULT '',
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    attempts_failed  leasehold_count NOT NULL DEFAULT 0,
    CONSTRAINT tasks_check CHECK (cost_used >= 0 AND cost_used <= cost_budget),
    CONSTRAINT tasks_check1 CHECK (steps_used >= 0 AND steps_used <= steps_max),
    CONSTRAINT tasks_check2 CHECK ((state = 'running') = (owner != '')),
    CONSTRAINT tasks_check3 CHECK ((state = 'running') = (lease_until != 0)),
    -- One array constant, read as one value rather than a list of seven.
    CONSTRAINT tasks_state_check CHECK (state = ANY ('{queued,running,waiting_for_approval,needs_review,completed,failed,cancelled}'::TEXT[]))
);

-- The claim: queued tasks in claim order, so the first eligible rows are an
-- index scan with no sort; and a user's, for a claim that takes each
-- user's first few.
CREATE INDEX tasks_claim_queued ON tasks (priority DESC, run_at, seq) WHERE state = 'queued';
CREATE INDEX tasks_claim_user ON tasks (user_id, priority DESC, run_at, seq) WHERE state = 'queued';
-- The reaper's lease scan.
CREATE INDEX tasks_lease_running ON tasks (lease_until) WHERE state = 'running';
-- The reaper's deadline scan, over active tasks that have a deadline.
CREATE INDEX tasks_deadline ON tasks (deadline)
    WHERE deadline != 0 AND state IN ('queued', 'running', 'waiting_for_approval');
-- Listing by state, for the states a listing asks for by index (running
-- and completed tasks are listed by a scan).
CREATE INDEX tasks_state_listed ON tasks (state, seq) WHERE state NOT IN ('running', 'completed');
-- Each periodic run (schedule, k) is enqueued at most once.
CREATE UNIQUE INDEX tasks_schedule_run ON tasks (schedule_id, schedule_run) WHERE schedule_id != '';

-- task_keys holds each task's idempotency key, written once beside the
-- task: its primary key recognises a used key, and task_keys_user lists a
-- user's tasks in submission order. tasks keeps user_id and idem_key as
-- the row's own record.
CREATE TABLE task_keys (
    user_id  TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    seq      BIGINT NOT NULL,
    PRIMARY KEY (user_id, idem_key)
);

CREATE INDEX task_keys_user ON task_keys (user_id, seq);

-- tally_deltas holds the counters as changes, one row per change, summed by
-- name when read (tallies_all) and folded now and then. Names, as SQLite's
-- tallies:
--   state:STATE                        tasks in STATE (n)
--   event:KIND:FROM:TO:REASON          events of that kind and transition (n)
--   queue_wait:BUCKET, run_time:BUCKET observations (n) and their sum (sum_ms)
--   pruned:STATE                       tasks pruned in STATE (n)
-- BUCKET indexes model.HistogramBounds; leasehold_bucket repeats those bounds
-- and a test proves they agree.
CREATE TABLE tally_deltas (
    id     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name   TEXT NOT NULL,
    n      BIGINT NOT NULL,
    sum_ms BIGINT NOT NULL DEFAULT 0
);

-- The active states' rows alone, which admission sums on every submit.
CREATE INDEX tally_deltas_active ON tally_deltas (name)
    WHERE name IN ('state:queued', 'state:running', 'state:waiting_for_approval');

INSERT INTO tally_deltas (name, n) VALUES
    ('state:queued', 0), ('state:running', 0), ('state:waiting_for_approval', 0),
    ('state:needs_review', 0), ('state:completed', 0), ('state:failed', 0), ('state:cancelled', 0);

-- events is the audit trail: append-only (a trigger refuses an update, and
-- a delete but a prune's), never holding payloads or credentials. Its seq
-- is the cursor order, not the commit order (event_insert and
-- events_after_lock in queries.sql say how a follower never passes an
-- event that may still commit).
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
CREATE INDEX events_at_brin ON events USING brin (at);

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

-- idem_tombstones keeps a pruned task's key, so that a replay of its
-- submit still finds the task until the tombstone expires.
CREATE TABLE idem_tombstones (
    user_id      TEXT NOT NULL,
    idem_key     TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    task_id      TEXT NOT NULL,
    state        TEXT NOT NULL,
    settled_at   BIGINT NOT NULL,
    pruned_at    BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    PRIMARY KEY (user_id, idem_key)
);

CREATE INDEX idem_tombstones_expiry ON idem_tombstones (expires_at);

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
