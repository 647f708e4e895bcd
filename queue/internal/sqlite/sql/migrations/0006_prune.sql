-- leasehold schema, version 6: retention (prune). Terminal tasks
-- (completed, failed, cancelled) settled before a cutoff are removed with
-- their events and their receipted effects, in bounded batches (prune.sql).
-- The events table stays append-only but for that one exception, and the
-- triggers below hold every DELETE to it, whatever runs it: a row goes only
-- inside a prune's transaction (which holds its cutoff in prune_gate, and
-- empties prune_gate again before it commits), only if its task is
-- terminal and settled at or before the cutoff, and an effect only with its
-- receipt (the foreign key from effects then keeps a task whose effect has
-- no receipt). A pruned task leaves a tombstone of its idempotency key so
-- that a replayed submit is still recognised for a window after the prune.

-- prune_gate holds the cutoff of the prune running in the one write
-- transaction; it is empty whenever that transaction is not running.
CREATE TABLE prune_gate (
    cutoff INTEGER NOT NULL
);

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
    settled_at   INTEGER NOT NULL,
    pruned_at    INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (user_id, idem_key)
) WITHOUT ROWID;

CREATE INDEX idem_tombstones_expiry ON idem_tombstones (expires_at);

-- The housekeeping policy, read by every worker's housekeeping: terminal
-- tasks settled longer than prune_older_than_ms ago are pruned (0, the
-- default: never), their tombstones kept prune_keep_keys_ms (30 days).
INSERT INTO settings (key, value) VALUES ('prune_older_than_ms', 0), ('prune_keep_keys_ms', 2592000000);

CREATE TRIGGER tasks_no_delete BEFORE DELETE ON tasks
WHEN OLD.state NOT IN ('completed', 'failed', 'cancelled')
  OR NOT EXISTS (SELECT 1 FROM prune_gate WHERE OLD.updated_at <= cutoff)
BEGIN
    SELECT RAISE(ABORT, 'only a prune removes a task, and only a terminal one settled before its cutoff');
END;

-- A pruned task leaves the state tallies and is counted in pruned:STATE,
-- so that the depths and the tasks pruned still account for every task
-- submitted.
CREATE TRIGGER tasks_pruned AFTER DELETE ON tasks
BEGIN
    UPDATE tallies SET n = n - 1 WHERE name = 'state:' || OLD.state;
    INSERT INTO tallies (name, n) VALUES ('pruned:' || OLD.state, 1)
    ON CONFLICT (name) DO UPDATE SET n = n + 1;
END;

-- An operator's settle may still remove an intent of a task in review; a
-- terminal task's effects go only with a prune, and only with a receipt.
CREATE TRIGGER effects_no_delete BEFORE DELETE ON effects
WHEN EXISTS (SELECT 1 FROM tasks WHERE id = OLD.task_id AND state IN ('completed', 'failed', 'cancelled'))
 AND (OLD.receipt_at = 0 OR NOT EXISTS (SELECT 1 FROM prune_gate))
BEGIN
    SELECT RAISE(ABORT, 'a terminal task''s effect goes only with a prune, and never without its receipt');
END;

DROP TRIGGER events_no_delete;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM tasks t JOIN prune_gate g ON t.updated_at <= g.cutoff
                 WHERE t.id = OLD.task_id AND t.state IN ('completed', 'failed', 'cancelled'))
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: only a prune removes a terminal task''s events');
END;
