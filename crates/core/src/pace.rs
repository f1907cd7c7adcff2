//! When a live stream may write: the pacing rule of the event streams.
//!
//! A stream that wrote every event the moment it was committed would cost a
//! thousand subscribers a thousand writes per event; one that waited a fixed
//! interval after each write would hold back the second of two events a
//! moment apart. A person who sends a message sees exactly that second
//! event: the send commits a handful of events in a few milliseconds (the
//! message, the claim, the start, the first step), and the first step waited
//! out the interval behind the claim.
//!
//! So a stream has a credit of `burst` writes, spent one per write and
//! earned back one per `interval` (a generic cell rate: the theoretical
//! time of the next write moves on by `interval` with each write). A quiet
//! stream writes a burst at once; a stream that stays busy writes at most
//! once per interval, as before. Callers pass the time; nothing here reads
//! a clock.

use std::time::{Duration, Instant};

/// The pacing state of one stream.
#[derive(Debug, Clone)]
pub struct WritePace {
    interval: Duration,
    /// How far ahead of the theoretical time a write may go: `burst - 1`
    /// intervals.
    tolerance: Duration,
    /// When the next write would be due if every write kept the interval.
    theoretical: Option<Instant>,
}

impl WritePace {
    /// At most one write per `interval` while busy, after a burst of
    /// `burst` (at least 1) writes at once.
    pub fn new(interval: Duration, burst: u32) -> WritePace {
        WritePace {
            interval,
            tolerance: interval.saturating_mul(burst.max(1) - 1),
            theoretical: None,
        }
    }

    /// When a write wanted at `now` may go: `None` at once, else the instant
    /// to wait for.
    pub fn due(&self, now: Instant) -> Option<Instant> {
        let at = self.theoretical?.checked_sub(self.tolerance)?;
        (at > now).then_some(at)
    }

    /// A write went at `now`.
    pub fn wrote(&mut self, now: Instant) {
        let from = self.theoretical.map_or(now, |t| t.max(now));
        self.theoretical = Some(from + self.interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_burst_of_one_waits_an_interval_after_each_write() {
        let t0 = Instant::now();
        let mut p = WritePace::new(25 * MS, 1);
        assert_eq!(p.due(t0), None, "the first write goes at once");
        p.wrote(t0);
        assert_eq!(p.due(t0 + 2 * MS), Some(t0 + 25 * MS));
        assert_eq!(p.due(t0 + 25 * MS), None);
    }

    #[test]
    fn a_quiet_stream_writes_its_burst_at_once_then_keeps_the_interval() {
        let t0 = Instant::now();
        let mut p = WritePace::new(25 * MS, 4);
        // Four events a few milliseconds apart each go when they come.
        for i in 0..4 {
            let now = t0 + 3 * i * MS;
            assert_eq!(p.due(now), None, "write {i} of the burst waited");
            p.wrote(now);
        }
        // The fifth waits until a write's credit has come back.
        let now = t0 + 12 * MS;
        let due = p.due(now).expect("the fifth write waits");
        assert_eq!(due, t0 + 25 * MS);
        p.wrote(due);
        // Busy from then on: one write per interval.
        assert_eq!(p.due(due + MS), Some(due + 25 * MS));
    }

    #[test]
    fn a_quiet_spell_gives_the_whole_burst_back_and_no_more() {
        let t0 = Instant::now();
        let mut p = WritePace::new(25 * MS, 3);
        for _ in 0..3 {
            p.wrote(t0);
        }
        assert!(p.due(t0).is_some());
        // A long silence earns back the burst, not more.
        let later = t0 + Duration::from_secs(60);
        for i in 0..3 {
            assert_eq!(p.due(later), None, "write {i} after the silence waited");
            p.wrote(later);
        }
        assert_eq!(p.due(later), Some(later + 25 * MS));
    }

    #[test]
    fn no_interval_never_waits() {
        let t0 = Instant::now();
        let mut p = WritePace::new(Duration::ZERO, 1);
        for _ in 0..10 {
            assert_eq!(p.due(t0), None);
            p.wrote(t0);
        }
    }
}
