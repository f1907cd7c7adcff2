-- Webhook subscriptions and their deliveries. Each subscription reads the
-- event log through its own durable cursor (`cursor_seq`: every event at or
-- below it was delivered or given up), one event in flight at a time, so a
-- restart resumes where delivery stopped and order holds per subscription.
-- Keep in step with postgres/0013_webhooks.sql.
CREATE TABLE webhooks (
    id               TEXT PRIMARY KEY,
    url              TEXT NOT NULL,
    -- JSON array of event names and prefix wildcards.
    events           TEXT NOT NULL,
    -- The whsec_ secret: kept as given, since signing needs the key itself.
    secret           TEXT NOT NULL,
    format           TEXT NOT NULL CHECK (format IN ('standard', 'slack')),
    -- 'config' rows are synced from shepherd.toml and not deleted by the API.
    source           TEXT NOT NULL CHECK (source IN ('api', 'config')),
    state            TEXT NOT NULL CHECK (state IN ('active', 'failing')),
    cursor_seq       INTEGER NOT NULL,
    -- The event being delivered, from its first attempt (the 24 h retry
    -- window starts then) until it is delivered or given up.
    pending_seq      INTEGER,
    pending_since    INTEGER,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER,
    -- Which node delivers this subscription, until when (several nodes on
    -- one PostgreSQL: one delivers at a time; a dead node's lease expires).
    lease_owner      TEXT,
    lease_until      INTEGER,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
CREATE UNIQUE INDEX webhooks_config_url ON webhooks (url) WHERE source = 'config';

-- Every delivery attempt, for `GET /api/v1/webhooks/{id}/deliveries`.
CREATE TABLE webhook_deliveries (
    webhook_id       TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    seq              INTEGER NOT NULL,
    event_type       TEXT NOT NULL,
    attempt          INTEGER NOT NULL,
    -- 'delivered', 'retrying' (another attempt is due at next_attempt_at)
    -- or 'failed' (given up after 24 h; the cursor moved on).
    outcome          TEXT NOT NULL CHECK (outcome IN ('delivered', 'retrying', 'failed')),
    http_status      INTEGER,
    error            TEXT,
    started_at       INTEGER NOT NULL,
    finished_at      INTEGER NOT NULL,
    next_attempt_at  INTEGER,
    PRIMARY KEY (webhook_id, seq, attempt)
);
CREATE INDEX webhook_deliveries_recent ON webhook_deliveries (webhook_id, started_at DESC);
