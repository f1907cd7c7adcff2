//! A VFS for the writer's connection that hands each commit's WAL frames to
//! the kernel in one `write` instead of two per frame.
//!
//! SQLite appends a frame to the WAL with two calls, its 24-byte header and
//! then the page, and a claim-and-complete cycle changes about 24 pages: some
//! 50 write calls per cycle, each through the file system's whole per-call
//! path (locking the inode, stamping its times, dirtying the pages it
//! spans, two of them because a 4,120-byte frame straddles pages). Profiled
//! under steady claims, that was a fifth of the writer thread's time, and
//! the writer is the store's bottleneck. Held back and written as one run,
//! a commit of a hundred frames costs one call.
//!
//! Only the WAL files of connections opened with this VFS are wrapped;
//! every other file, and every other method, is SQLite's own `unix` VFS.
//! The rules that keep the WAL's bytes exactly what SQLite believes they are:
//! - A write that starts where the held bytes end is held; any other write
//!   first writes out what is held, so bytes reach the file in the order
//!   SQLite wrote them, and a later write over the same range wins.
//! - Every other call on the file (read, sync, truncate, size, close,
//!   locks, file controls) first writes out what is held: SQLite never sees
//!   a file that lacks a byte it wrote.
//! - SQLite publishes a commit to readers through shared memory, which no
//!   VFS call announces, right after it writes the commit frame (the frame
//!   whose header carries the database's size). So the write that follows a
//!   held commit header, its page, writes everything out before it
//!   returns. A commit header that arrives with nothing held goes straight
//!   to the file, and so does the page after it: SQLite also rewrites lone
//!   headers when it re-checksums a transaction, and nothing follows those.
//! - A write-out that fails fails the call that caused it, so a commit
//!   whose frames did not reach the file returns an error and is never
//!   published.
//!
//! Durability is unchanged: nothing SQLite reports committed is held, and a
//! `kill -9` finds the file as SQLite left it after its last commit.

use std::ffi::{c_int, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::ffi;

/// The name the writer's connection opens the database with.
pub(crate) const NAME: &CStr = c"shepherd-wal-appends";

/// Held bytes past which a run is written out anyway (a transaction that
/// changes more pages than this only saves fewer calls).
const MAX_HELD: usize = 8 << 20;

/// Memory kept for the next commit's frames: a commit of the hot path is
/// a few hundred KiB.
const KEEP_CAPACITY: usize = 1 << 20;

/// The largest write the `unix` VFS takes in one call (it masks the length
/// with `0x1ffff`): longer runs go out in pieces of this size.
const MAX_WRITE: usize = 0x1ffff;

/// A frame header is 24 bytes; bytes 4..8 are the database's size in pages
/// after the commit, and zero in every frame but a commit's.
const FRAME_HEADER: usize = 24;

/// How many writes SQLite asked for on wrapped WAL files, and how many
/// reached the file: what the coalescing saves, for tests and benches.
#[derive(Debug, Default)]
pub(crate) struct WriteCounts {
    pub asked: AtomicU64,
    pub made: AtomicU64,
}

/// What a registered VFS of this kind carries: the VFS it wraps, and its
/// counts.
struct Shared {
    inner: *mut ffi::sqlite3_vfs,
    counts: WriteCounts,
}

/// A wrapped WAL file. SQLite allocates `szOsFile` bytes for it; this
/// struct comes first (`base` must be, for SQLite's casts) and the wrapped
/// VFS's own file follows it, at [`inner_offset`].
#[repr(C)]
struct WalFile {
    base: ffi::sqlite3_file,
    inner: *mut ffi::sqlite3_file,
    shared: *const Shared,
    /// Bytes written by SQLite and not yet by the kernel, starting at `at`.
    held: Vec<u8>,
    at: i64,
    /// The last held bytes are a commit frame's header: the next
    /// contiguous write is its page, and ends the commit.
    commit_held: bool,
    /// A commit header went straight to the file: its page, if next,
    /// must too. The offset the page starts at.
    direct_page_at: Option<i64>,
}

fn inner_offset() -> usize {
    std::mem::size_of::<WalFile>().next_multiple_of(16)
}

/// Registers the VFS (once per process) and returns its write counts.
/// Must run before a connection names it; SQLite is initialised by then.
pub(crate) fn register() -> Result<&'static WriteCounts, c_int> {
    use std::sync::OnceLock;
    static REGISTERED: OnceLock<Result<&'static WriteCounts, c_int>> = OnceLock::new();
    *REGISTERED.get_or_init(|| register_as(NAME))
}

