//! `shepherd backup` and `shepherd restore`: one archive (`.tar.gz`) of a
//! server's state, made while it runs, straight from the configured
//! database and data directory (like `prune`, not through the server).
//!
//! The archive holds a manifest (`shepherd-backup.json`, first), the SQLite
//! database as SQLite's online backup API copied it (`database/…`: one
//! committed state, whatever the server was writing), every regular file and
//! directory of the data directory beside it (`data/…`: terminals'
//! scrollback, the runner's spool and run directories, the node id), and
//! last the SHA-256 of the manifest and of every file
//! (`shepherd-backup.sha256.json`). On PostgreSQL the database is backed up
//! with `pg_dump`, and `--files-only` archives the data directory alone.
//!
//! An archive is input from outside: a restore of a crafted one must not
//! become a way to plant a link the server then follows, a setuid file, or
//! a file outside the target. So a backup holds only regular files and
//! directories (symbolic links are left out), and `restore` reads the whole
//! archive once before it writes anything, refusing every other kind of
//! entry, any path outside `data/` and `database/`, special mode bits, and
//! a damaged or foreign archive (format, checksums); it then unpacks into a
//! new directory inside the target, files `0600` (`0700` when the archive
//! marks them executable) and directories `0700`, and swaps that in only
//! once all of it is written: a restore that fails leaves the old data as
//! it was.

use std::collections::{BTreeMap, HashMap};
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use shepherd_store::DatabaseUrl;

use super::admin::{human_bytes, load_config, progress};
use super::{Global, Result};

/// The archive's manifest, its first entry.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    /// This layout's version.
    format: u32,
    /// The shepherd that made it.
    shepherd_version: String,
    /// RFC 3339.
    created_at: String,
    /// `sqlite` or `postgres`.
    database: String,
    /// Where the SQLite database goes, relative to the data directory (the
    /// archive holds it as `database/<this>`); none when files only.
    database_file: Option<PathBuf>,
}

/// The archive's last entry (from format 2): what its content must hash to,
/// so that a damaged archive is refused before anything is replaced.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Checksums {
    /// SHA-256 (hex) of the manifest entry's bytes.
    manifest: String,
    /// SHA-256 (hex) of every regular file, by its name in the archive.
    files: BTreeMap<String, String>,
}

const MANIFEST: &str = "shepherd-backup.json";
const CHECKSUMS: &str = "shepherd-backup.sha256.json";
/// Format 2 added [`Checksums`] and holds no symbolic links; format 1
/// archives (no checksums) are still restored, with every other check.
const FORMAT: u32 = 2;
const OLDEST_FORMAT: u32 = 1;
/// Inside the target during a restore: the archive unpacked, then (while
/// they are swapped) what the target held before.
const STAGING: &str = ".shepherd-restore-new";
const REPLACED: &str = ".shepherd-restore-old";

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A reader that hashes what passes through it.
struct Hashing<R> {
    inner: R,
    hash: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// Appends one regular file with the given name and mode, returning the
/// SHA-256 of what was written. Exactly the size read from the open file
/// is written (zeros make up for a file that shrank meanwhile; what it
/// grew by is left out), so the entry's header never lies about its size.
fn append_file<W: Write>(
    tar: &mut tar::Builder<W>,
    name: &Path,
    file: File,
    meta: &std::fs::Metadata,
) -> std::io::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let size = meta.len();
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(size);
    // Only the owner's execute bit says anything worth keeping.
    header.set_mode(if meta.permissions().mode() & 0o100 != 0 {
        0o700
    } else {
        0o600
    });
    header.set_mtime(
        meta.modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs())
            .unwrap_or(0),
    );
    let mut reader = Hashing {
        inner: file.take(size).chain(std::io::repeat(0)).take(size),
        hash: Sha256::new(),
    };
    tar.append_data(&mut header, name, &mut reader)?;
    Ok(hex(&reader.hash.finalize()))
}

