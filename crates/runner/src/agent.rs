//! An agent as configured: the command it runs and how to read its output.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use shepherd_core::adapters::TranscriptFormat;

/// `[agents.NAME]` in `shepherd.toml`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Program and arguments. `{spec}`, `{task_id}` and `{run_id}` are
    /// replaced; without `{spec}` the spec is written to the process's stdin.
    #[serde(default)]
    pub command: Vec<String>,
    pub cwd: Option<PathBuf>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub capabilities: Vec<String>,
    pub max_concurrent: Option<i64>,
    pub timeout_secs: Option<u64>,
    pub cancel_grace_secs: Option<u64>,
    pub worker_type: Option<String>,
    /// Arguments that make the agent continue its own earlier conversation
    /// (`["--continue"]`, `["resume", "{session_id}"]`); used by sessions.
    #[serde(default)]
    pub continue_args: Vec<String>,
    /// The command a person talks to in a session tab (`["claude"]`), since
    /// `command` is usually a one-shot (`claude -p …`). Without it the agent
    /// cannot be opened in a session.
    #[serde(default)]
    pub interactive_command: Vec<String>,
    /// `steps-jsonl`, `claude-stream-json`, `codex-json` or `text` (default).
    pub transcript: Option<String>,
}

impl AgentConfig {
    /// Checks the configuration; errors name the agent and the key.
    pub fn validate(&self, name: &str) -> Result<(), String> {
        let bad = |key: &str, msg: &str| format!("agents.{name}.{key}: {msg}");
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(format!(
                "agents.{name}: agent names are letters, digits and - _ ."
            ));
        }
        if self.command.is_empty() || self.command[0].trim().is_empty() {
            return Err(bad(
                "command",
                "required: the program and its arguments, e.g. [\"bash\", \"agent.sh\"]",
            ));
        }
        if let Some(m) = self.max_concurrent {
            if !(1..=1000).contains(&m) {
                return Err(bad("max_concurrent", "must be between 1 and 1000"));
            }
        }
        if let Some(t) = &self.transcript {
            if t.parse::<TranscriptFormat>().is_err() {
                return Err(bad(
                    "transcript",
                    "one of steps-jsonl, claude-stream-json, codex-json, text",
                ));
            }
        }
        if self.timeout_secs == Some(0) {
            return Err(bad("timeout_secs", "must be at least 1"));
        }
        if let Some(cwd) = &self.cwd {
            if !cwd.is_dir() {
                return Err(bad("cwd", &format!("{} is not a directory", cwd.display())));
            }
        }
        Ok(())
    }

    pub fn format(&self) -> TranscriptFormat {
        self.transcript
            .as_deref()
            .and_then(|t| t.parse().ok())
            .unwrap_or(TranscriptFormat::Text)
    }

    pub fn worker_type(&self) -> &str {
        self.worker_type.as_deref().unwrap_or("process")
    }

    pub fn slots(&self) -> i64 {
        self.max_concurrent.unwrap_or(1)
    }

    /// The command line with placeholders filled in; whether the spec still
    /// has to go to stdin.
    pub fn argv(&self, spec: &str, task_id: &str, run_id: &str) -> (Vec<String>, bool) {
        let mut spec_used = false;
        let argv = self
            .command
            .iter()
            .map(|a| {
                if a.contains("{spec}") {
                    spec_used = true;
                }
                a.replace("{spec}", spec)
                    .replace("{task_id}", task_id)
                    .replace("{run_id}", run_id)
            })
            .collect();
        (argv, !spec_used)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_and_stdin() {
        let a = AgentConfig {
            command: vec!["agent".into(), "--task={task_id}".into()],
            ..Default::default()
        };
        let (argv, stdin) = a.argv("do it", "T-1", "r1");
        assert_eq!(argv, vec!["agent", "--task=T-1"]);
        assert!(stdin);
        let b = AgentConfig {
            command: vec!["claude".into(), "-p".into(), "{spec}".into()],
            ..Default::default()
        };
        let (argv, stdin) = b.argv("do it", "T-1", "r1");
        assert_eq!(argv[2], "do it");
        assert!(!stdin);
    }

    #[test]
    fn errors_name_agent_and_key() {
        let e = AgentConfig::default().validate("coder").unwrap_err();
        assert!(e.starts_with("agents.coder.command"), "{e}");
        let a = AgentConfig {
            command: vec!["x".into()],
            transcript: Some("xml".into()),
            ..Default::default()
        };
        assert!(a
            .validate("coder")
            .unwrap_err()
            .starts_with("agents.coder.transcript"));
    }
}
