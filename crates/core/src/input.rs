//! Input requests: what an agent asks a person (a permission for a tool
//! call, or a question), the answers it can get, and the per-agent policy
//! that answers some requests at once (Claude Code's own rule syntax) or
//! ends them after a timeout. Pure: the store keeps the requests, the API
//! serves them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::time::Millis;

crate::status::vocabulary!(
    /// What an input request asks for.
    InputKind {
        /// A tool call the agent wants to make (tool name and exact input).
        Permission = "permission",
        /// A prompt for a person, optionally with options to choose from.
        Question = "question",
    }
);

crate::status::vocabulary!(
    /// Where an input request is in its life.
    InputState {
        /// Waiting for a person (or its timeout).
        Pending = "pending",
        /// A person, a rule or the budget answered it; `answer` says how.
        Answered = "answered",
        /// Its `ask_timeout` passed first; `answer` is the agent's `on_timeout`.
        Expired = "expired",
        /// Its run ended (cancelled, failed, done) before anyone answered.
        Withdrawn = "withdrawn",
    }
);

impl InputState {
    pub fn is_final(self) -> bool {
        self != InputState::Pending
    }
}

crate::status::vocabulary!(
    /// The answer to a permission request.
    Decision {
        Allow = "allow",
        Deny = "deny",
    }
);

/// An answer: `decision` (and an optional `message` for the agent) for a
/// permission, `text` or `option` for a question.
#[derive(
    Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct InputAnswer {
    /// `allow` or `deny` (permissions; also a question's "continue?" budget answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// Told to the agent with the decision (why it was denied, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A free-text answer to a question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// One of the question's `options`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub option: Option<String>,
}

/// An input request as stored and served (`/api/v1/input-requests`).
#[derive(
    Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema,
)]
pub struct InputRequest {
    pub id: String,
    pub kind: InputKind,
    pub run_id: String,
    pub task_id: String,
    pub vtid: String,
    pub agent_id: String,
    pub conversation_id: Option<String>,
    /// The tool the agent wants to call (permissions).
    pub tool_name: Option<String>,
    /// The tool call's exact input, as the agent gave it (permissions).
    #[schema(value_type = Option<Object>)]
    pub tool_input: Option<Value>,
    /// What the agent asks (questions; a permission's optional explanation).
    pub prompt: Option<String>,
    /// The answers a question offers (empty: free text).
    pub options: Vec<String>,
    pub state: InputState,
    /// Set once `state` is not `pending` (`withdrawn` has none).
    pub answer: Option<InputAnswer>,
    /// Who answered: `operator`, `worker:<id>`, `run:<id>`, `rule:<rule>`,
    /// `timeout` or `budget`.
    pub answered_by: Option<String>,
    #[serde(with = "crate::time::serde_ms")]
    #[schema(value_type = String, format = DateTime)]
    #[schemars(with = "String")]
    pub created_at: Millis,
    #[serde(with = "crate::time::serde_ms::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    #[schemars(with = "Option<String>")]
    pub answered_at: Option<Millis>,
    /// When the agent's `ask_timeout` ends it, if it has one.
    #[serde(with = "crate::time::serde_ms::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    #[schemars(with = "Option<String>")]
    pub expires_at: Option<Millis>,
}

/// Longest text an answer, prompt or option may have (bytes).
pub const MAX_TEXT: usize = 16 * 1024;
/// Most options a question may offer.
pub const MAX_OPTIONS: usize = 32;

impl InputAnswer {
    /// Checks the answer against what was asked; the error is a message for
    /// a 422 `invalid_answer`.
    pub fn validate(&self, kind: InputKind, options: &[String]) -> Result<(), String> {
        let long = |s: &Option<String>| s.as_ref().is_some_and(|s| s.len() > MAX_TEXT);
        if long(&self.message) || long(&self.text) || long(&self.option) {
            return Err(format!("answers are at most {MAX_TEXT} bytes"));
        }
        match kind {
            InputKind::Permission => {
                if self.decision.is_none() || self.text.is_some() || self.option.is_some() {
                    return Err(
                        "a permission is answered with {\"decision\": \"allow\"|\"deny\", \"message\"?}"
                            .into(),
                    );
                }
            }
            InputKind::Question => {
                if self.decision.is_some() || self.message.is_some() {
                    return Err(
                        "a question is answered with {\"text\": …} or {\"option\": …}".into(),
                    );
                }
                match (&self.text, &self.option) {
                    (Some(_), None) => {}
                    (None, Some(o)) if options.contains(o) => {}
                    (None, Some(o)) => {
                        return Err(format!("{o:?} is not one of the options {options:?}"))
                    }
                    _ => {
                        return Err(
                            "a question is answered with exactly one of text and option".into()
                        )
                    }
                }
            }
        }
        Ok(())
    }

