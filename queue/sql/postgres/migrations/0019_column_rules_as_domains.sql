-- leasehold PostgreSQL schema, version 19: the rules on single columns are
-- domains, and the states CHECK is written as one array.
--
-- PostgreSQL reads a table's CHECK constraints afresh for every statement
-- that writes a row of it: each constraint's stored expression is parsed
-- from its node text and planned again, once per statement, before its
-- first row is checked. A fused group (complete_and_claim) updates tasks
-- twice and users once, so it paid for the eleven tasks constraints
-- (about 10,400 characters of node text: the reasons' list alone 2,403,
-- the states' 1,656) twice, and the four users constraints once, on every
-- call, however few rows it wrote. Perf put that parsing and planning at
-- about 8% of the server's CPU under work on 10 workers.
--
-- A domain's constraints are read once per connection (the type cache
-- keeps them planned), and a statement checks only the columns it
-- assigns. So the rules that name a single column become domains, with
-- the same rules:
--   task_reason (tasks.reason): the reasons' list, its constraint still
--     named tasks_reason_check;
--   leasehold_flag (tasks.cancel_requested): 0 or 1;
--   leasehold_positive (tasks.attempts_max, cost_budget, steps_max): >= 1;
--   leasehold_count (tasks.attempts_failed, users.running, users.active):
--     >= 0;
--   leasehold_cap (users.running_max, users.depth_max): >= -1.
-- The states CHECK stays on the table, as tasks_state_check with the same
-- seven states, written as one array constant (787 characters of node
-- text instead of 1,656: an IN list is stored as an array of separate
-- constants, seven here, folded into one each time it is planned). The rules
-- across columns stay table constraints as they were (cost_used and
-- steps_used within their budgets, owner and lease_until set exactly when
-- running). Left on tasks: about 4,400 characters, none on users.
--
-- Measured (bench/peers, work PostgreSQL 10 workers, 6,000 jobs, fifteen
-- alternating pairs of runs, one build at each schema): 3,972 jobs/s at
-- version 18 against 4,242 at 19 (medians, +7%; 19 ahead in 11 pairs of
-- 15), and 198 against 185 µs of server CPU a job. This machine's runs
-- vary by a fifth from one to the next, so the figure is good to a few
-- percent.
--
-- Results are unchanged for clients: a row description names a domain's
-- base type, and a value that breaks a domain's rule fails with the same
-- SQLSTATE (23514, check_violation) as one that breaks a table's.
--
-- The column type changes rewrite tasks and users and rebuild their
-- indexes under an exclusive lock, checking every stored value against
-- its rule as they go; the runbook's upgrade section says so. user_caps
-- reads users' columns, so it is dropped and made again, as version 3
-- made it.

CREATE DOMAIN task_reason AS TEXT
    CONSTRAINT tasks_reason_check CHECK (VALUE IN ('', 'budget_exhausted',
        'steps_exhausted', 'permanent_error', 'cancelled_by_caller',
        'approval_rejected', 'attempts_exhausted', 'uncertain_effect',
        'deadline_exceeded', 'operator_resolved'));
CREATE DOMAIN leasehold_flag AS BIGINT CHECK (VALUE IN (0, 1));
CREATE DOMAIN leasehold_positive AS BIGINT CHECK (VALUE >= 1);
CREATE DOMAIN leasehold_count AS BIGINT CHECK (VALUE >= 0);
CREATE DOMAIN leasehold_cap AS BIGINT CHECK (VALUE >= -1);

DROP VIEW user_caps;

ALTER TABLE users
    DROP CONSTRAINT users_running_check,
    DROP CONSTRAINT users_active_check,
    DROP CONSTRAINT users_running_max_check,
    DROP CONSTRAINT users_depth_max_check,
    ALTER COLUMN running TYPE leasehold_count,
    ALTER COLUMN active TYPE leasehold_count,
    ALTER COLUMN running_max TYPE leasehold_cap,
    ALTER COLUMN depth_max TYPE leasehold_cap;

CREATE VIEW user_caps AS
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

ALTER TABLE tasks
    DROP CONSTRAINT tasks_reason_check,
    DROP CONSTRAINT tasks_cancel_requested_check,
    DROP CONSTRAINT tasks_attempts_max_check,
    DROP CONSTRAINT tasks_cost_budget_check,
    DROP CONSTRAINT tasks_steps_max_check,
    DROP CONSTRAINT tasks_attempts_failed_check,
    DROP CONSTRAINT tasks_state_check,
    ALTER COLUMN reason TYPE task_reason,
    ALTER COLUMN cancel_requested TYPE leasehold_flag,
    ALTER COLUMN attempts_max TYPE leasehold_positive,
    ALTER COLUMN cost_budget TYPE leasehold_positive,
    ALTER COLUMN steps_max TYPE leasehold_positive,
    ALTER COLUMN attempts_failed TYPE leasehold_count,
    ADD CONSTRAINT tasks_state_check CHECK (state = ANY (
        '{queued,running,waiting_for_approval,needs_review,completed,failed,cancelled}'::TEXT[]));
