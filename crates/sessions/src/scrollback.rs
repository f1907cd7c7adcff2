//! A worker's output history: a bounded ring in memory, and the same bytes
//! appended to segment files on disk so that history survives a restart of
//! the server.
//!
//! Offsets count bytes since the worker was created. Segment files are named
//! by the offset of their first byte (`00000000000000001024.seg`), so the
//! next offset after a restart is the last segment's name plus its length:
//! no database write per chunk of output. The oldest segments are deleted
//! once a worker's files pass their cap.
//!
//! What is read back is served to every client of the terminal, so a link
//! in the directory (planted, or restored from a crafted backup) is never
//! followed: only regular files count as segments, and each is opened with
//! `O_NOFOLLOW`; a worker directory that is itself a link is refused.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Sizes of a worker's history.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes kept in memory (and sent as `history` on attach).
    pub ring_bytes: usize,
    /// Size at which a new segment file is started.
    pub segment_bytes: u64,
    /// Bytes kept on disk per worker, besides the segment being written
    /// (whole segments are dropped when a new one starts).
    pub disk_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            ring_bytes: 2 * 1024 * 1024,
            segment_bytes: 1024 * 1024,
            disk_bytes: 8 * 1024 * 1024,
        }
    }
}

struct Segment {
    start: u64,
    len: u64,
}

/// The segment files of one worker.
struct Segments {
    dir: PathBuf,
    list: Vec<Segment>,
    current: Option<File>,
}

fn segment_path(dir: &Path, start: u64) -> PathBuf {
    dir.join(format!("{start:020}.seg"))
}

impl Segments {
    fn open(dir: &Path) -> std::io::Result<Segments> {
        std::fs::create_dir_all(dir)?;
        if std::fs::symlink_metadata(dir)?.file_type().is_symlink() {
            return Err(std::io::Error::other(format!(
                "{} is a symbolic link, not a directory of scrollback segments",
                dir.display()
            )));
        }
        let mut list = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            // The entry's own type (a link is not a file): never followed.
            if !e.file_type()?.is_file() {
                continue;
            }
            let name = e.file_name();
            let Some(start) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".seg"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            list.push(Segment {
                start,
                len: e.metadata()?.len(),
            });
        }
        list.sort_by_key(|s| s.start);
        Ok(Segments {
            dir: dir.to_owned(),
            list,
            current: None,
        })
    }

    fn end(&self) -> u64 {
        self.list.last().map(|s| s.start + s.len).unwrap_or(0)
    }

    /// The last `max` bytes on disk, and the offset of the first of them.
    fn tail(&self, max: usize) -> std::io::Result<(u64, Vec<u8>)> {
        let end = self.end();
        let from = end.saturating_sub(max as u64);
        let mut out = Vec::with_capacity((end - from) as usize);
        let mut first = None;
        for s in &self.list {
            if s.start + s.len <= from {
                continue;
            }
            let mut f = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(segment_path(&self.dir, s.start))?;
            let skip = from.saturating_sub(s.start);
            f.seek(SeekFrom::Start(skip))?;
            first.get_or_insert(s.start + skip);
            f.take(s.len - skip).read_to_end(&mut out)?;
        }
        Ok((first.unwrap_or(end), out))
    }

    fn append(&mut self, offset: u64, bytes: &[u8], limits: &Limits) -> std::io::Result<()> {
        let roll = match self.list.last() {
            None => true,
            Some(s) => s.len >= limits.segment_bytes || s.start + s.len != offset,
        };
        if roll || self.current.is_none() {
            let start = if roll {
                self.list.push(Segment {
                    start: offset,
                    len: 0,
                });
                offset
            } else {
                self.list.last().map(|s| s.start).unwrap_or(offset)
            };
            self.current = Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                    .open(segment_path(&self.dir, start))?,
            );
            self.trim(limits);
        }
        if let Some(f) = &mut self.current {
            f.write_all(bytes)?;
        }
        if let Some(s) = self.list.last_mut() {
            s.len += bytes.len() as u64;
        }
        Ok(())
    }

    fn trim(&mut self, limits: &Limits) {
        let mut total: u64 = self.list.iter().map(|s| s.len).sum();
        while self.list.len() > 1 && total > limits.disk_bytes {
            let s = self.list.remove(0);
            total -= s.len;
            let _ = std::fs::remove_file(segment_path(&self.dir, s.start));
        }
    }
}

