//! The step spool: finished steps of one run, on disk, until the server has
//! acknowledged them.
//!
//! Steps are appended as JSON lines with their index. Delivery reads from
//! the first unacknowledged one; the server stores each index once, so
//! resending after an error or a server restart is exact. The spool is
//! bounded: when more than `cap_bytes` wait for delivery, the run stops
//! reading the agent's output (the agent blocks on its own writes) until
//! the server catches up.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use serde_json::Value;

pub struct Spool {
    path: PathBuf,
    file: File,
    /// Byte offset of each step's line.
    offsets: Vec<u64>,
    end: u64,
    delivered: usize,
    cap_bytes: u64,
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
            keep: false,
        })
    }

    /// Leaves the spool on disk when dropped.
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// Appends a step; returns its index.
    pub fn push(&mut self, step: &Value) -> std::io::Result<u64> {
        let mut line = serde_json::to_vec(step).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.file.seek(SeekFrom::Start(self.end))?;
        self.file.write_all(&line)?;
        self.offsets.push(self.end);
        self.end += line.len() as u64;
        Ok(self.offsets.len() as u64 - 1)
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
            out.push(serde_json::from_str(&line).map_err(std::io::Error::other)?);
        }
        Ok((first as u64, out))
    }

    /// The server has everything below `next_index`.
    pub fn acknowledge(&mut self, next_index: u64) {
        self.delivered = (next_index as usize).clamp(self.delivered, self.offsets.len());
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
            s.push(&json!({ "type": "action", "n": i })).unwrap();
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
}
