-- The double's ledger of operations in its own SQLite file, shared by every
-- worker process of a live run, so that applications can be counted across
-- processes.

-- name: schema
CREATE TABLE IF NOT EXISTS applications (
    op_id      TEXT PRIMARY KEY,
    effect     TEXT NOT NULL,
    applied    INTEGER NOT NULL,
    result     TEXT NOT NULL,
    fence_max  INTEGER NOT NULL,
    applied_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS calls (
    op_id   TEXT NOT NULL,
    fence   INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    at      INTEGER NOT NULL
);

-- name: get
SELECT applied, result, fence_max FROM applications WHERE op_id = ?;

-- name: put
-- Stores an operation's entry; the effect and the time of the first
-- application are kept from the call that applied it first.
INSERT INTO applications (op_id, effect, applied, result, fence_max, applied_at) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (op_id) DO UPDATE SET applied = excluded.applied, result = excluded.result, fence_max = excluded.fence_max,
    effect = CASE WHEN effect = '' THEN excluded.effect ELSE effect END,
    applied_at = CASE WHEN applied_at = 0 THEN excluded.applied_at ELSE applied_at END;

-- name: all
SELECT op_id, applied FROM applications WHERE applied > 0 ORDER BY op_id;

-- name: log_call
INSERT INTO calls (op_id, fence, outcome, at) VALUES (?, ?, ?, ?);

-- name: calls
SELECT op_id, fence, outcome, at FROM calls ORDER BY rowid;

-- name: hold
DELETE FROM applications WHERE 0;
