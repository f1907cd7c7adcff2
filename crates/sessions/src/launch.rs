//! What a tab runs and where: the rules every host of sessions applies
//! before it starts a process (a server node for its own sessions, a
//! runner's host for the sessions it holds). It keeps no records.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use shepherd_core::Error;

use crate::worker::LaunchSpec;

/// How an agent is run in a session tab.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentSpec {
    /// The command a person talks to (`["claude"]`); empty: not interactive.
    pub interactive_command: Vec<String>,
    /// Appended to continue the agent's earlier conversation.
    pub continue_args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// Placeholder in `continue_args` for the agent's own conversation id.
pub const AGENT_SESSION_PLACEHOLDER: &str = "{agent_session_id}";

impl From<&shepherd_core::agent_config::AgentConfig> for AgentSpec {
    fn from(a: &shepherd_core::agent_config::AgentConfig) -> Self {
        AgentSpec {
            interactive_command: a.interactive_command.clone(),
            continue_args: a.continue_args.clone(),
            env: a.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        }
    }
}

impl AgentSpec {
    /// The arguments that continue the agent's earlier conversation in a
    /// tab. `{agent_session_id}` is filled from the id the tab knows; when it
    /// knows none, none of `continue_args` is used (the agent starts afresh):
    /// dropping only the placeholder would leave a flag such as `--resume`
    /// without its value, and passing it through would hand the agent a
    /// literal `{agent_session_id}`. The same rule as follow-up runs of a
    /// conversation. An id that could read as an option (see
    /// `shepherd_core::cmdline::check_agent_session_id`) counts as none.
    pub fn continue_args_for(&self, agent_session_id: Option<&str>) -> Vec<String> {
        let needs_id = self
            .continue_args
            .iter()
            .any(|a| a.contains(AGENT_SESSION_PLACEHOLDER));
        let safe = |id: &&str| shepherd_core::cmdline::check_agent_session_id(id).is_ok();
        match agent_session_id.filter(safe) {
            Some(id) => self
                .continue_args
                .iter()
                .map(|a| a.replace(AGENT_SESSION_PLACEHOLDER, id))
                .collect(),
            None if needs_id => Vec::new(),
            None => self.continue_args.clone(),
        }
    }
}

/// Checks a new tab's type and agent, and names it (by default after its
/// agent, or what it is).
pub fn tab_name(kind: &str, name: Option<String>, agent_id: Option<&str>) -> Result<String, Error> {
    let name = match (name, kind) {
        (Some(n), _) => n,
        (None, "agent") => agent_id.unwrap_or("agent").to_owned(),
        (None, "git-diff") => "git diff".into(),
        (None, _) => "terminal".into(),
    };
    match kind {
        "terminal" | "git-diff" if agent_id.is_some() => {
            return Err(Error::invalid(
                "invalid_agent_id",
                "agent_id is only for agent workers",
            ))
        }
        "agent" if agent_id.is_none() => {
            return Err(Error::invalid(
                "agent_not_found",
                "an agent worker needs agent_id, the name of an [agents.*] entry",
            ))
        }
        "agent" | "terminal" | "git-diff" => {}
        other => {
            return Err(Error::invalid(
                "invalid_worker_type",
                format!("type must be agent, terminal or git-diff (got {other:?})"),
            ))
        }
    }
    Ok(name)
}

/// The program a terminal tab runs when none is configured: `$SHELL`, or
/// `/bin/sh`.
pub fn default_shell() -> String {
    std::env::var("SHELL")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "/bin/sh".into())
}

/// A host's rules for starting tab processes: its shell, its agents, the
/// root its sessions must stay in, the umask children get.
#[derive(Debug, Clone, Copy)]
pub struct Launcher<'a> {
    pub shell: &'a str,
    pub agents: &'a BTreeMap<String, AgentSpec>,
    /// When set, no session may live outside this directory.
    pub sessions_root: Option<&'a Path>,
    /// The umask terminals and agent tabs get; `None`: the host's own.
    pub umask: Option<u32>,
}

