//! Counters of the writer's group commits, for `/metrics`: how many units of
//! work each transaction carried and how long it took from its first
//! statement to its commit's answer.
//!
//! Both backends' writers record every batch here (one call after each
//! transaction); the counters are plain atomics, so recording costs a few
//! relaxed adds on the writer's path and reading them never blocks it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the batch-size buckets (units per transaction).
pub const BATCH_BUCKETS: [u64; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// Upper bounds (seconds) of the commit-latency buckets.
pub const COMMIT_BUCKETS: [f64; 11] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0,
];

/// The live counters; one per store.
#[derive(Debug, Default)]
pub(crate) struct WriterStats {
    /// Per bucket, not cumulative; the last slot counts batches above every bound.
    batch: [AtomicU64; BATCH_BUCKETS.len() + 1],
    units: AtomicU64,
    /// Per bucket, not cumulative; the last slot counts commits above every bound.
    commit: [AtomicU64; COMMIT_BUCKETS.len() + 1],
    commit_micros: AtomicU64,
    batches: AtomicU64,
}

impl WriterStats {
    /// One transaction of `units` units that took `took`.
    pub(crate) fn record(&self, units: usize, took: Duration) {
        let units = units as u64;
        let i = BATCH_BUCKETS
            .iter()
            .position(|b| units <= *b)
            .unwrap_or(BATCH_BUCKETS.len());
        self.batch[i].fetch_add(1, Ordering::Relaxed);
        self.units.fetch_add(units, Ordering::Relaxed);
        let secs = took.as_secs_f64();
        let i = COMMIT_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(COMMIT_BUCKETS.len());
        self.commit[i].fetch_add(1, Ordering::Relaxed);
        self.commit_micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> WriterSnapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WriterSnapshot {
            batch_counts: self.batch.iter().map(load).collect(),
            units: load(&self.units),
            commit_counts: self.commit.iter().map(load).collect(),
            commit_seconds: load(&self.commit_micros) as f64 / 1e6,
            batches: load(&self.batches),
        }
    }
}

/// The counters at one moment. Bucket counts are per bucket (not
/// cumulative), with one more slot than bounds for everything above the last.
#[derive(Debug, Clone, Default)]
pub struct WriterSnapshot {
    /// Batches per [`BATCH_BUCKETS`] bucket.
    pub batch_counts: Vec<u64>,
    /// Units of work in every batch together.
    pub units: u64,
    /// Transactions per [`COMMIT_BUCKETS`] bucket.
    pub commit_counts: Vec<u64>,
    /// Time spent in every transaction together.
    pub commit_seconds: f64,
    /// Transactions run.
    pub batches: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_land_in_their_buckets() {
        let s = WriterStats::default();
        s.record(1, Duration::from_micros(50));
        s.record(3, Duration::from_millis(2));
        s.record(1000, Duration::from_secs(2));
        let snap = s.snapshot();
        assert_eq!(snap.batches, 3);
        assert_eq!(snap.units, 1004);
        assert_eq!(snap.batch_counts[0], 1); // <= 1
        assert_eq!(snap.batch_counts[2], 1); // <= 4
        assert_eq!(*snap.batch_counts.last().unwrap(), 1); // > 256
        assert_eq!(snap.commit_counts[0], 1); // <= 100 µs
        assert_eq!(snap.commit_counts[4], 1); // <= 2.5 ms
        assert_eq!(*snap.commit_counts.last().unwrap(), 1); // > 1 s
        assert!((snap.commit_seconds - 2.00205).abs() < 1e-9);
    }
}
