//! An agent as configured: the command it runs and how to read its output.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::adapters::TranscriptFormat;
use serde::Deserialize;

/// `[agents.NAME]` in `shepherd.toml`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Program and arguments. `{spec}`, `{task_id}` and `{run_id}` are
    /// replaced, in one pass (a spec holding `{run_id}` stays as written);
    /// without `{spec}` the spec is written to the process's stdin.
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
    /// (`["--resume", "{agent_session_id}"]`, `["--continue"]`). A
    /// conversation's follow-up message runs the command with these appended
    /// and the new message alone as its spec; `{agent_session_id}` is the id
    /// the agent revealed in its output on the conversation's earlier runs.
    #[serde(default)]
    pub continue_args: Vec<String>,
    /// The command a person talks to in a session tab (`["claude"]`), since
    /// `command` is usually a one-shot (`claude -p …`). Without it the agent
    /// cannot be opened in a session.
    #[serde(default)]
    pub interactive_command: Vec<String>,
    /// `steps-jsonl`, `claude-stream-json`, `codex-json` or `text` (default).
    pub transcript: Option<String>,
    /// `"worktree"`: each run works in its own git worktree of `repo`, on a
    /// new branch from `base` (see the `worktree` module).
    pub workspace: Option<String>,
    /// The git repository runs check out (with `workspace = "worktree"`).
    pub repo: Option<PathBuf>,
    /// The ref runs branch from; the repository's current branch by default.
    pub base: Option<String>,
    /// A run whose reported cost passes this many US dollars is stopped
    /// (its partial work kept) with reason `budget_exceeded`.
    pub max_cost_usd: Option<f64>,
    /// Default attempts in all for this agent's tasks (a task may set its
    /// own); failed, timed-out and lost runs are retried until then.
    pub max_attempts: Option<i64>,
    /// Default wait between attempts: `{ initial_ms = 10000, max_ms = 600000 }`.
    pub retry_backoff: Option<crate::retry::RetryBackoff>,
    /// Exit codes that count as a failure worth retrying; unset: every
    /// non-zero code. Any other code fails the task at once.
    pub retry_on_exit_codes: Option<Vec<i32>>,
    /// `"ask"`: the agent's permission prompts become input requests that a
    /// person answers from any device (Claude Code agents get the flags this
    /// needs added to their command). Unset: the agent runs with whatever
    /// its command line grants.
    pub permissions: Option<String>,
    /// Rules in Claude Code's syntax (`"Read"`, `"Bash(git status:*)"`)
    /// whose calls are allowed at once, without asking; recorded all the same.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Rules whose calls are denied at once (they win over `allow`).
    #[serde(default)]
    pub deny: Vec<String>,
    /// How long a request waits for a person (`"10m"`, `90` seconds);
    /// unset: as long as the run lives.
    pub ask_timeout: Option<DurationSetting>,
    /// The answer a request gets when `ask_timeout` passes: `"deny"` (default) or `"allow"`.
    pub on_timeout: Option<crate::input::Decision>,
    /// With `max_cost_usd`: `"ask"` turns reaching the budget into a
    /// question ("continue with another $Y?"): continue raises the run's
    /// budget by `max_cost_usd` again, stop (or no answer) stops the run as
    /// `"stop"` (the default) does at once.
    pub on_budget: Option<String>,
    /// A running run with no new step for this long is reported once per
    /// quiet spell as stuck (`run.stuck`), so that someone can be told.
    pub stuck_after: Option<DurationSetting>,
}

/// A duration in the configuration: whole seconds, or a number with a unit
/// (`"90s"`, `"10m"`, `"2h"`, `"1d"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationSetting(pub std::time::Duration);

