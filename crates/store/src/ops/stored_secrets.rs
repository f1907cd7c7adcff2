//! The secrets the database keeps, as a whole: the check that the store's
//! secrets key is the one they were sealed with, and the sealing of the
//! ones an older version stored in clear. Both run once, when a store with
//! a key opens (see `sealed`).

use shepherd_core::error::ErrorKind;
use shepherd_core::time::Millis;
use shepherd_core::Error;

use crate::params;
use crate::sealed::{is_sealed, Sealer};
use crate::sql::Db;

/// The `server_keys` row that proves which key the database's secrets are
/// sealed with: a known text, sealed.
const CHECK: &str = "secrets_check";
const CHECK_TEXT: &str = "shepherd stored secrets";

/// What a `server_keys` value is sealed for: its row.
pub(crate) fn server_key_label(name: &str) -> String {
    format!("server_keys.value:{name}")
}

fn mismatch() -> Error {
    Error::new(
        ErrorKind::Internal,
        "secrets_key_mismatch",
        "the database's secrets were sealed with another secrets key than this one: \
         start every server of this database with the same key (copy `secret.key` from \
         the data directory of the server that first used it, or point `secrets_key_file` \
         at one file)",
    )
}

/// Checks the key against the database (recording it on first use) and
/// seals every secret still stored in clear; returns how many it sealed.
pub async fn seal_at_open<D: Db>(db: &mut D, sealer: &Sealer, now: Millis) -> Result<usize, Error> {
    let label = server_key_label(CHECK);
    const READ: &str = "SELECT value FROM server_keys WHERE name = $1";
    let stored = match db.query_opt(READ, params![CHECK]).await? {
        Some(row) => row.string(0)?,
        None => {
            let value = sealer.seal(&label, CHECK_TEXT)?;
            // Another node may record its key first: the one recorded wins,
            // and the check below holds this one to it.
            db.execute(
                "INSERT INTO server_keys (name, value, created_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (name) DO NOTHING",
                params![CHECK, value.as_str(), now],
            )
            .await?;
            db.query_one(READ, params![CHECK]).await?.string(0)?
        }
    };
    match sealer.open(&label, &stored) {
        Ok(text) if text == CHECK_TEXT => {}
        _ => return Err(mismatch()),
    }
    let mut sealed = super::webhooks::seal_clear_secrets(db, sealer).await?;
    let rows = db
        .query(
            "SELECT name, value FROM server_keys WHERE name <> $1 ORDER BY name",
            params![CHECK],
        )
        .await?;
    for r in rows {
        let (name, value) = (r.string(0)?, r.string(1)?);
        if is_sealed(&value) {
            continue;
        }
        let value = sealer.seal(&server_key_label(&name), &value)?;
        db.execute(
            "UPDATE server_keys SET value = $2 WHERE name = $1",
            params![name.as_str(), value.as_str()],
        )
        .await?;
        sealed += 1;
    }
    Ok(sealed)
}
