//! The store's input-request operations, one unit of work each; see
//! `ops/input_requests.rs` for what each records.

use shepherd_core::input::{InputAnswer, InputRequest};
use shepherd_core::Error;

use crate::ops::input_requests::{self, InputFilter, NewInputRequest};
use crate::{log, Listing, Store};

impl Store {
    /// Records what a run's agent asks (answered at once when a rule of
    /// its policy covers it).
    pub async fn ask(&self, new: NewInputRequest) -> Result<InputRequest, Error> {
        let now = self.now();
        self.write(move |db| Box::pin(input_requests::ask(db, now, new)))
            .await
    }

    pub async fn input_request(&self, id: &str) -> Result<InputRequest, Error> {
        let id = id.to_owned();
        self.read(move |db| Box::pin(async move { input_requests::get(db, &id).await }))
            .await
    }

    /// Requests, newest first, and the cursor the list is valid at.
    pub async fn input_requests(&self, f: InputFilter) -> Result<Listing<InputRequest>, Error> {
        self.read(move |db| {
            Box::pin(async move {
                let items = input_requests::list(db, &f).await?;
                Ok(Listing {
                    items,
                    cursor: log::head(db).await?,
                })
            })
        })
        .await
    }

    /// The first answer to a request; later ones get `already_answered`.
    pub async fn answer_input(
        &self,
        id: &str,
        answer: InputAnswer,
        answered_by: &str,
    ) -> Result<InputRequest, Error> {
        let (now, id, by) = (self.now(), id.to_owned(), answered_by.to_owned());
        self.write(move |db| {
            Box::pin(async move { input_requests::answer(db, now, &id, answer, &by).await })
        })
        .await
    }

    /// Ends requests whose time ran out; how many. Reads first, so that a
    /// node with nothing due writes nothing.
    pub async fn expire_input_requests(&self) -> Result<usize, Error> {
        let now = self.now();
        let due = self
            .read(move |db| Box::pin(input_requests::any_due(db, now)))
            .await?;
        if !due {
            return Ok(0);
        }
        self.write(move |db| Box::pin(input_requests::expire_due(db, now, 200)))
            .await
    }

    /// The key run tokens are derived from (made on first use).
    pub async fn run_token_key(&self) -> Result<String, Error> {
        let now = self.now();
        let sealer = self.sealer();
        self.write(move |db| {
            Box::pin(async move { input_requests::run_token_key(db, &sealer, now).await })
        })
        .await
    }
}

impl Store {
    /// A request and the cursor it is valid at (to wait for its answer from).
    pub async fn input_request_at(&self, id: &str) -> Result<(InputRequest, i64), Error> {
        let id = id.to_owned();
        self.read(move |db| {
            Box::pin(async move {
                let r = input_requests::get(db, &id).await?;
                Ok((r, log::head(db).await?))
            })
        })
        .await
    }

    /// The running run `run_id`, if `claim_token` is its active claim's
    /// (held by `worker`, when a worker token asks): 409 `claim_stale` otherwise.
    pub async fn fenced_run(
        &self,
        run_id: &str,
        claim_token: &str,
        worker: Option<String>,
    ) -> Result<shepherd_core::model::Run, Error> {
        let (now, id, token) = (self.now(), run_id.to_owned(), claim_token.to_owned());
        self.read(move |db| {
            Box::pin(async move {
                let run = crate::ops::runs::require(db, &id).await?;
                crate::ops::runs::fence_run(db, now, &run, &token, worker.as_deref(), None).await?;
                Ok(run)
            })
        })
        .await
    }
}
