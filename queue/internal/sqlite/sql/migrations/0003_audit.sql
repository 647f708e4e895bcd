-- leasehold schema, version 3: the audit trail records the scope each
-- action was taken under (submit, approve, operate, or worker and reaper
-- actions with none), and can be read by actor and by time.

ALTER TABLE events ADD COLUMN scope TEXT NOT NULL DEFAULT '';

CREATE INDEX events_actor ON events (actor, seq);
CREATE INDEX events_at ON events (at, seq);