impl<'de> Deserialize<'de> for DurationSetting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Secs(s) => Ok(DurationSetting(std::time::Duration::from_secs(s))),
            Raw::Text(t) => parse_duration(&t)
                .map(DurationSetting)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// `"90s"`, `"10m"`, `"2h"`, `"1d"` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 90s, 10m, 2h or 1d"))?;
    let secs = match unit.trim() {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => {
            return Err(format!(
                "{text:?} is not a duration like 90s, 10m, 2h or 1d"
            ))
        }
    };
    n.checked_mul(secs)
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is too long"))
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
        if let Some(m) = self.max_cost_usd {
            if !(m.is_finite() && m > 0.0) {
                return Err(bad(
                    "max_cost_usd",
                    "must be a positive number of US dollars",
                ));
            }
        }
        if let Some(n) = self.max_attempts {
            crate::retry::validate_max_attempts(n).map_err(|m| bad("max_attempts", &m))?;
        }
        if let Some(b) = &self.retry_backoff {
            b.validate().map_err(|m| bad("retry_backoff", &m))?;
        }
        if let Some(codes) = &self.retry_on_exit_codes {
            if codes.contains(&0) {
                return Err(bad("retry_on_exit_codes", "0 is success, not a failure"));
            }
        }
        match self.workspace.as_deref() {
            Some("worktree") => {
                if self.repo.is_none() {
                    return Err(bad(
                        "repo",
                        "required with workspace = \"worktree\": the git repository runs check out",
                    ));
                }
                if self.cwd.is_some() {
                    return Err(bad(
                        "cwd",
                        "not with workspace = \"worktree\": each run works in its own worktree",
                    ));
                }
            }
            Some(_) => return Err(bad("workspace", "the only workspace is \"worktree\"")),
            None => {
                if self.repo.is_some() || self.base.is_some() {
                    return Err(bad(
                        "workspace",
                        "repo and base need workspace = \"worktree\"",
                    ));
                }
            }
        }
        match self.permissions.as_deref() {
            None | Some("ask") => {}
            Some(_) => {
                return Err(bad(
                    "permissions",
                    "the only setting is \"ask\" (route permission prompts to Shepherd)",
                ))
            }
        }
        crate::input::PermissionPolicy::new(&self.allow, &self.deny)
            .map_err(|m| bad("allow/deny", &m))?;
        if self.ask_timeout.is_some_and(|d| d.0.is_zero()) {
            return Err(bad("ask_timeout", "must be at least 1 second"));
        }
        if self.stuck_after.is_some_and(|d| d.0.is_zero()) {
            return Err(bad("stuck_after", "must be at least 1 second"));
        }
        match self.on_budget.as_deref() {
            None | Some("stop") => {}
            Some("ask") if self.max_cost_usd.is_some() => {}
            Some("ask") => return Err(bad("on_budget", "\"ask\" needs max_cost_usd")),
            Some(_) => return Err(bad("on_budget", "one of \"stop\" and \"ask\"")),
        }
        if let Some(cwd) = &self.cwd {
            if !cwd.is_dir() {
                return Err(bad("cwd", &format!("{} is not a directory", cwd.display())));
            }
        }
        Ok(())
    }

    /// The policy the server answers this agent's input requests with.
    pub fn permission_policy(&self) -> crate::input::PermissionPolicy {
        let mut p = crate::input::PermissionPolicy::new(&self.allow, &self.deny)
            // validate() refused bad rules before any caller gets here.
            .unwrap_or_default();
        p.ask_timeout_ms = self.ask_timeout.map(|d| d.0.as_millis() as i64);
        p.on_timeout = self.on_timeout;
        p
    }

    /// Whether permission prompts go to Shepherd.
    pub fn asks_permissions(&self) -> bool {
        self.permissions.as_deref() == Some("ask")
    }

    /// Whether reaching `max_cost_usd` asks instead of stopping.
    pub fn asks_at_budget(&self) -> bool {
        self.on_budget.as_deref() == Some("ask")
    }

    /// Whether a run that exited with `code` (non-zero) may be retried.
    pub fn retries_exit_code(&self, code: i32) -> bool {
        self.retry_on_exit_codes
            .as_ref()
            .is_none_or(|codes| codes.contains(&code))
    }

    /// The repository (and base) of a worktree agent.
    pub fn worktree_repo(&self) -> Option<(&std::path::Path, Option<&str>)> {
        match self.workspace.as_deref() {
            Some("worktree") => self.repo.as_deref().map(|r| (r, self.base.as_deref())),
            _ => None,
        }
    }

    pub fn format(&self) -> TranscriptFormat {
        self.transcript
            .as_deref()
            .and_then(|t| t.parse().ok())
            .unwrap_or(TranscriptFormat::Text)
    }

    /// The configured kind, or `builtin`: the word `open_store` records for
    /// the same agent, so its runs and `/api/v1/agents` say the same.
    pub fn worker_type(&self) -> &str {
        self.worker_type
            .as_deref()
            .unwrap_or(crate::status::WorkerType::Builtin.as_str())
    }

    pub fn slots(&self) -> i64 {
        self.max_concurrent.unwrap_or(1)
    }

    /// The command line with placeholders filled in; whether the spec still
    /// has to go to stdin.
    pub fn argv(&self, spec: &str, task_id: &str, run_id: &str) -> (Vec<String>, bool) {
        let values = [
            ("{spec}", spec),
            ("{task_id}", task_id),
            ("{run_id}", run_id),
        ];
        let spec_used = self.command.iter().any(|a| a.contains("{spec}"));
        let argv = self.command.iter().map(|a| fill(a, &values)).collect();
        (argv, !spec_used)
    }
}

