//! Shell completion: `shepherd completion SHELL` prints a script that asks
//! the binary itself what to offer as a line is typed, so task ids, run ids,
//! sessions and agent names come from the server when one is reachable.
//!
//! The shell calls `shepherd` with [`COMPLETE_VAR`] set and the words typed
//! so far; `main` answers before anything else runs. A candidate list that
//! needs the server is fetched with a short timeout and no retries, and is
//! simply empty when no server answers: a slow or absent server never holds
//! up the shell for long.

use std::time::Duration;

use clap_complete::engine::CompletionCandidate;
use clap_complete::env::{Bash, Elvish, EnvCompleter, Fish, Powershell, Zsh};
use clap_complete::Shell;

/// The variable that tells the binary it is being asked for completions.
/// Not `SHEPHERD_…`: those are settings, and unknown settings are refused.
pub const COMPLETE_VAR: &str = "_SHEPHERD_COMPLETE";

/// The longest a completion waits for the server.
const SERVER_WAIT: Duration = Duration::from_millis(1500);

/// Answers a shell's completion request and exits, when this process is one.
pub fn answer_if_asked() {
    use clap::CommandFactory;
    clap_complete::CompleteEnv::with_factory(super::Cli::command)
        .var(COMPLETE_VAR)
        .complete();
}

/// `shepherd completion SHELL`: the registration script on stdout.
pub fn print_script(shell: Shell) -> std::io::Result<()> {
    let adapter: &dyn EnvCompleter = match shell {
        Shell::Bash => &Bash,
        Shell::Zsh => &Zsh,
        Shell::Fish => &Fish,
        Shell::Elvish => &Elvish,
        Shell::PowerShell => &Powershell,
        _ => return Err(std::io::Error::other(format!("no completion for {shell}"))),
    };
    adapter.write_registration(
        COMPLETE_VAR,
        "shepherd",
        "shepherd",
        "shepherd",
        &mut std::io::stdout(),
    )
}

/// What the server lists, as candidates; empty when it cannot be asked.
fn from_server<F, Fut>(list: F) -> Vec<CompletionCandidate>
where
    F: FnOnce(shepherd_client::Client) -> Fut,
    Fut: std::future::Future<Output = Vec<CompletionCandidate>>,
{
    let server =
        std::env::var("SHEPHERD_SERVER").unwrap_or_else(|_| "http://127.0.0.1:7700".into());
    let token = std::env::var("SHEPHERD_TOKEN_FILE")
        .ok()
        .and_then(|f| super::args::read_token_file(std::path::Path::new(&f)).ok())
        .or_else(|| crate::config::token_from_env(&|k| std::env::var(k).ok()));
    let Ok(client) = shepherd_client::Client::new(&server, token) else {
        return Vec::new();
    };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    rt.block_on(async move {
        tokio::time::timeout(SERVER_WAIT, list(client.with_retries(0)))
            .await
            .unwrap_or_default()
    })
}

fn candidate(value: &str, help: &str) -> CompletionCandidate {
    CompletionCandidate::new(value).help(Some(help.to_owned().into()))
}

/// The newest tasks' ids, with their titles.
pub fn tasks() -> Vec<CompletionCandidate> {
    from_server(|c| async move {
        let q = shepherd_protocol::TaskListQuery {
            limit: Some(200),
            ..Default::default()
        };
        c.tasks(&q)
            .await
            .map(|l| {
                l.tasks
                    .iter()
                    .map(|t| candidate(&t.vtid, &format!("{} ({})", t.title, t.state)))
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// The newest runs' ids, with their task and status.
pub fn runs() -> Vec<CompletionCandidate> {
    from_server(|c| async move {
        let q = shepherd_protocol::RunsQuery {
            limit: Some(200),
            ..Default::default()
        };
        c.runs(&q)
            .await
            .map(|l| {
                l.runs
                    .iter()
                    .map(|r| candidate(&r.id, &format!("{} ({})", r.vtid, r.status.as_str())))
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// Sessions by id and by name.
pub fn sessions() -> Vec<CompletionCandidate> {
    from_server(|c| async move {
        c.sessions()
            .await
            .map(|l| {
                l.sessions
                    .iter()
                    .flat_map(|s| {
                        [
                            candidate(&s.id, &format!("{} ({})", s.name, s.location_path)),
                            candidate(&s.name, &s.location_path),
                        ]
                    })
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// Agents configured or declared by workers.
pub fn agents() -> Vec<CompletionCandidate> {
    from_server(|c| async move {
        c.agents()
            .await
            .map(|l| {
                l.agents
                    .iter()
                    .map(|a| candidate(&a.id, &format!("{} agent", a.worker_type)))
                    .collect()
            })
            .unwrap_or_default()
    })
}
