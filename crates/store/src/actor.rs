//! Who the events of a unit of work are written for: the audit trail's
//! `actor`.
//!
//! The API knows the caller; the operations that write events do not, and
//! threading a caller through every store method would touch each of them
//! for a value only the event insert reads. So the caller is set once, for
//! the whole of a request's handling ([`acting_as`], in the API's
//! authentication layer), read when a unit of work is queued (on the
//! caller's task, where it is set), and carried into the unit, which the
//! writer runs on its own thread or task. Work that no request started (the
//! lease sweep, retries, the maintenance loops) writes as [`SYSTEM`].

use std::future::Future;

/// The actor of changes no request asked for.
pub const SYSTEM: &str = shepherd_core::actor_names::SYSTEM;

tokio::task_local! {
    static ACTING: String;
}

/// Runs `fut` with `actor` as the actor of every event it writes.
pub async fn acting_as<F: Future>(actor: String, fut: F) -> F::Output {
    ACTING.scope(actor, fut).await
}

/// The actor set for the current task, if any.
pub fn current() -> Option<String> {
    ACTING.try_with(Clone::clone).ok()
}

/// Runs `fut` (a unit of work, on the writer) with the actor its caller had
/// when it was queued: [`SYSTEM`] when none was set.
pub(crate) fn within<F: Future>(actor: Option<String>, fut: F) -> impl Future<Output = F::Output> {
    ACTING.scope(actor.unwrap_or_else(|| SYSTEM.to_owned()), fut)
}