/// Opens a file of the data directory for reading without following a link.
fn open_nofollow(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// Whether `path` is the database or one of SQLite's files beside it.
fn is_database_file(path: &Path, db: Option<&Path>) -> bool {
    let Some(db) = db else { return false };
    let name = path.as_os_str().to_string_lossy();
    let db = db.as_os_str().to_string_lossy();
    name == db
        || ["-wal", "-shm", "-journal"]
            .iter()
            .any(|s| name == format!("{db}{s}"))
}

/// Every regular file and directory under `root`, parents first, and how
/// many symbolic links were left out.
fn walk(root: &Path, out: &mut Vec<PathBuf>, links: &mut usize) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(root)?.collect::<std::io::Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let kind = e.file_type()?;
        if kind.is_dir() {
            out.push(path.clone());
            walk(&path, out, links)?;
        } else if kind.is_file() {
            out.push(path);
        } else if kind.is_symlink() {
            // Never restored (a link in the data directory could lead the
            // server anywhere), so not archived either.
            *links += 1;
        }
        // Sockets and pipes (a live terminal's) are not data.
    }
    Ok(())
}

pub fn backup(g: &Global, file: &Path, files_only: bool) -> Result<()> {
    if g.server_given {
        return Err(
            "backup works on the database and data directory of the configuration \
(--config or SHEPHERD_CONFIG), on the server's machine, not through --server"
                .into(),
        );
    }
    let config = load_config(g)?;
    let data_dir = std::path::absolute(&config.data_dir)?;
    if !data_dir.is_dir() {
        return Err(format!("no data directory at {}", data_dir.display()).into());
    }
    let db_path = match shepherd_store::parse_database_url(&config.database_url)? {
        DatabaseUrl::Sqlite(path) => Some(std::path::absolute(path)?),
        DatabaseUrl::Postgres(_) if files_only => None,
        DatabaseUrl::Postgres(_) => {
            return Err(
                "the database is PostgreSQL: back it up with pg_dump (see Operations in \
the README), and the data directory with `shepherd backup --files-only FILE`"
                    .into(),
            )
        }
    };
    let out_path = std::path::absolute(file)?;
    let partial = out_path.with_extension("partial");
    let manifest = Manifest {
        format: FORMAT,
        shepherd_version: env!("CARGO_PKG_VERSION").into(),
        created_at: shepherd_core::time::to_rfc3339(shepherd_store::now_ms()),
        database: if db_path.is_some() {
            "sqlite"
        } else {
            "postgres"
        }
        .into(),
        database_file: match (&db_path, files_only) {
            (Some(db), false) => Some(
                db.strip_prefix(&data_dir)
                    .map(Path::to_owned)
                    .unwrap_or_else(|_| PathBuf::from(db.file_name().unwrap_or_default())),
            ),
            _ => None,
        },
    };
    let gz = flate2::write::GzEncoder::new(File::create(&partial)?, flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    tar.follow_symlinks(false);
    let text = serde_json::to_vec_pretty(&manifest)?;
    let mut sums = Checksums {
        manifest: hex(&Sha256::digest(&text)),
        files: BTreeMap::new(),
    };
    let mut header = tar::Header::new_gnu();
    header.set_size(text.len() as u64);
    header.set_mode(0o600);
    header.set_mtime(shepherd_store::now_ms() as u64 / 1000);
    tar.append_data(&mut header, MANIFEST, text.as_slice())?;

    let mut db_bytes = 0;
    if let (Some(db), Some(name)) = (&db_path, &manifest.database_file) {
        let copy = partial.with_extension("db-copy");
        let bar = progress(format!("copying the database {}", db.display()), true);
        let copied = shepherd_store::backup_sqlite(db, &copy, |done, total| {
            bar.set_message(format!("copying the database: {done} of {total} pages"));
        });
        bar.finish_and_clear();
        if let Err(e) = copied {
            let _ = std::fs::remove_file(&copy);
            let _ = std::fs::remove_file(&partial);
            return Err(e.into());
        }
        let f = File::open(&copy)?;
        let meta = f.metadata()?;
        db_bytes = meta.len();
        let entry = Path::new("database").join(name);
        let sum = append_file(&mut tar, &entry, f, &meta)?;
        sums.files.insert(entry.display().to_string(), sum);
        std::fs::remove_file(&copy)?;
    }

    let mut paths = Vec::new();
    let mut links = 0;
    walk(&data_dir, &mut paths, &mut links)?;
    let bar = progress("archiving the data directory".into(), true);
    let (mut files, mut bytes) = (0u64, 0u64);
    for path in &paths {
        if is_database_file(path, db_path.as_deref()) || *path == partial || *path == out_path {
            continue;
        }
        let rel = path.strip_prefix(&data_dir).expect("walked under it");
        let name = Path::new("data").join(rel);
        // A file that went away while the archive was made (a run that
        // ended) is simply not in it; one replaced by a link is not
        // followed.
        let opened = open_nofollow(path).and_then(|f| f.metadata().map(|m| (f, m)));
        let (f, meta) = match opened {
            Ok(x) => x,
            Err(e) if std::fs::symlink_metadata(path).is_err() => {
                tracing::debug!(error = %e, "gone while archiving");
                continue;
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                links += 1;
                continue;
            }
            Err(e) => return Err(format!("{}: {e}", path.display()).into()),
        };
        if meta.is_dir() {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Directory);
            h.set_size(0);
            h.set_mode(0o700);
            tar.append_data(&mut h, &name, std::io::empty())?;
            continue;
        }
        if !meta.is_file() {
            continue;
        }
        let sum = append_file(&mut tar, &name, f, &meta)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        sums.files.insert(name.display().to_string(), sum);
        files += 1;
        bytes += meta.len();
        bar.set_message(format!("archiving the data directory: {files} files"));
    }
    bar.finish_and_clear();
    let text = serde_json::to_vec_pretty(&sums)?;
    let mut header = tar::Header::new_gnu();
    header.set_size(text.len() as u64);
    header.set_mode(0o600);
    header.set_mtime(shepherd_store::now_ms() as u64 / 1000);
    tar.append_data(&mut header, CHECKSUMS, text.as_slice())?;
    let mut gz = tar.into_inner()?;
    gz.flush()?;
    gz.finish()?.sync_all()?;
    std::fs::rename(&partial, &out_path)?;
    let links_note = match links {
        0 => String::new(),
        n => format!(" ({n} symbolic links left out: a backup holds files and directories only)"),
    };
    match &manifest.database_file {
        Some(_) => println!(
            "backed up the database ({}) and {files} files ({}) of {} to {}{links_note}",
            human_bytes(db_bytes as i64),
            human_bytes(bytes as i64),
            data_dir.display(),
            out_path.display()
        ),
        None => println!(
            "backed up {files} files ({}) of {} to {} (files only: back up the database with pg_dump){links_note}",
            human_bytes(bytes as i64),
            data_dir.display(),
            out_path.display()
        ),
    }
    Ok(())
}

