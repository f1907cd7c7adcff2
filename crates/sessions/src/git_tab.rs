//! A `git-diff` tab's view of its session's location: `git diff` and
//! `git status --porcelain`, run where a launch would be (the location
//! checked again first).

use std::time::Duration;

use shepherd_core::Error;
use shepherd_protocol::GitDiff;

use crate::launch::Launcher;

/// The diff and status of `location`, checked by `launcher` as a launch is.
pub async fn location_diff(launcher: &Launcher<'_>, location: &str) -> Result<GitDiff, Error> {
    let dir = launcher.launch_dir(location)?.display().to_string();
    // Whatever works in the location can write its repository's
    // configuration: no filter or external diff program it names is run,
    // and git gets none of Shepherd's secrets.
    let diff = git(&dir, &["diff", "--no-ext-diff", "--no-textconv"]).await?;
    let status = git(&dir, &["status", "--porcelain"]).await?;
    Ok(GitDiff { diff, status })
}

async fn git(dir: &str, args: &[&str]) -> Result<String, Error> {
    let mut cmd = tokio::process::Command::new("git");
    let inherited = std::env::vars_os().map(|(name, _)| name);
    for name in shepherd_core::secrets::inherited_settings(inherited) {
        cmd.env_remove(name);
    }
    let run = cmd
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .map_err(|_| Error::unavailable("git_timeout", "git took longer than 30 s"))?
        .map_err(|e| Error::invalid("git_failed", format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(Error::invalid(
            "git_failed",
            format!(
                "git {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
