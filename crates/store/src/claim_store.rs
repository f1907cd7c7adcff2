//! The store's claim operations: what a worker may take, claiming it, the
//! progress reports that hold and settle a claim, and the sweep that expires
//! lapsed ones; see `ops/claims/` for the rules each applies.

use std::sync::Arc;

use shepherd_core::model::Task;
use shepherd_core::time::Millis;
use shepherd_core::Error;

use crate::ops::{claims, workers};
use crate::sql::{self, Db};
use crate::{unit, Applied, Grant, LeaseRules, Store, SweepReport};

/// One progress report of a batch (see [`Store::progress_batch`]).
#[derive(Debug, Clone)]
pub struct ProgressReport {
    pub vtid: String,
    pub claim_token: Option<String>,
    pub event: String,
    pub message: Option<String>,
    pub metadata: serde_json::Value,
    pub result: Option<String>,
}

impl ProgressReport {
    async fn apply<D: sql::Db>(
        self,
        db: &mut D,
        now: Millis,
        worker_id: &str,
        rules: &LeaseRules,
        batch: &claims::BatchReads,
    ) -> Result<Applied, Error> {
        claims::progress(
            db,
            now,
            worker_id,
            &self.vtid,
            self.claim_token.as_deref(),
            &self.event,
            self.message,
            self.metadata,
            self.result,
            rules,
            Some(batch),
        )
        .await
    }
}

impl Store {
    pub async fn pending_tasks(&self, worker_id: &str, limit: i64) -> Result<Vec<Task>, Error> {
        let (now, id) = (self.now(), worker_id.to_owned());
        let read_id = id.clone();
        let (first, tasks) = self
            .read(move |db| {
                Box::pin(async move { claims::pending(db, now, &read_id, limit).await })
            })
            .await?;
        if first {
            // The worker's first poll ends the worker registry contract's `spawning`.
            self.write(move |db| Box::pin(async move { workers::mark_heard(db, now, &id).await }))
                .await?;
        }
        Ok(tasks)
    }

    pub async fn claim_task(
        &self,
        worker_id: &str,
        vtid: &str,
        rules: LeaseRules,
    ) -> Result<Grant, Error> {
        let prefetch = claims::claim_prefetch(worker_id, vtid);
        let (now, id, vtid) = (self.now(), worker_id.to_owned(), vtid.to_owned());
        self.write_prefetched(Some(prefetch), move |db| {
            Box::pin(async move { claims::claim_alone(db, now, &id, &vtid, &rules).await })
        })
        .await
        .map_err(claims::lost_race)
    }

    /// Claims up to `max` of the best tasks the worker may take now (see
    /// [`claims::claim_next`]); empty when nothing is eligible.
    pub async fn claim_next(
        &self,
        worker_id: &str,
        max: i64,
        rules: LeaseRules,
    ) -> Result<Vec<Grant>, Error> {
        let (now, id) = (self.now(), worker_id.to_owned());
        self.write(move |db| {
            Box::pin(async move { claims::claim_next(db, now, &id, max, &rules).await })
        })
        .await
    }

    /// Applies several progress reports of one worker in one transaction,
    /// in order, each on its own: a refused report changes nothing and does
    /// not stop the others. The outer `Err` is for the batch as a whole
    /// (the database unreachable); each report has its own outcome.
    pub async fn progress_batch(
        &self,
        worker_id: &str,
        reports: Vec<ProgressReport>,
        rules: LeaseRules,
    ) -> Result<Vec<Result<Applied, Error>>, Error> {
        let now = self.now();
        // The reports run one after another in one transaction (write_many
        // keeps them together), so they can share one read.
        let batch = Arc::new(claims::BatchReads::new(
            worker_id,
            reports.iter().map(|r| r.vtid.clone()).collect(),
        ));
        let units: Vec<_> = reports
            .into_iter()
            .map(|r| {
                let (id, batch) = (worker_id.to_owned(), batch.clone());
                unit(move |db| {
                    Box::pin(async move {
                        let appended = db.appended_later();
                        let applied = r.apply(db, now, &id, &rules, &batch).await?;
                        Ok((applied, appended))
                    })
                })
            })
            .collect();
        Ok(self
            .write_many(units)
            .await?
            .into_iter()
            .map(|r| r.map(|(applied, appended)| claims::settle_seq(applied, appended)))
            .collect())
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn progress(
        &self,
        worker_id: &str,
        vtid: &str,
        claim_token: Option<String>,
        event: &str,
        message: Option<String>,
        metadata: serde_json::Value,
        result: Option<String>,
        rules: LeaseRules,
    ) -> Result<Applied, Error> {
        let (now, id, vtid, event) = (
            self.now(),
            worker_id.to_owned(),
            vtid.to_owned(),
            event.to_owned(),
        );
        let prefetch = claims::progress_prefetch(worker_id, &vtid);
        let (applied, appended) = self
            .write_prefetched(Some(prefetch), move |db| {
                Box::pin(async move {
                    let appended = sql::Db::appended_later(db);
                    let applied = claims::progress(
                        db,
                        now,
                        &id,
                        &vtid,
                        claim_token.as_deref(),
                        &event,
                        message,
                        metadata,
                        result,
                        &rules,
                        None,
                    )
                    .await?;
                    Ok((applied, appended))
                })
            })
            .await?;
        Ok(claims::settle_seq(applied, appended))
    }

    /// Expires lapsed claims and ends runs whose cancel grace has passed.
    pub async fn sweep(&self, rules: LeaseRules) -> Result<SweepReport, Error> {
        let now = self.now();
        self.write(move |db| Box::pin(async move { claims::sweep(db, now, &rules).await }))
            .await
    }
}
