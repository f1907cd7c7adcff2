//! Configuration: loaded by the `shepherd-config` crate (re-exported here,
//! so `shepherd::config::Config` stays the one name), plus what only the
//! binary needs from it: the store's settings, the secrets key among them.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

pub use shepherd_config::*;
use shepherd_store::{SecretsKey, StoreConfig, SyncMode};

/// The name of the secrets key file in the data directory.
pub const SECRETS_KEY_FILE: &str = "secret.key";

/// The store settings a configuration names, with its secrets key (made
/// on first use, see [`secrets_key`]).
pub fn store_config(config: &Config) -> Result<StoreConfig, String> {
    let mut c = StoreConfig::new(config.database_url.clone());
    c.sqlite_sync = match config.sqlite_sync {
        SqliteSync::Normal => SyncMode::Normal,
        SqliteSync::Full => SyncMode::Full,
    };
    c.pg_pool_size = config.pg_pool_size;
    c.pg_schema = config.pg_schema.clone();
    c.secrets_key = Some(secrets_key(config)?);
    Ok(c)
}

/// Where a configuration's secrets key is: `secrets_key_file`, or
/// `secret.key` in the data directory.
pub fn secrets_key_path(config: &Config) -> PathBuf {
    config
        .secrets_key_file
        .clone()
        .unwrap_or_else(|| config.data_dir.join(SECRETS_KEY_FILE))
}

/// The key the database's secrets are sealed with, read from
/// [`secrets_key_path`]. A missing file is made, readable by this user
/// only (`0600`), with a new random key: the first start of a server, or a
/// database that had none. Kept outside the database, so that a copy of
/// the database alone opens none of its secrets; every server of one
/// database needs the same file, and a backup needs it too (`shepherd
/// backup` archives the data directory, this file included).
pub fn secrets_key(config: &Config) -> Result<SecretsKey, String> {
    let path = secrets_key_path(config);
    let shown = path.display().to_string();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {} for the secrets key: {e}", dir.display()))?;
    }
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let text = SecretsKey::new_file_text().map_err(|e| e.to_string())?;
            // `create_new`: of two processes making it at once, one writes
            // it and the other reads that one.
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(mut f) => {
                    f.write_all(text.as_bytes())
                        .and_then(|()| f.sync_all())
                        .map_err(|e| format!("cannot write the secrets key {shown}: {e}"))?;
                    text
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    std::fs::read_to_string(&path)
                        .map_err(|e| format!("cannot read the secrets key {shown}: {e}"))?
                }
                Err(e) => return Err(format!("cannot create the secrets key {shown}: {e}")),
            }
        }
        Err(e) => return Err(format!("cannot read the secrets key {shown}: {e}")),
    };
    // An existing file others may read is taken back (as the data
    // directory's own entries are): it opens every stored secret.
    if let Ok(meta) = std::fs::metadata(&path) {
        if meta.permissions().mode() & 0o077 != 0 {
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
        }
    }
    SecretsKey::parse_file_text(&text, &shown)
}
