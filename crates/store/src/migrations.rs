//! Which schema migrations to apply, and the check that none that was
//! applied has changed since.
//!
//! Each backend keeps its own numbered SQL files (`sqlite/`, `postgres/`)
//! and applies them itself, in a transaction each, under its own lock; this
//! module decides what to do from the numbers and texts it is given, so
//! both backends behave the same.
//!
//! `schema_migrations` records, for each applied version, a SHA-256 of the
//! text that was applied. A database whose recorded checksum differs from
//! this build's text for that version is refused at start, with an error
//! that names the version: an edited migration would otherwise leave
//! databases migrated before and after the edit with different schemas and
//! nobody told. Rows from before checksums were recorded (the column is
//! empty) take the current text's checksum on the first start that sees
//! them. Versions need not be contiguous (there are gaps). A database that
//! holds a migration newer than this build's newest (a newer build migrated
//! it) is refused at start, naming both versions: this build would read and
//! write tables whose meaning it does not know. (A node already running
//! when a newer one migrates goes on serving; the upgrade procedure in the
//! README replaces every node with the newer build.)
//!
//! Why not `refinery`, which runs numbered migrations with checksums for
//! both drivers: resolved against this workspace (2026-11), `refinery` 0.10
//! with its `rusqlite` and `tokio-postgres` features adds 46 crates to the
//! store's tree (a proc-macro crate, `toml`, `time`, `url` and the ICU
//! crates under it, `walkdir`, `regex`), and its `rusqlite` feature needs
//! rusqlite 0.41 (0.8 needs 0.33) where the workspace has 0.37, so it would
//! compile a second bundled SQLite or force a driver upgrade. It also keeps
//! its own history table, which existing databases do not have, and its
//! PostgreSQL runner does not take the advisory lock that lets several
//! nodes start at once on one database. The runner here is a few dozen
//! lines over the table every existing database already has, using the
//! SHA-256 the crate already depends on.

use sha2::{Digest, Sha256};
use shepherd_core::Error;

/// How often a migration still running says so in the log.
pub(crate) const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// One migration: its version and its SQL text.
pub(crate) type Migration = (i64, &'static str);

/// A migration's checksum: SHA-256 of its text, hex encoded. Line endings
/// are normalised, so that a checkout that turns `\n` into `\r\n` does not
/// read as an edit.
pub(crate) fn checksum(sql: &str) -> String {
    let digest = Sha256::digest(sql.replace("\r\n", "\n").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// What to do for one migration of this build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Not applied yet: run it and record it with this checksum.
    Apply {
        version: i64,
        sql: &'static str,
        checksum: String,
    },
    /// Applied before checksums were recorded: record this one.
    Record { version: i64, checksum: String },
}

/// The steps that bring a database with `applied` (version, recorded
/// checksum) up to `known`, in version order; an error if an applied
/// migration's text has changed.
pub(crate) fn plan(
    known: &[Migration],
    applied: &[(i64, Option<String>)],
) -> Result<Vec<Step>, Error> {
    let newest_known = known.iter().map(|(v, _)| *v).max().unwrap_or(0);
    if let Some(newest) = applied
        .iter()
        .map(|(v, _)| *v)
        .filter(|v| *v > newest_known)
        .max()
    {
        return Err(Error::new(
            shepherd_core::error::ErrorKind::Internal,
            "schema_too_new",
            format!(
                "the database's schema is at migration {newest}, newer than this build of \
                 shepherd ({}) knows: its newest migration is {newest_known}. A newer shepherd \
                 migrated this database; run that version (or newer), or restore a backup made \
                 before the upgrade; refusing to start",
                env!("CARGO_PKG_VERSION")
            ),
        ));
    }
    let mut steps = Vec::new();
    for &(version, sql) in known {
        let sum = checksum(sql);
        match applied.iter().find(|(v, _)| *v == version) {
            None => steps.push(Step::Apply {
                version,
                sql,
                checksum: sum,
            }),
            Some((_, None)) => steps.push(Step::Record {
                version,
                checksum: sum,
            }),
            Some((_, Some(recorded))) if *recorded == sum => {}
            Some((_, Some(recorded))) => {
                return Err(Error::new(
                    shepherd_core::error::ErrorKind::Internal,
                    "migration_changed",
                    format!(
                        "schema migration {version} was applied to this database with checksum \
                     {recorded}, but this build's migration {version} has checksum {sum}: its \
                     text was changed after it was applied. Restore the original migration and \
                     make the change in a new one; refusing to start"
                    ),
                ));
            }
        }
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: &[Migration] = &[
        (1, "CREATE TABLE a (x INT);"),
        (3, "CREATE TABLE b (y INT);"),
    ];

    #[test]
    fn a_fresh_database_applies_every_migration_in_order() {
        let steps = plan(KNOWN, &[]).unwrap();
        let versions: Vec<i64> = steps
            .iter()
            .map(|s| match s {
                Step::Apply { version, .. } => *version,
                Step::Record { .. } => panic!("{s:?}"),
            })
            .collect();
        assert_eq!(versions, [1, 3]);
    }

    #[test]
    fn applied_unchanged_migrations_need_nothing_and_gaps_are_kept() {
        let applied = vec![
            (1, Some(checksum(KNOWN[0].1))),
            (3, Some(checksum(KNOWN[1].1))),
        ];
        assert_eq!(plan(KNOWN, &applied).unwrap(), []);
    }

    #[test]
    fn a_database_a_newer_build_migrated_is_refused_naming_both_versions() {
        let applied = vec![
            (1, Some(checksum(KNOWN[0].1))),
            (3, Some(checksum(KNOWN[1].1))),
            (9, Some("0".repeat(64))),
        ];
        let err = plan(KNOWN, &applied).unwrap_err();
        assert_eq!(err.code, "schema_too_new");
        assert!(
            err.message.contains("migration 9") && err.message.contains("newest migration is 3"),
            "{}",
            err.message
        );
    }

    #[test]
    fn rows_from_before_checksums_take_the_current_text() {
        let applied = vec![(1, None), (3, Some(checksum(KNOWN[1].1)))];
        assert_eq!(
            plan(KNOWN, &applied).unwrap(),
            [Step::Record {
                version: 1,
                checksum: checksum(KNOWN[0].1)
            }]
        );
    }

    #[test]
    fn an_edited_applied_migration_is_refused_by_version() {
        let applied = vec![(1, Some(checksum("CREATE TABLE a (x TEXT);")))];
        let err = plan(KNOWN, &applied).unwrap_err();
        assert_eq!(err.code, "migration_changed");
        assert!(err.message.contains("migration 1"), "{}", err.message);
    }

    #[test]
    fn line_endings_do_not_count_as_an_edit() {
        assert_eq!(checksum("a;\r\nb;\r\n"), checksum("a;\nb;\n"));
        assert_ne!(checksum("a;\nb;\n"), checksum("a;\nc;\n"));
    }
}
