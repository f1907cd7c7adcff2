//! `shepherd backup` and `shepherd restore`: one archive (`.tar.gz`) of a
//! server's state, made while it runs, straight from the configured
//! database and data directory (like `prune`, not through the server).
//!
//! The archive holds a manifest (`shepherd-backup.json`), the SQLite
//! database as SQLite's online backup API copied it (`database/…`: one
//! committed state, whatever the server was writing), and every file of
//! the data directory beside it (`data/…`: terminals' scrollback, the
//! runner's spool and run directories, the node id). On PostgreSQL the
//! database is backed up with `pg_dump`, and `--files-only` archives the
//! data directory alone.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
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

const MANIFEST: &str = "shepherd-backup.json";
const FORMAT: u32 = 1;

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

/// Every file, directory and symbolic link under `root`, parents first.
fn walk(root: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(root)?.collect::<std::io::Result<_>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let kind = e.file_type()?;
        if kind.is_dir() {
            out.push(path.clone());
            walk(&path, out)?;
        } else if kind.is_file() || kind.is_symlink() {
            out.push(path);
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
        db_bytes = std::fs::metadata(&copy)?.len();
        tar.append_path_with_name(&copy, Path::new("database").join(name))?;
        std::fs::remove_file(&copy)?;
    }

    let mut paths = Vec::new();
    walk(&data_dir, &mut paths)?;
    let bar = progress("archiving the data directory".into(), true);
    let (mut files, mut bytes) = (0u64, 0u64);
    for path in &paths {
        if is_database_file(path, db_path.as_deref()) || *path == partial || *path == out_path {
            continue;
        }
        let rel = path.strip_prefix(&data_dir).expect("walked under it");
        let name = Path::new("data").join(rel);
        let meta = std::fs::symlink_metadata(path)?;
        if meta.is_dir() {
            tar.append_dir(&name, path)?;
            continue;
        }
        // A file that went away while the archive was made (a run that
        // ended) is simply not in it.
        match tar.append_path_with_name(path, &name) {
            Ok(()) => {
                files += 1;
                bytes += meta.len();
            }
            Err(e) if !path.exists() => tracing::debug!(error = %e, "gone while archiving"),
            Err(e) => return Err(format!("{}: {e}", path.display()).into()),
        }
        bar.set_message(format!("archiving the data directory: {files} files"));
    }
    bar.finish_and_clear();
    let mut gz = tar.into_inner()?;
    gz.flush()?;
    gz.finish()?.sync_all()?;
    std::fs::rename(&partial, &out_path)?;
    match &manifest.database_file {
        Some(_) => println!(
            "backed up the database ({}) and {files} files ({}) of {} to {}",
            human_bytes(db_bytes as i64),
            human_bytes(bytes as i64),
            data_dir.display(),
            out_path.display()
        ),
        None => println!(
            "backed up {files} files ({}) of {} to {} (files only: back up the database with pg_dump)",
            human_bytes(bytes as i64),
            data_dir.display(),
            out_path.display()
        ),
    }
    Ok(())
}

/// Where an archive entry goes under `data_dir`: entries live under `data/`
/// (the data directory) or `database/` (the SQLite file).
fn restore_target(file: &Path, path: &Path, data_dir: &Path) -> Result<PathBuf> {
    entry_path(path, "data")
        .or_else(|| entry_path(path, "database"))
        .map(|rel| data_dir.join(rel))
        .ok_or_else(|| format!("{}: unexpected entry {}", file.display(), path.display()).into())
}

/// Creates `target`'s parent directories and makes sure they resolve under
/// `root` (the canonical data directory), whatever links lie on the way.
fn create_parent_inside(target: &Path, root: &Path, file: &Path) -> Result<()> {
    let Some(parent) = target.parent() else {
        return Ok(());
    };
    // Checked before anything is created: the deepest part of the path that
    // exists decides where the new directories would land.
    let existing = parent
        .ancestors()
        .find(|a| a.symlink_metadata().is_ok())
        .unwrap_or(Path::new("/"));
    if !existing.canonicalize()?.starts_with(root) {
        return Err(format!(
            "{}: {} would be written outside {}",
            file.display(),
            target.display(),
            root.display()
        )
        .into());
    }
    std::fs::create_dir_all(parent)?;
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

pub fn restore(file: &Path, data_dir: &Path, force: bool) -> Result<()> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(File::open(file)?));
    archive.set_preserve_permissions(true);
    let mut entries = archive.entries()?;
    let manifest: Manifest = match entries.next() {
        Some(first) => {
            let mut first = first?;
            if first.path()?.as_ref() != Path::new(MANIFEST) {
                return Err(format!("{} is not a shepherd backup", file.display()).into());
            }
            let mut text = String::new();
            first.read_to_string(&mut text)?;
            serde_json::from_str(&text)
                .map_err(|e| format!("{}: unreadable manifest: {e}", file.display()))?
        }
        None => return Err(format!("{} is empty", file.display()).into()),
    };
    if manifest.format != FORMAT {
        return Err(format!(
            "{} is a backup of format {}; this shepherd reads format {FORMAT}",
            file.display(),
            manifest.format
        )
        .into());
    }
    if data_dir.exists() && std::fs::read_dir(data_dir)?.next().is_some() {
        if !force {
            return Err(format!(
                "{} is not empty: restore into an empty directory, or add --force to replace \
what is in it",
                data_dir.display()
            )
            .into());
        }
        // Replaced, not merged: a database's leftover WAL beside the
        // restored file would be read into it.
        for e in std::fs::read_dir(data_dir)? {
            let path = e?.path();
            if path.is_dir() && !path.is_symlink() {
                std::fs::remove_dir_all(&path)?;
            } else {
                std::fs::remove_file(&path)?;
            }
        }
    }
    std::fs::create_dir_all(data_dir)?;
    let root = data_dir.canonicalize()?;
    let mut files = 0u64;
    // Symbolic links are made after every file and directory, so no entry
    // is ever written through one: an archive that names a link `data/x`
    // pointing at /etc and then a file `data/x/passwd` cannot reach /etc.
    let mut links = Vec::new();
    for entry in entries {
        let mut entry = entry?;
        let path = entry.path()?.into_owned();
        let target = restore_target(file, &path, data_dir)?;
        let kind = entry.header().entry_type();
        if kind.is_symlink() {
            let points_to = entry.link_name()?.ok_or_else(|| {
                format!("{}: link {} has no target", file.display(), path.display())
            })?;
            links.push((target, points_to.into_owned()));
            continue;
        }
        if !(kind.is_file() || kind.is_dir()) {
            // A backup holds files, directories and symbolic links only;
            // a hard link or a device here was not made by `shepherd backup`.
            return Err(format!(
                "{}: {} is neither a file, a directory nor a symbolic link",
                file.display(),
                path.display()
            )
            .into());
        }
        create_parent_inside(&target, &root, file)?;
        entry.unpack(&target)?;
        if kind.is_file() {
            files += 1;
        }
    }
    for (target, points_to) in links {
        create_parent_inside(&target, &root, file)?;
        std::os::unix::fs::symlink(&points_to, &target)
            .map_err(|e| format!("{}: link {}: {e}", file.display(), target.display()))?;
    }
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