    /// What `shepherd ask` prints: the decision, the option or the text.
    pub fn printed(&self) -> &str {
        match (&self.decision, &self.option, &self.text) {
            (Some(d), _, _) => d.as_str(),
            (None, Some(o), _) => o,
            (None, None, Some(t)) => t,
            (None, None, None) => "",
        }
    }

    /// Whether the asker should go on: allow, or any answer to a question.
    pub fn goes_on(&self) -> bool {
        self.decision != Some(Decision::Deny)
    }

    pub fn decided(decision: Decision, message: Option<String>) -> Self {
        InputAnswer {
            decision: Some(decision),
            message,
            ..Default::default()
        }
    }
}

/// One rule in Claude Code's permission syntax: a tool name (`Read`,
/// `mcp__github`), or a tool with a specifier (`Bash(git status:*)`,
/// `Edit(src/**)`, `WebFetch(domain:example.com)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub tool: String,
    pub specifier: Option<String>,
}

impl Rule {
    pub fn parse(text: &str) -> Result<Rule, String> {
        let text = text.trim();
        let (tool, specifier) = match text.find('(') {
            Some(open) => {
                let Some(inner) = text[open + 1..].strip_suffix(')') else {
                    return Err(format!("{text:?}: a specifier ends with `)`"));
                };
                (&text[..open], Some(inner.to_owned()))
            }
            None => (text, None),
        };
        if tool.is_empty()
            || !tool
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!(
                "{text:?}: a rule is a tool name, optionally with a specifier: `Bash(git status:*)`"
            ));
        }
        Ok(Rule {
            tool: tool.to_owned(),
            specifier: specifier.filter(|s| !s.is_empty() && s != "*"),
        })
    }

    /// Whether this rule covers a call of `tool` with `input`.
    pub fn matches(&self, tool: &str, input: &Value) -> bool {
        let name_matches = self.tool == tool
            // `mcp__server` covers every tool of that server.
            || (self.tool.starts_with("mcp__")
                && self.tool.matches("__").count() == 1
                && tool.strip_prefix(self.tool.as_str()).is_some_and(|r| r.starts_with("__")));
        if !name_matches {
            return false;
        }
        let Some(spec) = &self.specifier else {
            return true;
        };
        let field = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| input.get(*n).and_then(Value::as_str))
                .map(str::to_owned)
        };
        match tool {
            "Bash" => field(&["command"]).is_some_and(|cmd| command_matches(spec, &cmd)),
            "WebFetch" => {
                let Some(domain) = spec.strip_prefix("domain:") else {
                    return false;
                };
                field(&["url"]).is_some_and(|u| url_host(&u).is_some_and(|h| h == domain))
            }
            _ => field(&["file_path", "notebook_path", "path", "pattern"])
                .is_some_and(|p| glob_matches(spec.trim_start_matches("./"), &p)),
        }
    }
}

/// `git status:*` covers commands that start with `git status`; anything
/// else is the whole command (with `*` as a wildcard).
fn command_matches(spec: &str, command: &str) -> bool {
    let command = command.trim();
    match spec.strip_suffix(":*") {
        Some(prefix) => {
            command == prefix
                || command
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with(char::is_whitespace))
        }
        None => glob_matches(spec, command),
    }
}

fn url_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    Some(host.split(':').next().unwrap_or(host))
}

/// A path pattern: `*` matches within one path segment, `**` across them;
/// a pattern without `/` at its start also matches at any depth's end
/// (`*.rs` covers `src/main.rs`), as gitignore patterns do.
fn glob_matches(pattern: &str, path: &str) -> bool {
    fn rec(p: &[u8], s: &[u8]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some((b'*', rest)) if rest.first() == Some(&b'*') => {
                let rest = rest[1..].strip_prefix(b"/").unwrap_or(&rest[1..]);
                (0..=s.len()).any(|i| rec(rest, &s[i..]))
            }
            Some((b'*', rest)) => (0..=s.len())
                .take_while(|&i| i == 0 || s[i - 1] != b'/')
                .any(|i| rec(rest, &s[i..])),
            Some((c, rest)) => s.first() == Some(c) && rec(rest, &s[1..]),
        }
    }
    let (p, s) = (pattern.as_bytes(), path.as_bytes());
    if rec(p, s) {
        return true;
    }
    !pattern.starts_with('/')
        && !pattern.contains('/')
        && path
            .rsplit_once('/')
            .is_some_and(|(_, name)| rec(p, name.as_bytes()))
}

/// An agent's permission settings (`permissions`, `allow`, `deny`,
/// `ask_timeout_secs`, `on_timeout` in its `[agents.NAME]` table).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PermissionPolicy {
    pub allow: Vec<(String, Rule)>,
    pub deny: Vec<(String, Rule)>,
    /// A request still pending after this long ends `expired`.
    pub ask_timeout_ms: Option<Millis>,
    /// The answer an expired request gets (deny by default).
    pub on_timeout: Option<Decision>,
}

