//! A consistent copy of a live SQLite database through SQLite's online
//! backup API: pages are copied a batch at a time while the server goes on
//! writing, and a write in between makes SQLite start over from a fresh
//! snapshot, so the copy is always one committed state of the database
//! (unlike copying the file, which can catch a half-checkpointed WAL).

use std::path::Path;
use std::time::Duration;

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};
use shepherd_core::Error;

/// Pages copied per step: small enough that the server's writer is never
/// kept waiting long, large enough that a big database does not take all
/// day.
const PAGES_PER_STEP: i32 = 1024;

fn failed(what: &str, e: impl std::fmt::Display) -> Error {
    Error::internal(format!("backup: {what}: {e}"))
}

/// Copies the database at `source` into a new file at `dest`, telling
/// `progress` the pages done and the pages in all after each step. The
/// source is opened read-only: backing up never changes it.
pub fn backup(source: &Path, dest: &Path, mut progress: impl FnMut(u64, u64)) -> Result<(), Error> {
    if !source.exists() {
        return Err(Error::not_found(
            "database_not_found",
            format!("no database at {}", source.display()),
        ));
    }
    let from = Connection::open_with_flags(
        source,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| failed(&format!("opening {}", source.display()), e))?;
    // The server's writer holds the write lock for a moment at a time.
    from.busy_timeout(Duration::from_secs(30))
        .map_err(|e| failed("setting a busy timeout", e))?;
    let mut to =
        Connection::open(dest).map_err(|e| failed(&format!("creating {}", dest.display()), e))?;
    {
        let copy = Backup::new(&from, &mut to).map_err(|e| failed("starting", e))?;
        loop {
            let step = copy
                .step(PAGES_PER_STEP)
                .map_err(|e| failed("copying", e))?;
            let p = copy.progress();
            let total = p.pagecount.max(0) as u64;
            progress(total.saturating_sub(p.remaining.max(0) as u64), total);
            match step {
                StepResult::Done => break,
                StepResult::More => {}
                // The source is busy or locked for a moment: try again shortly.
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
    // One file, no WAL beside it: the copy is what goes in the archive.
    to.pragma_update(None, "journal_mode", "DELETE")
        .map_err(|e| failed("closing the copy's journal", e))?;
    let ok: String = to
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .map_err(|e| failed("checking the copy", e))?;
    if ok != "ok" {
        return Err(failed("checking the copy", ok));
    }
    Ok(())
}
