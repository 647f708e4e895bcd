-- leasehold PostgreSQL schema, version 20: the queue's active count is read
-- by an index of its rows.
--
-- Since version 18 a submit (submit_one, and the usual way's user_depth and
-- SubmitMany's active_total) reads the queue's active tasks from
-- active_tasks: the sum of tally_deltas' rows of the three active states,
-- folded into one row a name once they number 256. Those rows stay few, but
-- the statement that sums them read all of tally_deltas by a sequential
-- scan, and the table holds far more than the state rows: every fused
-- group adds five to seven rows of other names (its events, its run and
-- wait time buckets), every submit one ('event:submitted::queued:'), and
-- only housekeeping's tally_compact folds them, once the table holds more
-- than 10,000 rows (prune.go's tallyCompactRows). So under load every
-- submit read up to ten thousand rows, and with nothing housekeeping (a
-- backlog building while no worker runs) the table only grew: intake slowed
-- with every submit.
--
-- Measured with one submit_one a transaction in a loop on the server
-- (synchronous_commit off, 1,000 submits a round, three rounds in a row):
-- on a fresh schema, 525, 700 and 926 µs a submit as the submits' own rows
-- piled up; with 10,000 rows of other names, 1,636, 1,709 and 2,690 µs.
-- With this index: 424, 430 and 443 µs, and 462, 580 and 621 µs.
--
-- The index holds the active states' rows only (its predicate is
-- active_tasks' filter, word for word, so the planner can prove it), so a
-- fused group's insert of its state rows adds an entry or two to it, and
-- the rows of other names add none. tally_deltas stays small in pages: the
-- index is built under a brief lock.
--
-- active_tasks runs with sequential scans off, so that it reads by the
-- index whatever the table's statistics: a connection keeps the plan of
-- its first call, and a first call on a table of a page or two (a fresh
-- schema, or one just compacted) would plan a sequential scan and keep it
-- as the table grew.

CREATE INDEX tally_deltas_active ON tally_deltas (name)
    WHERE name IN ('state:queued', 'state:running', 'state:waiting_for_approval');

ALTER FUNCTION active_tasks(BIGINT) SET enable_seqscan = off;
