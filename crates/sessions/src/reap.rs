//! Ending every process of a PTY's session.
//!
//! A PTY child is the leader of a new session (`setsid`), so its session id
//! is its pid. An interactive shell puts each background job (`sleep 1000 &`)
//! in a process group of its own, so killing the child's group is not enough:
//! the members are found by session id in `/proc`, sent SIGHUP (what a
//! terminal hang-up sends), and whatever is left after a grace is killed.

use std::time::Duration;

/// One process as `/proc/PID/stat` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: i32,
    pub state: char,
    pub ppid: i32,
    pub session: i32,
}

/// Parses `/proc/PID/stat`; the command name may contain spaces and
/// parentheses, so fields are counted from the last `)`.
pub fn parse_stat(pid: i32, text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let _pgrp: i32 = f.next()?.parse().ok()?;
    let session = f.next()?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        session,
    })
}

/// Live (not zombie) processes whose session id is `sid`.
pub fn session_members(sid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            parse_stat(pid, &text)
        })
        .filter(|p| p.session == sid && p.state != 'Z' && p.state != 'X')
        .map(|p| p.pid)
        .collect()
}

fn signal_all(pids: &[i32], sig: i32) {
    for &pid in pids {
        // SAFETY: kill(2) with a pid read from /proc; a process that has
        // gone meanwhile just answers ESRCH.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Reaps any of `pids` that are our own children and have ended, so none
/// stays a zombie (the session leader is reaped by its waiter instead).
fn reap_ours(pids: &[i32], leader: i32) {
    let me = std::process::id() as i32;
    for &pid in pids {
        if pid == leader {
            continue;
        }
        let ours = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|t| parse_stat(pid, &t))
            .is_some_and(|p| p.ppid == me);
        if ours {
            let mut status = 0;
            // SAFETY: non-blocking waitpid on a child of this process.
            unsafe {
                libc::waitpid(pid, &mut status, libc::WNOHANG);
            }
        }
    }
}

/// Ends every process of session `sid`: SIGHUP (and SIGCONT, so stopped
/// jobs see it), then SIGKILL for whatever is still alive after `grace`.
/// Returns once none is left or a further second has passed after SIGKILL.
pub async fn kill_session(sid: i32, grace: Duration) {
    if sid <= 1 {
        return;
    }
    let first = session_members(sid);
    if first.is_empty() {
        return;
    }
    signal_all(&first, libc::SIGHUP);
    signal_all(&first, libc::SIGCONT);
    if wait_empty(sid, grace).await {
        reap_ours(&first, sid);
        return;
    }
    let left = session_members(sid);
    tracing::debug!(
        sid,
        left = left.len(),
        "processes ignored SIGHUP; sending SIGKILL"
    );
    signal_all(&left, libc::SIGKILL);
    wait_empty(sid, Duration::from_secs(1)).await;
    reap_ours(&first, sid);
}

async fn wait_empty(sid: i32, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if session_members(sid).is_empty() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
}

/// Whether `pid` carries `SHEPHERD_WORKER_ID=worker_id` in its environment:
/// proof that it belongs to that worker and is not a stranger with a reused pid.
fn belongs_to(pid: i32, worker_id: &str) -> bool {
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let want = format!("SHEPHERD_WORKER_ID={worker_id}");
    env.split(|b| *b == 0).any(|kv| kv == want.as_bytes())
}

/// Ends what an earlier server left of a worker's session (one killed with
/// SIGKILL could not end it): the processes of session `sid` that carry the
/// worker's id in their environment.
pub async fn kill_leftovers(sid: i32, worker_id: &str, grace: Duration) {
    if sid <= 1 {
        return;
    }
    let members = session_members(sid);
    if members.iter().any(|&pid| belongs_to(pid, worker_id)) {
        tracing::info!(
            sid,
            worker = worker_id,
            left = members.len(),
            "ending what an earlier server left of a PTY session"
        );
        kill_session(sid, grace).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_command_names() {
        let s = parse_stat(42, "42 (a) b (c)) S 7 42 40 34816 0").unwrap();
        assert_eq!(
            s,
            ProcStat {
                pid: 42,
                state: 'S',
                ppid: 7,
                session: 40
            }
        );
        assert!(parse_stat(1, "garbage").is_none());
    }

    #[test]
    fn finds_this_process_in_its_own_session() {
        let me = std::process::id() as i32;
        // SAFETY: getsid(0) reads this process's own session id.
        let sid = unsafe { libc::getsid(0) };
        assert!(session_members(sid).contains(&me));
    }
}
