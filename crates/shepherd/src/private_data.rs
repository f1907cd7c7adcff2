//! The data directory is private to the user Shepherd runs as.
//!
//! It holds the database (tokens' hashes, specs, transcripts), terminal
//! scrollback (anything typed or printed, tokens included) and agents'
//! output; a world-readable one handed all of that to every local user
//! (finding 7 of issue 35). So the server-side verbs create what they
//! create under the umask `077` (directories `0700`, files `0600`), set
//! before any thread starts, and `serve` and `runner` take group and other
//! permissions (and setuid, setgid and sticky bits) away from what an older
//! version, a restore or anyone else left behind: the directory and every
//! entry in it, known to Shepherd or not (the agents' checkouts in
//! `worktrees` keep their modes), saying so in the log. Symbolic links are
//! never followed, counted and reported instead: nothing in the data
//! directory is meant to be one.
//!
//! The agents and terminals Shepherd starts get the umask the process was
//! started with back ([`inherited_umask`]): what they create is the user's
//! work in the user's repositories, not Shepherd's data.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The umask Shepherd's own files are created under.
pub const PRIVATE_UMASK: u32 = 0o077;

static INHERITED: OnceLock<u32> = OnceLock::new();

/// Sets the process's umask to [`PRIVATE_UMASK`] and records the one it
/// replaced. Call it before any thread starts (the mask is the process's).
pub fn restrict_umask() {
    // SAFETY: umask(2) swaps the process's file mode mask; it cannot fail.
    let old = unsafe { libc::umask(PRIVATE_UMASK as libc::mode_t) };
    let _ = INHERITED.set(old as u32);
}

/// The umask the process started with, once [`restrict_umask`] replaced
/// it: what spawned agents and terminals are given back.
pub fn inherited_umask() -> Option<u32> {
    INHERITED.get().copied()
}

/// What [`tighten`] changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tightened {
    pub dirs: usize,
    pub files: usize,
    /// Entries whose mode could not be read or changed.
    pub failed: usize,
    /// Symbolic links found (left alone, never followed).
    pub links: usize,
}

/// The agents' checkouts: the directory is made private, which closes them
/// to others as well; what is in them (the user's work) keeps its modes.
const WORKTREES: &str = "worktrees";

/// Takes group and other permissions (and special bits) away from the data
/// directory and everything in it, and from a SQLite database kept
/// elsewhere (with its `-wal` and `-shm`; not its directory, which is not
/// Shepherd's). Symbolic links are never followed.
pub fn tighten(data_dir: &Path, database: Option<&Path>) -> Tightened {
    let mut t = Tightened::default();
    if data_dir.exists() && private(data_dir, true, &mut t) {
        match std::fs::read_dir(data_dir) {
            Ok(entries) => {
                for entry in entries.flatten() {
                    if entry.file_name() == WORKTREES {
                        private(&entry.path(), true, &mut t);
                    } else {
                        one(&entry, &mut t);
                    }
                }
            }
            Err(_) => t.failed += 1,
        }
    }
    if let Some(db) = database.filter(|db| !db.starts_with(data_dir)) {
        for suffix in ["", "-wal", "-shm"] {
            let mut p = db.as_os_str().to_owned();
            p.push(suffix);
            let p = PathBuf::from(p);
            if p.exists() {
                private(&p, false, &mut t);
            }
        }
    }
    t
}

/// One entry, by its own type (a symbolic link is neither a file nor a
/// directory: counted, not followed). Sockets and pipes are left alone.
fn one(entry: &std::fs::DirEntry, t: &mut Tightened) {
    match entry.file_type() {
        Ok(ft) if ft.is_dir() => walk(&entry.path(), t),
        Ok(ft) if ft.is_file() => {
            private(&entry.path(), false, t);
        }
        Ok(ft) if ft.is_symlink() => t.links += 1,
        Ok(_) => {}
        Err(_) => t.failed += 1,
    }
}

fn walk(dir: &Path, t: &mut Tightened) {
    if !private(dir, true, t) {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        t.failed += 1;
        return;
    };
    for entry in entries.flatten() {
        one(&entry, t);
    }
}