impl PermissionPolicy {
    pub fn new(allow: &[String], deny: &[String]) -> Result<Self, String> {
        let parse = |rules: &[String]| {
            rules
                .iter()
                .map(|r| Rule::parse(r).map(|rule| (r.trim().to_owned(), rule)))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(PermissionPolicy {
            allow: parse(allow)?,
            deny: parse(deny)?,
            ..Default::default()
        })
    }

    /// The rule that answers a call at once, and how: deny rules first (a
    /// call both allowed and denied is denied, as Claude Code does).
    pub fn decide(&self, tool: &str, input: &Value) -> Option<(Decision, &str)> {
        fn find<'a>(rules: &'a [(String, Rule)], tool: &str, input: &Value) -> Option<&'a str> {
            rules
                .iter()
                .find(|(_, r)| r.matches(tool, input))
                .map(|(t, _)| t.as_str())
        }
        if let Some(rule) = find(&self.deny, tool, input) {
            return Some((Decision::Deny, rule));
        }
        find(&self.allow, tool, input).map(|rule| (Decision::Allow, rule))
    }

    pub fn timeout_answer(&self) -> Decision {
        self.on_timeout.unwrap_or(Decision::Deny)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(t: &str) -> Rule {
        Rule::parse(t).unwrap()
    }

    #[test]
    fn rules_in_claude_codes_syntax() {
        assert!(rule("Read").matches("Read", &json!({"file_path": "/x"})));
        assert!(!rule("Read").matches("Write", &json!({})));
        let git = rule("Bash(git status:*)");
        assert!(git.matches("Bash", &json!({"command": "git status"})));
        assert!(git.matches("Bash", &json!({"command": "git status --short"})));
        assert!(!git.matches("Bash", &json!({"command": "git statusx"})));
        assert!(!git.matches("Bash", &json!({"command": "rm -rf / ; git status"})));
        assert!(rule("Bash(npm test)").matches("Bash", &json!({"command": "npm test"})));
        assert!(!rule("Bash(npm test)").matches("Bash", &json!({"command": "npm test; rm x"})));
        assert!(rule("Bash(*)").matches("Bash", &json!({"command": "anything"})));
        assert!(rule("Edit(src/**)").matches("Edit", &json!({"file_path": "src/a/b.rs"})));
        assert!(!rule("Edit(src/**)").matches("Edit", &json!({"file_path": "tests/a.rs"})));
        assert!(rule("Edit(*.md)").matches("Edit", &json!({"file_path": "/repo/docs/a.md"})));
        assert!(!rule("Edit(src/*.rs)").matches("Edit", &json!({"file_path": "src/a/b.rs"})));
        let web = rule("WebFetch(domain:docs.rs)");
        assert!(web.matches("WebFetch", &json!({"url": "https://docs.rs/axum"})));
        assert!(!web.matches("WebFetch", &json!({"url": "https://docs.rs.evil.com/"})));
        assert!(!web.matches("WebFetch", &json!({"url": "https://docs.rs@evil.com/"})));
        assert!(rule("mcp__github").matches("mcp__github__create_issue", &json!({})));
        assert!(!rule("mcp__github").matches("mcp__githubx__a", &json!({})));
        assert!(rule("mcp__github__get").matches("mcp__github__get", &json!({})));
        assert!(!rule("mcp__github__get").matches("mcp__github__get_x", &json!({})));
        for bad in ["", "Bash(", "Ba sh", "(x)", "Bash(x"] {
            assert!(Rule::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn deny_rules_win() {
        let p =
            PermissionPolicy::new(&["Bash".into(), "Read".into()], &["Bash(rm:*)".into()]).unwrap();
        let rm = json!({"command": "rm -rf x"});
        assert_eq!(p.decide("Bash", &rm), Some((Decision::Deny, "Bash(rm:*)")));
        let ls = json!({"command": "ls"});
        assert_eq!(p.decide("Bash", &ls), Some((Decision::Allow, "Bash")));
        assert_eq!(p.decide("Write", &ls), None);
        assert_eq!(p.timeout_answer(), Decision::Deny);
    }

    #[test]
    fn answers_must_fit_the_request() {
        let allow = InputAnswer::decided(Decision::Allow, None);
        assert!(allow.validate(InputKind::Permission, &[]).is_ok());
        assert!(allow.validate(InputKind::Question, &[]).is_err());
        let text = InputAnswer {
            text: Some("yes".into()),
            ..Default::default()
        };
        assert!(text.validate(InputKind::Question, &[]).is_ok());
        assert!(text.validate(InputKind::Permission, &[]).is_err());
        let opt = InputAnswer {
            option: Some("b".into()),
            ..Default::default()
        };
        assert!(opt
            .validate(InputKind::Question, &["a".into(), "b".into()])
            .is_ok());
        assert!(opt.validate(InputKind::Question, &["a".into()]).is_err());
        assert!(InputAnswer::default()
            .validate(InputKind::Question, &[])
            .is_err());
        assert_eq!(opt.printed(), "b");
        assert!(!InputAnswer::decided(Decision::Deny, None).goes_on());
    }
}