/// The path an archive entry names, below its top folder, if it is safe to
/// write under a directory: relative, with no `..`.
fn entry_path(path: &Path, top: &str) -> Option<PathBuf> {
    let rel = path.strip_prefix(top).ok()?;
    rel.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then(|| rel.to_owned())
}

/// What an entry becomes: a directory, or a file with the mode it gets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File(u32),
}

/// What a checked archive holds.
struct Checked {
    manifest: Manifest,
    files: u64,
}

/// Reads the archive through, checking every entry and (from format 2)
/// every checksum, and writes its files and directories under `into` when
/// given. Without `into` nothing is written anywhere: that is the check a
/// restore makes before it touches the target.
fn read_archive(file: &Path, into: Option<&Path>) -> Result<Checked> {
    let refuse = |what: String| -> crate::server::anyhow_like::Error {
        format!("{}: {what}; nothing was restored", file.display()).into()
    };
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(File::open(file)?));
    let mut entries = archive
        .entries()
        .map_err(|e| refuse(format!("not a shepherd backup ({e})")))?;
    let (manifest, manifest_sum) = read_manifest(entries.next()).map_err(refuse)?;
    let db_entry = check_manifest(&manifest).map_err(refuse)?;
    // Every name unpacked so far, relative to the target, and whether it
    // is a directory: a name twice, a file below a file, are refused.
    let mut seen: HashMap<PathBuf, bool> = HashMap::new();
    let mut sums: BTreeMap<String, String> = BTreeMap::new();
    let mut listed: Option<Checksums> = None;
    let mut files = 0u64;
    for entry in entries {
        let mut entry = entry.map_err(|e| refuse(format!("damaged ({e})")))?;
        let path = entry
            .path()
            .map_err(|e| refuse(format!("damaged ({e})")))?
            .into_owned();
        let shown = path.display().to_string();
        if listed.is_some() {
            return Err(refuse(format!(
                "{shown} comes after the checksum list (damaged or not made by shepherd backup)"
            )));
        }
        let kind = entry_kind(entry.header(), &shown).map_err(refuse)?;
        if manifest.format >= 2 && kind != Kind::Dir && path == Path::new(CHECKSUMS) {
            let mut text = Vec::new();
            entry.read_to_end(&mut text)?;
            listed = Some(
                serde_json::from_slice(&text)
                    .map_err(|e| refuse(format!("unreadable checksum list: {e}")))?,
            );
            continue;
        }
        let rel = entry_path(&path, "data")
            .or_else(|| entry_path(&path, "database"))
            .ok_or_else(|| {
                refuse(format!(
                    "{shown} is outside the data directory (entries are data/… and database/…)"
                ))
            })?;
        claim_name(&mut seen, &rel, kind, &shown).map_err(refuse)?;
        let target = into.map(|root| root.join(&rel));
        match kind {
            Kind::Dir => {
                if let Some(target) = target {
                    DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(&target)
                        .map_err(|e| format!("{}: {e}", target.display()))?;
                }
            }
            Kind::File(mode) => {
                let sum = unpack_file(&mut entry, target.as_deref(), mode)
                    .map_err(|e| refuse(format!("{shown}: {e}")))?;
                sums.insert(shown, sum);
                files += 1;
            }
        }
    }
    if let Some(db) = &db_entry {
        if !seen.contains_key(&entry_path(db, "database").expect("checked above")) {
            return Err(refuse(format!(
                "the manifest names the database {} but the archive does not hold it",
                db.display()
            )));
        }
    }
    if manifest.format >= 2 {
        check_sums(&manifest_sum, listed, &sums).map_err(refuse)?;
    }
    Ok(Checked { manifest, files })
}

