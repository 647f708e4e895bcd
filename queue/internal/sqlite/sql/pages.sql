-- Reads for the HTTP API's paging and watching (queue/pages.go and
-- queue/watch.go). Same "-- name: NAME" sections as queries.sql.
--
-- A page of tasks is keyed by seq, the insertion order: a cursor is the
-- seq of the last task a page returned, and tasks added later have a
-- higher seq, so a cursor stays stable while tasks arrive. :users is ''
-- (any user) or a JSON array of the users the caller may see.
--
-- Every LIMIT is written LIMIT +:limit. SQLite's planner reads a bare
-- bound LIMIT parameter's value, and a statement planned with one value
-- is compiled again (parsed and planned) before it runs with another; the
-- unary plus keeps the parameter out of planning, so a statement prepared
-- once runs with any limit. The limit applied is the same.

-- name: list_page
SELECT {task_columns} FROM tasks
WHERE seq > :after
  AND (:state = '' OR state = :state)
  AND (:users = '' OR user_id IN (SELECT value FROM json_each(:users)))
  AND created_at >= :created_from AND created_at < :created_until
  AND (:schedule_id = '' OR schedule_id = :schedule_id)
  AND (:kind = '' OR kind = :kind)
ORDER BY seq LIMIT +:limit;

-- name: list_page_by_user
SELECT {task_columns} FROM tasks
WHERE user_id = :user AND seq > :after
  AND (:state = '' OR state = :state)
  AND created_at >= :created_from AND created_at < :created_until
  AND (:schedule_id = '' OR schedule_id = :schedule_id)
  AND (:kind = '' OR kind = :kind)
ORDER BY seq LIMIT +:limit;

-- name: list_page_for_users
-- list_page for a few users (:users, a JSON array): each user's first
-- :limit tasks after :after, by tasks_user, then the first :limit of them
-- all. The seq-ordered scan of list_page reads every task of every other
-- user on its way, all of the table for a user with few tasks.
SELECT {task_columns} FROM tasks
WHERE seq IN (
    SELECT s.seq FROM (SELECT DISTINCT value AS user_id FROM json_each(:users)) AS u, tasks AS s
    WHERE s.seq IN (SELECT t.seq FROM tasks AS t
                    WHERE t.user_id = u.user_id AND t.seq > :after
                      AND (:state = '' OR t.state = :state)
                      AND t.created_at >= :created_from AND t.created_at < :created_until
                      AND (:schedule_id = '' OR t.schedule_id = :schedule_id)
                      AND (:kind = '' OR t.kind = :kind)
                    ORDER BY t.seq LIMIT +:limit))
ORDER BY seq LIMIT +:limit;

-- name: list_page_newest
-- list_page from the newest task back (PageFilter.Newest): :after is the
-- cursor, here the seq the page starts below. So are the two after it.
SELECT {task_columns} FROM tasks
WHERE seq < :after
  AND (:state = '' OR state = :state)
  AND (:users = '' OR user_id IN (SELECT value FROM json_each(:users)))
  AND created_at >= :created_from AND created_at < :created_until
  AND (:schedule_id = '' OR schedule_id = :schedule_id)
  AND (:kind = '' OR kind = :kind)
ORDER BY seq DESC LIMIT +:limit;

-- name: list_page_by_user_newest
SELECT {task_columns} FROM tasks
WHERE user_id = :user AND seq < :after
  AND (:state = '' OR state = :state)
  AND created_at >= :created_from AND created_at < :created_until
  AND (:schedule_id = '' OR schedule_id = :schedule_id)
  AND (:kind = '' OR kind = :kind)
ORDER BY seq DESC LIMIT +:limit;

-- name: list_page_for_users_newest
SELECT {task_columns} FROM tasks
WHERE seq IN (
    SELECT s.seq FROM (SELECT DISTINCT value AS user_id FROM json_each(:users)) AS u, tasks AS s
    WHERE s.seq IN (SELECT t.seq FROM tasks AS t
                    WHERE t.user_id = u.user_id AND t.seq < :after
                      AND (:state = '' OR t.state = :state)
                      AND t.created_at >= :created_from AND t.created_at < :created_until
                      AND (:schedule_id = '' OR t.schedule_id = :schedule_id)
                      AND (:kind = '' OR t.kind = :kind)
                    ORDER BY t.seq DESC LIMIT +:limit))
ORDER BY seq DESC LIMIT +:limit;

-- name: task_by_user_key
-- The task a user submitted under an idempotency key, by the (user_id,
-- idem_key) index (the console's search).
SELECT {task_columns} FROM tasks WHERE user_id = :user AND idem_key = :key;

-- The audit trail with each event's task's user beside it ('' for an
-- event that concerns no task). The join is on tasks.id, which is unique.

-- name: trail_by_task_after
SELECT e.seq, e.task_id, e.kind, e.attempt, e.fence, e.op_id, e.from_state, e.to_state, e.reason, e.actor, e.at, e.detail, e.scope,
       COALESCE(t.user_id, ''), COALESCE(t.kind, '')
FROM events e LEFT JOIN tasks t ON t.id = e.task_id
WHERE e.task_seq = (SELECT s.seq FROM tasks s WHERE s.id = :task_id) AND e.task_id = :task_id AND e.seq > :after
ORDER BY e.seq LIMIT +:limit;

-- name: trail_after
SELECT e.seq, e.task_id, e.kind, e.attempt, e.fence, e.op_id, e.from_state, e.to_state, e.reason, e.actor, e.at, e.detail, e.scope,
       COALESCE(t.user_id, ''), COALESCE(t.kind, '')
FROM events e LEFT JOIN tasks t ON t.id = e.task_id
WHERE e.seq > :after ORDER BY e.seq LIMIT +:limit;

-- name: trail_through
-- How far a read of the trail for some users may look (watch.go,
-- eventsThrough): :window past :after, and no further than the last
-- event written, every event up to which is committed (one writer at a
-- time numbers them in commit order). Read before trail_after_for_users.
SELECT MAX(:after, MIN(:after + :window, COALESCE((SELECT MAX(seq) FROM events), 0)));

-- name: trail_after_for_users
-- The events after :after and up to :through of the tasks of :users.
SELECT e.seq, e.task_id, e.kind, e.attempt, e.fence, e.op_id, e.from_state, e.to_state, e.reason, e.actor, e.at, e.detail, e.scope,
       t.user_id, t.kind
FROM events e JOIN tasks t ON t.id = e.task_id
WHERE e.seq > :after AND e.seq {broken:follower-skips-mark|<=|<} :through AND t.user_id IN (SELECT value FROM json_each(:users))
ORDER BY e.seq LIMIT +:limit;

-- name: task_last_event_seq
SELECT COALESCE(MAX(seq), 0) FROM events
WHERE task_seq = (SELECT t.seq FROM tasks t WHERE t.id = :task_id) AND task_id = :task_id;
