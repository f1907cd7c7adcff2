//! Shapes a value reported by a worker must have before Shepherd lets it
//! reach a command line: a git object id, a branch name, an agent's own
//! session id. A worker token is not the operator: what it reports is data,
//! and data that git or an agent would read as an option (`--output=/x`,
//! `--evil`) or as a revision expression (`@{-1}`, `main..other`) is refused
//! where it is reported and checked again where it is used.

/// The longest agent session id accepted. Claude Code's and Codex's are
/// UUIDs (36 characters); the bound only keeps a worker from storing a
/// megabyte on a conversation.
pub const AGENT_SESSION_ID_MAX: usize = 256;

/// A full git object id: 40 hex digits (SHA-1) or 64 (SHA-256). Never an
/// abbreviation, a ref name or a revision expression, so it can only name
/// one object and never reads as an option.
pub fn is_object_id(s: &str) -> bool {
    matches!(s.len(), 40 | 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Checks a branch name as `git check-ref-format --branch` does (without
/// asking git), and refuses what that command would let through but a
/// command line must not see. The reason, when refused.
///
/// Git's rules for `refs/heads/<name>`: no component starts with `.` or
/// ends with `.lock`; no `..`; no control character, space, `~`, `^`, `:`,
/// `?`, `*`, `[` or `\`; no leading, trailing or doubled `/`; no trailing
/// `.`; no `@{`; not `@` alone; and, for a branch, no leading `-`. The
/// `@{-N}` shorthand `--branch` expands is refused, like any `@{`.
pub fn check_branch_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("a branch name is not empty");
    }
    if name.len() > 1024 {
        return Err("a branch name is at most 1024 bytes");
    }
    if name.starts_with('-') {
        return Err("a branch name does not start with '-'");
    }
    if name == "@" {
        return Err("a branch name is not '@' alone");
    }
    if name.contains("@{") {
        return Err("a branch name does not contain '@{'");
    }
    if name.contains("..") {
        return Err("a branch name does not contain '..'");
    }
    if name.starts_with('/') || name.ends_with('/') || name.contains("//") {
        return Err("a branch name has no leading, trailing or doubled '/'");
    }
    if name.ends_with('.') {
        return Err("a branch name does not end with '.'");
    }
    if name
        .chars()
        .any(|c| c.is_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\'))
    {
        return Err("a branch name has no control character, space or any of ~ ^ : ? * [ \\");
    }
    for component in name.split('/') {
        if component.starts_with('.') {
            return Err("no part of a branch name starts with '.'");
        }
        if component.ends_with(".lock") {
            return Err("no part of a branch name ends with '.lock'");
        }
    }
    Ok(())
}

/// Checks an agent's own session id (what `--resume` takes): ASCII letters,
/// digits, `-` and `_`, not starting with `-`, at most
/// [`AGENT_SESSION_ID_MAX`] bytes. Such an id is one argument and never an
/// option, whatever argument list it is put in. The reason, when refused.
pub fn check_agent_session_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > AGENT_SESSION_ID_MAX {
        return Err(format!(
            "an agent session id is 1 to {AGENT_SESSION_ID_MAX} characters"
        ));
    }
    if id.starts_with('-') {
        return Err("an agent session id does not start with '-'".into());
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
    {
        return Err("an agent session id holds only ASCII letters, digits, '-' and '_'".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_ids_are_full_hex_only() {
        assert!(is_object_id(&"a".repeat(40)));
        assert!(is_object_id(&"0123456789abcdef".repeat(4)));
        for bad in [
            "",
            "abc123",
            "--output=/tmp/x",
            "HEAD",
            "main",
            &"a".repeat(39),
            &"a".repeat(41),
            &"g".repeat(40),
            &format!("{}..{}", "a".repeat(19), "b".repeat(19)),
        ] {
            assert!(!is_object_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn branch_names_follow_gits_rules() {
        for good in [
            "main",
            "shepherd/T-1-1",
            "shepherd/conversation-01J_x",
            "feature/a.b",
            "a-",
            "x@y",
            "ünïcode",
        ] {
            assert_eq!(check_branch_name(good), Ok(()), "{good:?}");
        }
        for bad in [
            "",
            "-x",
            "--output=/tmp/x",
            "@",
            "@{-1}",
            "main@{upstream}",
            "a..b",
            "/a",
            "a/",
            "a//b",
            "a.",
            ".a",
            "a/.b",
            "a.lock",
            "a.lock/b",
            "a b",
            "a\tb",
            "a\nb",
            "a\u{7f}",
            "a~1",
            "a^",
            "a:b",
            "a?",
            "a*",
            "a[",
            "a\\b",
        ] {
            assert!(check_branch_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn agent_session_ids_are_one_plain_argument() {
        for good in ["abc-123", "0f8e2c1a-7b7d-4e0c-9f0e-3b7f3c2d1a00", "S_9"] {
            assert_eq!(check_agent_session_id(good), Ok(()), "{good:?}");
        }
        for bad in [
            "",
            "--evil=/x",
            "-x",
            "a b",
            "a=b",
            "a/b",
            "a\nb",
            "{run_id}",
            "ü",
            &"a".repeat(AGENT_SESSION_ID_MAX + 1),
        ] {
            assert!(check_agent_session_id(bad).is_err(), "{bad:?}");
        }
        assert!(check_agent_session_id(&"a".repeat(AGENT_SESSION_ID_MAX)).is_ok());
    }
}
