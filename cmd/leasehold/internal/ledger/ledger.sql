-- The live run's external service: a ledger of applied operations in its
-- own SQLite file, shared by every worker process, so that the demo and the
-- chaos checker can count applications across processes.

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

-- name: apply
INSERT INTO applications (op_id, effect, applied, result, fence_max, applied_at) VALUES (?, ?, 1, ?, ?, ?)
ON CONFLICT (op_id) DO UPDATE SET applied = applied + 1, fence_max = MAX(fence_max, excluded.fence_max);

-- name: register_fence
INSERT INTO applications (op_id, effect, applied, result, fence_max, applied_at) VALUES (?, '', 0, '', ?, 0)
ON CONFLICT (op_id) DO UPDATE SET fence_max = MAX(fence_max, excluded.fence_max);

-- name: all
SELECT op_id, applied FROM applications WHERE applied > 0 ORDER BY op_id;

-- name: log_call
INSERT INTO calls (op_id, fence, outcome, at) VALUES (?, ?, ?, ?);

-- name: calls
SELECT op_id, fence, outcome, at FROM calls ORDER BY rowid;

-- name: hold
DELETE FROM applications WHERE 0;
