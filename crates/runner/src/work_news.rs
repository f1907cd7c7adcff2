//! News of work for the claim loops: the event stream tells, each claim
//! loop listens. It is a counter rather than a wake-up call, so news that
//! comes while a loop is busy asking for work (its claim call in flight)
//! is still there when the loop next waits; a `Notify::notify_waiters`
//! keeps nothing for a task not waiting at that moment, and such a loop
//! slept until its poll.

use tokio::sync::watch;

/// The telling side (the event stream's follower).
#[derive(Clone)]
pub struct WorkNews(watch::Sender<u64>);

/// One claim loop's side.
pub struct NewsReader(watch::Receiver<u64>);

impl WorkNews {
    pub fn new() -> WorkNews {
        WorkNews(watch::channel(0).0)
    }

    /// There may be work.
    pub fn tell(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A reader that has read everything told so far.
    pub fn listen(&self) -> NewsReader {
        NewsReader(self.0.subscribe())
    }
}

impl Default for WorkNews {
    fn default() -> Self {
        WorkNews::new()
    }
}

impl NewsReader {
    /// Everything told so far is answered by what the caller does next (it
    /// asks for work).
    pub fn mark_read(&mut self) {
        self.0.borrow_and_update();
    }

    /// Until news comes that was not marked read; at once if some came
    /// since. Never, once every teller is gone.
    pub async fn next(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn news_told_while_the_reader_was_busy_is_there_when_it_waits() {
        let news = WorkNews::new();
        let mut reader = news.listen();
        reader.mark_read();
        // The loop is asking for work (not waiting) when the news comes.
        news.tell();
        tokio::time::timeout(Duration::from_secs(10), reader.next())
            .await
            .expect("the news told while busy was lost");
    }

    #[tokio::test]
    async fn news_marked_read_does_not_wake_again() {
        let news = WorkNews::new();
        let mut reader = news.listen();
        news.tell();
        reader.mark_read();
        let woke = tokio::time::timeout(Duration::from_millis(200), reader.next()).await;
        assert!(woke.is_err(), "news already answered woke the reader");
        news.tell();
        tokio::time::timeout(Duration::from_secs(10), reader.next())
            .await
            .expect("new news did not wake it");
    }

    #[tokio::test]
    async fn every_reader_hears_each_piece_of_news() {
        let news = WorkNews::new();
        let mut a = news.listen();
        let mut b = news.listen();
        news.tell();
        for r in [&mut a, &mut b] {
            tokio::time::timeout(Duration::from_secs(10), r.next())
                .await
                .expect("a reader missed the news");
        }
    }
}
