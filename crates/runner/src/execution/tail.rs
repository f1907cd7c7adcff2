//! The agent's output as the supervision loop sees it: each of the run's
//! `out` and `err` files followed as it grows, and the last few kilobytes of
//! each kept for the run's result and failure reason.
//!
//! The shim writes the agent's output to files rather than pipes so that a
//! runner can leave and a later one read on from a byte offset; that is why
//! every line carries the offset just past it, and why a follower ends only
//! when the shim has recorded the exit and the file is read to its end.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::file_events::{self, FileEvents};
use crate::lines::{char_boundary_before_end, decode, MAX_LINE_BYTES};
use crate::shim::RunFiles;

/// How often a follower looks at its file when nothing tells it of writes.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How often a follower told of writes (see [`FileEvents`]) looks anyway,
/// in case a wake-up was lost: at first. Each look of its own that finds
/// nothing doubles the wait, up to [`WATCHED_IDLE_MAX`]; one that finds
/// output no wake-up announced starts it over. Two followers per quiet
/// agent looking every two seconds were most of what a runner holding
/// hundreds of them did.
const WATCHED_IDLE_WAIT: Duration = Duration::from_secs(2);
/// The longest a watched follower goes without looking.
const WATCHED_IDLE_MAX: Duration = Duration::from_secs(30);

/// The most a follower reads at once.
const READ_CHUNK: u64 = 64 * 1024;

/// How much of each stream is kept (about; see [`push_tail`]).
const TAIL_BYTES: usize = 4000;

/// What the two followers hand the supervision loop, through one channel.
pub(super) enum Line {
    /// A line and the offset just past it in its file.
    Out(String, u64),
    Err(String, u64),
    OutClosed,
    ErrClosed,
}

/// Appends a line to a stream's kept tail; cut back to [`TAIL_BYTES`] only
/// once it has grown to twice that, so that cutting is rare.
pub(super) fn push_tail(tail: &mut String, line: &str) {
    tail.push_str(line);
    tail.push('\n');
    if tail.len() > TAIL_BYTES * 2 {
        let mut cut = tail.len() - TAIL_BYTES;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        tail.drain(..cut);
    }
}

/// The last `max` bytes of `s` (from a character boundary), marked with `…`
/// when cut.
pub(super) fn tail_of(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.trim_end().to_owned();
    }
    let mut cut = s.len() - max;
    while !s.is_char_boundary(cut) {
        cut += 1;
    }
    format!("…{}", s[cut..].trim_end())
}

/// Cuts a stream's bytes into lines, each with the offset just past it.
/// The followers and the re-reading of a run after a crash
/// (`super::replay`) both cut with it, so a line read again ends at the
/// same offset as when it was first read, and a stream can be followed on
/// from any such offset.
pub(super) struct LineCutter {
    /// The stream offset of `buf[0]`.
    pub(super) offset: u64,
}

impl LineCutter {
    /// Takes the complete lines (and pieces of an over-long one) off the
    /// front of `buf`, which holds the bytes from the cutter's offset on.
    pub(super) fn cut(&mut self, buf: &mut Vec<u8>) -> Vec<(String, u64)> {
        let mut lines = Vec::new();
        let mut start = 0;
        while let Some(i) = buf[start..].iter().position(|&b| b == b'\n') {
            let mut line = &buf[start..start + i];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            lines.push((decode(line), self.offset + (start + i + 1) as u64));
            start += i + 1;
        }
        buf.drain(..start);
        self.offset += start as u64;
        while buf.len() >= MAX_LINE_BYTES {
            let mut cut = char_boundary_before_end(&buf[..MAX_LINE_BYTES]);
            if cut == 0 {
                cut = MAX_LINE_BYTES;
            }
            let piece: Vec<u8> = buf.drain(..cut).collect();
            self.offset += cut as u64;
            lines.push((decode(&piece), self.offset));
        }
        lines
    }

    /// The stream's last line, unfinished (no `\n`): handed on once the
    /// agent has exited.
    pub(super) fn rest(&mut self, buf: &mut Vec<u8>) -> Option<(String, u64)> {
        if buf.is_empty() {
            return None;
        }
        self.offset += buf.len() as u64;
        let text = decode(buf);
        buf.clear();
        Some((text, self.offset))
    }
}

