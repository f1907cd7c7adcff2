//! What a worker token may read (PRODUCT.md decision 9, narrowed).
//!
//! A worker token proves only that its holder is one worker. It may read
//! the pending tasks it may take, the tasks and runs it holds or held, the
//! conversations it ran a run of, its own worker record and the events that
//! name it; every other read answers 403 `forbidden`, and lists and streams
//! are narrowed to what it may see (or, as resources and conversation lists,
//! are the operator's).
//! The operator token reads everything. Writes keep their own checks.

use shepherd_core::model::{Run, Task};
use shepherd_core::Error;
use shepherd_store::TaskDetail;

use crate::auth::Caller;
use crate::AppState;

/// The refusal every out-of-scope read gets.
pub fn forbidden(what: &str) -> Error {
    Error::forbidden(
        "forbidden",
        format!("a worker token cannot read {what}; use the operator token"),
    )
}

/// Refuses a worker: the route reads beyond any one worker's scope.
pub fn operator_only(caller: &Caller, what: &str) -> Result<(), Error> {
    match caller {
        Caller::Operator | Caller::User { .. } => Ok(()),
        Caller::Worker(_) | Caller::Run(_) | Caller::Host(_) => Err(forbidden(what)),
    }
}

/// A task is visible to a worker that holds or held a claim on it, or that
/// may take it now.
pub async fn check_task(state: &AppState, caller: &Caller, d: &TaskDetail) -> Result<(), Error> {
    let w = match caller {
        Caller::Operator | Caller::User { .. } => return Ok(()),
        Caller::Run(_) | Caller::Host(_) => return Err(forbidden("tasks")),
        Caller::Worker(w) => w,
    };
    if d.claims.iter().any(|c| &c.worker_id == w) || may_take(state, w, &d.task).await? {
        return Ok(());
    }
    Err(forbidden("a task it neither holds nor may take"))
}

async fn may_take(state: &AppState, worker_id: &str, task: &Task) -> Result<bool, Error> {
    let worker = state.store.worker(worker_id).await?;
    Ok(shepherd_core::claiming::may_take(
        &worker,
        task,
        shepherd_store::now_ms(),
    ))
}

/// A run is visible to the worker that ran it, and to its own run token.
pub fn check_run(caller: &Caller, run: &Run) -> Result<(), Error> {
    match caller {
        Caller::Worker(w) if w != &run.worker_id => Err(forbidden("another worker's run")),
        Caller::Run(r) if r != &run.id => Err(forbidden("another run")),
        // Defence in depth: the authentication layer already keeps host
        // tokens to their own routes.
        Caller::Host(_) => Err(forbidden("runs")),
        _ => Ok(()),
    }
}

/// A conversation is visible to a worker that ran one of its runs (the
/// operator's messages are its spec; another conversation's are not its
/// business). `ran_by` lists the workers that ran its runs.
pub fn check_conversation(caller: &Caller, ran_by: &[String]) -> Result<(), Error> {
    match caller {
        Caller::Worker(w) if !ran_by.contains(w) => {
            Err(forbidden("a conversation it ran no run of"))
        }
        Caller::Run(_) | Caller::Host(_) => Err(forbidden("conversations")),
        _ => Ok(()),
    }
}

/// The `worker_id` an event read is narrowed to: a worker sees the events
/// that name it, and asking for another worker's is refused.
pub fn event_worker(caller: &Caller, asked: Option<String>) -> Result<Option<String>, Error> {
    match caller {
        Caller::Operator | Caller::User { .. } => Ok(asked),
        Caller::Worker(w) => match asked {
            Some(a) if &a != w => Err(forbidden("another worker's events")),
            _ => Ok(Some(w.clone())),
        },
        Caller::Run(_) | Caller::Host(_) => Err(forbidden("events")),
    }
}