/// The archive's first entry, which must be its manifest: the manifest and
/// its checksum.
fn read_manifest<R: Read>(
    first: Option<std::io::Result<tar::Entry<'_, R>>>,
) -> std::result::Result<(Manifest, String), String> {
    let mut first = match first {
        Some(first) => first.map_err(|e| format!("not a shepherd backup ({e})"))?,
        None => return Err("empty".into()),
    };
    if first.path().map_err(|e| e.to_string())?.as_ref() != Path::new(MANIFEST) {
        return Err("not a shepherd backup (no manifest)".into());
    }
    let mut text = Vec::new();
    first.read_to_end(&mut text).map_err(|e| e.to_string())?;
    let manifest =
        serde_json::from_slice(&text).map_err(|e| format!("unreadable manifest: {e}"))?;
    Ok((manifest, hex(&Sha256::digest(&text))))
}

/// A manifest this build can restore: its format, its database, and where
/// the database file goes (inside the data directory), if it has one.
fn check_manifest(manifest: &Manifest) -> std::result::Result<Option<PathBuf>, String> {
    if !(OLDEST_FORMAT..=FORMAT).contains(&manifest.format) {
        return Err(format!(
            "a backup of format {}; this shepherd reads formats {OLDEST_FORMAT} to {FORMAT}",
            manifest.format
        ));
    }
    if !matches!(manifest.database.as_str(), "sqlite" | "postgres") {
        return Err(format!(
            "the manifest names an unknown database {:?}",
            manifest.database
        ));
    }
    let Some(db) = &manifest.database_file else {
        return Ok(None);
    };
    let inside =
        !db.as_os_str().is_empty() && db.components().all(|c| matches!(c, Component::Normal(_)));
    if !inside {
        return Err(format!(
            "the manifest puts the database at {}, outside the data directory",
            db.display()
        ));
    }
    Ok(Some(Path::new("database").join(db)))
}

/// What an entry's header makes it: only regular files (without special
/// mode bits) and directories are restored.
fn entry_kind(header: &tar::Header, shown: &str) -> std::result::Result<Kind, String> {
    match header.entry_type() {
        tar::EntryType::Regular | tar::EntryType::Continuous => {
            let mode = header
                .mode()
                .map_err(|e| format!("{shown}: unreadable mode ({e})"))?;
            if mode & 0o7000 != 0 {
                return Err(format!(
                    "{shown} has mode {mode:04o}: a backup holds no setuid, setgid or sticky bits"
                ));
            }
            Ok(Kind::File(if mode & 0o100 != 0 { 0o700 } else { 0o600 }))
        }
        tar::EntryType::Directory => Ok(Kind::Dir),
        other => {
            let what = match other {
                tar::EntryType::Symlink => "a symbolic link",
                tar::EntryType::Link => "a hard link",
                tar::EntryType::Char | tar::EntryType::Block => "a device",
                tar::EntryType::Fifo => "a named pipe",
                _ => "an entry of an unknown type",
            };
            Err(format!(
                "{shown} is {what}: a backup holds only regular files and directories"
            ))
        }
    }
}

