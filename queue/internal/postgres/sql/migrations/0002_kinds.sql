-- leasehold schema, version 2: every task and schedule has a kind, the
-- name of the handler that runs it (model.SubmitRequest.Kind). Tasks and
-- schedules written before kinds existed ran the synthetic payload, and
-- become kind 'synthetic'; every insert names its kind, so the default
-- fills only the rows that were there (ADD COLUMN with a constant default
-- rewrites no row).
ALTER TABLE tasks ADD COLUMN kind TEXT NOT NULL DEFAULT 'synthetic';
ALTER TABLE schedules ADD COLUMN kind TEXT NOT NULL DEFAULT 'synthetic';

-- A claim that names its kinds scans each kind's queued tasks in claim
-- order, one descent of this index a kind, so that it reads no task of a
-- kind it does not serve.
CREATE INDEX tasks_claim_kind ON tasks (kind, priority DESC, run_at, seq) WHERE state = 'queued';
