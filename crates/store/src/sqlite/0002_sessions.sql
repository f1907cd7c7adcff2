-- Sessions (seed 004): a workspace directory on one node, with its tabs.
CREATE TABLE sessions (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    location_path TEXT NOT NULL,
    node_id       TEXT NOT NULL,
    node_address  TEXT,
    created_at    INTEGER NOT NULL
);

-- A session's tabs. `pid` and `epoch` describe the latest process of a PTY
-- worker; `exited_at` is set when that process ended while its server was
-- up (such a worker is not restored on attach, only restarted on request).
CREATE TABLE session_workers (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    type        TEXT NOT NULL CHECK (type IN ('agent', 'terminal', 'git-diff')),
    name        TEXT NOT NULL,
    agent_id    TEXT,
    created_at  INTEGER NOT NULL,
    pid         INTEGER,
    epoch       INTEGER NOT NULL DEFAULT 0,
    started_at  INTEGER,
    exited_at   INTEGER,
    exit_code   INTEGER,
    exit_signal TEXT
);
CREATE INDEX session_workers_session ON session_workers (session_id, created_at);