impl Launcher<'_> {
    /// Checks a location: an existing directory, inside the sessions root if
    /// one is set, after every link on the way is resolved. Called when a
    /// session is created and again before every process is started in it
    /// ([`Launcher::launch_dir`]): what is checked is the directory
    /// the path leads to now.
    pub fn check_location(&self, path: &str) -> Result<PathBuf, Error> {
        let p = Path::new(path);
        if path.trim().is_empty() || !p.is_absolute() {
            return Err(Error::invalid(
                "invalid_location",
                format!("location_path must be an absolute path (got {path:?})"),
            ));
        }
        let canon = p
            .canonicalize()
            .ok()
            .filter(|c| c.is_dir())
            .ok_or_else(|| {
                Error::invalid(
                    "invalid_location",
                    format!("location_path {path:?} is not an existing directory"),
                )
            })?;
        if let Some(root) = self.sessions_root {
            let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
            if !canon.starts_with(&root) {
                return Err(Error::invalid(
                    "outside_sessions_root",
                    format!(
                        "location_path {path:?} leads to {}, outside the sessions root {}",
                        canon.display(),
                        root.display()
                    ),
                ));
            }
        }
        Ok(canon)
    }

    /// The directory a process of `s` starts in: its location checked
    /// again, as at creation. The directory (or one on its path) may have
    /// been replaced by a link since, to somewhere outside the sessions
    /// root; then nothing is started. The spawn itself starts the process in
    /// exactly the directory checked here (see `PtyProcess::spawn`).
    pub fn launch_dir(&self, location: &str) -> Result<PathBuf, Error> {
        if !Path::new(location).is_dir() {
            return Err(Error::invalid(
                "invalid_location",
                format!("the session's location {location} no longer exists"),
            ));
        }
        self.check_location(location).map_err(|e| {
            Error::invalid(
                e.code,
                format!("nothing was started: the session's {}", e.message),
            )
        })
    }

    /// What a tab of `kind` in session `session_id` at `location` runs:
    /// the shell, or an agent's `interactive_command` (with its
    /// `continue_args` when it continues an earlier process).
    pub fn spec(
        &self,
        session_id: &str,
        location: &str,
        kind: &str,
        agent_id: Option<&str>,
        continue_: bool,
    ) -> Result<LaunchSpec, Error> {
        let cwd = self.launch_dir(location)?;
        let mut env = vec![
            ("TERM".to_owned(), "xterm-256color".to_owned()),
            ("SHEPHERD_SESSION_ID".to_owned(), session_id.to_owned()),
        ];
        let (program, args) = match kind {
            "terminal" => (self.shell.to_owned(), Vec::new()),
            "agent" => {
                let id = agent_id.unwrap_or_default();
                let a = self.agents.get(id).ok_or_else(|| {
                    Error::invalid(
                        "agent_not_found",
                        format!("no agent {id:?} is configured ([agents.{id}])"),
                    )
                })?;
                if a.interactive_command.is_empty() {
                    return Err(Error::invalid(
                        "agent_not_interactive",
                        format!("agent {id:?} has no interactive_command"),
                    ));
                }
                env.extend(a.env.iter().cloned());
                let mut args = a.interactive_command[1..].to_vec();
                if continue_ {
                    // A tab stores no agent conversation id (yet), so
                    // arguments naming one are left out rather than
                    // passed with the placeholder unfilled.
                    let extra = a.continue_args_for(None);
                    if extra.len() < a.continue_args.len() {
                        tracing::info!(
                            session_id,
                            agent_id = id,
                            "continue_args name {AGENT_SESSION_PLACEHOLDER} and this tab knows none: the agent starts a new conversation"
                        );
                    }
                    args.extend(extra);
                }
                (a.interactive_command[0].clone(), args)
            }
            other => {
                return Err(Error::invalid(
                    "not_a_terminal",
                    format!("a {other:?} worker runs no process"),
                ))
            }
        };
        Ok(LaunchSpec {
            program,
            args,
            cwd,
            env,
            cols: 80,
            rows: 24,
            umask: self.umask,
        })
    }
}
