//! The store's clock: what every operation takes as "now", the system
//! clock unless a test fixed it and moves it by hand.

use std::sync::Arc;

use shepherd_core::time::Millis;

/// The store's clock: the system clock unless a test set it.
///
/// Lease rules (TTLs, heartbeat timeouts, start grace, cancel grace,
/// retry backoff) are all decided against the `now` each operation reads
/// here. A test of those rules gives the store a fixed clock
/// ([`StoreConfig::clock`](crate::StoreConfig::clock)) and moves it by
/// hand, so that a claim lapses exactly when the rules say rather than when
/// a sleep happens to end, and so a failing case replays the same. Clones
/// share one reading.
#[derive(Clone)]
pub struct Clock {
    /// Milliseconds since the epoch, or [`Clock::SYSTEM`].
    fixed: Arc<std::sync::atomic::AtomicI64>,
}

impl Clock {
    const SYSTEM: i64 = i64::MIN;

    /// The system clock (until [`Clock::set`] fixes it).
    pub fn system() -> Clock {
        Clock {
            fixed: Arc::new(std::sync::atomic::AtomicI64::new(Clock::SYSTEM)),
        }
    }

    /// A clock that reads `at` until it is set or advanced.
    pub fn fixed(at: Millis) -> Clock {
        let clock = Clock::system();
        clock.set(Some(at));
        clock
    }

    /// Milliseconds since the epoch.
    pub fn now(&self) -> Millis {
        match self.fixed.load(std::sync::atomic::Ordering::SeqCst) {
            Clock::SYSTEM => now_ms(),
            fixed => fixed,
        }
    }

    /// Fixes the clock at `at`, or gives it back to the system with `None`.
    pub fn set(&self, at: Option<Millis>) {
        self.fixed.store(
            at.unwrap_or(Clock::SYSTEM),
            std::sync::atomic::Ordering::SeqCst,
        );
    }

    /// Moves a fixed clock forward by `ms` (a system clock is left alone).
    pub fn advance(&self, ms: Millis) {
        let _ = self.fixed.fetch_update(
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
            |t| (t != Clock::SYSTEM).then_some(t + ms),
        );
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.fixed.load(std::sync::atomic::Ordering::SeqCst) {
            Clock::SYSTEM => f.write_str("Clock::system()"),
            at => write!(f, "Clock::fixed({at})"),
        }
    }
}

/// Milliseconds since the epoch, from the system clock.
pub fn now_ms() -> Millis {
    chrono::Utc::now().timestamp_millis()
}