/// A worker's history.
pub struct Scrollback {
    limits: Limits,
    ring: VecDeque<u8>,
    /// Offset of `ring[0]`.
    start: u64,
    disk: Option<Segments>,
}

impl Scrollback {
    /// History kept in memory only.
    pub fn in_memory(limits: Limits) -> Scrollback {
        Scrollback {
            limits,
            ring: VecDeque::new(),
            start: 0,
            disk: None,
        }
    }

    /// History kept in `dir` too, loading what an earlier server left there.
    pub fn open(dir: &Path, limits: Limits) -> std::io::Result<Scrollback> {
        let disk = Segments::open(dir)?;
        let (start, bytes) = disk.tail(limits.ring_bytes)?;
        Ok(Scrollback {
            limits,
            ring: bytes.into(),
            start,
            disk: Some(disk),
        })
    }

    /// The offset after the last byte.
    pub fn end(&self) -> u64 {
        self.start + self.ring.len() as u64
    }

    /// The offset of the oldest byte still in memory.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Appends output. A failing disk is logged once and then left alone;
    /// the in-memory history goes on.
    pub fn push(&mut self, bytes: &[u8]) {
        let offset = self.end();
        if let Some(disk) = &mut self.disk {
            if let Err(e) = disk.append(offset, bytes, &self.limits) {
                tracing::warn!(dir = %disk.dir.display(), error = %e, "scrollback stops being written to disk");
                self.disk = None;
            }
        }
        self.ring.extend(bytes);
        let over = self.ring.len().saturating_sub(self.limits.ring_bytes);
        if over > 0 {
            self.ring.drain(..over);
            self.start += over as u64;
        }
    }

    /// The bytes in memory from `offset` (clamped to what is kept) to `until`.
    pub fn range(&self, offset: u64, until: u64) -> Vec<u8> {
        let from = offset.clamp(self.start, self.end());
        let until = until.clamp(from, self.end());
        let (a, b) = ((from - self.start) as usize, (until - self.start) as usize);
        self.ring.range(a..b).copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Limits {
        Limits {
            ring_bytes: 10,
            segment_bytes: 8,
            disk_bytes: 20,
        }
    }

    #[test]
    fn the_ring_keeps_the_newest_bytes_and_counts_offsets() {
        let mut s = Scrollback::in_memory(small());
        s.push(b"0123456789abc");
        assert_eq!((s.start(), s.end()), (3, 13));
        assert_eq!(s.range(0, 13), b"3456789abc");
        assert_eq!(s.range(11, 13), b"bc");
        assert_eq!(s.range(13, 13), b"");
    }

    #[test]
    fn history_on_disk_survives_reopening_and_is_capped() {
        let dir = std::env::temp_dir().join(format!("shepherd-scrollback-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        {
            let mut s = Scrollback::open(&dir, small()).unwrap();
            for i in 0..10u8 {
                s.push(&[b'a' + i; 5]);
            }
            assert_eq!(s.end(), 50);
        }
        let s = Scrollback::open(&dir, small()).unwrap();
        assert_eq!(s.end(), 50);
        assert_eq!(s.range(0, 50), b"iiiiijjjjj");
        let on_disk: u64 = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        // The cap, plus the segment being written (which may pass its size by one push).
        assert!(on_disk <= 20 + 8 + 5, "disk use {on_disk} exceeds the cap");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_link_among_the_segments_is_not_followed() {
        let root =
            std::env::temp_dir().join(format!("shepherd-scrollback-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("wk_1");
        std::fs::create_dir_all(&dir).unwrap();
        let secret = root.join("secret");
        std::fs::write(&secret, b"private").unwrap();
        // Where the first segment of a worker's history would be.
        std::os::unix::fs::symlink(&secret, segment_path(&dir, 0)).unwrap();
        let s = Scrollback::open(&dir, small()).unwrap();
        assert_eq!(s.end(), 0);
        assert_eq!(s.range(0, u64::MAX), b"");
        // A worker directory that is a link is refused, not read.
        let linked = root.join("wk_2");
        std::os::unix::fs::symlink(&dir, &linked).unwrap();
        assert!(Scrollback::open(&linked, small()).is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
