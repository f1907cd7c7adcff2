//! The store's conversation operations (the conversations contract): each runs one operation
//! of `ops::conversations` as a unit of work or a consistent read.

use shepherd_core::Error;

use crate::ops::conversations::{
    self, Conversation, ConversationView, Multitask, Resource, SendOutcome,
};
use crate::{log, ConversationPage, Listing, Store};

impl Store {
    /// Creates a resource (a channel with an agent) or updates it; says
    /// whether it was created.
    pub async fn upsert_resource(
        &self,
        id: &str,
        name: &str,
        agent_id: &str,
    ) -> Result<(Resource, bool), Error> {
        let (now, id, name, agent) = (
            self.now(),
            id.to_owned(),
            name.to_owned(),
            agent_id.to_owned(),
        );
        self.write(move |db| {
            Box::pin(
                async move { conversations::resource_upsert(db, now, &id, &name, &agent).await },
            )
        })
        .await
    }

    /// Resources not archived, and the cursor the list is valid at.
    pub async fn list_resources(&self) -> Result<Listing<Resource>, Error> {
        self.read(move |db| {
            Box::pin(async move {
                let items = conversations::resource_list(db).await?;
                Ok(Listing {
                    items,
                    cursor: log::head(db).await?,
                })
            })
        })
        .await
    }

    /// A new active conversation on a resource (cancelling one processing there).
    pub async fn create_conversation(&self, resource_id: &str) -> Result<Conversation, Error> {
        let (now, id) = (self.now(), resource_id.to_owned());
        self.write(move |db| Box::pin(async move { conversations::create(db, now, &id).await }))
            .await
    }

    /// A page of a resource's conversations, newest first, the next page's
    /// token, and the cursor.
    pub async fn list_conversations(
        &self,
        resource_id: &str,
        before: Option<String>,
        limit: i64,
    ) -> Result<ConversationPage, Error> {
        let id = resource_id.to_owned();
        self.read(move |db| {
            Box::pin(async move {
                let (conversations, next_before) =
                    conversations::list(db, &id, before.as_deref(), limit).await?;
                Ok(ConversationPage {
                    conversations,
                    next_before,
                    cursor: log::head(db).await?,
                })
            })
        })
        .await
    }

    /// Everything persisted of a conversation, and the cursor it is valid
    /// at: tailing the log after that cursor gives exactly what followed.
    pub async fn load_conversation(&self, id: &str) -> Result<(ConversationView, i64), Error> {
        let id = id.to_owned();
        self.read(move |db| {
            Box::pin(async move {
                let view = conversations::load(db, &id).await?;
                Ok((view, log::head(db).await?))
            })
        })
        .await
    }

    pub async fn send_message(
        &self,
        conversation_id: &str,
        text: &str,
        multitask: Multitask,
    ) -> Result<SendOutcome, Error> {
        let (now, id, text) = (self.now(), conversation_id.to_owned(), text.to_owned());
        self.write(move |db| {
            Box::pin(async move { conversations::send(db, now, &id, &text, multitask).await })
        })
        .await
    }

    pub async fn cancel_conversation(
        &self,
        conversation_id: &str,
        reason: Option<String>,
    ) -> Result<Conversation, Error> {
        let (now, id) = (self.now(), conversation_id.to_owned());
        self.write(move |db| {
            Box::pin(async move { conversations::cancel(db, now, &id, reason).await })
        })
        .await
    }

    pub async fn activate_conversation(
        &self,
        conversation_id: &str,
    ) -> Result<Conversation, Error> {
        let (now, id) = (self.now(), conversation_id.to_owned());
        self.write(move |db| Box::pin(async move { conversations::activate(db, now, &id).await }))
            .await
    }
}
