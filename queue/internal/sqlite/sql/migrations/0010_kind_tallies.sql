-- leasehold schema, version 10: the outcome counts by the kind of their
-- task, for metrics labelled by kind. An event's tally names its task's
-- kind after its transition (event:KIND:FROM:TO:REASON:TASK_KIND, the
-- kind empty for an event of no task), and a pruned task's names its kind
-- after its state (pruned:STATE:TASK_KIND); the totals are their sums.
-- The counts move in the statement that writes the event or removes the
-- task, so a state change, its events and its counts still commit
-- together. The task's kind is read by the event's task_seq, the tasks'
-- rowid (0, no row, for an event of no task).
DROP TRIGGER events_counted;

CREATE TRIGGER events_counted AFTER INSERT ON events
BEGIN
    INSERT INTO tallies (name, n)
    VALUES ('event:' || NEW.kind || ':' || NEW.from_state || ':' || NEW.to_state || ':' || NEW.reason || ':'
            || COALESCE((SELECT t.kind FROM tasks t WHERE t.seq = NEW.task_seq), ''), 1)
    ON CONFLICT (name) DO UPDATE SET n = n + 1;
END;

DROP TRIGGER tasks_pruned;

CREATE TRIGGER tasks_pruned AFTER DELETE ON tasks
BEGIN
    UPDATE tallies SET n = n - 1 WHERE name = 'state:' || OLD.state;
    INSERT INTO tallies (name, n) VALUES ('pruned:' || OLD.state || ':' || OLD.kind, 1)
    ON CONFLICT (name) DO UPDATE SET n = n + 1;
END;

-- The counts so far get kinds: the events the trail still holds are
-- recounted by their tasks' kinds; what a count holds beyond them (the
-- events of tasks already pruned, whose kinds are gone) gets the empty
-- kind, as do the tasks pruned. Each total is unchanged. (The recount
-- finds an event's task by its ID, which every event has had.)
WITH recount AS (
    SELECT 'event:' || e.kind || ':' || e.from_state || ':' || e.to_state || ':' || e.reason AS name,
           COALESCE(t.kind, '') AS task_kind, COUNT(*) AS n
    FROM events e LEFT JOIN tasks t ON t.id = e.task_id
    GROUP BY 1, 2
), held AS (
    SELECT name, SUM(n) AS n FROM recount GROUP BY name
)
INSERT INTO tallies (name, n)
SELECT name || ':' || task_kind, SUM(n) FROM (
    SELECT name, task_kind, n FROM recount
    UNION ALL
    SELECT o.name, '', o.n - COALESCE(h.n, 0) FROM tallies o LEFT JOIN held h ON h.name = o.name
    WHERE o.name GLOB 'event:*' AND o.n > COALESCE(h.n, 0)
)
WHERE true
GROUP BY 1;

DELETE FROM tallies WHERE name GLOB 'event:*' AND length(name) - length(replace(name, ':', '')) = 4;

UPDATE tallies SET name = name || ':' WHERE name GLOB 'pruned:*';
