-- People and their personal access tokens. A user has one role; the
-- bootstrap operator token (SHEPHERD_TOKEN) acts as the built-in user
-- 'admin', which needs no row. A token is kept as its SHA-256 only, and is
-- refused once revoked, past its expiry, or when its user is disabled.
-- Keep in step with postgres/0014_users.sql.
CREATE TABLE users (
    name         TEXT PRIMARY KEY,
    role         TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
    email        TEXT,
    disabled     INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);

CREATE TABLE access_tokens (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    user_name     TEXT NOT NULL REFERENCES users (name),
    token_hash    TEXT NOT NULL UNIQUE,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER,
    -- Written at most once a minute per token: a busy client does not turn
    -- every read into a write.
    last_used_at  INTEGER,
    revoked_at    INTEGER
);
CREATE INDEX access_tokens_by_user ON access_tokens (user_name, created_at);

-- The built-in admin, whom the bootstrap token acts as.
INSERT INTO users (name, role, created_at, updated_at)
VALUES ('admin', 'admin', CAST(strftime('%s', 'now') AS INTEGER) * 1000, CAST(strftime('%s', 'now') AS INTEGER) * 1000);
