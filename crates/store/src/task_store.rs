//! The store's task operations: creating, dispatching, reading, listing,
//! cancelling, requeueing and retrying tasks, and external task events; see
//! `ops/tasks.rs` and `ops/restart.rs` for what each records.

use shepherd_core::model::Task;
use shepherd_core::Error;

use crate::ops::{self, claims, tasks};
use crate::sql;
use crate::{log, Applied, CancelOutcome, NewTask, Page, Store, TaskDetail, TaskFilter};

impl Store {
    // ----- tasks and claims -----

    pub async fn create_task(&self, new: NewTask) -> Result<Task, Error> {
        let now = self.now();
        self.write(move |db| Box::pin(tasks::create(db, now, new)))
            .await
    }

    pub async fn dispatch_task(&self, vtid: &str) -> Result<Task, Error> {
        let (now, vtid) = (self.now(), vtid.to_owned());
        self.write(move |db| Box::pin(async move { tasks::dispatch(db, now, &vtid).await }))
            .await
    }

    pub async fn task(&self, vtid: &str, events: i64) -> Result<(TaskDetail, i64), Error> {
        let vtid = vtid.to_owned();
        self.read(move |db| {
            Box::pin(async move {
                let d = tasks::detail(db, &vtid, events).await?;
                Ok((d, log::head(db).await?))
            })
        })
        .await
    }

    /// Tasks, their total, and the cursor the page is valid at.
    pub async fn list_tasks(&self, filter: TaskFilter) -> Result<Page<Task>, Error> {
        self.read(move |db| {
            Box::pin(async move {
                let (items, total) = tasks::list(db, &filter).await?;
                Ok(Page {
                    items,
                    total,
                    cursor: log::head(db).await?,
                })
            })
        })
        .await
    }

    pub async fn cancel_task(
        &self,
        vtid: &str,
        reason: Option<String>,
    ) -> Result<(Task, CancelOutcome), Error> {
        let (now, vtid) = (self.now(), vtid.to_owned());
        self.write(move |db| Box::pin(async move { tasks::cancel(db, now, &vtid, reason).await }))
            .await
    }

    /// Puts the task of a run whose agent did not survive back in the
    /// queue (fenced by the run's claim token).
    pub async fn requeue_run(
        &self,
        run_id: &str,
        claim_token: &str,
        caller: Option<String>,
        reason: &str,
    ) -> Result<Task, Error> {
        let (now, id, token, reason) = (
            self.now(),
            run_id.to_owned(),
            claim_token.to_owned(),
            reason.to_owned(),
        );
        self.write(move |db| {
            Box::pin(async move {
                ops::restart::requeue_run(db, now, &id, &token, caller.as_deref(), &reason).await
            })
        })
        .await
    }

    /// Makes a failed or cancelled task runnable again (409 `task_not_failed`
    /// otherwise).
    pub async fn retry_task(&self, vtid: &str) -> Result<Task, Error> {
        let (now, vtid) = (self.now(), vtid.to_owned());
        self.write(move |db| {
            Box::pin(async move { ops::restart::retry_task(db, now, &vtid).await })
        })
        .await
    }

    pub async fn task_event(
        &self,
        vtid: &str,
        event: &str,
        message: Option<String>,
        metadata: serde_json::Value,
    ) -> Result<Applied, Error> {
        let (now, vtid, event) = (self.now(), vtid.to_owned(), event.to_owned());
        let (applied, appended) = self
            .write(move |db| {
                Box::pin(async move {
                    let appended = sql::Db::appended_later(db);
                    let applied =
                        tasks::external_event(db, now, &vtid, &event, message, metadata).await?;
                    Ok((applied, appended))
                })
            })
            .await?;
        Ok(claims::settle_seq(applied, appended))
    }
}