/// Removes group, other and special bits from one directory or regular file, through
/// a descriptor opened without following a link (so a link put in its place
/// meanwhile changes nothing elsewhere). False if it is not what was
/// expected or cannot be opened.
fn private(path: &Path, dir: bool, t: &mut Tightened) -> bool {
    let opened: std::io::Result<File> = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let Ok(f) = opened else {
        t.failed += 1;
        return false;
    };
    let Ok(meta) = f.metadata() else {
        t.failed += 1;
        return false;
    };
    if meta.is_dir() != dir || !(meta.is_dir() || meta.is_file()) {
        return false;
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & !0o700 != 0 {
        match f.set_permissions(std::fs::Permissions::from_mode(mode & 0o700)) {
            Ok(()) if dir => t.dirs += 1,
            Ok(()) => t.files += 1,
            Err(_) => t.failed += 1,
        }
    }
    true
}

/// [`tighten`], with a log line when it changed anything or failed.
pub fn tighten_and_log(data_dir: &Path, database: Option<&Path>) {
    let t = tighten(data_dir, database);
    if t.dirs + t.files > 0 {
        tracing::warn!(
            data_dir = %data_dir.display(),
            directories = t.dirs,
            files = t.files,
            "the data directory was open to other users: made it private (directories 0700, files 0600)"
        );
    }
    if t.failed > 0 {
        tracing::warn!(
            data_dir = %data_dir.display(),
            entries = t.failed,
            "some entries of the data directory could not be made private; check their owner and mode"
        );
    }
    if t.links > 0 {
        tracing::warn!(
            data_dir = %data_dir.display(),
            links = t.links,
            "the data directory holds symbolic links: Shepherd never follows them (what they lead to is neither served nor changed); remove them"
        );
    }
}

/// The SQLite database file named by a database URL, if it names one.
pub fn sqlite_path(database_url: &str) -> Option<PathBuf> {
    match shepherd_store::parse_database_url(database_url) {
        Ok(shepherd_store::DatabaseUrl::Sqlite(path)) => Some(path),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
    }

    fn set(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    #[test]
    fn an_open_data_directory_is_made_private_without_following_links() {
        let root = std::env::temp_dir().join(format!("shepherd-private-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let data = root.join("data");
        let seg = data.join("sessions/ses_1/wk_1");
        std::fs::create_dir_all(&seg).unwrap();
        std::fs::create_dir_all(data.join("worktrees/T-1/src")).unwrap();
        std::fs::create_dir_all(root.join("elsewhere")).unwrap();
        for (p, m) in [
            (data.join("shepherd.db"), 0o644),
            (seg.join("00000000000000000000.seg"), 0o644),
            (data.join("worktrees/T-1/src/lib.rs"), 0o644),
            (root.join("elsewhere/secret"), 0o644),
            (data.join("notes.txt"), 0o644),
            (data.join("restored/setuid"), 0o4777),
        ] {
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent).unwrap();
            }
            std::fs::write(&p, "x").unwrap();
            set(&p, m);
        }
        for d in [
            &data,
            &data.join("sessions"),
            &data.join("sessions/ses_1"),
            &seg,
            &data.join("worktrees"),
            &data.join("worktrees/T-1"),
            &data.join("restored"),
        ] {
            set(d, 0o755);
        }
        // A link to something outside is left alone, and so is its target.
        std::os::unix::fs::symlink(root.join("elsewhere/secret"), data.join("link")).unwrap();
        let t = tighten(&data, Some(&data.join("shepherd.db")));
        assert_eq!(
            t,
            Tightened {
                dirs: 6,
                files: 4,
                failed: 0,
                links: 1,
            }
        );
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(&data.join("sessions")), 0o700);
        assert_eq!(mode(&seg), 0o700);
        assert_eq!(mode(&seg.join("00000000000000000000.seg")), 0o600);
        assert_eq!(mode(&data.join("shepherd.db")), 0o600);
        assert_eq!(mode(&data.join("worktrees")), 0o700);
        // The agents' checkouts keep their modes (closed by `worktrees`).
        assert_eq!(mode(&data.join("worktrees/T-1")), 0o755);
        assert_eq!(mode(&data.join("worktrees/T-1/src/lib.rs")), 0o644);
        assert_eq!(mode(&root.join("elsewhere/secret")), 0o644);
        // Entries Shepherd does not know are made private too, special
        // bits taken away.
        assert_eq!(mode(&data.join("notes.txt")), 0o600);
        assert_eq!(mode(&data.join("restored")), 0o700);
        let special = std::fs::metadata(data.join("restored/setuid")).unwrap();
        assert_eq!(special.permissions().mode() & 0o7777, 0o700);
        // A second pass has nothing to do (the link is counted again).
        assert_eq!(
            tighten(&data, None),
            Tightened {
                links: 1,
                ..Tightened::default()
            }
        );
        // A database outside the data directory: the file, not its directory.
        let db = root.join("elsewhere/app.db");
        std::fs::write(&db, "x").unwrap();
        set(&db, 0o644);
        let t = tighten(&data, Some(&db));
        assert_eq!(t.files, 1);
        assert_eq!(mode(&db), 0o600);
        assert_eq!(mode(&root.join("elsewhere")), 0o755);
        let _ = std::fs::remove_dir_all(&root);
    }
}