/// Records `rel` as unpacked (a directory, or a file), refusing a name
/// seen before (a directory may repeat), a file below a file, and a file
/// in place of the target itself.
fn claim_name(
    seen: &mut HashMap<PathBuf, bool>,
    rel: &Path,
    kind: Kind,
    shown: &str,
) -> std::result::Result<(), String> {
    // Every directory above it must be (or become) a directory.
    for parent in rel.ancestors().skip(1) {
        if parent.as_os_str().is_empty() {
            break;
        }
        if !*seen.entry(parent.to_owned()).or_insert(true) {
            return Err(format!("{shown} is below a file of the same name"));
        }
    }
    match (seen.get(rel), kind) {
        (None, _) | (Some(true), Kind::Dir) => {}
        _ => return Err(format!("{shown} appears twice")),
    }
    if kind != Kind::Dir && rel.as_os_str().is_empty() {
        return Err(format!("{shown} is a file in place of a directory"));
    }
    seen.insert(rel.to_owned(), kind == Kind::Dir);
    Ok(())
}

/// Copies a file entry to a new file at `target` with `mode` (or reads it
/// through, without a target); the entry's SHA-256.
fn unpack_file(
    entry: &mut impl Read,
    target: Option<&Path>,
    mode: u32,
) -> std::result::Result<String, String> {
    let mut hashing = Hashing {
        inner: entry,
        hash: Sha256::new(),
    };
    match target {
        Some(target) => {
            if let Some(parent) = target.parent() {
                DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(parent)
                    .map_err(|e| format!("{}: {e}", parent.display()))?;
            }
            // A new file, never a link followed: the staging directory
            // holds only what the restore made.
            let mut out = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(target)
                .map_err(|e| format!("{}: {e}", target.display()))?;
            std::io::copy(&mut hashing, &mut out)
                .and_then(|_| out.sync_all())
                .map_err(|e| format!("{}: {e}", target.display()))?;
        }
        None => {
            std::io::copy(&mut hashing, &mut std::io::sink()).map_err(|e| e.to_string())?;
        }
    }
    Ok(hex(&hashing.hash.finalize()))
}

/// The checksum list (format 2 on) against the manifest's and every file's
/// checksum, both ways.
fn check_sums(
    manifest_sum: &str,
    listed: Option<Checksums>,
    sums: &BTreeMap<String, String>,
) -> std::result::Result<(), String> {
    let listed = listed.ok_or_else(|| {
        "no checksum list at its end (cut short, or not made by shepherd backup)".to_owned()
    })?;
    if listed.manifest != manifest_sum {
        return Err("the manifest does not match its checksum (damaged)".into());
    }
    for (name, sum) in sums {
        match listed.files.get(name) {
            Some(want) if want == sum => {}
            Some(_) => return Err(format!("{name} does not match its checksum (damaged)")),
            None => return Err(format!("{name} is not in the checksum list")),
        }
    }
    if let Some(name) = listed.files.keys().find(|n| !sums.contains_key(*n)) {
        return Err(format!(
            "{name} is in the checksum list but not in the archive (damaged)"
        ));
    }
    Ok(())
}

/// The entries of `dir` but the restore's own.
fn own_entries(dir: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let name = e?.file_name();
        if name != STAGING && name != REPLACED {
            names.push(name);
        }
    }
    Ok(names)
}

/// Moves the entries named from one directory to another, moving them back
/// if one fails (the rename of an entry within one directory tree is
/// atomic, and the staging directory is inside the target, so on the same
/// file system even when the target is a mount point).
fn move_all(names: &[std::ffi::OsString], from: &Path, to: &Path) -> std::io::Result<()> {
    for (i, name) in names.iter().enumerate() {
        if let Err(e) = std::fs::rename(from.join(name), to.join(name)) {
            for done in &names[..i] {
                let _ = std::fs::rename(to.join(done), from.join(done));
            }
            return Err(e);
        }
    }
    Ok(())
}

