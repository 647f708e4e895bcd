-- leasehold schema, version 3: a task's events are found from the task,
-- not by an index entry per event. Each task row keeps the seqs of its
-- events (trail), appended in the transaction that writes them: by the
-- update that moves the task where one does (complete_and_claim), by the
-- trigger events_trailed otherwise (functions.sql). The index
-- events_task, one entry per event written on the hot path, goes; a
-- task's events are read by their seqs (the primary key). Events that
-- concern no task (task_id '') are in no trail.
ALTER TABLE tasks ADD COLUMN trail BIGINT[] NOT NULL DEFAULT '{}';

UPDATE tasks AS t SET trail = e.seqs
FROM (SELECT task_id, array_agg(seq ORDER BY seq) AS seqs FROM events GROUP BY task_id) AS e
WHERE t.id = e.task_id;

DROP INDEX events_task;
