-- Single sign-on for the web UI. A user made by a login is bound to the
-- provider's identity (issuer and subject), so that nobody else can sign in
-- as them by taking their name at the provider. A login under way keeps
-- its state (by SHA-256), nonce and PKCE verifier until the provider sends
-- the browser back, once. A browser's session is kept by the SHA-256 of its
-- cookie, with its CSRF token and its lifetimes; an ended one stays ended.
-- Keep in step with postgres/0016_web_sessions.sql.
ALTER TABLE users ADD COLUMN oidc_subject TEXT;
CREATE UNIQUE INDEX users_by_oidc_subject ON users (oidc_subject)
    WHERE oidc_subject IS NOT NULL;

CREATE TABLE login_attempts (
    state_hash     TEXT PRIMARY KEY,
    nonce          TEXT NOT NULL,
    pkce_verifier  TEXT NOT NULL,
    return_to      TEXT NOT NULL,
    created_at     INTEGER NOT NULL
);
CREATE INDEX login_attempts_by_age ON login_attempts (created_at);

CREATE TABLE web_sessions (
    id_hash       TEXT PRIMARY KEY,
    user_name     TEXT NOT NULL REFERENCES users (name),
    csrf_token    TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    last_seen_at  INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    ended_at      INTEGER
);
CREATE INDEX web_sessions_by_user ON web_sessions (user_name);
