-- leasehold PostgreSQL schema, version 2: retention (prune), as SQLite's
-- version 6. Terminal tasks (completed, failed, cancelled) settled before
-- a cutoff are removed with their events and their receipted effects, in
-- bounded batches (prune.sql). The events table stays append-only but for
-- that one exception, and the triggers below hold every DELETE to it,
-- whatever runs it: a row goes only inside a prune's transaction (which
-- sets leasehold.prune_cutoff for itself alone, with set_config(..., true):
-- the setting ends with the transaction, on every connection of every
-- machine), only if its task is terminal and settled at or before the
-- cutoff, and an effect only with its receipt (the foreign key from effects
-- then keeps a task whose effect has no receipt). A pruned task leaves a
-- tombstone of its idempotency key so that a replayed submit is still
-- recognised for a window after the prune.

-- leasehold_prune_cutoff is the cutoff of the prune running in this
-- transaction, or NULL outside one.
CREATE FUNCTION leasehold_prune_cutoff() RETURNS BIGINT
LANGUAGE sql STABLE AS $$
    SELECT NULLIF(current_setting('leasehold.prune_cutoff', true), '')::BIGINT
$$;

-- idem_tombstones keeps, per pruned task, what intake needs to recognise a
-- replay (same user, key and request hash: the original task ID, replay)
-- and to refuse a changed request under the key. expires_at is when a
-- prune may remove it: pruned_at plus the window the prune was given.
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

-- The housekeeping policy, read by every worker's housekeeping: terminal
-- tasks settled longer than prune_older_than_ms ago are pruned (0, the
-- default: never), their tombstones kept prune_keep_keys_ms (30 days).
INSERT INTO settings (key, value) VALUES ('prune_older_than_ms', 0), ('prune_keep_keys_ms', 2592000000);

CREATE FUNCTION tasks_no_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state IN ('completed', 'failed', 'cancelled') AND OLD.updated_at <= leasehold_prune_cutoff() THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'only a prune removes a task, and only a terminal one settled before its cutoff';
END
$$;

CREATE TRIGGER tasks_no_delete BEFORE DELETE ON tasks
FOR EACH ROW EXECUTE FUNCTION tasks_no_delete();

-- A pruned task leaves the state tallies and is counted in pruned:STATE,
-- so that the depths and the tasks pruned still account for every task
-- submitted.
CREATE FUNCTION tasks_pruned() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tally_deltas (name, n) VALUES ('state:' || OLD.state, -1), ('pruned:' || OLD.state, 1);
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_pruned AFTER DELETE ON tasks
FOR EACH ROW EXECUTE FUNCTION tasks_pruned();

-- An operator's settle may still remove an intent of a task in review; a
-- terminal task's effects go only with a prune, and only with a receipt.
CREATE FUNCTION effects_no_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tasks WHERE id = OLD.task_id AND state IN ('completed', 'failed', 'cancelled'))
       OR (OLD.receipt_at != 0 AND leasehold_prune_cutoff() IS NOT NULL) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'a terminal task''s effect goes only with a prune, and never without its receipt';
END
$$;

CREATE TRIGGER effects_no_delete BEFORE DELETE ON effects
FOR EACH ROW EXECUTE FUNCTION effects_no_delete();

-- events_append_only now lets a prune delete a terminal task's events.
CREATE OR REPLACE FUNCTION events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND EXISTS (SELECT 1 FROM tasks
                                    WHERE id = OLD.task_id AND state IN ('completed', 'failed', 'cancelled')
                                      AND updated_at <= leasehold_prune_cutoff()) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'events are append-only: only a prune removes a terminal task''s events';
END
$$;
