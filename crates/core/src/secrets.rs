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
//! being named here. The server, the runner and the shim also take these
//! out of their own environment once they have read them.
//!
//! Spawn sites go further than this list: no `SHEPHERD_*` setting at all
//! reaches a spawned process by inheritance ([`is_setting`]). Settings such
//! as `SHEPHERD_CONFIG` and `SHEPHERD_DATA_DIR` are not secrets themselves,
//! but they point an agent at the configuration file (which may hold the
//! token, the OIDC client secret, webhook secrets) and at the database.
//! What a spawned process is told about its own run (`SHEPHERD_RUN_ID`,
//! `SHEPHERD_RUN_TOKEN`, `SHEPHERD_SERVER`, …) is set explicitly by the
//! spawn site, after the inherited settings are removed, and an agent's
//! configured `env` may still set any of them on purpose.

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

/// Whether the environment variable `name` is one of Shepherd's settings
/// (`SHEPHERD_*`), which no spawned process inherits.
pub fn is_setting(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().starts_with(b"SHEPHERD_")
}

/// Of the variable names `names` (a process's environment), the ones a
/// spawn site removes from its child's before adding what it sets on
/// purpose: every Shepherd setting, and every name of [`SECRET_ENV`].
pub fn inherited_settings(
    names: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    let mut out: Vec<std::ffi::OsString> = names.into_iter().filter(|n| is_setting(n)).collect();
    for name in SECRET_ENV {
        if !out.iter().any(|n| n == name) {
            out.push(name.into());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shepherd_setting_is_removed_and_nothing_else() {
        let names = [
            "SHEPHERD_CONFIG",
            "SHEPHERD_DATA_DIR",
            "PATH",
            "HOME",
            "shepherd_x",
        ]
        .map(std::ffi::OsString::from);
        let removed = inherited_settings(names);
        for name in ["SHEPHERD_CONFIG", "SHEPHERD_DATA_DIR", "SHEPHERD_TOKEN"] {
            assert!(removed.iter().any(|n| n == name), "{name}");
        }
        for name in ["PATH", "HOME", "shepherd_x"] {
            assert!(!removed.iter().any(|n| n == name), "{name}");
        }
    }

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
