-- Reads for the HTTP API's paging and watching (queue/pages.go and
-- queue/watch.go), as SQLite's pages.sql. :users is '' (any user) or a
-- JSON array of the users the caller may see; NULLIF keeps '' from ever
-- being cast to jsonb.

-- name: list_page
SELECT {task_columns} FROM tasks
WHERE seq > :after
  AND (:state = '' OR state = :state)
  AND (:users = '' OR user_id IN (SELECT jsonb_array_elements_text(NULLIF(:users, '')::jsonb)))
  AND created_at >= :created_from AND created_at < :created_until
  AND (:schedule_id = '' OR schedule_id = :schedule_id)
  AND (:kind = '' OR kind = :kind)
ORDER BY seq LIMIT :limit;

-- name: list_page_by_user
-- Walked by task_keys_user (the baseline's task_keys), a task read a key (see
-- list_by_user in queries.sql).
SELECT {task_columns} FROM (
    SELECT t.* FROM task_keys k
    CROSS JOIN LATERAL (SELECT * FROM tasks WHERE tasks.seq = k.seq LIMIT 1) t
    WHERE k.user_id = :user AND k.seq > :after
      AND (:state = '' OR t.state = :state)
      AND t.created_at >= :created_from AND t.created_at < :created_until
      AND (:schedule_id = '' OR t.schedule_id = :schedule_id)
      AND (:kind = '' OR t.kind = :kind)
    ORDER BY k.seq LIMIT :limit) AS tasks
ORDER BY seq;

-- name: list_page_for_users
-- list_page for a few users (:users, a JSON array): each user's first
-- :limit tasks after :after, walked by task_keys_user as
-- list_page_by_user walks one, then the first :limit of them all. The
-- seq-ordered scan of list_page reads every task of every other user on
-- its way, all of the table for a user with few tasks.
SELECT {task_columns} FROM (
    SELECT t.* FROM (SELECT DISTINCT jsonb_array_elements_text(NULLIF(:users, '')::jsonb) AS user_id) AS u
    CROSS JOIN LATERAL (
        SELECT tt.* FROM task_keys k
        CROSS JOIN LATERAL (SELECT * FROM tasks WHERE tasks.seq = k.seq LIMIT 1) tt
        WHERE k.user_id = u.user_id AND k.seq > :after
          AND (:state = '' OR tt.state = :state)
          AND tt.created_at >= :created_from AND tt.created_at < :created_until
          AND (:schedule_id = '' OR tt.schedule_id = :schedule_id)
          AND (:kind = '' OR tt.kind = :kind)
        ORDER BY k.seq LIMIT :limit) AS t
    ORDER BY t.seq LIMIT :limit) AS tasks
ORDER BY seq;

-- name: list_page_newest
-- list_page from the newest task back (PageFilter.Newest): :after is the
-- cursor, here the seq the page starts below. So are the two after it.
SELECT {task_columns} FROM tasks
WHERE seq < :after
  AND (:state = '' OR state = :state)
  AND (:users = '' OR user_id IN (SELECT jsonb_array_elements_text(NULLIF(:users, '')::jsonb)))
  AND created_at >= :created_from AND created_at < :created_until
  AND (:schedule_id = '' OR schedule_id = :schedule_id)
  AND (:kind = '' OR kind = :kind)
ORDER BY seq DESC LIMIT :limit;

-- name: list_page_by_user_newest
SELECT {task_columns} FROM (
    SELECT t.* FROM task_keys k
    CROSS JOIN LATERAL (SELECT * FROM tasks WHERE tasks.seq = k.seq LIMIT 1) t
    WHERE k.user_id = :user AND k.seq < :after
      AND (:state = '' OR t.state = :state)
      AND t.created_at >= :created_from AND t.created_at < :created_until
      AND (:schedule_id = '' OR t.schedule_id = :schedule_id)
      AND (:kind = '' OR t.kind = :kind)
    ORDER BY k.seq DESC LIMIT :limit) AS tasks