/// Fills the `{name}` placeholders of one argument in a single pass over
/// the template: a value is copied as it is and never scanned again, so a
/// spec that holds `{run_id}` or `{task_id}` reaches the agent as written.
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    'scan: while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let at = &rest[i..];
        for (placeholder, value) in values {
            if let Some(after) = at.strip_prefix(placeholder) {
                out.push_str(value);
                rest = after;
                continue 'scan;
            }
        }
        out.push('{');
        rest = &at[1..];
    }
    out.push_str(rest);
    out
}

/// Placeholder in `continue_args` for the agent's own conversation id.
pub const AGENT_SESSION_PLACEHOLDER: &str = "{agent_session_id}";

impl AgentConfig {
    /// The command line of a follow-up run that continues the agent's own
    /// conversation, or `None` when the agent cannot: it declares no
    /// `continue_args`, or they name `{agent_session_id}` and none is known
    /// yet. Then the caller runs [`AgentConfig::argv`] with the whole
    /// history in the spec.
    pub fn continue_argv(
        &self,
        message: &str,
        task_id: &str,
        run_id: &str,
        agent_session_id: Option<&str>,
    ) -> Option<(Vec<String>, bool)> {
        if self.continue_args.is_empty() {
            return None;
        }
        let needs_id = self
            .continue_args
            .iter()
            .any(|a| a.contains(AGENT_SESSION_PLACEHOLDER));
        // The id came from a worker's report: the server refuses one that
        // could read as an option, and it is checked again here, since a
        // stored one may predate that check. One that fails is as good as
        // none (the spec then carries the history); the runner logs it.
        let id = agent_session_id
            .filter(|s| !s.is_empty())
            .filter(|s| crate::cmdline::check_agent_session_id(s).is_ok());
        if needs_id && id.is_none() {
            return None;
        }
        let (mut argv, stdin) = self.argv(message, task_id, run_id);
        let values = [
            (AGENT_SESSION_PLACEHOLDER, id.unwrap_or_default()),
            ("{task_id}", task_id),
            ("{run_id}", run_id),
        ];
        argv.extend(self.continue_args.iter().map(|a| fill(a, &values)));
        Some((argv, stdin))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_settings_are_checked_and_exit_codes_filter_retries() {
        let mut a = AgentConfig {
            command: vec!["sh".into()],
            ..Default::default()
        };
        assert!(a.retries_exit_code(1) && a.retries_exit_code(137));
        a.retry_on_exit_codes = Some(vec![75]);
        assert!(a.retries_exit_code(75) && !a.retries_exit_code(1));
        assert!(a.validate("x").is_ok());
        a.retry_on_exit_codes = Some(vec![0]);
        assert!(a.validate("x").unwrap_err().contains("retry_on_exit_codes"));
        a.retry_on_exit_codes = None;
        a.max_attempts = Some(0);
        assert!(a.validate("x").unwrap_err().contains("max_attempts"));
        a.max_attempts = Some(3);
        let parsed: AgentConfig = serde_json::from_str(
            r#"{"command": ["sh"], "max_attempts": 3, "retry_backoff": {"initial_ms": 100, "max_ms": 1000}}"#,
        )
        .unwrap();
        assert_eq!(parsed.retry_backoff.map(|b| b.initial_ms), Some(100));
    }

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
    fn continue_args_need_a_known_agent_session() {
        let a = AgentConfig {
            command: vec!["claude".into(), "-p".into(), "{spec}".into()],
            continue_args: vec!["--resume".into(), "{agent_session_id}".into()],
            ..Default::default()
        };
        assert_eq!(a.continue_argv("next", "T-1", "r1", None), None);
        let (argv, stdin) = a.continue_argv("next", "T-1", "r1", Some("s-9")).unwrap();
        assert_eq!(argv, vec!["claude", "-p", "next", "--resume", "s-9"]);
        assert!(!stdin);
        let plain = AgentConfig {
            command: vec!["agent".into()],
            continue_args: vec!["--continue".into()],
            ..Default::default()
        };
        let (argv, _) = plain.continue_argv("next", "T-1", "r1", None).unwrap();
        assert_eq!(argv, vec!["agent", "--continue"]);
        assert_eq!(
            AgentConfig::default().continue_argv("x", "t", "r", Some("s")),
            None
        );
    }

    #[test]
    fn placeholders_in_the_spec_are_not_filled() {
        let a = AgentConfig {
            command: vec![
                "agent".into(),
                "--task={task_id}".into(),
                "{spec}".into(),
                "run={run_id} {run_id}".into(),
            ],
            continue_args: vec!["--resume".into(), "{agent_session_id}".into()],
            ..Default::default()
        };
        let spec = "{run_id} {task_id} {spec} {agent_session_id} {";
        let (argv, _) = a.argv(spec, "T-{run_id}", "r1");
        assert_eq!(argv, vec!["agent", "--task=T-{run_id}", spec, "run=r1 r1"]);
        let (argv, _) = a.argv("{run_id}", "T-1", "r1");
        assert_eq!(argv[2], "{run_id}");
        let (argv, _) = a.continue_argv(spec, "T-1", "r1", Some("s-9")).unwrap();
        assert_eq!(
            argv,
            vec!["agent", "--task=T-1", spec, "run=r1 r1", "--resume", "s-9"]
        );
    }

    #[test]
    fn fill_copies_values_without_scanning_them() {
        assert_eq!(fill("{a}{b}{", &[("{a}", "{b}"), ("{b}", "x")]), "{b}x{");
        assert_eq!(fill("{{a}}", &[("{a}", "1")]), "{1}");
        assert_eq!(fill("", &[("{a}", "1")]), "");
        assert_eq!(fill("ü{a}ü", &[("{a}", "é")]), "üéü");
    }

    #[test]
    fn a_reported_agent_session_id_never_becomes_an_option() {
        let a = AgentConfig {
            command: vec!["claude".into(), "-p".into(), "{spec}".into()],
            continue_args: vec!["--resume".into(), "{agent_session_id}".into()],
            ..Default::default()
        };
        for bad in ["--evil=/x", "-x", "a b", "x\n--evil", "{run_id}", "a=b"] {
            assert_eq!(
                a.continue_argv("next", "T-1", "r1", Some(bad)),
                None,
                "{bad:?}: the history goes in the spec instead"
            );
        }
        let inline = AgentConfig {
            continue_args: vec!["--resume={agent_session_id}".into()],
            ..a.clone()
        };
        assert_eq!(
            inline.continue_argv("next", "T-1", "r1", Some("--evil")),
            None
        );
        let (argv, _) = inline
            .continue_argv("next", "T-1", "r1", Some("abc_1-2"))
            .unwrap();
        assert_eq!(argv, vec!["claude", "-p", "next", "--resume=abc_1-2"]);
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
        let w = AgentConfig {
            command: vec!["x".into()],
            workspace: Some("worktree".into()),
            ..Default::default()
        };
        assert!(w
            .validate("coder")
            .unwrap_err()
            .starts_with("agents.coder.repo"));
        let w = AgentConfig {
            command: vec!["x".into()],
            workspace: Some("copy".into()),
            repo: Some("/tmp".into()),
            ..Default::default()
        };
        assert!(w
            .validate("coder")
            .unwrap_err()
            .starts_with("agents.coder.workspace"));
        let w = AgentConfig {
            command: vec!["x".into()],
            repo: Some("/tmp".into()),
            ..Default::default()
        };
        assert!(w
            .validate("coder")
            .unwrap_err()
            .starts_with("agents.coder.workspace"));
    }
}
