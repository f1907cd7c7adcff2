-- Hosts: the places work lives. Each server node records itself (kind
-- 'server'); a runner on any machine registers itself with the operator
-- token (kind 'runner') and gets a host token, kept here as its SHA-256
-- only. A host is online while it has been seen within one heartbeat
-- timeout; nothing is written when it goes quiet, so `last_seen_at` is the
-- whole truth. A worker names the host it runs on, if it said so.
-- Keep in step with postgres/0017_hosts.sql.
CREATE TABLE hosts (
    id             TEXT PRIMARY KEY,
    name           TEXT NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('server', 'runner')),
    address        TEXT,
    sessions_root  TEXT,
    agents         TEXT NOT NULL DEFAULT '[]',
    slots          INTEGER,
    token_hash     TEXT UNIQUE,
    registered_at  INTEGER NOT NULL,
    last_seen_at   INTEGER NOT NULL
);

ALTER TABLE workers ADD COLUMN host_id TEXT;
CREATE INDEX workers_by_host ON workers (host_id) WHERE host_id IS NOT NULL;