/// Registers a VFS of this kind under `name`, wrapping the default VFS.
/// It lives for the rest of the process.
pub(crate) fn register_as(name: &'static CStr) -> Result<&'static WriteCounts, c_int> {
    // SAFETY: `sqlite3_vfs_find` initialises SQLite if needed and returns
    // the default VFS, which lives as long as the process.
    let inner = unsafe { ffi::sqlite3_vfs_find(ptr::null()) };
    if inner.is_null() {
        return Err(ffi::SQLITE_ERROR);
    }
    let shared: &'static Shared = Box::leak(Box::new(Shared {
        inner,
        counts: WriteCounts::default(),
    }));
    // SAFETY: `inner` is a valid VFS. The copy keeps every method of the
    // default VFS (the `unix` ones ignore which VFS they are called
    // through) but opens files through `open`.
    let vfs = unsafe {
        let mut vfs: ffi::sqlite3_vfs = ptr::read(inner);
        let wal_file = inner_offset() + (*inner).szOsFile as usize;
        vfs.szOsFile = wal_file.max((*inner).szOsFile as usize) as c_int;
        vfs.pNext = ptr::null_mut();
        vfs.zName = name.as_ptr();
        vfs.pAppData = shared as *const Shared as *mut c_void;
        vfs.xOpen = Some(open);
        Box::leak(Box::new(vfs))
    };
    // SAFETY: the VFS and everything it points at are leaked, so they
    // outlive every connection that uses it.
    let rc = unsafe { ffi::sqlite3_vfs_register(vfs, 0) };
    if rc != ffi::SQLITE_OK {
        return Err(rc);
    }
    Ok(&shared.counts)
}

unsafe extern "C" fn open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let shared = (*vfs).pAppData as *const Shared;
    let inner_vfs = (*shared).inner;
    let Some(inner_open) = (*inner_vfs).xOpen else {
        return ffi::SQLITE_ERROR;
    };
    if flags & ffi::SQLITE_OPEN_WAL == 0 {
        // Not a WAL: the default VFS's own file, in the same memory (which
        // is at least as large as it needs).
        return inner_open(inner_vfs, name, file, flags, out_flags);
    }
    let inner = (file as *mut u8).add(inner_offset()) as *mut ffi::sqlite3_file;
    let rc = inner_open(inner_vfs, name, inner, flags, out_flags);
    if rc != ffi::SQLITE_OK {
        // SQLite does not close a file whose open failed, unless it has
        // methods; ours are not set yet, so the inner file (which may have
        // set its own) is closed here.
        if !(*inner).pMethods.is_null() {
            if let Some(close) = (*(*inner).pMethods).xClose {
                close(inner);
            }
        }
        (*file).pMethods = ptr::null();
        return rc;
    }
    ptr::write(
        file as *mut WalFile,
        WalFile {
            base: ffi::sqlite3_file { pMethods: &METHODS },
            inner,
            shared,
            held: Vec::new(),
            at: 0,
            commit_held: false,
            direct_page_at: None,
        },
    );
    rc
}

impl WalFile {
    fn inner_methods(&self) -> &ffi::sqlite3_io_methods {
        // SAFETY: the inner file opened successfully, so its methods are
        // set and live as long as the VFS.
        unsafe { &*(*self.inner).pMethods }
    }

    fn counts(&self) -> &WriteCounts {
        // SAFETY: `Shared` is leaked at registration.
        unsafe { &(*self.shared).counts }
    }

    /// Writes `bytes` at `at` straight to the file.
    fn write_through(&self, bytes: &[u8], at: i64) -> c_int {
        let Some(write) = self.inner_methods().xWrite else {
            return ffi::SQLITE_IOERR_WRITE;
        };
        let mut at = at;
        for piece in bytes.chunks(MAX_WRITE) {
            self.counts().made.fetch_add(1, Ordering::Relaxed);
            // SAFETY: the inner file is open and `piece` is valid for its
            // length, which fits a `c_int`.
            let rc = unsafe {
                write(
                    self.inner,
                    piece.as_ptr() as *const c_void,
                    piece.len() as c_int,
                    at,
                )
            };
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            at += piece.len() as i64;
        }
        ffi::SQLITE_OK
    }

    /// Writes out what is held. The bytes are dropped either way: after a
    /// failure SQLite abandons the transaction they belong to.
    fn flush(&mut self) -> c_int {
        self.commit_held = false;
        if self.held.is_empty() {
            return ffi::SQLITE_OK;
        }
        let rc = self.write_through(&self.held, self.at);
        self.held.clear();
        if self.held.capacity() > KEEP_CAPACITY {
            // One large transaction should not pin its size for good.
            self.held = Vec::new();
        }
        rc
    }

