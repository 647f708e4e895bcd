-- version: 11
-- The PostgreSQL store's functions and the triggers that call them: code,
-- not schema. migrate installs this file whole (CREATE OR REPLACE) after
-- the migrations, in the transaction that runs them, and records its
-- version and checksum in schema_functions. A change to this file is an
-- ordinary diff: raise the version on the first line (a test pins each
-- version's checksum), and a build refuses a database whose functions'
-- version is newer than its own. A block between "-- fragment: NAME" and
-- "-- end fragment" is written once and placed wherever its placeholder
-- (NAME in braces after "fragment:") stands. A broken-variant placeholder (as in
-- queries.sql) is its safe text in every build; the leasehold_broken build
-- installs the broken text of the variants switched on when it migrates,
-- in that schema alone.
-- A function that drops or renames a parameter drops its old signature
-- first (CREATE OR REPLACE keeps a signature's name and types).

-- leasehold_fold_rows is how many rows of changes (user_deltas, the active
-- states' tally_deltas) pile up before a submit folds them into one.
CREATE OR REPLACE FUNCTION leasehold_fold_rows() RETURNS BIGINT
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT CAST(256 AS BIGINT) $$;

-- leasehold_user_key is the advisory lock key of a user's running count
-- in this schema, one 64-bit key (the user hashed with the schema's hash
-- as seed). A claim holds it shared for a user without a running limit
-- and exclusive for a user with one (see the claim below); two users that
-- share a key only wait for each other more than they need.
CREATE OR REPLACE FUNCTION leasehold_user_key(p_user text) RETURNS bigint
    LANGUAGE sql STABLE
    AS $$ SELECT hashtextextended(p_user, hashtext(current_schema())) $$;

-- leasehold_active is 1 for an active state (queued, running, waiting).
CREATE OR REPLACE FUNCTION leasehold_active(state text) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN state IN ('queued', 'running', 'waiting_for_approval') THEN 1 ELSE 0 END
$$;

-- leasehold_bucket is the histogram bucket of a time in ms: the bounds of
-- model.HistogramBounds (a test proves they agree).
CREATE OR REPLACE FUNCTION leasehold_bucket(ms bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE
        WHEN ms <= 10 THEN 0 WHEN ms <= 50 THEN 1 WHEN ms <= 100 THEN 2
        WHEN ms <= 250 THEN 3 WHEN ms <= 500 THEN 4 WHEN ms <= 1000 THEN 5
        WHEN ms <= 2500 THEN 6 WHEN ms <= 5000 THEN 7 WHEN ms <= 10000 THEN 8
        WHEN ms <= 30000 THEN 9 WHEN ms <= 60000 THEN 10 WHEN ms <= 300000 THEN 11
        WHEN ms <= 1800000 THEN 12 ELSE 13 END
$$;

-- leasehold_prune_cutoff is the running prune's cutoff, or NULL outside a
-- prune (the triggers below let a prune alone delete).
CREATE OR REPLACE FUNCTION leasehold_prune_cutoff() RETURNS bigint
    LANGUAGE sql STABLE
    AS $$
    SELECT NULLIF(current_setting('leasehold.prune_cutoff', true), '')::BIGINT
$$;

-- active_tasks is the queue's active tasks, the sum of the active states'
-- rows of tally_deltas, folding them once p_rows or more pile up; it reads
-- them by the partial index tally_deltas_active, in a plain index scan: it
-- marks the entries of rows a fold deleted dead once no transaction can
-- see them, so the next read steps over them, where a bitmap scan reads
-- every one of them again until a vacuum (and autovacuum may be off).
CREATE OR REPLACE FUNCTION active_tasks(p_rows bigint) RETURNS bigint
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
DECLARE
    total BIGINT;
    counted BIGINT;
BEGIN
    SELECT COALESCE(SUM(t.n), 0)::BIGINT, COUNT(*) INTO total, counted
    FROM tally_deltas t WHERE t.name IN ('state:queued', 'state:running', 'state:waiting_for_approval');
    IF counted >= p_rows THEN
        WITH gone AS (
            DELETE FROM tally_deltas
            WHERE id IN (SELECT t.id FROM tally_deltas t
                         WHERE t.name IN ('state:queued', 'state:running', 'state:waiting_for_approval')
                         FOR UPDATE SKIP LOCKED)
            RETURNING name, n, sum_ms
        )
        INSERT INTO tally_deltas (name, n, sum_ms)
        SELECT g.name, SUM(g.n)::BIGINT, SUM(g.sum_ms)::BIGINT FROM gone g GROUP BY g.name ORDER BY g.name COLLATE "C";
    END IF;
    RETURN total;
END
$$;

-- fold_user_deltas folds the users' rows of changes into their counters
-- once p_rows or more pile up, skipping a user's row another transaction
-- holds.
CREATE OR REPLACE FUNCTION fold_user_deltas(p_rows bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    locked TEXT[];
BEGIN
    IF (SELECT COALESCE(MAX(d.id) - MIN(d.id) + 1, 0) FROM user_deltas d) < p_rows THEN
        RETURN;
    END IF;
    SELECT COALESCE(array_agg(l.user_id), '{}') INTO locked
    FROM (SELECT u.user_id FROM users u
          WHERE u.user_id IN (SELECT d.user_id FROM user_deltas d)
          ORDER BY u.user_id COLLATE "C"
          FOR NO KEY UPDATE OF u SKIP LOCKED) AS l;
    IF cardinality(locked) = 0 THEN
        RETURN;
    END IF;
    WITH gone AS (
        DELETE FROM user_deltas WHERE user_id = ANY(locked)
        RETURNING user_id, running, active
    ), sums AS (
        SELECT g.user_id, SUM(g.running) AS running, SUM(g.active) AS active FROM gone g GROUP BY g.user_id
    )
    UPDATE users u SET running = u.running + s.running, active = u.active + s.active
    FROM sums s WHERE u.user_id = s.user_id;
END
$$;

-- The counters. Each statement that writes tasks or events adds its
-- changes as rows (tally_deltas, user_deltas), one per name or user, in
-- name or user order; a function that counts its own writes runs with
-- leasehold.counted on, and the triggers stand aside. A claim that raised
-- its users' running counts itself sets leasehold.claim_counted.
CREATE OR REPLACE FUNCTION tasks_inserted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

CREATE OR REPLACE TRIGGER tasks_inserted AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT
    WHEN (current_setting('leasehold.counted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION tasks_inserted();

CREATE OR REPLACE FUNCTION tasks_moved() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

CREATE OR REPLACE TRIGGER tasks_moved AFTER UPDATE ON tasks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
    WHEN (current_setting('leasehold.counted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION tasks_moved();

CREATE OR REPLACE FUNCTION tasks_pruned() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO tally_deltas (name, n)
    SELECT name, SUM(n) FROM (
        SELECT 'state:' || state AS name, -1 AS n FROM removed
        UNION ALL SELECT 'pruned:' || state || ':' || kind, 1 FROM removed) c
    GROUP BY name ORDER BY name COLLATE "C";
    DELETE FROM task_keys k USING removed r WHERE k.user_id = r.user_id AND k.idem_key = r.idem_key;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER tasks_pruned AFTER DELETE ON tasks
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT
    EXECUTE FUNCTION tasks_pruned();

CREATE OR REPLACE FUNCTION events_counted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO tally_deltas (name, n)
    SELECT name, n FROM (
        SELECT 'event:' || kind || ':' || from_state || ':' || to_state || ':' || reason AS name, COUNT(*) AS n
        FROM appended GROUP BY 1) c
    ORDER BY name COLLATE "C";
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER events_counted AFTER INSERT ON events
    REFERENCING NEW TABLE AS appended FOR EACH STATEMENT
    WHEN (current_setting('leasehold.counted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION events_counted();

-- The counts by the kind of each event's task (migration 0005), beside the
-- totals above: kind:TASK_KIND:KIND:FROM:TO:REASON, the kind empty for an
-- event of no task. This trigger fires for every statement that inserts
-- events, those of the functions that count their own writes included,
-- so the kinds' counts commit with the events whoever wrote them; only a
-- statement that counts its events by kind itself (the submits', which
-- know their tasks' kinds) runs with leasehold.kinds_counted on, and the
-- trigger stands aside. That setting is set by set_config around the
-- statement, not by a function's SET clause: a role that is not a
-- superuser needs a grant (SET ON PARAMETER) for each custom setting a
-- function's SET clause names, and a new one would need a new grant
-- where the queue runs as such a role. Each task's kind is one lookup of
-- the tasks' id index.
CREATE OR REPLACE FUNCTION events_counted_by_kind() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO tally_deltas (name, n)
    SELECT name, COUNT(*) FROM (
        SELECT 'kind:' || COALESCE((SELECT t.kind FROM tasks t WHERE t.id = a.task_id), '') || ':' || a.kind
               || ':' || a.from_state || ':' || a.to_state || ':' || a.reason AS name
        FROM appended a) c
    GROUP BY name ORDER BY name COLLATE "C";
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER events_counted_by_kind AFTER INSERT ON events
    REFERENCING NEW TABLE AS appended FOR EACH STATEMENT
    WHEN (current_setting('leasehold.kinds_counted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION events_counted_by_kind();

-- The trail (migration 0004): each task's row keeps the seqs of its
-- events, which is how every reader of a task's events finds them. A
-- statement that inserts events appends their seqs to their tasks' rows
-- here, in its transaction, unless it appended them itself in the update
-- that moved the task (a function that does runs with leasehold.trailed
-- on). The counters' triggers stand aside for the append: it moves no
-- task. An event of a task that does not exist (task_id '', an event of
-- the queue's own) is in no trail.
CREATE OR REPLACE FUNCTION events_trailed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    counted TEXT := COALESCE(current_setting('leasehold.counted', true), '');
BEGIN
    PERFORM set_config('leasehold.counted', 'on', true);
    UPDATE tasks t SET trail = t.trail || a.seqs
    FROM (SELECT task_id, array_agg(seq ORDER BY seq) AS seqs FROM appended GROUP BY task_id) a
    WHERE t.id = a.task_id;
    PERFORM set_config('leasehold.counted', counted, true);
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER events_trailed AFTER INSERT ON events
    REFERENCING NEW TABLE AS appended FOR EACH STATEMENT
    WHEN (current_setting('leasehold.trailed', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION events_trailed();

-- Only a prune deletes: a terminal task settled before the prune's cutoff,
-- its events, and its effects that hold a receipt.
CREATE OR REPLACE FUNCTION tasks_no_delete() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.state IN ('completed', 'failed', 'cancelled') AND OLD.updated_at <= leasehold_prune_cutoff() THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'only a prune removes a task, and only a terminal one settled before its cutoff';
END
$$;

CREATE OR REPLACE TRIGGER tasks_no_delete BEFORE DELETE ON tasks
    FOR EACH ROW EXECUTE FUNCTION tasks_no_delete();

CREATE OR REPLACE FUNCTION events_append_only() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'DELETE' AND EXISTS (SELECT 1 FROM tasks
                                    WHERE id = OLD.task_id AND state IN ('completed', 'failed', 'cancelled')
                                      AND updated_at <= leasehold_prune_cutoff()) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'events are append-only: only a prune removes a terminal task''s events';
END
$$;

CREATE OR REPLACE TRIGGER events_no_update BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_append_only();

CREATE OR REPLACE FUNCTION effects_no_delete() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tasks WHERE id = OLD.task_id AND state IN ('completed', 'failed', 'cancelled'))
       OR (OLD.receipt_at != 0 AND leasehold_prune_cutoff() IS NOT NULL) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'a terminal task''s effect goes only with a prune, and never without its receipt';
END
$$;

CREATE OR REPLACE TRIGGER effects_no_delete BEFORE DELETE ON effects
    FOR EACH ROW EXECUTE FUNCTION effects_no_delete();

-- The claim, written once: the loader puts its declarations and its body
-- at their placeholders in claim_batch and in complete_and_claim, so each
-- runs it inline in its own frame (a call of one PL/pgSQL function from
-- another costs a frame and the rows passed between them). It takes up to p_max claimable tasks at p_now in
-- claim order (priority, then run_at, then submission; due, within their
-- deadline, their user below its running limit; of the kinds p_kinds
-- names, when it is not NULL) for p_owner until
-- p_lease_until, and leaves them in taken, as they were, in claim order.
-- The candidates are locked FOR UPDATE SKIP LOCKED, so two claimers never
-- wait on each other over tasks; SKIP LOCKED alone does not hold a
-- per-user limit (under READ COMMITTED two claimers each see the user
-- below it), so the claim first reads, without locks, the users of the
-- first due tasks and locks them, in the order of their keys
-- (leasehold_user_key), each as its running limit needs, and only then
-- locks candidates, of the users it holds (a task row lock is a write, so
-- a claim that passes a held user writes nothing for it):
-- - A user with a running limit: the key's exclusive lock, then, in user
--   order, the user's counter row; the claim's next statement, whose
--   snapshot is taken after the locks, folds the user's deltas and reads
--   the user's room. Every claim of that user that committed is counted,
--   and none can commit until this transaction ends: a claim of the user
--   as unlimited holds the key shared until it commits.
-- - A user without one: the key's shared lock, which any number of claims
--   hold at once, and the user's limit read again after it; the claim
--   takes as many of the user's tasks as it has and counts them as a row
--   of changes (user_deltas), as completions do, without the counter row.
--   A user given a limit since the first read is left by this claim. The
--   first claim that counts a user under a new limit needs the key's
--   exclusive lock, so it waits for every claim that took the user as
--   unlimited to end, and then counts their tasks.
-- Every claim tries the keys and skips a held one. A claim in a
-- transaction of its own that holds no other lock a claim may wait for
-- (complete_and_claim's: users_wait) that got no key waits for one
-- user's, holding no other, and then waits for that user's row: each
-- holder is one short statement, and every claim takes the keys, then
-- the rows, in the same order. Any other claim (claim_batch, in a group's
-- transaction that may hold admission's lock) never waits, so never in a
-- cycle; a task whose user was skipped, or whose user has no room, is
-- left. (Skipping in complete_and_claim too left its claim empty-handed
-- whenever another process's claim held the rows: docs/PERF.md.) The
-- users' running counts are raised here, not by tasks_moved.
-- fragment: claim_declare
    -- kinds are the kinds the claim serves (p_kinds, a JSON array), NULL
    -- for every kind.
    kinds TEXT[] := CASE WHEN p_kinds IS NULL THEN NULL ELSE ARRAY(SELECT jsonb_array_elements_text(p_kinds)) END;
    -- room_unlimited is the room of a user without a running limit: more
    -- than any claim takes.
    room_unlimited CONSTANT BIGINT := 4611686018427387904;
    cand tasks[] := '{}';
    cand_seqs BIGINT[] := '{}';
    cand_users TEXT[] := '{}';
    -- pre_users are the users of the first due tasks, read before any
    -- lock; claim_users, those of them the claim holds.
    pre_users TEXT[] := '{}';
    claim_users TEXT[] := '{}';
    locked TEXT[] := '{}';
    -- user_keys and user_excl are the candidates' users' keys in key
    -- order, and whether each is taken exclusive; held_keys and
    -- held_excl, those the claim holds.
    user_keys BIGINT[];
    user_excl BOOLEAN[];
    held_keys BIGINT[] := '{}';
    held_excl BOOLEAN[] := '{}';
    -- limited_users are the users to count under their counter rows;
    -- free_users, those taken without a running limit.
    limited_users TEXT[] := '{}';
    free_users TEXT[] := '{}';
    n_locked INTEGER;
    room_users TEXT[];
    room_left BIGINT[];
    d_running BIGINT[];
    d_active BIGINT[];
    took BIGINT[];
    taken tasks[] := '{}';
    taken_seqs BIGINT[] := '{}';
    -- trail_claims, set by a caller that inserts the claimed events
    -- itself, has the claim draw their seqs (claim_seqs, in claim order)
    -- and append each to its task's trail in the update that moves it.
    trail_claims BOOLEAN := false;
    claim_seqs BIGINT[];
    -- users_wait, set by a caller whose claim may wait for the users'
    -- rows (see above), has it wait rather than skip them.
    users_wait BOOLEAN := false;
    i INTEGER;
    k INTEGER;
-- end fragment
-- fragment: claim
    IF p_max >= 1 THEN
        -- The users of the first p_max due tasks in claim order, read
        -- without locks, and locked (below) before any task is: a claim
        -- that passes a held user writes nothing for it. When some of
        -- them has less room than it has tasks there, the users of each
        -- user's first few instead, as the candidates below are chosen.
        IF kinds IS NULL THEN
            SELECT COALESCE(array_agg(q.user_id), '{}') INTO pre_users
            FROM (SELECT t.user_id FROM tasks t
                  WHERE t.state = 'queued' AND t.run_at <= {broken:claim-exclusive-run-at|p_now|p_now - 1}
                    AND (t.deadline = 0 OR t.deadline >= p_now{broken:claim-past-deadline|| OR true})
                  ORDER BY t.priority DESC, t.run_at, t.seq
                  LIMIT p_max) AS q;
        ELSE
            SELECT COALESCE(array_agg(q.user_id), '{}') INTO pre_users
            FROM (SELECT e.user_id FROM unnest(kinds) AS k(kind) CROSS JOIN LATERAL (
                      SELECT t.user_id, t.priority, t.run_at, t.seq FROM tasks t
                      WHERE t.kind = k.kind AND t.state = 'queued'
                        AND t.run_at <= {broken:claim-exclusive-run-at|p_now|p_now - 1} AND (t.deadline = 0 OR t.deadline >= p_now{broken:claim-past-deadline|| OR true})
                      ORDER BY t.priority DESC, t.run_at, t.seq
                      LIMIT p_max) e
                  ORDER BY e.priority DESC, e.run_at, e.seq
                  LIMIT p_max) AS q;
        END IF;
        IF {broken:no-user-limit|true|false} AND cardinality(pre_users) > 0 AND EXISTS (
                SELECT 1 FROM (SELECT c.user_id, COUNT(*) AS cnt FROM unnest(pre_users) AS c(user_id) GROUP BY c.user_id) AS c
                JOIN user_caps u ON u.user_id = c.user_id
                WHERE u.running_limit > 0 AND u.running_limit - u.running < c.cnt) THEN
            SELECT COALESCE(array_agg(q.user_id), '{}') INTO pre_users
            FROM (
                WITH room AS (
                    SELECT u.user_id,
                           CASE WHEN u.running_limit <= 0 THEN CAST(p_max AS BIGINT)
                                ELSE LEAST(CAST(p_max AS BIGINT), u.running_limit - u.running) END AS n
                    FROM user_caps u
                    WHERE u.running_limit <= 0 OR u.running < u.running_limit
                )
                SELECT e.user_id FROM room r CROSS JOIN LATERAL (
                    SELECT t.user_id, t.priority, t.run_at, t.seq FROM tasks t
                    WHERE t.user_id = r.user_id AND t.state = 'queued'
                      AND (kinds IS NULL OR t.kind = ANY(kinds))
                      AND t.run_at <= {broken:claim-exclusive-run-at|p_now|p_now - 1} AND (t.deadline = 0 OR t.deadline >= p_now{broken:claim-past-deadline|| OR true})
                    ORDER BY t.priority DESC, t.run_at, t.seq
                    LIMIT r.n) e
                ORDER BY e.priority DESC, e.run_at, e.seq
                LIMIT p_max) AS q;
        END IF;
        pre_users := ARRAY(SELECT DISTINCT u FROM unnest(pre_users) AS u);
        IF cardinality(pre_users) > 0 THEN
            -- Their keys, in key order, each exclusive when one of its
            -- users has a running limit as read now.
            SELECT COALESCE(array_agg(x.k ORDER BY x.k), '{}'), COALESCE(array_agg(x.excl ORDER BY x.k), '{}')
            INTO user_keys, user_excl
            FROM (SELECT leasehold_user_key(u.user_id) AS k,
                         bool_or(COALESCE(CASE WHEN u.running_max >= 0 THEN u.running_max
                                               ELSE (SELECT value FROM settings WHERE key = 'user_running_max') END, 0) > 0) AS excl
                  FROM users u WHERE u.user_id = ANY(pre_users)
                  GROUP BY 1) AS x;
            -- Each key tried, and skipped when another transaction holds
            -- it in a mode that conflicts. A claim that may wait
            -- (users_wait) and got none waits for one, picked by its
            -- backend's pid so that processes' claims spread over the
            -- users, holding no other user's key while it waits.
            FOR i IN 1 .. cardinality(user_keys) LOOP
                IF user_excl[i] THEN
                    CONTINUE WHEN NOT pg_try_advisory_xact_lock(user_keys[i]);
                ELSE
                    CONTINUE WHEN NOT pg_try_advisory_xact_lock_shared(user_keys[i]);
                END IF;
                held_keys := held_keys || user_keys[i];
                held_excl := held_excl || user_excl[i];
            END LOOP;
            IF users_wait AND cardinality(held_keys) = 0 AND cardinality(user_keys) > 0 THEN
                i := 1 + pg_backend_pid() % cardinality(user_keys);
                IF user_excl[i] THEN
                    PERFORM pg_advisory_xact_lock(user_keys[i]);
                ELSE
                    PERFORM pg_advisory_xact_lock_shared(user_keys[i]);
                END IF;
                held_keys := ARRAY[user_keys[i]];
                held_excl := ARRAY[user_excl[i]];
            END IF;
            -- The users of the keys held, each limit read again after the
            -- locks: a user under an exclusive key is counted under its
            -- row; one under a shared key without a limit is free; one
            -- under a shared key given a limit since is left.
            IF cardinality(held_keys) > 0 THEN
                SELECT COALESCE(array_agg(x.user_id ORDER BY x.user_id COLLATE "C") FILTER (WHERE x.excl), '{}'),
                       COALESCE(array_agg(x.user_id ORDER BY x.user_id COLLATE "C")
                                FILTER (WHERE NOT x.excl AND x.running_limit <= 0), '{}')
                INTO limited_users, free_users
                FROM (SELECT u.user_id, h.excl,
                             COALESCE(CASE WHEN u.running_max >= 0 THEN u.running_max
                                           ELSE (SELECT value FROM settings WHERE key = 'user_running_max') END, 0) AS running_limit
                      FROM users u JOIN unnest(held_keys, held_excl) AS h(k, excl) ON h.k = leasehold_user_key(u.user_id)
                      WHERE u.user_id = ANY(pre_users)) AS x;
            END IF;
            -- The counter rows of the limited users, locked in user
            -- order, each skipped when another transaction holds it
            -- unless users_wait.
            IF cardinality(limited_users) = 0 THEN
                locked := '{}';
            ELSIF users_wait THEN
                SELECT COALESCE(array_agg(l.user_id), '{}') INTO locked
                FROM (SELECT u.user_id FROM users u
                      WHERE u.user_id = ANY(limited_users)
                      ORDER BY u.user_id COLLATE "C"
                      FOR NO KEY UPDATE OF u) AS l;
            ELSE
                SELECT COALESCE(array_agg(l.user_id), '{}') INTO locked
                FROM (SELECT u.user_id FROM users u
                      WHERE u.user_id = ANY(limited_users)
                      ORDER BY u.user_id COLLATE "C"
                      FOR NO KEY UPDATE OF u SKIP LOCKED) AS l;
            END IF;
        END IF;
        claim_users := locked || free_users;

        -- The candidates: the first p_max due tasks of the users the
        -- claim holds, in claim order, by one scan of tasks_claim_queued,
        -- locked and read whole; and when some candidates' user has less
        -- room than it has candidates, each user's first few instead.
        IF cardinality(claim_users) = 0 THEN
            NULL;
        ELSIF kinds IS NULL THEN
            SELECT COALESCE(array_agg(q.t ORDER BY q.priority DESC, q.run_at, q.seq), '{}'),
                   COALESCE(array_agg(q.seq ORDER BY q.priority DESC, q.run_at, q.seq), '{}'),
                   COALESCE(array_agg(q.user_id ORDER BY q.priority DESC, q.run_at, q.seq), '{}')
            INTO cand, cand_seqs, cand_users
            FROM (
                SELECT tasks AS t, tasks.seq, tasks.user_id, tasks.priority, tasks.run_at FROM tasks
                WHERE tasks.state = 'queued' AND tasks.run_at <= {broken:claim-exclusive-run-at|p_now|p_now - 1}
                  AND (tasks.deadline = 0 OR tasks.deadline >= p_now{broken:claim-past-deadline|| OR true})
                  AND tasks.user_id = ANY(claim_users)
                ORDER BY tasks.priority DESC, tasks.run_at, tasks.seq
                LIMIT p_max
                FOR UPDATE SKIP LOCKED) AS q;
        ELSE
            -- A claim that names its kinds: each kind's first p_max due
            -- tasks, by one scan of tasks_claim_kind a kind, merged in
            -- claim order, so that no task of another kind is read.
            SELECT COALESCE(array_agg(q.t ORDER BY q.priority DESC, q.run_at, q.seq), '{}'),
                   COALESCE(array_agg(q.seq ORDER BY q.priority DESC, q.run_at, q.seq), '{}'),
                   COALESCE(array_agg(q.user_id ORDER BY q.priority DESC, q.run_at, q.seq), '{}')
            INTO cand, cand_seqs, cand_users
            FROM (
                SELECT tasks AS t, tasks.seq, tasks.user_id, tasks.priority, tasks.run_at FROM tasks
                WHERE tasks.seq = ANY(ARRAY(
                        SELECT e.seq FROM unnest(kinds) AS k(kind) CROSS JOIN LATERAL (
                            SELECT t.seq FROM tasks t
                            WHERE t.kind = k.kind AND t.state = 'queued' AND t.user_id = ANY(claim_users)
                              AND t.run_at <= {broken:claim-exclusive-run-at|p_now|p_now - 1} AND (t.deadline = 0 OR t.deadline >= p_now{broken:claim-past-deadline|| OR true})
                            ORDER BY t.priority DESC, t.run_at, t.seq
                            LIMIT p_max) e))
                  AND COALESCE(tasks.state, '') = 'queued' AND tasks.run_at <= {broken:claim-exclusive-run-at|p_now|p_now - 1}
                  AND (tasks.deadline = 0 OR tasks.deadline >= p_now{broken:claim-past-deadline|| OR true})
                ORDER BY tasks.priority DESC, tasks.run_at, tasks.seq
                LIMIT p_max
                FOR UPDATE SKIP LOCKED) AS q;
        END IF;
        IF {broken:no-user-limit|true|false} AND cardinality(cand_seqs) > 0 AND EXISTS (
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
                           CASE WHEN {broken:no-user-limit||true OR }u.running_limit <= 0 THEN CAST(p_max AS BIGINT)
                                ELSE LEAST(CAST(p_max AS BIGINT), u.running_limit - u.running) END AS n
                    FROM user_caps u
                    WHERE ({broken:no-user-limit||true OR }u.running_limit <= 0 OR u.running < u.running_limit)
                      AND u.user_id = ANY(claim_users)
                )
                SELECT tasks AS t, tasks.seq, tasks.user_id, tasks.priority, tasks.run_at FROM tasks
                WHERE tasks.seq = ANY(ARRAY(
                        SELECT e.seq FROM room r CROSS JOIN LATERAL (
                            SELECT t.seq FROM tasks t
                            WHERE t.user_id = r.user_id AND t.state = 'queued'
                              AND (kinds IS NULL OR t.kind = ANY(kinds))
                              AND t.run_at <= {broken:claim-exclusive-run-at|p_now|p_now - 1} AND (t.deadline = 0 OR t.deadline >= p_now{broken:claim-past-deadline|| OR true})
                            ORDER BY t.priority DESC, t.run_at, t.seq
                            LIMIT r.n) e))
                  AND COALESCE(tasks.state, '') = 'queued' AND tasks.run_at <= {broken:claim-exclusive-run-at|p_now|p_now - 1}
                  AND (tasks.deadline = 0 OR tasks.deadline >= p_now{broken:claim-past-deadline|| OR true})
                ORDER BY tasks.priority DESC, tasks.run_at, tasks.seq
                LIMIT p_max
                FOR UPDATE SKIP LOCKED) AS q;
        END IF;


        IF cardinality(locked) + cardinality(free_users) > 0 THEN
            -- The locked users' deltas, deleted and summed, and each
            -- user's room; then the free users', more than any claim
            -- takes, with no deltas folded.
            room_users := '{}';
            room_left := '{}';
            d_running := '{}';
            d_active := '{}';
            IF cardinality(locked) > 0 THEN
                WITH gone AS (
                    DELETE FROM user_deltas WHERE user_id = ANY(locked)
                    RETURNING user_id, running, active
                ), sums AS (
                    SELECT user_id, SUM(running) AS running, SUM(active) AS active FROM gone GROUP BY user_id
                )
                SELECT array_agg(r.user_id ORDER BY r.user_id COLLATE "C"),
                       array_agg(CASE WHEN r.running_limit > 0 THEN r.running_limit - r.running
                                      ELSE room_unlimited END ORDER BY r.user_id COLLATE "C"),
                       array_agg(r.d_running ORDER BY r.user_id COLLATE "C"),
                       array_agg(r.d_active ORDER BY r.user_id COLLATE "C")
                INTO room_users, room_left, d_running, d_active
                FROM (SELECT u.user_id, u.running + COALESCE(s.running, 0) AS running,
                             COALESCE(s.running, 0) AS d_running, COALESCE(s.active, 0) AS d_active,
                             CASE WHEN u.running_max >= 0 THEN u.running_max
                                  ELSE (SELECT value FROM settings WHERE key = 'user_running_max') END AS running_limit
                      FROM users u LEFT JOIN sums s ON s.user_id = u.user_id
                      WHERE u.user_id = ANY(locked)) AS r;
            END IF;
            n_locked := cardinality(room_users);
            room_users := room_users || free_users;
            room_left := room_left || array_fill(room_unlimited, ARRAY[cardinality(free_users)]);
            d_running := d_running || array_fill(CAST(0 AS BIGINT), ARRAY[cardinality(free_users)]);
            d_active := d_active || array_fill(CAST(0 AS BIGINT), ARRAY[cardinality(free_users)]);
            took := array_fill(CAST(0 AS BIGINT), ARRAY[cardinality(room_users)]);

            -- The tasks taken, in claim order: each of a locked or free
            -- user with room.
            FOR i IN 1 .. cardinality(cand_seqs) LOOP
                k := array_position(room_users, cand_users[i]);
                CONTINUE WHEN k IS NULL;
                CONTINUE WHEN {broken:no-user-limit|true|false} AND room_left[k] <= 0;
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

            IF trail_claims THEN
                claim_seqs := ARRAY(SELECT nextval('events_seq') AS s
                                    FROM generate_series(1, cardinality(taken_seqs)) ORDER BY s);
            END IF;

            -- The locked users' rows gain their deltas and the tasks
            -- taken; the free users' tasks taken are rows of changes, in
            -- user order; and the tasks taken move.
            WITH counted AS (
                UPDATE users u
                SET running = u.running + x.d_running + x.took, active = u.active + x.d_active
                FROM unnest(room_users[1:n_locked], d_running[1:n_locked], d_active[1:n_locked], took[1:n_locked])
                     AS x(user_id, d_running, d_active, took)
                WHERE u.user_id = x.user_id AND (x.d_running <> 0 OR x.d_active <> 0 OR x.took <> 0)
            ), free_counted AS (
                INSERT INTO user_deltas (user_id, running, active)
                SELECT x.user_id, x.took, 0
                FROM unnest(room_users[n_locked + 1:], took[n_locked + 1:]) AS x(user_id, took)
                WHERE x.took <> 0
                ORDER BY x.user_id COLLATE "C"
            ), moved AS (
                UPDATE tasks
                SET state = 'running', version = version + 1, owner = p_owner, lease_until = p_lease_until,
                    claimed_at = p_now, heartbeat_at = p_now, updated_at = p_now,
                    trail = CASE WHEN claim_seqs IS NULL THEN trail
                                 ELSE trail || claim_seqs[array_position(taken_seqs, seq)] END
                WHERE seq = ANY(taken_seqs) AND COALESCE(state, '') = 'queued'
                RETURNING 1
            )
            SELECT COUNT(*) INTO k FROM moved;
            IF k <> cardinality(taken_seqs) THEN
                RAISE EXCEPTION 'claim: took % tasks, expected %', k, cardinality(taken_seqs);
            END IF;
        END IF;
    END IF;
-- end fragment

-- claim_batch is the claim alone: the claim's tasks, as they were. The
-- claim raises its users' running counts itself (claim_counted); the
-- triggers count the rest.
DROP FUNCTION IF EXISTS claim_batch(bigint, integer, text, bigint);
CREATE OR REPLACE FUNCTION claim_batch(p_now bigint, p_max integer, p_owner text, p_lease_until bigint, p_kinds jsonb) RETURNS SETOF tasks
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_bitmapscan TO 'off'
    AS $$
DECLARE
{fragment:claim_declare}
BEGIN
    PERFORM set_config('leasehold.claim_counted', 'on', true);
{fragment:claim}
    PERFORM set_config('leasehold.claim_counted', '', true);
    RETURN QUERY SELECT * FROM unnest(taken);
END
$$;

-- complete_and_claim runs a fused group (queue/fused.go) as one
-- statement: the completions of p_claims, fenced, then the claim, the
-- events of p_events and the claimed events, and the counts (the
-- function runs with leasehold.counted on, so the triggers stand aside). A claim that does not match fails with LH001 and
-- nothing written. Every event's seq is drawn after the events' shared
-- lock is held (as event_insert draws it), before the update that moves
-- its task, which appends it to the task's trail (leasehold.trailed is
-- on, so events_trailed stands aside): p_events are the completions'
-- events, each of a task p_claims completes.
DROP FUNCTION IF EXISTS complete_and_claim(jsonb, jsonb, bigint, integer, text, bigint, text);
CREATE OR REPLACE FUNCTION complete_and_claim(p_claims jsonb, p_events jsonb, p_now bigint, p_max integer, p_owner text, p_lease_until bigint, p_scope text, p_kinds jsonb) RETURNS SETOF tasks
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_bitmapscan TO 'off'
    SET "leasehold.counted" TO 'on'
    SET "leasehold.trailed" TO 'on'
    AS $$
DECLARE
    n BIGINT;
    n_trailed BIGINT;
    done_users TEXT[];
    done_runs BIGINT[];
    ev_tasks TEXT[];
    ev_seqs BIGINT[];
{fragment:claim_declare}
BEGIN
    PERFORM pg_advisory_xact_lock_shared(7424602, hashtext(current_schema()));
    ev_tasks := ARRAY(SELECT x.e ->> 0 FROM jsonb_array_elements(p_events) WITH ORDINALITY AS x(e, k) ORDER BY x.k);
    ev_seqs := ARRAY(SELECT nextval('events_seq') AS s FROM generate_series(1, cardinality(ev_tasks)) ORDER BY s);
    WITH done AS (
        UPDATE tasks SET state = 'completed', reason = '', owner = '', lease_until = 0, last_error = '', updated_at = c.now,
                         trail = tasks.trail || c.seqs
        FROM (SELECT e ->> 0 AS id, (e ->> 1)::bigint AS fence, (e ->> 2)::bigint AS now,
                     ARRAY(SELECT v.s FROM unnest(ev_tasks, ev_seqs) AS v(t, s) WHERE v.t = e ->> 0 ORDER BY v.s) AS seqs
              FROM jsonb_array_elements(p_claims) AS e) AS c
        WHERE tasks.id = ANY(ARRAY(SELECT e ->> 0 FROM jsonb_array_elements(p_claims) AS e))
          AND tasks.id = c.id{broken:fused-completion-unfenced| AND tasks.version = c.fence|} AND COALESCE(tasks.state, '') = 'running'
          AND (tasks.lease_until > c.now{broken:write-at-lease-until|| OR tasks.lease_until = c.now})
        RETURNING tasks.user_id, GREATEST(0, tasks.updated_at - tasks.claimed_at) AS run_time, cardinality(c.seqs) AS trailed
    ), deltas AS (
        -- The completions' users, each a running and an active task fewer.
        INSERT INTO user_deltas (user_id, running, active)
        SELECT d.user_id, -COUNT(*), -COUNT(*) FROM done d
        GROUP BY d.user_id ORDER BY d.user_id COLLATE "C"
    )
    SELECT COUNT(*), COALESCE(SUM(d.trailed), 0), COALESCE(array_agg(d.user_id), '{}'), COALESCE(array_agg(d.run_time), '{}')
    INTO n, n_trailed, done_users, done_runs
    FROM done d;
    IF n <> jsonb_array_length(p_claims) THEN
        RAISE EXCEPTION 'complete_and_claim: % of % claims matched', n, jsonb_array_length(p_claims)
            USING ERRCODE = 'LH001';
    END IF;
    IF n_trailed <> cardinality(ev_tasks) THEN
        RAISE EXCEPTION 'complete_and_claim: % of % events are of the tasks it completes', n_trailed, cardinality(ev_tasks);
    END IF;
    trail_claims := true;
    users_wait := true;
{fragment:claim}


    -- The events, with the seqs drawn for them, and the counts.
    WITH appended AS (
        INSERT INTO events (seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
        SELECT v.seq, v.task_id, v.kind, v.attempt, v.fence, v.op_id, v.from_state, v.to_state, v.reason, v.actor, v.at,
               v.detail, v.scope
        FROM (
            SELECT 1 AS part, x.k, ev_seqs[x.k] AS seq, e ->> 0 AS task_id, e ->> 1 AS kind, (e ->> 2)::bigint AS attempt,
                   (e ->> 3)::bigint AS fence, e ->> 4 AS op_id, e ->> 5 AS from_state, e ->> 6 AS to_state,
                   e ->> 7 AS reason, e ->> 8 AS actor, (e ->> 9)::bigint AS at, e ->> 10 AS detail, e ->> 11 AS scope
            FROM jsonb_array_elements(p_events) WITH ORDINALITY AS x(e, k)
            UNION ALL
            SELECT 2, t.ordinality, claim_seqs[t.ordinality], t.id, 'claimed', t.version + 1, t.version + 1, '', 'queued', 'running', '',
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

-- Admission (the depth caps) without one lock for every submit. The
-- queue has leasehold_admission_slots() slots, advisory locks keyed
-- (7424610 + slot, the schema), each good for admitting up to
-- settings.admission_slot_tasks tasks (B) in the transaction holding it.
-- The rule every admitting transaction keeps: it admits on the fast path
-- only while it holds enough slots for what it admitted, so the tasks
-- other transactions admitted and have not committed are at most B for
-- each slot they hold; and it admits on the fast path only when what it
-- sees (the committed tasks and its own) plus what it admits plus B for
-- each slot it does not hold is within every cap that applies. Far from
-- the caps, submits on different connections hold different slots and
-- do not wait for each other. Near a cap, admission takes the exclusive
-- path: every slot, so no fast-path transaction is in flight and the
-- next statement's snapshot counts every admitted task; a refusal is
-- decided only there, on that exact count. Nothing is reserved beyond a
-- transaction, so nothing leaks: a crashed process's slots are free when
-- its backend's transaction ends.
--
-- The lock order, which makes a deadlock through admission impossible:
--
--   1. A transaction waits for admission only as its first lock: while
--      it holds no slot and has written nothing (no transaction ID, so it
--      holds no row, key or events lock). It then takes every slot, in
--      slot order (the exclusive path). A lone submit (submit_one alone)
--      and a SubmitMany batch (users_ensure) admit before they write, so
--      they always may.
--   2. Otherwise admission only tries slots (pg_try_advisory_xact_lock)
--      and never waits: the fast path in every transaction, and the
--      exclusive path in a transaction that has written or holds a slot
--      (a group commit's later member, a schedule's second run). If a try
--      of the exclusive path fails, the statement fails with LH002
--      (a conflict, which the queue runs again) and its writes roll back.
--   3. Then the rows: the users' rows, the task keys, the tasks, the rows
--      of changes, the events' shared lock; as before.
--
-- A transaction waiting for a slot holds nothing any slot holder can wait
-- for, and a slot holder waits only for rows and keys, never for a slot;
-- so no cycle of waits passes through a slot. (A group whose first
-- member inserted a key and whose later member is near a cap, while a
-- lone submit of that key holds a slot and waits for the key: the group's
-- try fails and it rolls back, the lone submit goes on.) A fast-path try
-- that finds too few slots free, or a check that fails, is undone in a
-- subtransaction (the BEGIN ... EXCEPTION block below), which releases the
-- slots it took, so the exclusive path that follows starts holding none.
-- The transaction's slots and its fast-path admissions are kept in
-- transaction-local settings (leasehold.admission_held, a bit a slot, -1
-- for all of them; leasehold.admission_used), which a savepoint's
-- rollback undoes with the locks.

-- leasehold_admission_slots is how many admission slots a queue has.
CREATE OR REPLACE FUNCTION leasehold_admission_slots() RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT 64 $$;

-- admission admits p_users, one element a task that may be inserted (a
-- user named once for each of its tasks), as the transaction's next
-- tasks, p_size being the slots' size (admission_slot_tasks) as the
-- caller read it before: it returns 'fast' when they were admitted within
-- the margin (no check of the caps can refuse them, so the caller makes
-- none), and 'exact' when the transaction holds the exclusive path (the
-- caller's next statements read the exact counts and check the caps). On
-- the fast path it folds the active states' rows of changes once they
-- pile up, as active_tasks does for the exclusive path. Its margin reads
-- the rows of changes by plain index scans, as active_tasks does, and for
-- the same reason: so that it steps over the entries of folded rows.
CREATE OR REPLACE FUNCTION admission(p_users text[], p_size bigint) RETURNS text
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_bitmapscan TO 'off'
    SET enable_seqscan TO 'off'
    AS $$
DECLARE
    slots CONSTANT INTEGER := leasehold_admission_slots();
    schema_key CONSTANT INTEGER := hashtext(current_schema());
    k CONSTANT BIGINT := COALESCE(cardinality(p_users), 0);
    held BIGINT := COALESCE(NULLIF(current_setting('leasehold.admission_held', true), ''), '0')::BIGINT;
    used BIGINT := COALESCE(NULLIF(current_setting('leasehold.admission_used', true), ''), '0')::BIGINT;
    size_read CONSTANT BIGINT := p_size;
    set_to TEXT;
    need INTEGER;
    got INTEGER;
    start INTEGER;
    s INTEGER;
    near BOOLEAN;
    pending BIGINT := 0;
BEGIN
    IF held = -1 THEN
        RETURN 'exact';
    END IF;

    -- The fast path: enough slots for this transaction's fast-path tasks,
    -- tried from a slot of this connection's own, and the margin checked
    -- in the statement after them.
    BEGIN
        need := CAST(ceil((used + k)::numeric / GREATEST(size_read, 1)) AS INTEGER) - bit_count(held::bit(64))::INTEGER;
        IF bit_count(held::bit(64)) + GREATEST(need, 0) > slots THEN
            RAISE EXCEPTION 'admission: near' USING ERRCODE = 'LH902';
        END IF;
        got := 0;
        start := pg_backend_pid() % slots;
        FOR i IN 0 .. slots - 1 LOOP
            EXIT WHEN got >= need;
            s := (start + i) % slots;
            CONTINUE WHEN (held >> s) & 1 = 1;
            IF pg_try_advisory_xact_lock(7424610 + s, schema_key) THEN
                held := held | (CAST(1 AS BIGINT) << s);
                got := got + 1;
            END IF;
        END LOOP;
        IF got < need THEN
            RAISE EXCEPTION 'admission: too few slots free' USING ERRCODE = 'LH902';
        END IF;
        -- The margin, read after the slots are held: others is the most
        -- the other transactions admitted and have not committed, the
        -- tasks of each slot this one does not hold. The slots' size is
        -- read again, as one resized (on the exclusive path) since the
        -- caller read it (p_size) would change it.
        WITH conf AS (
            SELECT COALESCE(MAX(CASE WHEN st.key = 'depth_max' THEN st.value END), 0) AS depth_max,
                   COALESCE(MAX(CASE WHEN st.key = 'user_depth_max' THEN st.value END), 0) AS user_depth_max,
                   COALESCE(MAX(CASE WHEN st.key = 'admission_slot_tasks' THEN st.value END), 1) AS slot_tasks
            FROM settings st WHERE st.key IN ('depth_max', 'user_depth_max', 'admission_slot_tasks')
        ), margin AS (
            SELECT conf.*, (slots - bit_count(held::bit(64))) * conf.slot_tasks AS others FROM conf
        ), tally AS (
            SELECT COALESCE(SUM(t.n), 0)::BIGINT AS total, COUNT(*) AS n_rows FROM tally_deltas t
            WHERE t.name IN ('state:queued', 'state:running', 'state:waiting_for_approval')
              AND (SELECT depth_max FROM conf) <> 0
        )
        SELECT m.slot_tasks <> size_read
               OR (m.depth_max <> 0 AND tally.total + k + m.others > m.depth_max)
               OR EXISTS (SELECT 1 FROM (SELECT w.user_id, COUNT(*) AS n FROM unnest(p_users) AS w(user_id) GROUP BY w.user_id) w
                          LEFT JOIN user_caps c ON c.user_id = w.user_id
                          CROSS JOIN LATERAL (SELECT COALESCE(c.depth_limit, m.user_depth_max) AS cap) l
                          WHERE l.cap <> 0 AND COALESCE(c.active, 0) + w.n + m.others > l.cap),
               tally.n_rows
        INTO near, pending
        FROM margin m, tally;
        IF near THEN
            RAISE EXCEPTION 'admission: near a cap' USING ERRCODE = 'LH902';
        END IF;
        set_to := set_config('leasehold.admission_held', held::text, true);
        set_to := set_config('leasehold.admission_used', (used + k)::text, true);
    EXCEPTION WHEN SQLSTATE 'LH902' THEN
        -- The slots this block took are released; held is as it was.
        held := COALESCE(NULLIF(current_setting('leasehold.admission_held', true), ''), '0')::BIGINT;
        near := true;
    END;
    IF NOT near THEN
        IF pending >= leasehold_fold_rows() THEN
            PERFORM active_tasks(leasehold_fold_rows());
        END IF;
        RETURN 'fast';
    END IF;

    -- The exclusive path: every slot.
    IF held = 0 AND txid_current_if_assigned() IS NULL THEN
        FOR i IN 0 .. slots - 1 LOOP
            PERFORM pg_advisory_xact_lock(7424610 + i, schema_key);
        END LOOP;
    ELSE
        FOR i IN 0 .. slots - 1 LOOP
            CONTINUE WHEN (held >> i) & 1 = 1;
            IF NOT pg_try_advisory_xact_lock(7424610 + i, schema_key) THEN
                RAISE EXCEPTION 'admission: the exclusive path is held by another transaction, and this one has written'
                    USING ERRCODE = 'LH002';
            END IF;
        END LOOP;
    END IF;
    set_to := set_config('leasehold.admission_held', '-1', true);
    RETURN 'exact';
END
$$;

-- admission(p_users) is admission with the slots' size read first, for a
-- caller that has not read it.
CREATE OR REPLACE FUNCTION admission(p_users text[]) RETURNS text
    LANGUAGE sql
    AS $$
    SELECT admission(p_users, (SELECT COALESCE(MAX(st.value), 1) FROM settings st WHERE st.key = 'admission_slot_tasks'))
$$;

-- admission_resize sets the tasks a slot admits (admission_slot_tasks)
-- on the exclusive path, so that no transaction admits by the old figure
-- while another counts by the new; it must be its transaction's first
-- statement.
CREATE OR REPLACE FUNCTION admission_resize(p_slot_tasks bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF p_slot_tasks < 1 THEN
        RAISE EXCEPTION 'admission_resize: a slot admits at least one task, not %', p_slot_tasks;
    END IF;
    IF current_setting('leasehold.admission_held', true) IS DISTINCT FROM '-1' THEN
        IF txid_current_if_assigned() IS NOT NULL
           OR COALESCE(NULLIF(current_setting('leasehold.admission_held', true), ''), '0') <> '0' THEN
            RAISE EXCEPTION 'admission_resize: must be its transaction''s first write';
        END IF;
        FOR i IN 0 .. leasehold_admission_slots() - 1 LOOP
            PERFORM pg_advisory_xact_lock(7424610 + i, hashtext(current_schema()));
        END LOOP;
        PERFORM set_config('leasehold.admission_held', '-1', true);
    END IF;
    UPDATE settings SET value = p_slot_tasks WHERE key = 'admission_slot_tasks';
END
$$;

-- submit_batch writes a batch's new tasks (queue/submit_many.go's
-- insertBatch, after users_ensure admitted them), their keys and their
-- submitted events, in the batch's order, and returns how many tasks it
-- inserted. p_rows is a JSON array of objects (batchRow with the event's
-- actor, a). Each event's seq is drawn once the events' shared lock is
-- held (as event_insert draws it) and written with its task, as its
-- trail, so events_trailed stands aside (leasehold.trailed) and each new
-- row is written once. The statement counts what it writes, as
-- tasks_inserted, events_counted and events_counted_by_kind would from
-- the rows it inserted (leasehold.counted is on, and
-- leasehold.kinds_counted for that statement, so they stand aside): the
-- batch's rows are those rows, or the statement fails whole.
CREATE OR REPLACE FUNCTION submit_batch(p_rows text, p_attempts_max bigint, p_now bigint, p_scope text) RETURNS bigint
    LANGUAGE plpgsql
    SET "leasehold.counted" TO 'on'
    SET "leasehold.trailed" TO 'on'
    AS $$
DECLARE
    appended BIGINT;
    kinds_counted CONSTANT TEXT := COALESCE(current_setting('leasehold.kinds_counted', true), '');
    set_to TEXT;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(7424602, hashtext(current_schema()));
    set_to := set_config('leasehold.kinds_counted', 'on', true);
    WITH b AS (
        SELECT r.*, nextval('events_seq') AS event_seq FROM (
            SELECT * FROM ROWS FROM (json_to_recordset(p_rows::json)
                     AS (i TEXT, u TEXT, k TEXT, h TEXT, kd TEXT, p TEXT, r BIGINT, t BIGINT, d BIGINT, c BIGINT,
                         s BIGINT, si TEXT, sr BIGINT, a TEXT))
                 WITH ORDINALITY AS x(i, u, k, h, kd, p, r, t, d, c, s, si, sr, a, ord)
            ORDER BY x.ord) r
    ), task AS (
        INSERT INTO tasks (id, user_id, idem_key, request_hash, kind, payload, state, priority, run_at, deadline,
                           attempts_max, queued_at, cost_budget, steps_max, schedule_id, schedule_run,
                           created_at, updated_at, trail)
        SELECT b.i, b.u, b.k, b.h, b.kd, b.p, 'queued', b.r, b.t, b.d, p_attempts_max, p_now,
               b.c, b.s, b.si, b.sr, p_now, p_now, ARRAY[b.event_seq]
        FROM b ORDER BY b.ord
        RETURNING user_id, idem_key, seq
    ), keyed AS (
        INSERT INTO task_keys (user_id, idem_key, seq) SELECT task.user_id, task.idem_key, task.seq FROM task ORDER BY task.seq
    ), active AS (
        INSERT INTO user_deltas (user_id, running, active)
        SELECT b.u, 0, COUNT(*) FROM b GROUP BY b.u ORDER BY b.u COLLATE "C"
    ), counted AS (
        INSERT INTO tally_deltas (name, n)
        SELECT c.name, SUM(c.n) FROM (
            SELECT 'state:queued' AS name, COUNT(*) AS n FROM b
            UNION ALL SELECT 'event:submitted::queued:', COUNT(*) FROM b
            UNION ALL SELECT 'kind:' || b.kd || ':submitted::queued:', COUNT(*) FROM b GROUP BY b.kd) c
        GROUP BY c.name HAVING SUM(c.n) <> 0
        ORDER BY c.name COLLATE "C"
    )
    INSERT INTO events (seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
    SELECT b.event_seq, b.i, 'submitted', 0, 0, '', '', 'queued', '', b.a, p_now, '', p_scope
    FROM b ORDER BY b.ord;
    GET DIAGNOSTICS appended = ROW_COUNT;
    set_to := set_config('leasehold.kinds_counted', kinds_counted, true);
    RETURN appended;
END
$$;

-- submit_one runs a lone submit (queue/submitone.go) as one statement:
-- the key's lookup, admission, the task with its key and its submitted
-- event, and the counts; its outcome is the usual way's. The task's row is
-- inserted with its trail (the submitted event's seq, drawn first), so
-- events_trailed stands aside (leasehold.trailed) and the new row is
-- written once. What it reads before admission (the key, whether the
-- user has a row, the settings, whether the users' rows of changes want
-- folding) is one statement, and what it writes after is one more: the
-- task, its key, its event and every count of them, its kind's included
-- (leasehold.counted is on, and leasehold.kinds_counted for that
-- statement, so the counters' triggers stand aside). The exclusive path
-- reads the user's rows of changes by a plain index scan, as admission
-- does.
DROP FUNCTION IF EXISTS submit_one(text, text, text, text, text, bigint, bigint, bigint, bigint, bigint, bigint, text, bigint, text, text, boolean);
CREATE OR REPLACE FUNCTION submit_one(p_id text, p_user text, p_key text, p_hash text, p_kind text, p_payload text, p_priority bigint, p_run_at bigint, p_deadline bigint, p_now bigint, p_cost_budget bigint, p_steps_max bigint, p_schedule_id text, p_schedule_run bigint, p_actor text, p_scope text, p_timely boolean) RETURNS TABLE(outcome text, task_id text, n bigint, lim bigint)
    LANGUAGE plpgsql
    SET "leasehold.counted" TO 'on'
    SET "leasehold.trailed" TO 'on'
    SET plan_cache_mode TO 'force_generic_plan'
    SET enable_bitmapscan TO 'off'
    AS $$
DECLARE
    found_id TEXT;
    found_hash TEXT;
    user_known BOOLEAN;
    fold_due BOOLEAN;
    slot_tasks BIGINT;
    depth_max BIGINT;
    attempts BIGINT;
    mine BIGINT;
    mine_limit BIGINT;
    total BIGINT;
    path TEXT;
    kinds_counted CONSTANT TEXT := COALESCE(current_setting('leasehold.kinds_counted', true), '');
    set_to TEXT;
BEGIN
    SELECT k.id, k.request_hash, EXISTS (SELECT 1 FROM users u WHERE u.user_id = p_user),
           (SELECT COALESCE(MAX(d.id) - MIN(d.id) + 1, 0) FROM user_deltas d) >= leasehold_fold_rows(),
           st.attempts, st.slot_tasks
    INTO found_id, found_hash, user_known, fold_due, attempts, slot_tasks
    FROM (SELECT COALESCE(MAX(CASE WHEN s.key = 'attempts_max' THEN s.value END), 0) AS attempts,
                 COALESCE(MAX(CASE WHEN s.key = 'admission_slot_tasks' THEN s.value END), 1) AS slot_tasks
          FROM settings s WHERE s.key IN ('attempts_max', 'admission_slot_tasks')) st
    LEFT JOIN LATERAL (
        SELECT t.id, t.request_hash FROM task_keys tk JOIN tasks t ON t.seq = tk.seq
        WHERE tk.user_id = p_user AND tk.idem_key = p_key
        UNION ALL
        SELECT s.task_id, s.request_hash FROM idem_tombstones s WHERE s.user_id = p_user AND s.idem_key = p_key
        LIMIT 1) k ON true;
    IF found_id IS NOT NULL THEN
        IF found_hash = p_hash{broken:changed-request-replayed|| OR true} THEN
            outcome := 'replay';
        ELSE
            outcome := 'conflict';
        END IF;
        task_id := found_id;
        n := 0;
        lim := 0;
        RETURN NEXT;
        RETURN;
    END IF;
    IF NOT p_timely THEN
        outcome := 'untimely';
        n := 0;
        lim := 0;
        RETURN NEXT;
        RETURN;
    END IF;

    -- Admission first, before anything is written (see admission). On
    -- the fast path its margin keeps the task within every cap, and no
    -- count is read again; on the exclusive path the checks below read
    -- the exact counts, the only place a submit is refused.
    path := admission(ARRAY[p_user], slot_tasks);
    IF fold_due THEN
        PERFORM fold_user_deltas(leasehold_fold_rows());
    END IF;
    -- The user's row, written only for a user that has none: a submit of
    -- a known user (almost every one) writes none. (One whose row another
    -- transaction is inserting finds it here, having waited for it.)
    IF NOT user_known THEN
        INSERT INTO users (user_id) VALUES (p_user) ON CONFLICT (user_id) DO NOTHING;
    END IF;
    IF path <> 'fast' THEN
        SELECT COALESCE(MAX(CASE WHEN s.key = 'depth_max' THEN s.value END), 0) INTO depth_max
        FROM settings s WHERE s.key = 'depth_max';
        SELECT c.active, c.depth_limit INTO mine, mine_limit FROM user_caps c WHERE c.user_id = p_user;
        total := CASE WHEN depth_max <> 0 THEN active_tasks(leasehold_fold_rows()) ELSE 0 END;
{broken:depth-cap-off-by-one||        mine := mine - 1;
}        IF mine_limit > 0 AND mine >= mine_limit THEN
            RETURN QUERY SELECT 'user_full', CAST(NULL AS TEXT), mine, mine_limit;
            RETURN;
        END IF;
        IF depth_max <> 0 AND total >= depth_max THEN
            RETURN QUERY SELECT 'queue_full', CAST(NULL AS TEXT), total, depth_max;
            RETURN;
        END IF;
    END IF;

    -- The submitted event's seq, drawn once the events' shared lock is
    -- held (as event_insert draws it: see events_after_lock); then the
    -- task with that seq as its trail, its key, the event and their
    -- counts, as tasks_inserted, events_counted and
    -- events_counted_by_kind would add them.
    set_to := set_config('leasehold.kinds_counted', 'on', true);
    WITH drawn AS (
        SELECT nextval('events_seq') AS event_seq
        FROM (SELECT pg_advisory_xact_lock_shared(7424602, hashtext(current_schema()))) AS writing
    ), task AS (
        INSERT INTO tasks (id, user_id, idem_key, request_hash, kind, payload, state, priority, run_at, deadline,
                           attempts_max, queued_at, cost_budget, steps_max, schedule_id, schedule_run,
                           created_at, updated_at, trail)
        SELECT p_id, p_user, p_key, p_hash, p_kind, p_payload, 'queued', p_priority, p_run_at, p_deadline,
               attempts, p_now, p_cost_budget, p_steps_max, p_schedule_id, p_schedule_run, p_now, p_now,
               ARRAY[drawn.event_seq]
        FROM drawn
        RETURNING seq
    ), keyed AS (
        INSERT INTO task_keys (user_id, idem_key, seq) SELECT p_user, p_key, task.seq FROM task
    ), active AS (
        INSERT INTO user_deltas (user_id, running, active) VALUES (p_user, 0, 1)
    ), appended AS (
        INSERT INTO events (seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope)
        SELECT drawn.event_seq, p_id, 'submitted', 0, 0, '', '', 'queued', '', p_actor, p_now, '', p_scope FROM drawn
    )
    INSERT INTO tally_deltas (name, n)
    VALUES ('event:submitted::queued:', 1), ('kind:' || p_kind || ':submitted::queued:', 1), ('state:queued', 1);
    set_to := set_config('leasehold.kinds_counted', kinds_counted, true);
    outcome := 'inserted';
    task_id := p_id;
    n := 0;
    lim := 0;
    RETURN NEXT;
END
$$;
