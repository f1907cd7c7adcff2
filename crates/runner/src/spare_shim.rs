//! A shim started before a run needs it.
//!
//! Starting `shepherd shim` for a claimed run cost about two milliseconds
//! on the way from the claim to the agent's first step: the exec of a large
//! binary, its dynamic loading and relocations, before the shim can start
//! the agent. So a runner keeps one shim started in advance (`shepherd
//! shim --stand-by`), already out of the runner's session and waiting on a
//! pipe. A run takes it and writes it the run's description (a
//! [`ShimJob`]: the arguments, environment and working directory the shim
//! would have been started with), and another spare is started after.
//!
//! Nothing else changes for the run: the spare is this runner's child like
//! any shim, writes the same files, and is found the same way after a
//! restart. A spare that is gone or does not read is killed and the run
//! starts its own shim as before. A spare whose runner stops sees its pipe
//! close and exits; it never holds a run, a lease or Shepherd's secrets.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::{ChildStdin, Command};

use crate::shim::ShimJob;

/// How long writing a run's description to a spare may take before the
/// run starts a shim of its own (a spare reads it at once; this is for one
/// that hangs).
const HAND_OVER: Duration = Duration::from_secs(5);

/// This runner's spare shim, if one is ready.
pub struct SpareShims {
    program: PathBuf,
    spare: Mutex<Option<Spare>>,
}

struct Spare {
    pid: i32,
    input: ChildStdin,
}

impl SpareShims {
    /// A pool for shims of `program`, with no spare yet.
    pub fn new(program: PathBuf) -> Arc<SpareShims> {
        Arc::new(SpareShims {
            program,
            spare: Mutex::new(None),
        })
    }

    /// Starts the shim `cmd` describes (`<program> shim <flags…>`, with its
    /// environment and working directory): hands the run to the spare when
    /// there is one, else spawns `cmd`. Returns the shim's pid.
    pub async fn start_shim(&self, cmd: Command) -> Result<i32, String> {
        let spare = self.lock().take();
        if let Some(spare) = spare {
            match self.hand_over(spare, &cmd).await {
                Ok(pid) => {
                    self.refill();
                    return Ok(pid);
                }
                Err(e) => tracing::debug!(error = %e, "the spare shim was not used"),
            }
        }
        let pid = spawn(cmd)?;
        self.refill();
        Ok(pid)
    }

    async fn hand_over(&self, mut spare: Spare, cmd: &Command) -> Result<i32, String> {
        let job = self.job_of(cmd)?.encode()?;
        let written = tokio::time::timeout(HAND_OVER, async {
            spare.input.write_all(&job).await?;
            spare.input.shutdown().await
        })
        .await;
        match written {
            Ok(Ok(())) => Ok(spare.pid),
            Ok(Err(e)) => Err(format!("writing to the spare shim: {e}")),
            Err(_) => {
                // It may have read part of the run: it must not go on.
                // SAFETY: kill(2) on the spare's own pid; no memory involved.
                unsafe {
                    libc::kill(spare.pid, libc::SIGKILL);
                }
                Err("the spare shim did not read the run".into())
            }
        }
    }

    /// The run `cmd` would start a shim for, as a spare is told it.
    fn job_of(&self, cmd: &Command) -> Result<ShimJob, String> {
        let std = cmd.as_std();
        if std.get_program() != self.program.as_os_str() {
            return Err("another shim program".into());
        }
        let mut args = std.get_args().map(OsString::from);
        if args.next().as_deref() != Some("shim".as_ref()) {
            return Err("not a shim's command".into());
        }
        // What a spawn of `cmd` would give the shim: this process's
        // environment with the command's changes (Shepherd's secrets
        // removed, the agent's variables added).
        let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
        for (name, value) in std.get_envs() {
            match value {
                Some(v) => env.insert(name.to_owned(), v.to_owned()),
                None => env.remove(name),
            };
        }
        Ok(ShimJob {
            args: args.collect(),
            env: env.into_iter().collect(),
            cwd: std.get_current_dir().map(|d| d.to_owned()),
        })
    }

    /// Starts a spare if there is none (inside a Tokio runtime).
    pub fn refill(&self) {
        let mut slot = self.lock();
        if slot.is_some() {
            return;
        }
        let mut cmd = Command::new(&self.program);
        cmd.args(["shim", "--stand-by"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // It learns the agent's environment with its run; until then it
        // has no business with Shepherd's settings or secrets.
        let inherited = std::env::vars_os().map(|(name, _)| name);
        for name in shepherd_core::secrets::inherited_settings(inherited) {
            cmd.env_remove(name);
        }
        match cmd.spawn() {
            Ok(mut child) => {
                let (pid, input) = (child.id(), child.stdin.take());
                tokio::spawn(async move {
                    let _ = child.wait().await;
                });
                if let (Some(pid), Some(input)) = (pid, input) {
                    *slot = Some(Spare {
                        pid: pid as i32,
                        input,
                    });
                }
            }
            Err(e) => tracing::debug!(error = %e, "no spare shim"),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Spare>> {
        self.spare.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Starts a shim of its own for a run; returns its pid (0 if it has none
/// to tell).
fn spawn(mut cmd: Command) -> Result<i32, String> {
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the shim: {e}"))?;
    let shim_pid = child.id().map(|p| p as i32).unwrap_or(0);
    // The shim is reaped when it exits; if this runner leaves first, the
    // shim lives on (it leads its own session) and a later runner finds it.
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    Ok(shim_pid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in for `shepherd` whose every start sleeps without reading
    /// its input: as a spare it hangs, as a run's own shim it starts.
    fn sleeper(dir: &std::path::Path) -> PathBuf {
        let path = dir.join("hangs");
        std::fs::write(&path, "#!/bin/sh\nexec sleep 30\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| !r.trim_start().starts_with('Z'))
        })
    }

    fn run_command(program: &std::path::Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(["shim", "--dir", "/nowhere", "--", "true"]);
        // More than a pipe holds, so writing it waits on the reader (in
        // pieces an exec still takes: one string may be at most 128 KiB).
        for i in 0..4 {
            cmd.env(format!("LARGE_{i}"), "x".repeat(60 * 1024));
        }
        cmd
    }

    #[tokio::test]
    async fn a_spare_that_does_not_read_is_killed_and_the_run_starts_its_own_shim() {
        let dir = std::env::temp_dir().join(format!("spare-shim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let program = sleeper(&dir);
        let pool = SpareShims::new(program.clone());
        pool.refill();
        let spare = pool.lock().as_ref().map(|s| s.pid).unwrap();
        let pid = pool.start_shim(run_command(&program)).await.unwrap();
        assert_ne!(pid, spare, "the run went to the spare that never read it");
        assert!(alive(pid), "the run's own shim did not start");
        for _ in 0..100 {
            if !alive(spare) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!alive(spare), "the spare that hung was left running");
        let next = pool.lock().as_ref().map(|s| s.pid).unwrap();
        assert!(next != spare && alive(next), "no new spare");
        for p in [pid, next] {
            // SAFETY: kill(2) on this test's own children.
            unsafe {
                libc::kill(p, libc::SIGKILL);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_command_for_another_program_is_not_given_to_the_spare() {
        let dir = std::env::temp_dir().join(format!("spare-other-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pool = SpareShims::new(sleeper(&dir));
        let mut other = Command::new("/bin/sh");
        other.args(["shim", "--dir", "/nowhere"]);
        assert!(pool.job_of(&other).is_err());
        let mut not_shim = Command::new(sleeper(&dir));
        not_shim.args(["serve"]);
        assert!(pool.job_of(&not_shim).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
