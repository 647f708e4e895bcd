-- Wake-ups of idle workers (see pgnotify.go). The protocol, not a trigger,
-- sends the notification: at most one per transaction, in the transaction,
-- so PostgreSQL delivers it only if the transaction commits. The payload is
-- the schema, so queues in different schemas of one database wake only
-- their own workers.

-- name: ready_notify
SELECT pg_notify('leasehold_ready', current_schema());

-- name: ready_listen
LISTEN leasehold_ready;

-- name: ready_schema
SELECT current_schema();
