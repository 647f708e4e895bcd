-- Wake-ups of idle workers (see queue/wake.go). The protocol, not a
-- trigger, sends the notification, after the commit of a write that made a
-- task claimable, as a statement that is its own transaction: the write's
-- transaction does not notify, so it does not queue for the cluster-wide
-- lock a notifying commit holds through its WAL flush. This transaction
-- does not wait for the flush (synchronous_commit off, for it alone). The
-- payload is the schema, so queues in different schemas of one database
-- wake only their own workers.

-- name: ready_notify
SELECT set_config('synchronous_commit', 'off', true), pg_notify('leasehold_ready', current_schema());

-- name: ready_listen
LISTEN leasehold_ready;

-- name: ready_schema
SELECT current_schema();
