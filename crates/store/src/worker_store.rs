//! The store's worker and agent operations: registration, heartbeats,
//! tokens, the worker list and its snapshot event, and the agents declared
//! from configuration; see `ops/workers.rs` for what each records.

use shepherd_core::event::payloads::{SnapshotWorker, WorkersSnapshot};
use shepherd_core::event::NewEvent;
use shepherd_core::model::{Agent, Worker};
use shepherd_core::time::Millis;
use shepherd_core::Error;

use crate::ops::{self, claims, workers};
use crate::sql::Db;
use crate::{log, params, HeldClaim, LeaseRules, Listing, Registration, Store, WorkerFilter};

impl Store {
    // ----- workers -----

    pub async fn register_worker(&self, reg: Registration) -> Result<(Worker, String), Error> {
        let now = self.now();
        self.write(move |db| Box::pin(workers::register(db, now, reg)))
            .await
    }

    pub async fn deregister_worker(
        &self,
        worker_id: &str,
        reason: Option<String>,
    ) -> Result<Worker, Error> {
        let (now, id) = (self.now(), worker_id.to_owned());
        self.write(move |db| {
            Box::pin(async move { claims::deregister(db, now, &id, reason).await })
        })
        .await
    }

    pub async fn heartbeat(
        &self,
        worker_id: &str,
        rules: LeaseRules,
    ) -> Result<(Worker, Vec<HeldClaim>), Error> {
        let (now, id) = (self.now(), worker_id.to_owned());
        self.write(move |db| Box::pin(async move { claims::heartbeat(db, now, &id, &rules).await }))
            .await
    }

    /// The worker a bearer token belongs to.
    pub async fn worker_for_token(&self, token: &str) -> Result<Option<String>, Error> {
        let token = token.to_owned();
        self.read(move |db| Box::pin(async move { workers::for_token(db, &token).await }))
            .await
    }

    pub async fn worker(&self, worker_id: &str) -> Result<Worker, Error> {
        let id = worker_id.to_owned();
        self.read(move |db| Box::pin(async move { workers::require(db, &id).await }))
            .await
    }

    /// Workers and the cursor the list is valid at.
    pub async fn list_workers(&self, filter: WorkerFilter) -> Result<Listing<Worker>, Error> {
        self.read(move |db| {
            Box::pin(async move {
                let items = workers::list(db, &filter).await?;
                Ok(Listing {
                    items,
                    cursor: log::head(db).await?,
                })
            })
        })
        .await
    }

    /// Whether an agent with this id is configured or was declared by a
    /// worker's registration.
    pub async fn agent_known(&self, id: &str) -> Result<bool, Error> {
        let id = id.to_owned();
        self.read(move |db| Box::pin(async move { ops::agent_known(db, &id).await }))
            .await
    }

    pub async fn list_agents(&self) -> Result<Vec<Agent>, Error> {
        self.read(move |db| Box::pin(ops::agents_list(db))).await
    }

    /// Declares an agent from configuration (creating or updating it).
    pub async fn upsert_agent(
        &self,
        id: &str,
        worker_type: &str,
        capabilities: Vec<String>,
        max_concurrent: Option<i64>,
    ) -> Result<(), Error> {
        let (now, id, wt) = (self.now(), id.to_owned(), worker_type.to_owned());
        self.write(move |db| {
            Box::pin(async move {
                ops::agents_upsert(db, now, &id, &wt, &capabilities, max_concurrent).await
            })
        })
        .await
    }

    /// Sets the retry policy an agent's new tasks take by default.
    pub async fn set_agent_retry(
        &self,
        id: &str,
        max_attempts: Option<i64>,
        backoff: Option<shepherd_core::retry::RetryBackoff>,
    ) -> Result<(), Error> {
        let id = id.to_owned();
        self.write(move |db| {
            Box::pin(async move {
                ops::retries::set_agent_default(db, &id, max_attempts, backoff).await
            })
        })
        .await
    }

    /// The newest event timestamp about each worker.
    pub async fn worker_last_event_ts(
        &self,
    ) -> Result<std::collections::HashMap<String, Millis>, Error> {
        self.read(move |db| Box::pin(async move {
            let rows = db
                .query(
                    // One index probe per worker (events_worker), not a scan of the log.
                    "SELECT w.id, (SELECT e.ts FROM events e WHERE e.worker_id = w.id ORDER BY e.seq DESC LIMIT 1) \
                     FROM workers w",
                    params![],
                )
                .await?;
            rows.iter()
                .filter_map(|r| match (r.string(0), r.opt_i64(1)) {
                    (Ok(id), Ok(Some(ts))) => Some(Ok((id, ts))),
                    (Err(e), _) | (_, Err(e)) => Some(Err(e)),
                    _ => None,
                })
                .collect()
        })).await
    }

    /// Records a `workers.snapshot` event of every worker not closed.
    pub async fn snapshot_workers(&self, reason: &str) -> Result<i64, Error> {
        let (now, reason) = (self.now(), reason.to_owned());
        self.write(move |db| {
            Box::pin(async move {
                let list = workers::list(db, &WorkerFilter::default()).await?;
                let workers: Vec<SnapshotWorker> = list
                    .iter()
                    .map(|w| SnapshotWorker {
                        worker_id: w.worker_id.clone(),
                        session_id: w.session_id.clone(),
                        name: w.name.clone(),
                        project_path: w.project_path.clone(),
                        terminal_id: w.terminal_id.clone(),
                        agent_type: w.agent_id.clone(),
                        worker_type: w.worker_type.clone(),
                        registry_status: w.status,
                        state: if w.active_claims > 0 {
                            "active"
                        } else {
                            "idle"
                        }
                        .to_owned(),
                        status: if w.active_claims > 0 { "busy" } else { "ready" }.to_owned(),
                        created_at: shepherd_core::time::to_rfc3339(w.registered_at),
                        last_activity: shepherd_core::time::opt_rfc3339(w.last_activity_at),
                        last_heartbeat_at: shepherd_core::time::to_rfc3339(w.last_heartbeat_at),
                    })
                    .collect();
                let e = NewEvent::typed(
                    shepherd_core::event::kind::WORKERS_SNAPSHOT,
                    Default::default(),
                    &WorkersSnapshot {
                        count: workers.len() as i64,
                        workers,
                        reason,
                    },
                );
                log::append(db, now, &e).await
            })
        })
        .await
    }
}