/// Puts what `staging` holds in place of what `data_dir` held. Until the
/// last step the old entries are whole in `REPLACED`, and put back when a
/// rename fails.
fn swap_in(data_dir: &Path, staging: &Path) -> Result<()> {
    let old = data_dir.join(REPLACED);
    let before = own_entries(data_dir)?;
    let new = own_entries(staging)?;
    DirBuilder::new().mode(0o700).create(&old)?;
    if let Err(e) = move_all(&before, data_dir, &old) {
        let _ = std::fs::remove_dir(&old);
        return Err(format!("cannot move the old data aside: {e}").into());
    }
    if let Err(e) = move_all(&new, staging, data_dir) {
        let back = move_all(&before, &old, data_dir);
        if back.is_ok() {
            let _ = std::fs::remove_dir(&old);
        }
        return Err(format!(
            "cannot move the restored data in: {e}{}",
            match back {
                Ok(()) => String::new(),
                Err(b) => format!("; the old data is in {} ({b})", old.display()),
            }
        )
        .into());
    }
    let _ = std::fs::remove_dir(staging);
    if let Err(e) = std::fs::remove_dir_all(&old) {
        eprintln!(
            "restored; the old data could not all be removed from {}: {e}",
            old.display()
        );
    }
    Ok(())
}

pub fn restore(file: &Path, data_dir: &Path, force: bool) -> Result<()> {
    let data_dir = std::path::absolute(data_dir)?;
    if data_dir.join(REPLACED).symlink_metadata().is_ok() {
        return Err(format!(
            "{} holds the data an interrupted restore replaced: move it back or away first",
            data_dir.join(REPLACED).display()
        )
        .into());
    }
    let replacing = data_dir.exists() && !own_entries(&data_dir)?.is_empty();
    if replacing && !force {
        return Err(format!(
            "{} is not empty: restore into an empty directory, or add --force to replace \
what is in it",
            data_dir.display()
        )
        .into());
    }
    // The whole archive is checked before the target is touched: a crafted
    // or damaged one changes nothing.
    read_archive(file, None)?;
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&data_dir)?;
    let staging = data_dir.join(STAGING);
    // What an interrupted restore left unpacked is only ever a copy.
    if staging.symlink_metadata().is_ok() {
        std::fs::remove_dir_all(&staging)?;
    }
    DirBuilder::new().mode(0o700).create(&staging)?;
    // Read again, written this time; checked again, for the file could
    // have changed since.
    let checked = match read_archive(file, Some(&staging)) {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
    };
    // Replaced, not merged: a database's leftover WAL beside the restored
    // file would be read into it.
    if let Err(e) = swap_in(&data_dir, &staging) {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    // The data directory is private, as `serve` would make it.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let Checked { manifest, files } = checked;
    let db_note = match (&manifest.database_file, manifest.database.as_str()) {
        (Some(db), _) => format!(
            "; the database is {} (the default place when it is shepherd.db)",
            data_dir.join(db).display()
        ),
        (None, "postgres") => {
            "; restore the database with pg_restore (see Operations in the README)".into()
        }
        (None, _) => String::new(),
    };
    println!(
        "restored {files} files from a backup made {} by shepherd {} into {}{db_note}\nserve it: SHEPHERD_DATA_DIR={} shepherd serve",
        manifest.created_at,
        manifest.shepherd_version,
        data_dir.display(),
        data_dir.display()
    );
    std::io::stdout().flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_outside_their_folder_are_refused() {
        assert_eq!(
            entry_path(Path::new("data/a/b"), "data"),
            Some(PathBuf::from("a/b"))
        );
        assert_eq!(entry_path(Path::new("data/../x"), "data"), None);
        assert_eq!(entry_path(Path::new("/etc/passwd"), "data"), None);
        assert_eq!(entry_path(Path::new("other/x"), "data"), None);
    }

    #[test]
    fn the_database_and_its_journal_files_are_recognised() {
        let db = Path::new("/d/shepherd.db");
        for p in ["/d/shepherd.db", "/d/shepherd.db-wal", "/d/shepherd.db-shm"] {
            assert!(is_database_file(Path::new(p), Some(db)), "{p}");
        }
        assert!(!is_database_file(Path::new("/d/shepherd.db.bak"), Some(db)));
        assert!(!is_database_file(Path::new("/d/shepherd.db"), None));
    }
}
