//! The names the audit trail uses for what no person did: an event's
//! `actor` and an input request's `answered_by` name either a user or one
//! of these. So that an entry written by a person can never read as one
//! the server wrote (a user called `timeout` answering a question would
//! look exactly like its expiry), no user may be called by any of them,
//! whether made by an admin or at a first single sign-on.
//!
//! Actors that stand for a credential other than a person's carry a prefix
//! with a colon (`worker:ID`, `run:ID`, `host:ID`, `rule:NAME`); user names
//! cannot hold a colon, and [`reserved`] says so too, in case the allowed
//! characters ever grow.

/// The actor of changes no request asked for (sweeps, retries, the
/// maintenance loops).
pub const SYSTEM: &str = "system";
/// Who answered an input request its `ask_timeout` ended.
pub const TIMEOUT: &str = "timeout";
/// Who answered an input request withdrawn because its run ended.
pub const RUN_ENDED: &str = "run_ended";

/// Every name the server writes as an actor or `answered_by` on its own,
/// and the words that read as one: `operator` (the operator token's old
/// name), `nobody` (what a reader shows when no one answered), `unknown`,
/// `anonymous`, `server`.
pub const RESERVED: &[&str] = &[
    SYSTEM,
    TIMEOUT,
    RUN_ENDED,
    "operator",
    "nobody",
    "unknown",
    "anonymous",
    "server",
];

/// Whether `name` may not be a user's name because the audit trail uses it
/// (or a form of it) for something other than a person.
pub fn reserved(name: &str) -> bool {
    name.contains(':') || RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_servers_own_names_and_prefixed_actors_are_reserved() {
        for name in [
            "system",
            "timeout",
            "run_ended",
            "operator",
            "Timeout",
            "worker:w1",
            "rule:x",
        ] {
            assert!(reserved(name), "{name}");
        }
        for name in ["alice", "timeouts", "ops", "run-ended"] {
            assert!(!reserved(name), "{name}");
        }
    }
}
