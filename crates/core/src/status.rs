//! The status vocabularies, one enum each, so that every layer (store, API,
//! runner, CLI) compares the same words and an OpenAPI or JSON Schema
//! consumer sees the closed list. Each serialises as the contract's string.

use serde::{Deserialize, Serialize};

/// Defines a string enum with `as_str`, `ALL`, `Display` and `FromStr`.
macro_rules! vocabulary {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize,
                 utoipa::ToSchema, schemars::JsonSchema)]
        // Every word is its variant in snake_case; schema generators read
        // this (utoipa ignores a variant rename made inside a macro).
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vm])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            /// Every value, in the order the seed lists them.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub const fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(format!(
                        "{s:?} is not one of {:?}",
                        [$($text),+]
                    )),
                }
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}

pub(crate) use vocabulary;

vocabulary!(
    /// A run's status (the Workers page contract's `worker_runs.status`).
    RunStatus {
        Running = "running",
        Done = "done",
        Failed = "failed",
        Cancelled = "cancelled",
    }
);

impl RunStatus {
    pub fn is_final(self) -> bool {
        self != RunStatus::Running
    }
}

vocabulary!(
    /// A worker's registry status (the connector contract).
    WorkerStatus {
        Active = "active",
        Inactive = "inactive",
        Terminated = "terminated",
    }
);

vocabulary!(
    /// Why a claim was granted: to build the task or to validate it.
    ClaimPurpose {
        Build = "build",
        Validate = "validate",
    }
);

vocabulary!(
    /// The worker registry contract's session status of a worker.
    SessionStatus {
        /// Registered, not yet heard from since (no poll, no heartbeat).
        Spawning = "spawning",
        Ready = "ready",
        Busy = "busy",
        Closed = "closed",
    }
);

vocabulary!(
    /// The kinds of worker Shepherd itself starts. The wire's `worker_type`
    /// stays an open string (an external worker names its own kind), but
    /// every layer that fills it in for Shepherd's own workers (the
    /// configured agents, the built-in runner, the registration default, PTY
    /// tabs) takes the word from here, so runs and `/api/v1/agents` agree.
    WorkerType {
        /// Started by the built-in runner (`shepherd runner`).
        Builtin = "builtin",
        /// An interactive terminal tab.
        Pty = "pty",
    }
);

vocabulary!(
    /// The worker registry contract's event state of a worker.
    EventState {
        Idle = "idle",
        Active = "active",
        Closed = "closed",
    }
);

vocabulary!(
    /// Where the worker registry contract's worker list learned of a worker.
    WorkerSource {
        /// Heard from since this server started.
        Registry = "registry",
        /// Known only from storage (recovered after a restart).
        EventLog = "event_log",
    }
);

vocabulary!(
    /// The worker registry contract's names for worker lifecycle events.
    WorkerEventType {
        WorkerStarted = "worker_started",
        WorkerActive = "worker_active",
        WorkerIdle = "worker_idle",
        WorkerClosed = "worker_closed",
        Snapshot = "snapshot",
        Unknown = "unknown",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_list_the_seed_words() {
        use utoipa::PartialSchema;
        let schema = serde_json::to_string(&WorkerSource::schema()).unwrap();
        assert!(schema.contains("\"event_log\""), "{schema}");
        let schema = serde_json::to_string(&schemars::schema_for!(RunStatus)).unwrap();
        assert!(schema.contains("\"cancelled\""), "{schema}");
    }

    #[test]
    fn serialises_as_the_seed_words() {
        for s in RunStatus::ALL {
            let json = serde_json::to_string(s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
            assert_eq!(s.as_str().parse::<RunStatus>().unwrap(), *s);
        }
        assert_eq!(WorkerSource::EventLog.as_str(), "event_log");
        assert!("exploded".parse::<RunStatus>().is_err());
    }
}

vocabulary!(
    /// What a host is: a server node, or a runner that registered itself.
    HostKind {
        Server = "server",
        Runner = "runner",
    }
);
