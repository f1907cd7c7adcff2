//! The step spool: finished steps of one run, on disk, until the server has
//! acknowledged them.
//!
//! Steps are appended as JSON lines, a step's index being its line's. Each
//! line also records where in the agent's output the step was made (the
//! offsets read of `out` and `err`) and whether the adapter then held
//! nothing more: a runner that dies without recording how far it read
//! carries the run on from the last such point ([`Spool::resume_point`]),
//! by byte offset, never by counting steps again. Delivery reads from the
//! first unacknowledged step; the server stores each index once, so
//! resending after an error or a server restart is exact. The spool is
//! bounded: when more than `cap_bytes` wait for delivery, the run stops
//! reading the agent's output (the agent blocks on its own writes) until
//! the server catches up.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where in the agent's output a step was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputMark {
    /// Offset just past the last line of `out` read when the step was made.
    pub out: u64,
    /// The same for `err`.
    pub err: u64,
    /// The adapter held nothing more once it had made this step: everything
    /// read up to `out` and `err` is in this step or those before it.
    pub idle: bool,
}

/// One line of the spool: a step and where it was made.
#[derive(Serialize)]
struct Record<'a> {
    at: OutputMark,
    step: &'a Value,
}

/// The part of a line [`Spool::reopen`] reads back; `at` is absent from
/// what a runner before offsets were recorded wrote (a bare step).
#[derive(Deserialize)]
struct RecordHead {
    at: Option<OutputMark>,
}

pub struct Spool {
    path: PathBuf,
    file: File,
    /// Byte offset of each step's line.
    offsets: Vec<u64>,
    end: u64,
    delivered: usize,
    cap_bytes: u64,
    /// The last step made at an idle point, by index, and where (see
    /// [`Spool::resume_point`]).
    resume: Option<(u64, OutputMark)>,
    /// Left on disk when dropped (the run goes on under another runner).
    keep: bool,
}

impl Spool {
    pub fn create(dir: &std::path::Path, run_id: &str, cap_bytes: u64) -> std::io::Result<Spool> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{run_id}.jsonl"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            // A link in the data directory is never followed (its steps
            // would be read from, or written over, a file elsewhere).
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)?;
        Ok(Spool {
            path,
            file,
            offsets: Vec::new(),
            end: 0,
            delivered: 0,
            cap_bytes,
            resume: None,
            keep: false,
        })
    }

    /// Opens a spool a runner that left wrote, with the first `delivered`
    /// steps known to be on the server. Resending more is harmless (the
    /// server stores each index once), resending fewer would lose steps.
    pub fn reopen(
        dir: &std::path::Path,
        run_id: &str,
        cap_bytes: u64,
        delivered: u64,
    ) -> std::io::Result<Spool> {
        let path = dir.join(format!("{run_id}.jsonl"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            // A link in the data directory is never followed (its steps
            // would be read from, or written over, a file elsewhere).
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)?;
        let mut offsets = Vec::new();
        let mut end = 0u64;
        let mut resume = None;
        {
            let mut reader = BufReader::new(&file);
            let mut line = Vec::new();
            loop {
                line.clear();
                let n = reader.read_until(b'\n', &mut line)?;
                // A torn last line (the runner died mid-write) is dropped:
                // its step was never acknowledged, and is read again.
                if n == 0 || line.last() != Some(&b'\n') {
                    break;
                }
                if let Ok(RecordHead { at: Some(at) }) = serde_json::from_slice(&line) {
                    if at.idle {
                        resume = Some((offsets.len() as u64, at));
                    }
                }
                offsets.push(end);
                end += n as u64;
            }
        }
        let delivered = (delivered as usize).min(offsets.len());
        Ok(Spool {
            path,
            file,
            offsets,
            end,
            delivered,
            cap_bytes,
            resume,
            keep: false,
        })
    }

    /// Leaves the spool on disk when dropped.
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// Where a run whose runner died can be read on from: the number of
    /// steps made up to the last idle point, and that point. `None` when
    /// the spool holds none (no step yet, or only steps a runner from
    /// before output marks wrote): the output is then read from its start.
    pub fn resume_point(&self) -> Option<(u64, OutputMark)> {
        self.resume.map(|(index, at)| (index + 1, at))
    }

    /// Appends a step made at `at`; returns its index.
    pub fn push(&mut self, step: &Value, at: OutputMark) -> std::io::Result<u64> {
        let mut line = serde_json::to_vec(&Record { at, step }).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.file.seek(SeekFrom::Start(self.end))?;
        self.file.write_all(&line)?;
        let index = self.offsets.len() as u64;
        if at.idle {
            self.resume = Some((index, at));
        }
        self.offsets.push(self.end);
        self.end += line.len() as u64;
        Ok(index)
    }

    pub fn total(&self) -> u64 {
        self.offsets.len() as u64
    }

    pub fn delivered(&self) -> u64 {
        self.delivered as u64
    }

    pub fn pending(&self) -> usize {
        self.offsets.len() - self.delivered
    }

    /// True when too much waits for the server: stop reading output.
    pub fn is_full(&self) -> bool {
        let start = self
            .offsets
            .get(self.delivered)
            .copied()
            .unwrap_or(self.end);
        self.end - start > self.cap_bytes
    }

    /// Up to `max` undelivered steps, with the index of the first.
    pub fn next_batch(&mut self, max: usize) -> std::io::Result<(u64, Vec<Value>)> {
        let first = self.delivered;
        let Some(&offset) = self.offsets.get(first) else {
            return Ok((first as u64, Vec::new()));
        };
        self.file.seek(SeekFrom::Start(offset))?;
        let mut reader = BufReader::new(&self.file);
        let mut out = Vec::new();
        let mut line = String::new();
        while out.len() < max && first + out.len() < self.offsets.len() {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                break;
            }
            let record: Value = serde_json::from_str(&line).map_err(std::io::Error::other)?;
            out.push(step_of(record));
        }
        Ok((first as u64, out))
    }

    /// The server has everything below `next_index`.
    pub fn acknowledge(&mut self, next_index: u64) {
        self.delivered = (next_index as usize).clamp(self.delivered, self.offsets.len());
    }
}

