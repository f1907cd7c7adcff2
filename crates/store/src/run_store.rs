//! The store's run operations: reading runs and their transcripts, the
//! steps, status and usage a running agent reports, workspaces, and
//! transcript pruning; see `ops/runs.rs` and `ops/usage.rs`.

use shepherd_core::model::Run;
use shepherd_core::time::Millis;
use shepherd_core::transcript::TranscriptStep;
use shepherd_core::Error;

use crate::ops::{self, runs};
use crate::{log, unit, LeaseRules, Page, RunFilter, StepsAck, Store, UsageRow};

/// One run's steps of a batch (see [`Store::append_steps_many`]).
#[derive(Debug, Clone)]
pub struct StepAppend {
    pub run_id: String,
    pub claim_token: String,
    pub start_index: i64,
    pub steps: Vec<TranscriptStep>,
}

impl Store {
    // ----- runs -----

    /// Reports the quiet runs of each `(agent, stuck_after ms)` as stuck
    /// (`run.stuck`, once per quiet spell); how many. Reads first, so a
    /// node with nothing to report writes nothing.
    pub async fn mark_stuck_runs(&self, agents: &[(String, i64)]) -> Result<usize, Error> {
        let mut total = 0;
        for (agent, after) in agents {
            let (now, a, after) = (self.now(), agent.clone(), *after);
            let any = {
                let a = a.clone();
                self.read(move |db| {
                    Box::pin(async move { runs::mark_stuck(db, now, &a, after, true).await })
                })
                .await?
            };
            if any > 0 {
                total += self
                    .write(move |db| {
                        Box::pin(async move { runs::mark_stuck(db, now, &a, after, false).await })
                    })
                    .await?;
            }
        }
        Ok(total)
    }

    pub async fn run(&self, run_id: &str) -> Result<(Run, i64), Error> {
        let id = run_id.to_owned();
        self.read(move |db| {
            Box::pin(async move {
                let r = runs::require(db, &id).await?;
                Ok((r, log::head(db).await?))
            })
        })
        .await
    }

    /// A run with its decompressed transcript (None while running or when none was recorded).
    pub async fn run_detail(
        &self,
        run_id: &str,
    ) -> Result<(Run, Option<Vec<TranscriptStep>>, i64), Error> {
        let id = run_id.to_owned();
        self.read(move |db| {
            Box::pin(async move {
                let r = runs::require(db, &id).await?;
                let t = if r.status == shepherd_core::status::RunStatus::Running {
                    None
                } else {
                    runs::transcript(db, &id).await?
                };
                Ok((r, t, log::head(db).await?))
            })
        })
        .await
    }

    pub async fn run_steps(
        &self,
        run_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<(Run, Vec<(i64, TranscriptStep)>, i64), Error> {
        let id = run_id.to_owned();
        self.read(move |db| {
            Box::pin(async move {
                let (r, s) = runs::steps(db, &id, after, limit).await?;
                Ok((r, s, log::head(db).await?))
            })
        })
        .await
    }

    /// Runs (newest first), the total matching, and the cursor.
    pub async fn list_runs(&self, filter: RunFilter) -> Result<Page<Run>, Error> {
        self.read(move |db| {
            Box::pin(async move {
                let (items, total) = runs::list(db, &filter).await?;
                Ok(Page {
                    items,
                    total,
                    cursor: log::head(db).await?,
                })
            })
        })
        .await
    }

    pub async fn append_steps(
        &self,
        run_id: &str,
        claim_token: &str,
        caller: Option<String>,
        start_index: i64,
        steps: Vec<TranscriptStep>,
        rules: LeaseRules,
    ) -> Result<StepsAck, Error> {
        let (now, id, token) = (self.now(), run_id.to_owned(), claim_token.to_owned());
        self.write(move |db| {
            Box::pin(async move {
                runs::append_steps(
                    db,
                    now,
                    &id,
                    &token,
                    caller.as_deref(),
                    start_index,
                    steps,
                    &rules,
                )
                .await
            })
        })
        .await
    }

    /// Several runs' steps, each appended (or refused) on its own as
    /// [`Store::append_steps`] would, all in one transaction: a runner
    /// holding many running agents sends one request, and the store commits
    /// once, instead of one of each per run.
    pub async fn append_steps_many(
        &self,
        caller: Option<String>,
        appends: Vec<StepAppend>,
        rules: LeaseRules,
    ) -> Result<Vec<Result<StepsAck, Error>>, Error> {
        let now = self.now();
        // The appends run one after another in one transaction (write_many
        // keeps them together), so they can share one read.
        let reads = std::sync::Arc::new(runs::StepBatchReads::new(
            appends.iter().map(|a| a.run_id.clone()).collect(),
        ));
        let units: Vec<_> = appends
            .into_iter()
            .map(|a| {
                let (caller, reads) = (caller.clone(), reads.clone());
                unit(move |db| {
                    Box::pin(async move {
                        runs::append_steps_read(
                            db,
                            now,
                            &a.run_id,
                            &a.claim_token,
                            caller.as_deref(),
                            a.start_index,
                            a.steps,
                            &rules,
                            Some(&reads),
                        )
                        .await
                    })
                })
            })
            .collect();
        self.write_many(units).await
    }

    pub async fn set_run_status(
        &self,
        run_id: &str,
        claim_token: &str,
        caller: Option<String>,
        text: &str,
        rules: LeaseRules,
    ) -> Result<Run, Error> {
        let (now, id, token, text) = (
            self.now(),
            run_id.to_owned(),
            claim_token.to_owned(),
            text.to_owned(),
        );
        self.write(move |db| {
            Box::pin(async move {
                runs::set_status(db, now, &id, &token, caller.as_deref(), &text, &rules).await
            })
        })
        .await
    }

    /// Sets a running run's token usage and cost (the running total).
    pub async fn set_run_usage(
        &self,
        run_id: &str,
        claim_token: &str,
        caller: Option<String>,
        usage: shepherd_core::usage::Usage,
        rules: LeaseRules,
    ) -> Result<Run, Error> {
        let (now, id, token) = (self.now(), run_id.to_owned(), claim_token.to_owned());
        self.write(move |db| {
            Box::pin(async move {
                ops::usage::set_usage(db, now, &id, &token, caller.as_deref(), usage, &rules).await
            })
        })
        .await
    }

    /// Runs that recorded a worktree workspace: id, status, end, workspace.
    pub async fn run_workspaces(&self) -> Result<Vec<runs::RunWorkspaceRow>, Error> {
        self.read(move |db| Box::pin(runs::workspaces(db))).await
    }

    /// The stored usage of runs started since `since` (all with `None`).
    pub async fn usage_rows(&self, since: Option<Millis>) -> Result<Vec<UsageRow>, Error> {
        self.read(move |db| Box::pin(ops::usage::rows(db, since)))
            .await
    }

    /// Nulls transcripts of runs that ended before `cutoff`; returns (runs, bytes freed).
    pub async fn prune_transcripts(&self, cutoff: Millis) -> Result<(i64, i64), Error> {
        self.write(move |db| Box::pin(runs::prune_transcripts(db, cutoff)))
            .await
    }
}