    /// Before any call but a write: the file must hold every byte written.
    fn settle(&mut self) -> c_int {
        self.direct_page_at = None;
        self.flush()
    }

    fn write(&mut self, bytes: &[u8], at: i64) -> c_int {
        self.counts().asked.fetch_add(1, Ordering::Relaxed);
        if self.commit_held {
            // The page of the commit frame whose header is held: the
            // commit's last bytes, which must be in the file before SQLite
            // returns to publish it.
            if self.follows(at) {
                self.held.extend_from_slice(bytes);
                return self.flush();
            }
            let rc = self.flush();
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        }
        if self.direct_page_at.take() == Some(at) {
            return self.write_through(bytes, at);
        }
        if !self.follows(at) || self.held.len() + bytes.len() > MAX_HELD {
            let rc = self.flush();
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        }
        let commit_header = bytes.len() == FRAME_HEADER && bytes[4..8] != [0, 0, 0, 0];
        if commit_header && self.held.is_empty() {
            // Either a one-frame commit or a header rewritten alone: as
            // SQLite would, header and then (if it comes) page.
            self.direct_page_at = Some(at + FRAME_HEADER as i64);
            return self.write_through(bytes, at);
        }
        if self.held.is_empty() {
            self.at = at;
        }
        self.held.extend_from_slice(bytes);
        self.commit_held = commit_header;
        ffi::SQLITE_OK
    }

    /// A write at `at` continues the held bytes.
    fn follows(&self, at: i64) -> bool {
        !self.held.is_empty() && at == self.at + self.held.len() as i64
    }
}

/// The wrapped file behind SQLite's pointer.
///
/// # Safety
/// `file` must be a file this VFS opened as a WAL and has not closed.
unsafe fn wal<'a>(file: *mut ffi::sqlite3_file) -> &'a mut WalFile {
    &mut *(file as *mut WalFile)
}

/// Settles the file, then forwards the call to the wrapped one; a failed
/// write-out is the call's result.
macro_rules! settled {
    ($file:expr, $method:ident, $missing:expr, |$f:ident, $inner:ident| $call:expr) => {{
        let w = wal($file);
        let rc = w.settle();
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        let $inner = w.inner;
        match w.inner_methods().$method {
            Some($f) => $call,
            None => $missing,
        }
    }};
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    let w = wal(file);
    let flushed = w.settle();
    let closed = match w.inner_methods().xClose {
        Some(close) => close(w.inner),
        None => ffi::SQLITE_OK,
    };
    ptr::drop_in_place(file as *mut WalFile);
    (*file).pMethods = ptr::null();
    if flushed != ffi::SQLITE_OK {
        flushed
    } else {
        closed
    }
}

unsafe extern "C" fn read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amount: c_int,
    at: ffi::sqlite3_int64,
) -> c_int {
    settled!(file, xRead, ffi::SQLITE_IOERR_READ, |f, i| f(
        i, buf, amount, at
    ))
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amount: c_int,
    at: ffi::sqlite3_int64,
) -> c_int {
    let bytes = std::slice::from_raw_parts(buf as *const u8, amount.max(0) as usize);
    wal(file).write(bytes, at)
}

unsafe extern "C" fn truncate(file: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    settled!(file, xTruncate, ffi::SQLITE_IOERR_TRUNCATE, |f, i| f(
        i, size
    ))
}

unsafe extern "C" fn sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    settled!(file, xSync, ffi::SQLITE_IOERR_FSYNC, |f, i| f(i, flags))
}

unsafe extern "C" fn file_size(
    file: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    settled!(file, xFileSize, ffi::SQLITE_IOERR_FSTAT, |f, i| f(i, size))
}

unsafe extern "C" fn lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    settled!(file, xLock, ffi::SQLITE_IOERR_LOCK, |f, i| f(i, level))
}

unsafe extern "C" fn unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    settled!(file, xUnlock, ffi::SQLITE_IOERR_UNLOCK, |f, i| f(i, level))
}

unsafe extern "C" fn check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    settled!(
        file,
        xCheckReservedLock,
        ffi::SQLITE_IOERR_CHECKRESERVEDLOCK,
        |f, i| f(i, out)
    )
}

unsafe extern "C" fn file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    settled!(file, xFileControl, ffi::SQLITE_NOTFOUND, |f, i| f(
        i, op, arg
    ))
}

