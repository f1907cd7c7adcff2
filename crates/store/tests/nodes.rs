//! Several nodes opening one database at the same moment, as a cluster's
//! nodes do when they are started together: every one of them opens, on a
//! schema none of them has created yet.

mod common;

use common::{Kind, TestDb};

/// `CREATE SCHEMA IF NOT EXISTS` is not safe against a concurrent creator:
/// the loser of the race gets a unique violation instead of "exists".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_started_together_on_a_fresh_schema_all_open() {
    // Several rounds: the race is narrow, and each round has a new schema.
    for _ in 0..5 {
        let db = TestDb::new(Kind::Postgres).await;
        let opens: Vec<_> = (0..6)
            .map(|_| {
                let config = db.config();
                tokio::spawn(async move { shepherd_store::Store::open(&config).await })
            })
            .collect();
        let mut stores = Vec::new();
        for o in opens {
            match o.await.unwrap() {
                Ok(store) => stores.push(store),
                Err(e) => panic!("a node failed to open: {e}"),
            }
        }
        for s in stores {
            s.close();
        }
    }
}
