//! The store's channel operations (the resources runs are grouped under):
//! creating or renaming, archiving and listing channels.

use shepherd_core::event::payloads::{ChannelArchived, ChannelChanged};
use shepherd_core::event::NewEvent;
use shepherd_core::Error;

use crate::ops;
use crate::sql::Db;
use crate::{log, params, Store};

impl Store {
    // ----- channels (the conversations contract's resources) -----

    /// Creates a channel, or renames it if it exists.
    pub async fn upsert_channel(
        &self,
        id: &str,
        name: &str,
    ) -> Result<shepherd_core::model::Channel, Error> {
        let (now, id, name) = (self.now(), id.to_owned(), name.to_owned());
        self.write(move |db| {
            Box::pin(async move {
                ops::validate_id("channel id", "invalid_channel_id", &id)?;
                if name.trim().is_empty() || name.len() > 200 {
                    return Err(Error::invalid(
                        "invalid_name",
                        "a channel name is 1-200 bytes",
                    ));
                }
                db.execute(
                    "INSERT INTO channels (id, name, created_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name",
                    params![&id, &name, now],
                )
                .await?;
                let e = NewEvent::typed(
                    shepherd_core::event::kind::CHANNEL_CREATED,
                    shepherd_core::event::EventRefs::default().channel(Some(id.clone())),
                    &ChannelChanged {
                        name: name.clone(),
                        agent_id: None,
                    },
                );
                log::append(db, now, &e).await?;
                ops::channel_get(db, &id).await
            })
        })
        .await
    }

    /// Archives a channel: it stays, with its runs; it is only hidden from lists.
    pub async fn archive_channel(&self, id: &str) -> Result<shepherd_core::model::Channel, Error> {
        let (now, id) = (self.now(), id.to_owned());
        self.write(move |db| {
            Box::pin(async move {
                let n = db
                .execute(
                    "UPDATE channels SET archived_at = $2 WHERE id = $1 AND archived_at IS NULL",
                    params![&id, now],
                )
                .await?;
                if n == 0 {
                    ops::channel_get(db, &id).await?;
                    return Err(Error::conflict(
                        "channel_archived",
                        format!("channel {id:?} is already archived"),
                    ));
                }
                let e = NewEvent::typed(
                    shepherd_core::event::kind::CHANNEL_ARCHIVED,
                    shepherd_core::event::EventRefs::default().channel(Some(id.clone())),
                    &ChannelArchived {},
                );
                log::append(db, now, &e).await?;
                ops::channel_get(db, &id).await
            })
        })
        .await
    }

    pub async fn list_channels(
        &self,
        include_archived: bool,
    ) -> Result<Vec<shepherd_core::model::Channel>, Error> {
        self.read(move |db| {
            Box::pin(async move {
                let rows = db
                    .query(
                        "SELECT c.id, c.name, c.created_at, c.archived_at, \
                     (SELECT COUNT(*) FROM runs r WHERE r.channel_id = c.id) FROM channels c \
                     WHERE $1 = 1 OR c.archived_at IS NULL ORDER BY c.id",
                        params![include_archived as i64],
                    )
                    .await?;
                rows.iter().map(ops::channel_from_row).collect()
            })
        })
        .await
    }
}
