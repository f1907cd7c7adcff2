//! Shepherd's own secrets among its settings: the environment variables
//! no process Shepherd starts may inherit from it.
//!
//! Shepherd runs agents and shells on its host, and what they print ends up
//! in transcripts and scrollback; an agent that inherits the operator token
//! holds every right the operator has (finding 5 of issue 35). Every spawn
//! site removes these from the child's environment (the runner's agents
//! under their shim, session terminals and agent tabs), and only then adds
//! what the operator configured for that agent: an agent's own `env` may
//! still set any of them on purpose.
//!
//! One list, so that a secret setting added later is stripped everywhere by
//! being named here.

/// The variables removed from every process Shepherd spawns.
pub const SECRET_ENV: &[&str] = &[
    // The token a client or runner sends.
    "SHEPHERD_TOKEN",
    // Where a client reads its token from (`--token-file`).
    "SHEPHERD_TOKEN_FILE",
    // The server's operator token.
    "SHEPHERD_AUTH_TOKEN",
    // Holds the PostgreSQL password, if any.
    "SHEPHERD_DATABASE_URL",
    // The listener's certificate and private key.
    "SHEPHERD_TLS_CERT",
    "SHEPHERD_TLS_KEY",
    "SHEPHERD_OIDC_CLIENT_SECRET",
    "SHEPHERD_WEBHOOK_SECRET",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_secret_setting_is_listed() {
        for name in [
            "SHEPHERD_TOKEN",
            "SHEPHERD_AUTH_TOKEN",
            "SHEPHERD_DATABASE_URL",
            "SHEPHERD_TLS_CERT",
            "SHEPHERD_TLS_KEY",
            "SHEPHERD_OIDC_CLIENT_SECRET",
            "SHEPHERD_WEBHOOK_SECRET",
        ] {
            assert!(SECRET_ENV.contains(&name), "{name}");
        }
        // What an agent is told about its run is not a secret.
        for name in ["SHEPHERD_RUN_ID", "SHEPHERD_TASK_ID", "SHEPHERD_SESSION_ID"] {
            assert!(!SECRET_ENV.contains(&name), "{name}");
        }
    }
}