ORDER BY seq DESC;

-- name: list_page_for_users_newest
SELECT {task_columns} FROM (
    SELECT t.* FROM (SELECT DISTINCT jsonb_array_elements_text(NULLIF(:users, '')::jsonb) AS user_id) AS u
    CROSS JOIN LATERAL (
        SELECT tt.* FROM task_keys k
        CROSS JOIN LATERAL (SELECT * FROM tasks WHERE tasks.seq = k.seq LIMIT 1) tt
        WHERE k.user_id = u.user_id AND k.seq < :after
          AND (:state = '' OR tt.state = :state)
          AND tt.created_at >= :created_from AND tt.created_at < :created_until
          AND (:schedule_id = '' OR tt.schedule_id = :schedule_id)
          AND (:kind = '' OR tt.kind = :kind)
        ORDER BY k.seq DESC LIMIT :limit) AS t
    ORDER BY t.seq DESC LIMIT :limit) AS tasks
ORDER BY seq DESC;

-- name: task_by_user_key
-- The task a user submitted under an idempotency key, by task_keys'
-- primary key (the console's search).
SELECT {task_columns} FROM tasks
WHERE seq = (SELECT k.seq FROM task_keys k WHERE k.user_id = :user AND k.idem_key = :key);

-- The audit trail with each event's task's user beside it ('' for an
-- event that concerns no task). The join is on tasks.id, which is unique.
-- Each is a cursor, read after events_after_lock (see queries.sql) and
-- bounded by the last event number drawn.

-- name: trail_by_task_after
SELECT e.seq, e.task_id, e.kind, e.attempt, e.fence, e.op_id, e.from_state, e.to_state, e.reason, e.actor, e.at, e.detail, e.scope,
       COALESCE(t.user_id, ''), COALESCE(t.kind, '')
FROM events e LEFT JOIN tasks t ON t.id = e.task_id
WHERE e.seq IN (SELECT unnest(tt.trail) FROM tasks tt WHERE tt.id = :task_id)
  AND e.seq > :after AND e.seq <= (SELECT last_value FROM events_seq)
ORDER BY e.seq LIMIT :limit;

-- name: trail_after
SELECT e.seq, e.task_id, e.kind, e.attempt, e.fence, e.op_id, e.from_state, e.to_state, e.reason, e.actor, e.at, e.detail, e.scope,
       COALESCE(t.user_id, ''), COALESCE(t.kind, '')
FROM events e LEFT JOIN tasks t ON t.id = e.task_id
WHERE e.seq > :after AND e.seq <= (SELECT last_value FROM events_seq)
ORDER BY e.seq LIMIT :limit;

-- name: trail_through
-- How far a read of the trail for some users may look (watch.go,
-- eventsThrough): :window past :after, and no further than the last
-- number drawn (0 while none is), every event up to which is committed or
-- gone once events_after_lock is held. Read after it, before
-- trail_after_for_users, in the same transaction.
SELECT GREATEST(CAST(:after AS BIGINT), LEAST(CAST(:after AS BIGINT) + CAST(:window AS BIGINT),
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM events_seq)));

-- name: trail_after_for_users
-- The events after :after and up to :through of the tasks of :users.
SELECT e.seq, e.task_id, e.kind, e.attempt, e.fence, e.op_id, e.from_state, e.to_state, e.reason, e.actor, e.at, e.detail, e.scope,
       t.user_id, t.kind
FROM events e JOIN tasks t ON t.id = e.task_id
WHERE e.seq > :after AND e.seq {broken:follower-skips-mark|<=|<} :through
  AND t.user_id IN (SELECT jsonb_array_elements_text(NULLIF(:users, '')::jsonb))
ORDER BY e.seq LIMIT :limit;

-- name: task_last_event_seq
-- The highest seq of the task's trail.
SELECT COALESCE(MAX(s), 0) FROM tasks t CROSS JOIN LATERAL unnest(t.trail) AS s WHERE t.id = :task_id;