/// Reads a file the agent writes to as it grows, from `offset`, handing on
/// each line with the offset just past it. Ends once the shim has recorded
/// the agent's exit and everything written before it has been read.
pub(super) async fn follow(
    path: PathBuf,
    offset: u64,
    run: RunFiles,
    tx: mpsc::Sender<Line>,
    err: bool,
    events: Option<Arc<FileEvents>>,
    stop: CancellationToken,
) {
    use std::io::{Read, Seek};
    let wrap = |text: String, end: u64| {
        if err {
            Line::Err(text, end)
        } else {
            Line::Out(text, end)
        }
    };
    // Read on this task, not through tokio::fs: what is read was just
    // written, so it is in the page cache and a read returns at once, while
    // each tokio::fs read is a trip through the blocking pool (with hundreds
    // of agents printing, that was a tenth of the runner's CPU).
    let mut file: Option<std::fs::File> = None;
    // Bytes from the cutter's offset on, read but not yet handed on (a
    // partial line).
    let mut buf: Vec<u8> = Vec::new();
    let mut cutter = LineCutter { offset };
    let watch = events.and_then(|e| e.watch(&run.dir));
    let mut idle_wait = if watch.is_some() {
        WATCHED_IDLE_WAIT
    } else {
        POLL_INTERVAL
    };
    // The last wait ended on the timer, not on a wake-up.
    let mut by_timer = false;
    // Set once a read found nothing after the shim recorded the exit: one
    // more read then takes whatever was written before the record.
    let mut finished = false;
    loop {
        // Interest is registered before the file is looked at, so a write
        // between the look and the wait still wakes this follower.
        let mut written = std::pin::pin!(file_events::next_change(watch.as_ref()));
        file_events::arm(written.as_mut());
        if file.is_none() {
            if let Ok(mut f) = std::fs::File::open(&path) {
                if f.seek(std::io::SeekFrom::Start(offset)).is_ok() {
                    file = Some(f);
                }
            }
        }
        let before = buf.len();
        if let Some(f) = &mut file {
            // At most READ_CHUNK at a time, so one chatty agent cannot make
            // this follower hold its thread or grow without bound.
            let _ = f.by_ref().take(READ_CHUNK).read_to_end(&mut buf);
        }
        let n = buf.len() - before;
        if by_timer && watch.is_some() {
            idle_wait = if n > 0 {
                WATCHED_IDLE_WAIT
            } else {
                (idle_wait * 2).min(WATCHED_IDLE_MAX)
            };
        }
        by_timer = false;
        if n > 0 {
            for (text, end) in cutter.cut(&mut buf) {
                if tx.send(wrap(text, end)).await.is_err() {
                    return;
                }
            }
            continue;
        }
        if !finished {
            // Looked at only after a read found nothing: whatever the agent
            // wrote before the exit was recorded is in the file by then,
            // and the next turn reads it.
            if run.path("exit").exists() {
                finished = true;
                continue;
            }
        } else {
            if let Some((text, end)) = cutter.rest(&mut buf) {
                if tx.send(wrap(text, end)).await.is_err() {
                    return;
                }
            }
            let _ = tx
                .send(if err {
                    Line::ErrClosed
                } else {
                    Line::OutClosed
                })
                .await;
            return;
        }
        tokio::select! {
            _ = file_events::changed(written.as_mut()) => {}
            _ = tokio::time::sleep(idle_wait) => by_timer = true,
            _ = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Follows `out` of a fresh run directory, told of writes by `events`
    /// or polling without them; returns every line, once the exit is
    /// recorded and the file read to its end.
    async fn follow_to_the_end(events: Option<Arc<FileEvents>>) -> Vec<String> {
        let dir = std::env::temp_dir().join(format!(
            "shepherd-tail-{}-{}",
            std::process::id(),
            events.is_some()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let run = RunFiles::at(dir.clone());
        let (tx, mut rx) = mpsc::channel(16);
        let stop = CancellationToken::new();
        tokio::spawn(follow(
            run.path("out"),
            0,
            run.clone(),
            tx,
            false,
            events,
            stop.clone(),
        ));
        let mut out = std::fs::File::create(run.path("out")).unwrap();
        writeln!(out, "first").unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        // A partial line, finished only after the exit is recorded.
        write!(out, "second").unwrap();
        crate::shim::write_atomic(&run.path("exit"), b"{}").unwrap();
        let mut lines = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(Line::Out(l, _))) => lines.push(l),
                Ok(Some(Line::OutClosed)) => break,
                other => panic!("the follower ended without closing: {:?}", other.is_ok()),
            }
        }
        stop.cancel();
        let _ = std::fs::remove_dir_all(&dir);
        lines
    }

    #[tokio::test]
    async fn a_follower_reads_everything_with_inotify_and_without() {
        let stop = CancellationToken::new();
        let events = FileEvents::start(stop.clone());
        assert!(events.is_some(), "inotify is available here");
        assert_eq!(follow_to_the_end(events).await, ["first", "second"]);
        // Where inotify cannot start, the follower polls and loses nothing.
        assert_eq!(follow_to_the_end(None).await, ["first", "second"]);
        stop.cancel();
    }
}
