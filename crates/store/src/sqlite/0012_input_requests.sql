-- Input requests: what a run's agent asks a person (a permission for a tool
-- call, or a question) and how it was answered. A request is a row from the
-- moment it is made, so it survives restarts; its answer is written once
-- (the state check in the UPDATE decides the first answer).
-- Keep in step with postgres/0012_input_requests.sql.
CREATE TABLE input_requests (
    id              TEXT PRIMARY KEY,
    run_id          TEXT NOT NULL,
    task_id         TEXT NOT NULL,
    vtid            TEXT NOT NULL,
    agent_id        TEXT NOT NULL,
    conversation_id TEXT,
    kind            TEXT NOT NULL CHECK (kind IN ('permission', 'question')),
    -- The asker's own key: asking again with it (a retry after a lost
    -- answer) returns the same request instead of a second one.
    ask_key         TEXT,
    tool_name       TEXT,
    tool_input      TEXT,
    prompt          TEXT,
    options         TEXT NOT NULL DEFAULT '[]',
    state           TEXT NOT NULL CHECK (state IN ('pending', 'answered', 'expired', 'withdrawn')),
    answer          TEXT,
    answered_by     TEXT,
    created_at      INTEGER NOT NULL,
    answered_at     INTEGER,
    expires_at      INTEGER,
    on_timeout      TEXT
);
CREATE UNIQUE INDEX input_requests_key ON input_requests (run_id, ask_key) WHERE ask_key IS NOT NULL;
CREATE INDEX input_requests_created ON input_requests (created_at DESC, id DESC);
CREATE INDEX input_requests_pending ON input_requests (created_at DESC, id DESC) WHERE state = 'pending';
CREATE INDEX input_requests_expiring ON input_requests (expires_at) WHERE state = 'pending' AND expires_at IS NOT NULL;
CREATE INDEX input_requests_run ON input_requests (run_id, created_at);

-- Requests of the run still pending (the run carries the count).
ALTER TABLE runs ADD COLUMN pending_input INTEGER NOT NULL DEFAULT 0;
-- When the run was last reported stuck (no new step for its agent's
-- stuck_after): once per quiet spell, so a later step starts a new one.
ALTER TABLE runs ADD COLUMN stuck_at INTEGER;

-- Keys the server derives credentials from (the run tokens agents ask
-- with), made once per database so that every node agrees on them.
CREATE TABLE server_keys (
    name       TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
