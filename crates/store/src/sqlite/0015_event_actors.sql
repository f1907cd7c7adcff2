-- Who made each change: a user's name, worker:<id>, run:<id> or system.
-- Older events keep NULL: nobody recorded it then, and guessing would be
-- worse than saying nothing. The audit reads ask for people by name, so
-- only their rows are indexed: the far more numerous events of workers,
-- runs and the server's own loops cost no index entry (a user name never
-- holds ':' and 'system' is reserved). Keep in step with postgres/0015_event_actors.sql.
ALTER TABLE events ADD COLUMN actor TEXT;
CREATE INDEX events_by_person ON events (actor, seq)
    WHERE actor NOT LIKE '%:%' AND actor <> 'system';
