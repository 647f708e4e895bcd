-- leasehold schema, version 7: users_crossed, which blocks or unblocks a
-- user's queued tasks when the user's running count crosses its limit,
-- decides whether it fires from the row it fires on. Every claim and every
-- end of a claim moves a running count, and the old WHEN read the
-- user_caps view three times (each a lookup of the user and of the
-- default limit) to find a limit it can compute from NEW.running_max and,
-- only for a user without a limit of its own, the default. The rule and
-- the body are unchanged.
DROP TRIGGER users_crossed;

CREATE TRIGGER users_crossed AFTER UPDATE OF running ON users
WHEN NEW.running != OLD.running
 AND (SELECT lim > 0 AND (OLD.running >= lim) != (NEW.running >= lim)
      FROM (SELECT CASE WHEN NEW.running_max >= 0 THEN NEW.running_max
                        ELSE (SELECT value FROM settings WHERE key = 'user_running_max') END AS lim))
BEGIN
    UPDATE tasks SET blocked = (NEW.running >= (SELECT running_limit FROM user_caps WHERE user_id = NEW.user_id))
    WHERE user_id = NEW.user_id AND state = 'queued' AND limited = 1;
END;