/// The step a spool line holds: a record's `step`, or the line itself when
/// it is a bare step (from a runner before output marks; it has a `type`).
fn step_of(record: Value) -> Value {
    match record {
        Value::Object(mut fields) if !fields.contains_key("type") => {
            fields.remove("step").unwrap_or(Value::Object(fields))
        }
        other => other,
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn delivers_in_order_and_bounds_backlog() {
        let dir = std::env::temp_dir().join(format!("spool-test-{}", std::process::id()));
        let mut s = Spool::create(&dir, "r1", 40).unwrap();
        for i in 0..5 {
            s.push(&json!({ "type": "action", "n": i }), OutputMark::default())
                .unwrap();
        }
        assert!(s.is_full());
        let (first, batch) = s.next_batch(2).unwrap();
        assert_eq!((first, batch.len()), (0, 2));
        s.acknowledge(2);
        let (first, batch) = s.next_batch(10).unwrap();
        assert_eq!(first, 2);
        assert_eq!(batch[0]["n"], 2);
        assert_eq!(batch.len(), 3);
        s.acknowledge(5);
        assert_eq!(s.pending(), 0);
        assert!(!s.is_full());
        drop(s);
        assert!(!dir.join("r1.jsonl").exists());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn reopening_finds_the_last_idle_mark_and_reads_bare_steps() {
        let dir = std::env::temp_dir().join(format!("spool-marks-{}", std::process::id()));
        let mark = |out, idle| OutputMark { out, err: 7, idle };
        {
            let mut s = Spool::create(&dir, "r", 1 << 20).unwrap();
            s.push(&json!({ "type": "action", "n": 0 }), mark(10, true))
                .unwrap();
            s.push(&json!({ "type": "action", "n": 1 }), mark(20, true))
                .unwrap();
            // Made by a line after which the adapter still held something.
            s.push(&json!({ "type": "action", "n": 2 }), mark(30, false))
                .unwrap();
            assert_eq!(s.resume_point(), Some((2, mark(20, true))));
            s.keep();
        }
        // A step a runner from before output marks wrote, then a torn line.
        let path = dir.join("r.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"type\":\"action\",\"n\":3}\n{\"at\":{\"out\":9")
            .unwrap();
        let mut s = Spool::reopen(&dir, "r", 1 << 20, 0).unwrap();
        assert_eq!(s.total(), 4);
        assert_eq!(s.resume_point(), Some((2, mark(20, true))));
        let (_, steps) = s.next_batch(10).unwrap();
        let ns: Vec<i64> = steps.iter().map(|v| v["n"].as_i64().unwrap()).collect();
        assert_eq!(ns, [0, 1, 2, 3], "{steps:?}");
        assert_eq!(steps[0], json!({ "type": "action", "n": 0 }));
        drop(s);
        let _ = std::fs::remove_dir_all(dir);
    }
}
