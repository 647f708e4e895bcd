-- leasehold schema, version 8: the audit trail finds a task's events by
-- the task's seq, not by its ID. Task IDs are random, so events_task
-- (task_id, seq) put every event's entry on a leaf of its own: a group
-- commit of seven claims and seven completions dirtied about a dozen
-- leaves of that one index, a WAL frame each at every commit (about 40%
-- of the frames; more on a larger trail, where two tasks seldom share a
-- leaf). Tasks are claimed and settled near claim order, which is near
-- seq order, so entries keyed on the task's seq land on the few leaves
-- where that task's earlier events already are.
--
-- task_seq is the seq of the task the event concerns, 0 for an event that
-- concerns no task. Every statement that inserts an event sets it from
-- the task's ID (each event is written after its task's row), and every
-- read by task names both, so the two cannot disagree unseen. Nothing
-- reads it otherwise: no event's content or order changes.
ALTER TABLE events ADD COLUMN task_seq INTEGER NOT NULL DEFAULT 0;

-- The events written so far get their tasks' seqs: the append-only rule is
-- lifted for this one statement and restored unchanged.
DROP TRIGGER events_no_update;

UPDATE events SET task_seq = COALESCE((SELECT t.seq FROM tasks t WHERE t.id = events.task_id), 0)
WHERE task_id != '';

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;

DROP INDEX events_task;
CREATE INDEX events_task_seq ON events (task_seq, seq);