unsafe extern "C" fn sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    let w = wal(file);
    match w.inner_methods().xSectorSize {
        Some(f) => f(w.inner),
        None => 4096,
    }
}

unsafe extern "C" fn device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    let w = wal(file);
    match w.inner_methods().xDeviceCharacteristics {
        Some(f) => f(w.inner),
        None => 0,
    }
}

unsafe extern "C" fn shm_map(
    file: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    settled!(file, xShmMap, ffi::SQLITE_IOERR_SHMMAP, |f, i| f(
        i, region, size, extend, out
    ))
}

unsafe extern "C" fn shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    settled!(file, xShmLock, ffi::SQLITE_IOERR_SHMLOCK, |f, i| f(
        i, offset, n, flags
    ))
}

unsafe extern "C" fn shm_barrier(file: *mut ffi::sqlite3_file) {
    let w = wal(file);
    // SQLite calls the shared-memory methods on the database file, never
    // on a WAL; forwarded for completeness. A barrier has no result, so a
    // write-out failing here could not be reported.
    let _ = w.settle();
    if let Some(f) = w.inner_methods().xShmBarrier {
        f(w.inner)
    }
}

unsafe extern "C" fn shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    settled!(file, xShmUnmap, ffi::SQLITE_OK, |f, i| f(i, delete))
}

unsafe extern "C" fn fetch(
    file: *mut ffi::sqlite3_file,
    at: ffi::sqlite3_int64,
    amount: c_int,
    out: *mut *mut c_void,
) -> c_int {
    let w = wal(file);
    let rc = w.settle();
    if rc != ffi::SQLITE_OK {
        return rc;
    }
    match w.inner_methods().xFetch {
        Some(f) => f(w.inner, at, amount, out),
        None => {
            *out = ptr::null_mut();
            ffi::SQLITE_OK
        }
    }
}

