-- The column user becomes user_id wherever it is (users, tasks, schedules),
-- as in the PostgreSQL store, where user is a reserved word: both dialects
-- name their columns alike. SQLite's RENAME COLUMN cannot follow the
-- column through the view user_caps into the triggers that read it, so the
-- view and those triggers are dropped first and made again, unchanged but
-- for the name. The index tasks_user follows the column by itself.
DROP TRIGGER users_crossed;
DROP TRIGGER tasks_requeued;
DROP TRIGGER tasks_moved;
DROP TRIGGER tasks_inserted;
DROP VIEW user_caps;

ALTER TABLE users RENAME COLUMN user TO user_id;
ALTER TABLE tasks RENAME COLUMN user TO user_id;
ALTER TABLE schedules RENAME COLUMN user TO user_id;

CREATE VIEW user_caps AS
SELECT user_id, running, active,
       CASE WHEN running_max >= 0 THEN running_max
            ELSE (SELECT value FROM settings WHERE key = 'user_running_max') END AS running_limit,
       CASE WHEN depth_max >= 0 THEN depth_max
            ELSE (SELECT value FROM settings WHERE key = 'user_depth_max') END AS depth_limit
FROM users;

CREATE TRIGGER tasks_inserted AFTER INSERT ON tasks
BEGIN
    UPDATE tallies SET n = n + 1 WHERE name = 'state:' || NEW.state;
    UPDATE users SET active = active + 1 WHERE user_id = NEW.user_id;
    UPDATE tasks
    SET blocked = (SELECT running_limit > 0 AND running >= running_limit FROM user_caps WHERE user_id = NEW.user_id),
        limited = (SELECT running_limit > 0 FROM user_caps WHERE user_id = NEW.user_id)
    WHERE seq = NEW.seq;
END;

CREATE TRIGGER tasks_moved AFTER UPDATE OF state ON tasks
WHEN OLD.state != NEW.state AND NEW.state != 'queued'
BEGIN
    UPDATE tallies SET n = n - 1 WHERE name = 'state:' || OLD.state;
    UPDATE tallies SET n = n + 1 WHERE name = 'state:' || NEW.state;
    UPDATE users
    SET running = running + (NEW.state = 'running') - (OLD.state = 'running'),
        active = active
            + (NEW.state IN ('queued', 'running', 'waiting_for_approval'))
            - (OLD.state IN ('queued', 'running', 'waiting_for_approval'))
    WHERE user_id = NEW.user_id;
END;

CREATE TRIGGER tasks_requeued AFTER UPDATE OF state ON tasks
WHEN OLD.state != NEW.state AND NEW.state = 'queued'
BEGIN
    UPDATE tallies SET n = n - 1 WHERE name = 'state:' || OLD.state;
    UPDATE tallies SET n = n + 1 WHERE name = 'state:queued';
    UPDATE users
    SET running = running + (NEW.state = 'running') - (OLD.state = 'running'),
        active = active
            + (NEW.state IN ('queued', 'running', 'waiting_for_approval'))
            - (OLD.state IN ('queued', 'running', 'waiting_for_approval'))
    WHERE user_id = NEW.user_id;
    UPDATE tasks
    SET blocked = (SELECT running_limit > 0 AND running >= running_limit FROM user_caps WHERE user_id = NEW.user_id),
        limited = (SELECT running_limit > 0 FROM user_caps WHERE user_id = NEW.user_id)
    WHERE seq = NEW.seq;
END;

CREATE TRIGGER users_crossed AFTER UPDATE OF running ON users
WHEN NEW.running != OLD.running
 AND (SELECT running_limit FROM user_caps WHERE user_id = NEW.user_id) > 0
 AND (OLD.running >= (SELECT running_limit FROM user_caps WHERE user_id = NEW.user_id))
  != (NEW.running >= (SELECT running_limit FROM user_caps WHERE user_id = NEW.user_id))
BEGIN
    UPDATE tasks SET blocked = (NEW.running >= (SELECT running_limit FROM user_caps WHERE user_id = NEW.user_id))
    WHERE user_id = NEW.user_id AND state = 'queued' AND limited = 1;
END;
