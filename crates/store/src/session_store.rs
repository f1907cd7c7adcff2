//! The store's session operations (the sessions contract), one unit of work each; see
//! `ops/sessions.rs` for what each records.

use shepherd_core::Error;

use crate::ops::sessions::{
    self, NewSession, NewSessionWorker, SessionRecord, SessionWorkerRecord, StartReason,
};
use crate::{log, Listing, Store};

impl Store {
    pub async fn create_session(&self, new: NewSession) -> Result<SessionRecord, Error> {
        let now = self.now();
        self.write(move |db| Box::pin(sessions::create(db, now, new)))
            .await
    }

    /// The session with its tabs.
    pub async fn session(&self, id: &str) -> Result<SessionRecord, Error> {
        let id = id.to_owned();
        self.read(move |db| Box::pin(async move { sessions::require(db, &id).await }))
            .await
    }

    /// Every session and the cursor the list is valid at.
    pub async fn list_sessions(&self) -> Result<Listing<SessionRecord>, Error> {
        self.read(move |db| {
            Box::pin(async move {
                let items = sessions::list(db).await?;
                Ok(Listing {
                    items,
                    cursor: log::head(db).await?,
                })
            })
        })
        .await
    }

    pub async fn session_worker(
        &self,
        session_id: &str,
        worker_id: &str,
    ) -> Result<(SessionRecord, SessionWorkerRecord), Error> {
        let (s, w) = (session_id.to_owned(), worker_id.to_owned());
        self.read(move |db| Box::pin(async move { sessions::require_worker(db, &s, &w).await }))
            .await
    }

    pub async fn add_session_worker(
        &self,
        session_id: &str,
        new: NewSessionWorker,
    ) -> Result<SessionWorkerRecord, Error> {
        let (now, s) = (self.now(), session_id.to_owned());
        self.write(move |db| Box::pin(async move { sessions::add_worker(db, now, &s, new).await }))
            .await
    }

    pub async fn session_process_started(
        &self,
        session_id: &str,
        worker_id: &str,
        pid: i64,
        reason: StartReason,
        mode: &str,
    ) -> Result<SessionWorkerRecord, Error> {
        let (now, s, w, mode) = (
            self.now(),
            session_id.to_owned(),
            worker_id.to_owned(),
            mode.to_owned(),
        );
        self.write(move |db| {
            Box::pin(
                async move { sessions::process_started(db, now, &s, &w, pid, reason, &mode).await },
            )
        })
        .await
    }

    pub async fn session_process_exited(
        &self,
        session_id: &str,
        worker_id: &str,
        epoch: i64,
        exit_code: Option<i64>,
        signal: Option<i64>,
    ) -> Result<bool, Error> {
        let (now, s, w) = (self.now(), session_id.to_owned(), worker_id.to_owned());
        self.write(move |db| {
            Box::pin(async move {
                sessions::process_exited(db, now, &s, &w, epoch, exit_code, signal).await
            })
        })
        .await
    }

    pub async fn session_restore_failed(
        &self,
        session_id: &str,
        worker_id: &str,
        reason: &str,
    ) -> Result<(), Error> {
        let (now, s, w, r) = (
            self.now(),
            session_id.to_owned(),
            worker_id.to_owned(),
            reason.to_owned(),
        );
        self.write(move |db| {
            Box::pin(async move { sessions::restore_failed(db, now, &s, &w, &r).await })
        })
        .await
    }

    pub async fn remove_session_worker(
        &self,
        session_id: &str,
        worker_id: &str,
    ) -> Result<SessionWorkerRecord, Error> {
        let (now, s, w) = (self.now(), session_id.to_owned(), worker_id.to_owned());
        self.write(move |db| {
            Box::pin(async move { sessions::remove_worker(db, now, &s, &w, "removed").await })
        })
        .await
    }

    pub async fn delete_session(&self, id: &str) -> Result<SessionRecord, Error> {
        let (now, id) = (self.now(), id.to_owned());
        self.write(move |db| Box::pin(async move { sessions::delete(db, now, &id).await }))
            .await
    }

    /// Keeps the registry rows of this node's live PTY tabs fresh.
    pub async fn touch_session_workers(&self, worker_ids: Vec<String>) -> Result<(), Error> {
        let now = self.now();
        self.write(move |db| {
            Box::pin(async move { sessions::touch_live(db, now, &worker_ids).await })
        })
        .await
    }
}
