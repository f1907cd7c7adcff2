-- Shepherd schema, SQLite flavour. Times are Unix milliseconds (INTEGER);
-- JSON documents are TEXT. Keep in step with postgres/0001_init.sql.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- The event log: append-only; seq is the cursor and never reused.
CREATE TABLE events (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    ts              INTEGER NOT NULL,
    type            TEXT NOT NULL,
    agent_id        TEXT,
    worker_id       TEXT,
    task_id         TEXT,
    run_id          TEXT,
    channel_id      TEXT,
    conversation_id TEXT,
    session_id      TEXT,
    data            TEXT NOT NULL
);
CREATE INDEX events_ts ON events (ts);
CREATE INDEX events_task ON events (task_id, seq) WHERE task_id IS NOT NULL;
CREATE INDEX events_worker ON events (worker_id, seq) WHERE worker_id IS NOT NULL;
CREATE INDEX events_run ON events (run_id, seq) WHERE run_id IS NOT NULL;
CREATE INDEX events_type ON events (type, seq);

CREATE TABLE agents (
    id             TEXT PRIMARY KEY,
    worker_type    TEXT NOT NULL DEFAULT 'builtin',
    capabilities   TEXT NOT NULL DEFAULT '[]',
    max_concurrent INTEGER,
    source         TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);

CREATE TABLE workers (
    id                TEXT PRIMARY KEY,
    agent_id          TEXT NOT NULL REFERENCES agents (id),
    worker_type       TEXT NOT NULL,
    name              TEXT,
    project_path      TEXT,
    session_id        TEXT,
    terminal_id       TEXT,
    capabilities      TEXT NOT NULL DEFAULT '[]',
    max_concurrent    INTEGER NOT NULL DEFAULT 1,
    status            TEXT NOT NULL CHECK (status IN ('active', 'inactive', 'terminated')),
    token_hash        TEXT NOT NULL,
    metadata          TEXT NOT NULL DEFAULT '{}',
    registered_at     INTEGER NOT NULL,
    last_heartbeat_at INTEGER NOT NULL,
    last_activity_at  INTEGER,
    closed_at         INTEGER
);
CREATE UNIQUE INDEX workers_token ON workers (token_hash);

CREATE TABLE channels (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    archived_at INTEGER
);

CREATE TABLE tasks (
    id                  TEXT PRIMARY KEY,
    title               TEXT NOT NULL,
    spec                TEXT NOT NULL,
    priority            INTEGER NOT NULL DEFAULT 0,
    capabilities        TEXT NOT NULL DEFAULT '[]',
    agent_id            TEXT,
    channel_id          TEXT REFERENCES channels (id),
    workflow            TEXT NOT NULL,
    state               TEXT NOT NULL,
    spec_snapshot_id    TEXT,
    dispatched_at       INTEGER,
    builder_worker_id   TEXT,
    cancel_requested_at INTEGER,
    attempts            INTEGER NOT NULL DEFAULT 0,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
);
CREATE INDEX tasks_queue ON tasks (state, priority DESC, created_at);
CREATE INDEX tasks_agent ON tasks (agent_id, created_at);

CREATE TABLE spec_snapshots (
    id         TEXT PRIMARY KEY,
    task_id    TEXT NOT NULL REFERENCES tasks (id),
    spec       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE runs (
    id                  TEXT PRIMARY KEY,
    task_id             TEXT NOT NULL REFERENCES tasks (id),
    task                TEXT NOT NULL,
    channel_id          TEXT REFERENCES channels (id),
    worker_id           TEXT NOT NULL REFERENCES workers (id),
    agent_id            TEXT NOT NULL,
    worker_type         TEXT NOT NULL DEFAULT 'builtin',
    attempt             INTEGER NOT NULL,
    purpose             TEXT NOT NULL DEFAULT 'build',
    status              TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'cancelled')),
    result              TEXT,
    started_at          INTEGER NOT NULL,
    completed_at        INTEGER,
    live_status         TEXT,
    tool_calls          INTEGER NOT NULL DEFAULT 0,
    active_tool         TEXT,
    step_count          INTEGER NOT NULL DEFAULT 0,
    last_step_at        INTEGER,
    cancel_requested_at INTEGER,
    -- Whether run_transcripts holds this run's transcript: lists read this
    -- flag, never the blob.
    has_transcript      INTEGER NOT NULL DEFAULT 0
);
-- Newest first, with the id as tie-break, for every list filter.
CREATE INDEX runs_agent ON runs (agent_id, started_at DESC, id DESC);
CREATE INDEX runs_agent_status ON runs (agent_id, status, started_at DESC, id DESC);
CREATE INDEX runs_status ON runs (status, started_at DESC, id DESC);
CREATE INDEX runs_started ON runs (started_at DESC, id DESC);
CREATE INDEX runs_task ON runs (task_id);

-- Finished runs' transcripts, gzipped JSON, written once at the end of the
-- run. Kept apart from runs so that run rows stay small and lists fast.
CREATE TABLE run_transcripts (
    run_id TEXT PRIMARY KEY REFERENCES runs (id),
    blob   BLOB NOT NULL
);

-- Runs per agent and status, kept in the same transaction as the runs
-- themselves: list totals and agent limits without counting rows.
CREATE TABLE run_counts (
    agent_id TEXT NOT NULL,
    status   TEXT NOT NULL,
    n        INTEGER NOT NULL,
    PRIMARY KEY (agent_id, status)
);

-- Finished steps of running runs; compacted into run_transcripts at the end.
CREATE TABLE run_steps (
    run_id TEXT NOT NULL REFERENCES runs (id),
    idx    INTEGER NOT NULL,
    body   TEXT NOT NULL,
    PRIMARY KEY (run_id, idx)
);

CREATE TABLE claims (
    id             TEXT PRIMARY KEY,
    task_id        TEXT NOT NULL REFERENCES tasks (id),
    worker_id      TEXT NOT NULL REFERENCES workers (id),
    run_id         TEXT NOT NULL REFERENCES runs (id),
    token          TEXT NOT NULL,
    purpose        TEXT NOT NULL DEFAULT 'build',
    claimed_at     INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    released_at    INTEGER,
    release_reason TEXT
);
-- At most one active claim per task, enforced by the database (N1, N5).
CREATE UNIQUE INDEX claims_one_active ON claims (task_id) WHERE released_at IS NULL;
CREATE INDEX claims_worker_active ON claims (worker_id) WHERE released_at IS NULL;
CREATE INDEX claims_task ON claims (task_id, claimed_at);
