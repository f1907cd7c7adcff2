//! The store's host operations: a server node's own record, a runner's
//! registration and heartbeats, the host list; see `ops/hosts.rs` for what
//! each records.

use shepherd_core::model::Host;
use shepherd_core::Error;

use crate::ops::hosts::{self, HostClaim, HostDeclaration, HostRegistration};
use crate::Store;

impl Store {
    /// Records this server node as a host, seen now.
    pub async fn record_server_host(&self, decl: HostDeclaration) -> Result<Host, Error> {
        let now = self.now();
        self.write(move |db| Box::pin(hosts::record_server(db, now, decl)))
            .await
    }

    /// Registers a runner's host, if `claim` entitles the caller to its
    /// id; returns it and its new host token.
    pub async fn register_host(
        &self,
        decl: HostDeclaration,
        claim: HostClaim,
    ) -> Result<HostRegistration, Error> {
        let now = self.now();
        self.write(move |db| Box::pin(hosts::register_runner(db, now, decl, claim)))
            .await
    }

    /// Records that a host is still there.
    pub async fn host_seen(&self, id: &str) -> Result<Host, Error> {
        let (now, id) = (self.now(), id.to_owned());
        self.write(move |db| Box::pin(async move { hosts::seen(db, now, &id).await }))
            .await
    }

    /// Records that a runner's host opened its link to server node `node`.
    pub async fn host_linked(&self, id: &str, node: &str) -> Result<Host, Error> {
        let (now, id, node) = (self.now(), id.to_owned(), node.to_owned());
        self.write(move |db| Box::pin(async move { hosts::linked(db, now, &id, &node).await }))
            .await
    }

    /// The host a host token belongs to.
    pub async fn host_for_token(&self, token: &str) -> Result<Option<String>, Error> {
        let token = token.to_owned();
        self.read(move |db| Box::pin(async move { hosts::for_token(db, &token).await }))
            .await
    }

    pub async fn host(&self, id: &str) -> Result<Host, Error> {
        let id = id.to_owned();
        self.read(move |db| Box::pin(async move { hosts::require(db, &id).await }))
            .await
    }

    pub async fn list_hosts(&self) -> Result<Vec<Host>, Error> {
        self.read(move |db| Box::pin(hosts::list(db))).await
    }
}
