//! The read pool under callers that give up: a request whose client hung up
//! drops its read part-way, and the reads that follow must still find a
//! connection (they used to fail with 500 `reader pool empty` on SQLite).

mod common;

use std::time::Duration;

use common::TestDb;
use shepherd_core::event::EventFilter;

contract!(
    reads_abandoned_by_their_callers_do_not_starve_the_next,
    |db: TestDb| async move {
        let store = db.open().await;
        // Many more abandoned reads than the pool has connections, each still
        // running on the database when its caller goes away.
        let abandoned: Vec<_> = (0..24)
            .map(|_| {
                let s = store.clone();
                tokio::spawn(async move {
                    let _ =
                        tokio::time::timeout(Duration::from_millis(20), s.read_holding(300)).await;
                })
            })
            .collect();
        for a in abandoned {
            a.await.unwrap();
        }
        // Every read now waits for a connection rather than failing.
        let reads: Vec<_> = (0..16)
            .map(|_| {
                let s = store.clone();
                tokio::spawn(async move { s.read_events(0, &EventFilter::default(), 10).await })
            })
            .collect();
        for r in reads {
            let page = tokio::time::timeout(Duration::from_secs(30), r)
                .await
                .expect("reads complete")
                .unwrap();
            assert!(page.is_ok(), "a read failed: {:?}", page.err());
        }
        store.close();
    }
);