unsafe extern "C" fn unfetch(
    file: *mut ffi::sqlite3_file,
    at: ffi::sqlite3_int64,
    page: *mut c_void,
) -> c_int {
    settled!(file, xUnfetch, ffi::SQLITE_OK, |f, i| f(i, at, page))
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: Some(shm_map),
    xShmLock: Some(shm_lock),
    xShmBarrier: Some(shm_barrier),
    xShmUnmap: Some(shm_unmap),
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::{Connection, OpenFlags};
    use std::path::{Path, PathBuf};

    /// Each test registers a VFS of its own, so its counts are its own.
    fn vfs(name: &'static CStr) -> &'static WriteCounts {
        register_as(name).unwrap()
    }

    /// A writer through the VFS named `name`, that never checkpoints: the
    /// WAL keeps every frame, for [`recovered`] to read back.
    fn writer(path: &Path, name: &CStr, sync: &str) -> Connection {
        let c = Connection::open_with_flags_and_vfs(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
            name,
        )
        .unwrap();
        c.pragma_update(None, "journal_mode", "WAL").unwrap();
        c.pragma_update(None, "synchronous", sync).unwrap();
        c.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        c.execute_batch("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)")
            .unwrap();
        c
    }

    fn reader(path: &Path) -> Connection {
        Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
    }

    /// What a connection sees: (rows, total length of their values).
    fn seen(c: &Connection) -> (i64, i64) {
        c.query_row(
            "SELECT count(*), coalesce(sum(length(v)), 0) FROM t",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    }

    /// The database as a process that crashed now would leave it: its
    /// file and its WAL, copied while the writer still has them open, and
    /// opened elsewhere, where SQLite rebuilds the WAL's index from the
    /// frames' bytes alone (their checksums, their commit marks). Returns
    /// what it holds after an integrity check.
    fn recovered(path: &Path, scratch: &Path) -> (i64, i64) {
        let copy: PathBuf = scratch.join(format!(
            "copy-{}.db",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::copy(path, &copy).unwrap();
        let wal = |p: &Path| PathBuf::from(format!("{}-wal", p.display()));
        std::fs::copy(wal(path), wal(&copy)).unwrap();
        let c = Connection::open(&copy).unwrap();
        let check: String = c
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
        seen(&c)
    }

    fn row(i: usize, len: usize) -> String {
        format!("{i:0>len$}")
    }

    #[test]
    fn a_commit_of_many_frames_reaches_the_file_in_few_writes_and_readers_see_it() {
        let counts = vfs(c"wal-appends-many-frames");
        let dir = shepherd_testkit::TempDir::new("wal-appends");
        let path = dir.0.join("db");
        let mut w = writer(&path, c"wal-appends-many-frames", "NORMAL");
        let r = reader(&path);
        let mut expected = (0, 0);
        for round in 0..5 {
            let (asked, made) = (
                counts.asked.load(Ordering::Relaxed),
                counts.made.load(Ordering::Relaxed),
            );
            let tx = w.transaction().unwrap();
            // 60 rows of 3,000 bytes: more than 40 pages, 80 writes asked.
            for i in 0..60 {
                tx.execute(
                    "INSERT INTO t (v) VALUES (?1)",
                    [row(round * 100 + i, 3000)],
                )
                .unwrap();
            }
            tx.commit().unwrap();
            expected = (expected.0 + 60, expected.1 + 60 * 3000);
            let asked = counts.asked.load(Ordering::Relaxed) - asked;
            let made = counts.made.load(Ordering::Relaxed) - made;
            assert!(
                asked >= 80,
                "round {round}: SQLite asked for {asked} writes"
            );
            // About 190 KB of frames: two writes of at most 128 KiB.
            assert!(
                made <= 3,
                "round {round}: {asked} writes asked, {made} made"
            );
            // A reader on the plain VFS, and a copy recovered from the bytes
            // alone, both see every commit as soon as it returns.
            assert_eq!(seen(&r), expected, "round {round}: the reader");
            assert_eq!(
                recovered(&path, &dir.0),
                expected,
                "round {round}: recovered"
            );
        }
    }

    #[test]
    fn small_commits_and_full_sync_leave_a_complete_wal() {
        for (sync, name) in [
            ("NORMAL", c"wal-appends-small-normal"),
            ("FULL", c"wal-appends-small-full"),
        ] {
            vfs(name);
            let dir = shepherd_testkit::TempDir::new("wal-appends");
            let path = dir.0.join("db");
            let w = writer(&path, name, sync);
            let r = reader(&path);
            let mut expected = (0, 0);
            // One-page commits (a commit frame with nothing before it),
            // then two-page ones, then a row that overflows onto pages of
            // its own.
            for (i, len) in [(0, 10), (1, 10), (2, 2000), (3, 2500), (4, 9000), (5, 10)] {
                w.execute("INSERT INTO t (v) VALUES (?1)", [row(i, len)])
                    .unwrap();
                expected = (expected.0 + 1, expected.1 + len as i64);
                assert_eq!(seen(&r), expected, "{sync}, row {i}: the reader");
                assert_eq!(recovered(&path, &dir.0), expected, "{sync}, row {i}");
            }
        }
    }

    #[test]
    fn spilled_rewritten_and_rolled_back_frames_leave_a_consistent_wal() {
        vfs(c"wal-appends-spills");
        let dir = shepherd_testkit::TempDir::new("wal-appends");
        let path = dir.0.join("db");
        let mut w = writer(&path, c"wal-appends-spills", "NORMAL");
        // A cache of 20 pages: a transaction that changes more spills
        // frames into the WAL before its commit, and one that changes a
        // spilled page again overwrites its frame and has SQLite rewrite
        // the transaction's checksums at commit.
        w.pragma_update(None, "cache_size", 20).unwrap();
        let r = reader(&path);

        let tx = w.transaction().unwrap();
        for i in 0..200 {
            tx.execute("INSERT INTO t (v) VALUES (?1)", [row(i, 1500)])
                .unwrap();
        }
        tx.execute("UPDATE t SET v = v || 'x'", []).unwrap();
        tx.commit().unwrap();
        let expected = (200, 200 * 1501);
        assert_eq!(seen(&r), expected);
        assert_eq!(recovered(&path, &dir.0), expected);

        // A transaction that spills, then rolls back: its frames were
        // written (or held) past the WAL's end and must not count.
        let tx = w.transaction().unwrap();
        for i in 0..200 {
            tx.execute("INSERT INTO t (v) VALUES (?1)", [row(i, 1500)])
                .unwrap();
        }
        tx.rollback().unwrap();
        assert_eq!(seen(&r), expected);
        assert_eq!(recovered(&path, &dir.0), expected);

        // The next commit writes over them.
        w.execute("DELETE FROM t WHERE k % 2 = 0", []).unwrap();
        let expected = (100, 100 * 1501);
        assert_eq!(seen(&r), expected);
        assert_eq!(recovered(&path, &dir.0), expected);

        // A checkpoint that empties the WAL, then commits that start it
        // over from its first frame.
        w.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        for i in 0..3 {
            w.execute("INSERT INTO t (v) VALUES (?1)", [row(i, 5000)])
                .unwrap();
        }
        let expected = (103, 100 * 1501 + 3 * 5000);
        assert_eq!(seen(&r), expected);
        assert_eq!(recovered(&path, &dir.0), expected);
    }

    /// A commit whose frames cannot reach the file fails, and nothing of
    /// it is visible or recovered; the writer commits again once the file
    /// can grow. Runs in a child process (this test binary, started again
    /// for [`write_out_failure_child`]), because the file-size limit that
    /// makes the write-out fail holds for a whole process.
    #[test]
    fn a_commit_whose_frames_cannot_be_written_fails_and_leaves_nothing() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sqlite::wal_appends::tests::write_out_failure_child",
                "--ignored",
                "--nocapture",
            ])
            .env("WAL_APPENDS_CHILD", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("1 passed"), "the child ran no test: {text}");
    }

    #[test]
    #[ignore = "run by a_commit_whose_frames_cannot_be_written_fails_and_leaves_nothing"]
    fn write_out_failure_child() {
        if std::env::var_os("WAL_APPENDS_CHILD").is_none() {
            return;
        }
        vfs(c"wal-appends-write-fails");
        let dir = shepherd_testkit::TempDir::new("wal-appends");
        let path = dir.0.join("db");
        let mut w = writer(&path, c"wal-appends-write-fails", "NORMAL");
        let r = reader(&path);
        for i in 0..5 {
            w.execute("INSERT INTO t (v) VALUES (?1)", [row(i, 1000)])
                .unwrap();
        }
        let expected = (5, 5000);
        let wal_len = std::fs::metadata(format!("{}-wal", path.display()))
            .unwrap()
            .len();
        // No file of this process may now grow past 64 KiB beyond the WAL's
        // end; past it `write` fails (EFBIG) instead of raising SIGXFSZ.
        // The soft limit moves; the hard one stays as it was, so that the
        // test needs no privilege and can lift the soft limit again.
        let limit = |bytes: Option<u64>| {
            let mut l = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: plain system calls on this process's own settings,
            // `l` outliving both calls.
            unsafe {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut l), 0);
                l.rlim_cur = bytes.map_or(l.rlim_max, |b| b.min(l.rlim_max));
                assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &l), 0);
            }
        };
        limit(Some(wal_len + 64 * 1024));
        let tx = w.transaction().unwrap();
        for i in 0..60 {
            tx.execute("INSERT INTO t (v) VALUES (?1)", [row(100 + i, 3000)])
                .unwrap();
        }
        assert!(tx.commit().is_err(), "a commit past the limit succeeded");
        limit(None);
        assert_eq!(seen(&r), expected);
        assert_eq!(recovered(&path, &dir.0), expected);
        // The file can grow again: the next commit is whole.
        w.execute("INSERT INTO t (v) VALUES (?1)", [row(9, 1000)])
            .unwrap();
        let expected = (6, 6000);
        assert_eq!(seen(&w), expected);
        assert_eq!(seen(&r), expected);
        assert_eq!(recovered(&path, &dir.0), expected);
    }

    /// The store's connections that write go through this VFS, and its
    /// readers through SQLite's own.
    #[test]
    fn the_store_writes_through_it() {
        fn vfs_name(c: &Connection) -> String {
            let mut vfs: *mut ffi::sqlite3_vfs = ptr::null_mut();
            // SAFETY: a documented file control that stores the database
            // file's VFS pointer in its argument.
            let rc = unsafe {
                ffi::sqlite3_file_control(
                    c.handle(),
                    c"main".as_ptr(),
                    ffi::SQLITE_FCNTL_VFS_POINTER,
                    &mut vfs as *mut *mut ffi::sqlite3_vfs as *mut c_void,
                )
            };
            assert_eq!(rc, ffi::SQLITE_OK);
            // SAFETY: a registered VFS and its name live for the process.
            unsafe { CStr::from_ptr((*vfs).zName) }
                .to_string_lossy()
                .into_owned()
        }
        let dir = shepherd_testkit::TempDir::new("wal-appends");
        let path = dir.0.join("db");
        let w = super::super::open_conn(&path, false, super::super::SyncMode::Normal).unwrap();
        assert_eq!(vfs_name(&w), NAME.to_str().unwrap());
        let r = super::super::open_conn(&path, true, super::super::SyncMode::Normal).unwrap();
        assert_eq!(vfs_name(&r), "unix");
    }
}
