//! Where the SQLite writer's time goes, statement by statement: an opt-in
//! tally for measuring the write path (`examples/sqlite_cycle_cost.rs`
//! prints it), not a metric.
//!
//! While off, which is always unless a caller turns it on, each statement
//! costs one relaxed atomic load. While on, the writer thread times every
//! statement it runs (transaction control included: `COMMIT` is where
//! SQLite writes the WAL frames) and adds it up per SQL text. PostgreSQL
//! has its own server-side accounting (`log_min_duration_statement`,
//! `pg_stat_statements`), so its writer does not record here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The tally; one per store.
#[derive(Debug, Default)]
pub(crate) struct StatementCosts {
    on: AtomicBool,
    /// Per SQL text: calls and total time.
    tally: Mutex<HashMap<String, (u64, Duration)>>,
}

/// One statement's share of the writer's time while the tally was on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatementCost {
    /// The SQL text as the store sends it (`$N` placeholders).
    pub sql: String,
    pub calls: u64,
    pub time: Duration,
}

impl StatementCosts {
    /// Starts (or restarts) counting from zero.
    pub(crate) fn start(&self) {
        self.lock().clear();
        self.on.store(true, Ordering::Relaxed);
    }

    /// Stops counting and returns the tally, the costliest statement first.
    pub(crate) fn stop(&self) -> Vec<StatementCost> {
        self.on.store(false, Ordering::Relaxed);
        let mut costs: Vec<StatementCost> = self
            .lock()
            .drain()
            .map(|(sql, (calls, time))| StatementCost { sql, calls, time })
            .collect();
        costs.sort_by(|a, b| b.time.cmp(&a.time).then_with(|| a.sql.cmp(&b.sql)));
        costs
    }

    /// When a statement starts: the time to pass to [`Self::record`], or
    /// `None` while the tally is off.
    pub(crate) fn started(&self) -> Option<Instant> {
        self.on.load(Ordering::Relaxed).then(Instant::now)
    }

    /// Adds one run of `sql` that began at `since`.
    pub(crate) fn record(&self, sql: &str, since: Instant) {
        let took = since.elapsed();
        let mut tally = self.lock();
        match tally.get_mut(sql) {
            Some((calls, time)) => {
                *calls += 1;
                *time += took;
            }
            None => {
                tally.insert(sql.to_owned(), (1, took));
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, Duration)>> {
        self.tally.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_while_on_and_sorts_by_time() {
        let costs = StatementCosts::default();
        assert!(costs.started().is_none());
        costs.start();
        let early = Instant::now() - Duration::from_millis(5);
        costs.record("COMMIT", early);
        costs.record("COMMIT", early);
        costs.record("SELECT 1", Instant::now());
        let tally = costs.stop();
        assert_eq!(tally.len(), 2);
        assert_eq!((tally[0].sql.as_str(), tally[0].calls), ("COMMIT", 2));
        assert!(tally[0].time >= Duration::from_millis(10));
        assert_eq!(tally[1].calls, 1);
        assert!(costs.started().is_none(), "stopped");
        assert!(costs.stop().is_empty(), "taken");
    }
}
