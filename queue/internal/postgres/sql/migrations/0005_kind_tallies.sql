-- leasehold schema, version 5: the outcome counts by the kind of their
-- task, for metrics labelled by kind. Beside each event count
-- event:KIND:FROM:TO:REASON (the totals), tally_deltas holds
-- kind:TASK_KIND:KIND:FROM:TO:REASON, added by the trigger
-- events_counted_by_kind (functions.sql) in the statement that writes the
-- events; a pruned task is counted as pruned:STATE:TASK_KIND. The kind is
-- empty for an event of no task.
--
-- The counts so far get kinds: the events the trail still holds are
-- recounted by their tasks' kinds; what a total holds beyond them (the
-- events of tasks already pruned, whose kinds are gone) gets the empty
-- kind, as do the tasks pruned. Each total is unchanged.
WITH recount AS (
    SELECT e.kind || ':' || e.from_state || ':' || e.to_state || ':' || e.reason AS event,
           COALESCE(t.kind, '') AS task_kind, COUNT(*) AS n
    FROM events e LEFT JOIN tasks t ON t.id = e.task_id
    GROUP BY 1, 2
), held AS (
    SELECT event, SUM(n) AS n FROM recount GROUP BY event
), counted AS (
    SELECT substr(name, 7) AS event, SUM(n) AS n FROM tally_deltas WHERE name LIKE 'event:%' GROUP BY 1
)
INSERT INTO tally_deltas (name, n)
SELECT name, SUM(n) FROM (
    SELECT 'kind:' || task_kind || ':' || event AS name, n FROM recount
    UNION ALL
    SELECT 'kind::' || c.event, c.n - COALESCE(h.n, 0) FROM counted c LEFT JOIN held h ON h.event = c.event
    WHERE c.n > COALESCE(h.n, 0)
) r
GROUP BY name ORDER BY name COLLATE "C";

UPDATE tally_deltas SET name = name || ':' WHERE name LIKE 'pruned:%';
