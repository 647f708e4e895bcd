-- leasehold schema, version 4: attempts_failed counts every attempt that
-- ended in a transient failure or a lease expiry over the task's whole
-- life. attempts_charged is what attempts_max bounds, and an operator's
-- requeue zeroes it; attempts_failed is never reset, so a handler can tell
-- how often the task has failed (the synthetic handler's "times") across
-- requeues. Existing tasks start from their attempts charged so far.

ALTER TABLE tasks ADD COLUMN attempts_failed INTEGER NOT NULL DEFAULT 0 CHECK (attempts_failed >= 0);

UPDATE tasks SET attempts_failed = attempts_charged;
