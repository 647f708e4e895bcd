-- Reads for the HTTP API's paging and watching (queue/pages.go and
-- queue/watch.go). Same "-- name: NAME" sections as queries.sql.
--
-- A page of tasks is keyed by seq, the insertion order: a cursor is the
-- seq of the last task a page returned, and tasks added later have a
-- higher seq, so a cursor stays stable while tasks arrive. :users is ''
-- (any user) or a JSON array of the users the caller may see.

-- name: list_page
SELECT {task_columns} FROM tasks
WHERE seq > :after
  AND (:state = '' OR state = :state)
  AND (:users = '' OR user IN (SELECT value FROM json_each(:users)))
  AND created_at >= :created_from AND created_at < :created_until
  AND (:schedule_id = '' OR schedule_id = :schedule_id)
ORDER BY seq LIMIT :limit;

-- name: list_page_by_user
SELECT {task_columns} FROM tasks
WHERE user = :user AND seq > :after
  AND (:state = '' OR state = :state)
  AND created_at >= :created_from AND created_at < :created_until
  AND (:schedule_id = '' OR schedule_id = :schedule_id)
ORDER BY seq LIMIT :limit;

-- name: events_by_task_after
SELECT seq, task_id, kind, attempt, fence, op_id, from_state, to_state, reason, actor, at, detail, scope
FROM events WHERE task_id = :task_id AND seq > :after ORDER BY seq LIMIT :limit;

-- name: events_after_for_users
SELECT e.seq, e.task_id, e.kind, e.attempt, e.fence, e.op_id, e.from_state, e.to_state, e.reason, e.actor, e.at, e.detail, e.scope
FROM events e JOIN tasks t ON t.id = e.task_id
WHERE e.seq > :after AND t.user IN (SELECT value FROM json_each(:users))
ORDER BY e.seq LIMIT :limit;
