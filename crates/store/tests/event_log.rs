//! The event log's contract, on both databases: appends are readable by
//! cursor and filter, and a live tailer sees every committed event exactly
//! once, in order, even while many nodes write concurrently.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use serde_json::json;
use shepherd_core::event::{EventFilter, EventRefs, NewEvent};
use shepherd_store::{TailItem, TestFailure};

use common::{Kind, TestDb};

fn event(kind: &str, task: &str, n: u64) -> NewEvent {
    NewEvent::new(kind, EventRefs::default().task(task), json!({ "n": n }))
}

contract!(
    append_then_read_by_cursor_and_filter,
    |db: TestDb| async move {
        let store = db.open().await;
        assert_eq!(store.head().await.unwrap(), 0);
        let seqs = store
            .append_events(vec![
                event("task.created", "A", 1),
                event("worker.building", "B", 2),
                event("task.created", "B", 3),
            ])
            .await
            .unwrap();
        assert_eq!(seqs.len(), 3);
        assert!(seqs.windows(2).all(|w| w[0] < w[1]));
        let page = store
            .read_events(0, &EventFilter::default(), 10)
            .await
            .unwrap();
        assert_eq!(page.events.len(), 3);
        assert_eq!(page.next_cursor, seqs[2]);
        let only_b = EventFilter {
            task_id: Some("B".into()),
            ..Default::default()
        };
        let page = store.read_events(0, &only_b, 10).await.unwrap();
        assert_eq!(
            page.events
                .iter()
                .map(|e| e.data["n"].as_u64().unwrap())
                .collect::<Vec<_>>(),
            vec![2, 3]
        );
        let worker_kinds = EventFilter {
            kinds: vec!["worker.*".into()],
            ..Default::default()
        };
        let page = store.read_events(0, &worker_kinds, 10).await.unwrap();
        assert_eq!(page.events.len(), 1);
        assert_eq!(page.events[0].kind, "worker.building");
        // A page that is full resumes exactly after its last event.
        let page = store
            .read_events(0, &EventFilter::default(), 2)
            .await
            .unwrap();
        assert_eq!(page.next_cursor, seqs[1]);
        let rest = store
            .read_events(page.next_cursor, &EventFilter::default(), 2)
            .await
            .unwrap();
        assert_eq!(rest.events.len(), 1);
        assert_eq!(rest.events[0].seq, seqs[2]);
        let latest = store
            .read_latest_events(&EventFilter::default(), 2)
            .await
            .unwrap();
        assert_eq!(
            latest.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            seqs[1..].to_vec()
        );
        store.close();
    }
);

contract!(
    tailer_sees_every_committed_event_exactly_once_in_order,
    |db: TestDb| async move {
        const NODES: usize = 4;
        const WRITERS_PER_NODE: u64 = 6;
        const EVENTS_PER_WRITER: u64 = 60;
        let mut nodes = Vec::new();
        for _ in 0..NODES {
            nodes.push(db.open().await);
        }
        // The tailer runs on its own node and starts before anything is written.
        let observer = db.open().await;
        let mut tail = observer.tail(0, EventFilter::default());
        // A second reader polls with plain "events after my cursor" queries, the
        // pattern that skips late-committing rows when ordering is not enforced.
        let poller_store = db.open().await;
        let total = NODES as u64 * WRITERS_PER_NODE * EVENTS_PER_WRITER;
        let poller = tokio::spawn(async move {
            let mut cursor = 0;
            let mut seen = Vec::new();
            while (seen.len() as u64) < total {
                let page = poller_store
                    .read_events(cursor, &EventFilter::default(), 1000)
                    .await
                    .unwrap();
                for e in &page.events {
                    seen.push((
                        e.seq,
                        e.data["w"].as_u64().unwrap(),
                        e.data["n"].as_u64().unwrap(),
                    ));
                }
                cursor = page.next_cursor;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            seen
        });

        let mut writers = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            for w in 0..WRITERS_PER_NODE {
                let node = node.clone();
                let writer_id = i as u64 * 100 + w;
                writers.push(tokio::spawn(async move {
                    let mut acked = Vec::new();
                    for n in 0..EVENTS_PER_WRITER {
                        let e = NewEvent::new(
                            "test.append",
                            EventRefs::default(),
                            json!({ "w": writer_id, "n": n }),
                        );
                        // Every third unit of work stays open a little, so commits
                        // interleave out of sequence order unless the log prevents it.
                        // Another third are plain appends, which a writer may send
                        // as one statement without a transaction of its own.
                        let seqs = match n % 3 {
                            0 => node.append_events_holding(vec![e], (n % 5) as i64).await,
                            1 => node.append_events(vec![e]).await,
                            _ => node.append_events_holding(vec![e], 0).await,
                        }
                        .unwrap();
                        acked.push((seqs[0], writer_id, n));
                    }
                    acked
                }));
            }
        }
        let mut acked = Vec::new();
        for w in writers {
            acked.extend(w.await.unwrap());
        }
        assert_eq!(acked.len() as u64, total);

        let mut seen = Vec::new();
        while (seen.len() as u64) < total {
            let item = tokio::time::timeout(Duration::from_secs(30), tail.next())
                .await
                .expect("tailer stalled")
                .unwrap();
            match item {
                TailItem::Event(e) => seen.push((
                    e.seq,
                    e.data["w"].as_u64().unwrap(),
                    e.data["n"].as_u64().unwrap(),
                )),
                TailItem::Expired => panic!("nothing was pruned"),
                TailItem::FellBehind => panic!("this tail backfills when behind"),
            }
        }
        let polled = tokio::time::timeout(Duration::from_secs(30), poller)
            .await
            .expect("poller stalled")
            .unwrap();

        acked.sort();
        for (name, got) in [("tail", &seen), ("poller", &polled)] {
            assert!(
                got.windows(2).all(|w| w[0].0 < w[1].0),
                "{name}: out of order or duplicated"
            );
            let unique: HashSet<_> = got.iter().collect();
            assert_eq!(unique.len(), got.len(), "{name}: duplicates");
            assert_eq!(
                got, &acked,
                "{name}: did not see exactly the acknowledged events"
            );
        }
        // Nothing more arrives: the tail is exhausted and duplicate-free.
        let extra = tokio::time::timeout(Duration::from_millis(300), tail.next()).await;
        assert!(extra.is_err(), "unexpected extra event: {extra:?}");
        for n in nodes {
            n.close();
        }
    }
);

contract!(
    tail_resumes_from_a_cursor_and_filters_live_events,
    |db: TestDb| async move {
        let store = db.open().await;
        let first = store
            .append_events(vec![event("a", "T1", 1), event("b", "T2", 2)])
            .await
            .unwrap();
        let filter = EventFilter {
            task_id: Some("T1".into()),
            ..Default::default()
        };
        let mut tail = store.tail(first[0], filter);
        let later = store.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            later
                .append_events(vec![event("c", "T2", 3), event("d", "T1", 4)])
                .await
                .unwrap();
        });
        let item = tokio::time::timeout(Duration::from_secs(5), tail.next())
            .await
            .unwrap()
            .unwrap();
        match item {
            TailItem::Event(e) => {
                assert_eq!(e.kind, "d");
                assert_eq!(tail.cursor(), e.seq);
            }
            other => panic!("unexpected {other:?}"),
        }
        store.close();
    }
);

contract!(pruned_cursor_reports_expiry, |db: TestDb| async move {
    let store = db.open().await;
    store
        .append_events(vec![
            event("a", "T", 1),
            event("b", "T", 2),
            event("c", "T", 3),
        ])
        .await
        .unwrap();
    let removed = store
        .prune_events(shepherd_store::now_ms() + 1000)
        .await
        .unwrap();
    assert_eq!(removed, 2, "the newest event is always kept");
    let page = store
        .read_events(0, &EventFilter::default(), 10)
        .await
        .unwrap();
    assert!(page.cursor_expired);
    let mut tail = store.tail(0, EventFilter::default());
    assert!(matches!(tail.next().await.unwrap(), TailItem::Expired));
    match tail.next().await.unwrap() {
        TailItem::Event(e) => assert_eq!(e.kind, "c"),
        other => panic!("unexpected {other:?}"),
    }
    store.close();
});

async fn wait_published(store: &shepherd_store::Store, seq: i64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.published_through() < seq {
        assert!(std::time::Instant::now() < deadline, "the pump stalled");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

contract!(
    a_live_tail_that_falls_out_of_the_ring_is_told_so,
    |db: TestDb| async move {
        let store = db.open().await;
        // History longer than the ring is backfilled, never reported as a lag.
        let flood = |from: u64| -> Vec<NewEvent> {
            (0..(shepherd_store::BROADCAST_CAPACITY as u64 + 500))
                .map(|n| event("flood", "T", from + n))
                .collect()
        };
        let stored = store.append_events(flood(0)).await.unwrap();
        // The pump has published the history before the reader subscribes.
        wait_published(&store, *stored.last().unwrap()).await;
        let mut tail = store.tail(0, EventFilter::default());
        let history = shepherd_store::BROADCAST_CAPACITY as u64 + 500;
        for n in 0..history {
            match tail.next().await.unwrap() {
                TailItem::Event(e) => assert_eq!(e.data["n"], n),
                other => panic!("unexpected {other:?} while backfilling"),
            }
        }
        assert!(tail.try_next().is_none(), "nothing more is at hand");
        // Live: one event arrives through the broadcast...
        let live = store
            .append_events(vec![event("live", "T", 0)])
            .await
            .unwrap();
        match tokio::time::timeout(Duration::from_secs(5), tail.next()).await {
            Ok(Ok(TailItem::Event(e))) => assert_eq!(e.seq, live[0]),
            other => panic!("unexpected {other:?}"),
        }
        // ...then more than the ring holds while the reader reads nothing.
        let burst = store.append_events(flood(history)).await.unwrap();
        wait_published(&store, *burst.last().unwrap()).await;
        match tail.try_next_or_behind() {
            Some(Ok(TailItem::FellBehind)) => assert_eq!(tail.cursor(), live[0]),
            other => panic!("expected FellBehind, got {other:?}"),
        }
        // Reading on backfills exactly from the cursor.
        for seq in &burst {
            match tail.next().await.unwrap() {
                TailItem::Event(e) => assert_eq!(e.seq, *seq),
                other => panic!("unexpected {other:?}"),
            }
        }
        // Live again; a lag found while waiting in `next` (the server, not
        // the client, was behind) is caught up from the log, not reported.
        let live = store
            .append_events(vec![event("live", "T", 1)])
            .await
            .unwrap();
        match tokio::time::timeout(Duration::from_secs(5), tail.next()).await {
            Ok(Ok(TailItem::Event(e))) => assert_eq!(e.seq, live[0]),
            other => panic!("unexpected {other:?}"),
        }
        let burst = store.append_events(flood(2 * history)).await.unwrap();
        wait_published(&store, *burst.last().unwrap()).await;
        match tail.next().await.unwrap() {
            TailItem::Event(e) => assert_eq!(e.seq, burst[0]),
            other => panic!("expected a quiet backfill, got {other:?}"),
        }
        store.close();
    }
);

contract!(
    a_unit_whose_unawaited_write_fails_commits_nothing,
    |db: TestDb| async move {
        let store = db.open().await;
        let mut tail = store.tail(store.head().await.unwrap(), EventFilter::default());
        let warm = store
            .append_events(vec![event("warm", "T", 0)])
            .await
            .unwrap();
        match tokio::time::timeout(Duration::from_secs(5), tail.next()).await {
            Ok(Ok(TailItem::Event(e))) => assert_eq!(e.seq, warm[0]),
            other => panic!("unexpected {other:?}"),
        }
        // Three times: on PostgreSQL the first prepares the statements, and
        // the later ones send them at once, so their failure is found only
        // when the writer collects the answers with the COMMIT's.
        for _ in 0..3 {
            let err = store
                .append_events_then_fail(vec![event("doomed", "T", 1)])
                .await
                .unwrap_err();
            assert_eq!(err.code, "constraint_violation", "{err}");
        }
        // The writer carries on, and the failed unit's event never existed.
        let kept = store
            .append_events(vec![event("kept", "T", 2)])
            .await
            .unwrap();
        match tokio::time::timeout(Duration::from_secs(5), tail.next()).await {
            Ok(Ok(TailItem::Event(e))) => {
                assert_eq!(e.kind, "kept");
                assert_eq!(e.seq, kept[0]);
            }
            other => panic!("unexpected {other:?}"),
        }
        let doomed = EventFilter {
            kinds: vec!["doomed".into()],
            ..Default::default()
        };
        let page = store.read_events(0, &doomed, 10).await.unwrap();
        assert!(page.events.is_empty(), "{:?}", page.events);
        store.close();
    }
);

contract!(
    each_unit_of_a_batch_is_told_what_was_committed,
    |db: TestDb| async move {
        let store = db.open().await;
        // Twice each way: on PostgreSQL the first round prepares the
        // statements, the later ones pipeline them without waiting. The
        // failing unit is the second of four, then the last (nothing after
        // it can notice an aborted transaction before the COMMIT).
        let ways = [
            TestFailure::Write,
            TestFailure::TrustedWrite,
            TestFailure::Read,
            TestFailure::Refusal,
        ];
        let cases = ways
            .iter()
            .flat_map(|h| [(*h, 1), (*h, 1), (*h, 3), (*h, 3)]);
        for (round, (how, failing)) in cases.enumerate() {
            let groups: Vec<Vec<NewEvent>> = (0..4u64)
                .map(|u| vec![event(&format!("batch{round}.unit{u}"), "T", u)])
                .collect();
            let outcomes = store
                .append_groups_one_failing(groups, failing, how)
                .await
                .unwrap();
            assert_eq!(outcomes.len(), 4);
            let err = outcomes[failing].as_ref().unwrap_err();
            match how {
                TestFailure::Write | TestFailure::TrustedWrite => {
                    assert_eq!(err.code, "constraint_violation", "{how:?}: {err}")
                }
                TestFailure::Refusal => assert_eq!(err.code, "refused", "{err}"),
                TestFailure::Read => {}
                TestFailure::Panic => unreachable!("not among the ways tried here"),
            }
            for (u, outcome) in outcomes.iter().enumerate() {
                let kind = format!("batch{round}.unit{u}");
                let filter = EventFilter {
                    kinds: vec![kind.clone()],
                    ..Default::default()
                };
                let found = store.read_events(0, &filter, 10).await.unwrap().events;
                match outcome {
                    // Told it committed: its event is in the log, once.
                    Ok(()) => assert_eq!(found.len(), 1, "{how:?} {kind}: {found:?}"),
                    // Told it failed: nothing of it was committed.
                    Err(_) => assert!(
                        found.is_empty(),
                        "{how:?}: {kind} failed yet wrote {found:?}"
                    ),
                }
                // A unit that refused before writing, or did not trust a
                // failing write, fails alone. (A failure in the database
                // without a savepoint, or of a trusted write, may take the
                // whole transaction with it.)
                if matches!(how, TestFailure::Write | TestFailure::Refusal) && u != failing {
                    assert!(outcome.is_ok(), "{how:?} {kind}: {outcome:?}");
                }
            }
        }
        // The writer carries on.
        store
            .append_events(vec![event("after", "T", 9)])
            .await
            .unwrap();
        store.close();
    }
);

contract!(
    writes_made_as_the_store_opens_reach_live_readers,
    |db: TestDb| async move {
        // The event pump must count as published only what was in the log
        // before the store took its first write. Each round opens the store
        // and writes at once, racing the pump's start; a live reader must
        // still hear every event (it used to miss those the pump's late
        // reading of the head had already counted).
        for round in 0..20u64 {
            let store = db.open().await;
            // Three events per round, no rollbacks: the head is known
            // without reading it (a read would give the pump time to start).
            let mut tail = store.tail(round as i64 * 3, EventFilter::default());
            // The first event comes from the log (the tail backfills), the
            // next ones live.
            let first = store
                .append_events(vec![event("opened", "T", round * 10)])
                .await
                .unwrap();
            match tokio::time::timeout(Duration::from_secs(5), tail.next()).await {
                Ok(Ok(TailItem::Event(e))) => assert_eq!(e.seq, first[0]),
                other => panic!("round {round}: got {other:?}"),
            }
            let mut want = Vec::new();
            for n in 1..3 {
                want.extend(
                    store
                        .append_events(vec![event("opened", "T", round * 10 + n)])
                        .await
                        .unwrap(),
                );
            }
            for seq in want {
                match tokio::time::timeout(Duration::from_secs(5), tail.next()).await {
                    Ok(Ok(TailItem::Event(e))) => assert_eq!(e.seq, seq, "round {round}"),
                    other => panic!("round {round}: expected seq {seq}, got {other:?}"),
                }
            }
            store.close();
        }
    }
);

contract!(
    a_panicking_unit_rolls_back_and_the_writer_serves_on,
    |db: TestDb| async move {
        // A unit of work that panics (a bug) must not commit half of what
        // it wrote, nor take the writer (SQLite's thread, PostgreSQL's task
        // or the caller running it inline) down with it: whether its batch
        // runs alone or together with other callers' writes, nothing of it
        // commits, its caller is told `internal`, every other unit is told
        // what the log holds, and the next writes go through.
        let store = db.open().await;
        for round in 0..6 {
            let groups: Vec<Vec<NewEvent>> = (0..3u64)
                .map(|u| vec![event(&format!("panic{round}.unit{u}"), "T", u)])
                .collect();
            // Odd rounds send other writes meanwhile, which the writer may
            // group into the same transaction.
            let busy: Vec<_> = (0..if round % 2 == 1 { 8 } else { 0 })
                .map(|i| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        store
                            .append_events(vec![event(&format!("busy{round}.{i}"), "T", 9)])
                            .await
                    })
                })
                .collect();
            // And a lone panicking write, which a busy writer runs on its
            // own task (or thread) rather than on this caller's.
            let lone = {
                let store = store.clone();
                let group = vec![vec![event(&format!("panic{round}.lone"), "T", 7)]];
                tokio::spawn(async move {
                    store
                        .append_groups_one_failing(group, 0, TestFailure::Panic)
                        .await
                })
            };
            let outcomes = store
                .append_groups_one_failing(groups, 1, TestFailure::Panic)
                .await;
            // `failed`: the error the unit's caller was told, if any.
            let told_committed = |kind: String, failed: Option<String>| {
                let store = store.clone();
                async move {
                    let filter = EventFilter {
                        kinds: vec![kind.clone()],
                        ..Default::default()
                    };
                    let found = store.read_events(0, &filter, 10).await.unwrap().events;
                    match failed {
                        None => assert_eq!(found.len(), 1, "{kind}: {found:?}"),
                        Some(e) => {
                            assert!(found.is_empty(), "{kind} failed ({e}) yet wrote {found:?}")
                        }
                    }
                }
            };
            // A write that shared the panicking unit's transaction is
            // either rolled back with it and told to try again, or (behind
            // a savepoint of its own) committed.
            for (i, b) in busy.into_iter().enumerate() {
                let outcome = b.await.unwrap().map(|_| ());
                if let Err(e) = &outcome {
                    assert_eq!(e.code, "database_unavailable", "{e}");
                }
                told_committed(
                    format!("busy{round}.{i}"),
                    outcome.err().map(|e| e.to_string()),
                )
                .await;
            }
            // A panicking unit's caller is told `internal` if the unit ran,
            // or "try again" if the batch it shared had already been rolled
            // back for the other panicking unit: at least one of them ran.
            let mut panic_codes = Vec::new();
            let lone = lone
                .await
                .expect("the lone panicking write's caller is told");
            let lone_error = match &lone {
                Ok(outcomes) => outcomes[0].as_ref().expect_err("the lone unit failed"),
                Err(e) => e,
            };
            panic_codes.push(lone_error.code);
            told_committed(format!("panic{round}.lone"), Some(lone_error.to_string())).await;
            match outcomes {
                Err(e) => panic_codes.push(e.code),
                Ok(outcomes) => {
                    assert_eq!(outcomes.len(), 3);
                    let err = outcomes[1].as_ref().expect_err("the panicking unit failed");
                    panic_codes.push(err.code);
                    for (u, outcome) in outcomes.iter().enumerate() {
                        if let (Err(e), true) = (outcome, u != 1) {
                            assert_eq!(e.code, "database_unavailable", "{e}");
                        }
                        let failed = outcome.as_ref().err().map(|e| e.to_string());
                        told_committed(format!("panic{round}.unit{u}"), failed).await;
                    }
                }
            }
            assert!(
                panic_codes
                    .iter()
                    .all(|c| matches!(*c, "internal" | "database_unavailable"))
                    && panic_codes.contains(&"internal"),
                "round {round}: {panic_codes:?}"
            );
            store
                .append_events(vec![event(&format!("after{round}"), "T", 1)])
                .await
                .expect("the writer serves on after a panicking unit");
        }
        store.close();
    }
);

#[tokio::test]
async fn postgres_notifies_commits_only_while_another_node_listens() {
    // A node alone on its database sends no NOTIFY with its commits; once a
    // second node has announced itself, commits are notified again and the
    // second node's tail hears the first node's events.
    let db = TestDb::new(Kind::Postgres).await;
    let first = db.open().await;
    for i in 0..20 {
        first
            .append_events(vec![NewEvent::new(
                "test.alone",
                EventRefs::default(),
                json!({ "i": i }),
            )])
            .await
            .unwrap();
    }
    assert_eq!(first.peer_state(), Some((false, 0)));

    let second = db.open().await;
    let mut tail = second.tail(first.head().await.unwrap(), EventFilter::default());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while first.peer_state().map(|(present, _)| present) != Some(true) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second node was never heard"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let seq = first
        .append_events(vec![NewEvent::new(
            "test.together",
            EventRefs::default(),
            json!({}),
        )])
        .await
        .unwrap()[0];
    let (_, sent) = first.peer_state().unwrap();
    assert!(sent >= 1, "a commit with a peer listening is notified");
    let heard = tokio::time::timeout(Duration::from_secs(10), tail.next())
        .await
        .expect("the second node hears the first node's commit")
        .unwrap();
    let TailItem::Event(heard) = heard else {
        panic!("expected an event, got {heard:?}");
    };
    assert_eq!((heard.seq, heard.kind.as_str()), (seq, "test.together"));
    first.close();
    second.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_readers_joining_nodes_nobody_listened_to_miss_nothing() {
    // Two nodes write at once, so each node's commits rarely follow the
    // last event it published, and readers come and go on both nodes, each
    // from where the last one left, so that each node spends stretches with
    // nobody listening. Every reader must get every event after its cursor
    // exactly once, in order: what it backfills, then what both nodes commit
    // while it listens (the other node's events reach it only through its
    // node's pump).
    let db = TestDb::new(Kind::Postgres).await;
    let nodes = [db.open().await, db.open().await];
    let writers: Vec<_> = (0..4usize)
        .map(|w| {
            let node = nodes[w % 2].clone();
            tokio::spawn(async move {
                for i in 0..150u64 {
                    node.append_events(vec![event("test.mixed", &format!("W{w}"), i)])
                        .await
                        .unwrap();
                    if i % 10 == 0 {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
            })
        })
        .collect();
    let mut cursor = 0;
    let mut round = 0;
    loop {
        let writing = writers.iter().any(|w| !w.is_finished());
        // Nobody listens on either node for a while.
        tokio::time::sleep(Duration::from_millis(15)).await;
        let node = &nodes[round % 2];
        let mut tail = node.tail(cursor, EventFilter::default());
        let mut got = Vec::new();
        let mut until = cursor;
        for wait in [0, 20] {
            tokio::time::sleep(Duration::from_millis(wait)).await;
            until = node.head().await.unwrap();
            while until > cursor && got.last().is_none_or(|s| *s < until) {
                match tokio::time::timeout(Duration::from_secs(10), tail.next()).await {
                    Ok(Ok(TailItem::Event(e))) => got.push(e.seq),
                    other => panic!("round {round}: after {:?}: {other:?}", got.last()),
                }
            }
        }
        drop(tail);
        let want: Vec<i64> = nodes[0]
            .read_events(cursor, &EventFilter::default(), 100_000)
            .await
            .unwrap()
            .events
            .iter()
            .map(|e| e.seq)
            .take_while(|s| *s <= until)
            .collect();
        assert_eq!(got, want, "round {round}, from {cursor}");
        cursor = cursor.max(until);
        round += 1;
        if !writing {
            break;
        }
    }
    for w in writers {
        w.await.expect("every write of both nodes succeeded");
    }
    assert_eq!(cursor, nodes[0].head().await.unwrap());
    assert!(round >= 3, "the writers ended before readers came and went");
    for n in nodes {
        n.close();
    }
}

#[tokio::test]
async fn postgres_plain_appends_wait_for_an_earlier_open_transaction() {
    // A node alone on its database may send a plain append as one statement
    // in autocommit. That statement must still queue behind a transaction
    // that drew a lower `seq` and has not committed, or a reader could pass
    // over the lower one. The open transaction here is another process's,
    // holding the event lock as every writer must.
    let db = TestDb::new(Kind::Postgres).await;
    let store = db.open().await;
    store
        .append_events(vec![event("test.warm", "T1", 0)])
        .await
        .unwrap();
    let mut config: tokio_postgres::Config = common::pg_url().parse().unwrap();
    config.options(format!("-c search_path={}", db.config().pg_schema.unwrap()));
    let (other, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    other.batch_execute("BEGIN").await.unwrap();
    other
        .execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&shepherd_store::POSTGRES_EVENT_LOCK],
        )
        .await
        .unwrap();
    let early: i64 = other
        .query_one(
            "INSERT INTO events (ts, type, data) VALUES (0, 'test.early', '{}') RETURNING seq",
            &[],
        )
        .await
        .unwrap()
        .get(0);

    let appender = store.clone();
    let mut late = tokio::spawn(async move {
        appender
            .append_events(vec![event("test.late", "T1", 1)])
            .await
    });
    let waited = tokio::time::timeout(Duration::from_millis(500), &mut late).await;
    assert!(
        waited.is_err(),
        "a plain append committed while an earlier transaction was open: {waited:?}"
    );
    other.batch_execute("COMMIT").await.unwrap();
    let late = tokio::time::timeout(Duration::from_secs(10), late)
        .await
        .expect("the append goes through once the other transaction commits")
        .unwrap()
        .unwrap();
    assert!(late[0] > early, "late {late:?}, early {early}");
    let page = store
        .read_events(0, &EventFilter::default(), 10)
        .await
        .unwrap();
    let kinds: Vec<_> = page.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["test.warm", "test.early", "test.late"]);
    store.close();
}

#[tokio::test]
async fn postgres_a_write_dropped_part_way_is_rolled_back_and_frees_the_log() {
    // A node that is idle runs a caller's unit of work on the caller's own
    // task. If the caller goes away part-way (a client hung up), the unit
    // must be rolled back, not committed by whatever the node writes next,
    // and the event lock must be released without waiting for that.
    let db = TestDb::new(Kind::Postgres).await;
    let first = db.open().await;
    let second = db.open().await;
    let dropped = tokio::time::timeout(
        Duration::from_millis(300),
        first.append_events_holding(vec![event("test.dropped", "T1", 0)], 1500),
    )
    .await;
    assert!(dropped.is_err(), "the unit was meant to be cut short");

    // The other node gets the event lock once the dropped unit's statement
    // ends, although the first node writes nothing more.
    tokio::time::timeout(
        Duration::from_secs(10),
        second.append_events(vec![event("test.other", "T1", 1)]),
    )
    .await
    .expect("the event lock was left held")
    .unwrap();
    first
        .append_events(vec![event("test.after", "T1", 2)])
        .await
        .unwrap();
    let page = second
        .read_events(0, &EventFilter::default(), 10)
        .await
        .unwrap();
    let kinds: Vec<_> = page.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["test.other", "test.after"]);
    first.close();
    second.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_unread_answer_does_not_stall_the_writers_connection() {
    // A unit's pipelined writes are answered in order, and tokio-postgres
    // stops reading a connection while an answer nobody reads yet fills
    // its hand-over. A unit that appends many events (a long answer of
    // `seq`s, in several chunks) and then reads must still get its read's
    // answer. The first round prepares the statements; the later ones send
    // the insert at once, its answer unread while the read waits.
    let db = TestDb::new(Kind::Postgres).await;
    let store = db.open().await;
    let mut expected = 0;
    for round in 0..3u64 {
        let events: Vec<_> = (0..5000)
            .map(|n| event("test.many", "T1", round * 10_000 + n))
            .collect();
        let head = tokio::time::timeout(
            Duration::from_secs(30),
            store.append_events_then_read(events),
        )
        .await
        .unwrap_or_else(|_| panic!("round {round}: the unit never got its read's answer"))
        .unwrap();
        expected += 5000;
        assert!(head >= expected, "round {round}: head {head}");
    }
    store.close();
}

#[tokio::test]
async fn postgres_a_read_cut_short_does_not_leave_its_snapshot_to_the_next() {
    // A reader that goes away mid-read (an SSE client hanging up during a
    // backfill) leaves its pooled connection inside a repeatable-read
    // transaction. The next read on that connection must not see the log
    // as it was then.
    let db = TestDb::new(Kind::Postgres).await;
    let mut config = db.config();
    config.pg_pool_size = 2; // the writer's connection and one for reads
    let first = shepherd_store::Store::open(&config).await.unwrap();
    let second = db.open().await;
    first
        .append_events(vec![event("test.before", "T1", 0)])
        .await
        .unwrap();
    let cut = tokio::time::timeout(Duration::from_millis(200), first.read_holding(1000)).await;
    assert!(cut.is_err(), "the read was meant to be cut short");
    let seq = second
        .append_events(vec![event("test.later", "T1", 1)])
        .await
        .unwrap()[0];
    let page = tokio::time::timeout(
        Duration::from_secs(10),
        first.read_events(0, &EventFilter::default(), 10),
    )
    .await
    .expect("a read connection came back")
    .unwrap();
    let kinds: Vec<_> = page.events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["test.before", "test.later"], "head {}", page.head);
    assert_eq!(page.head, seq);
    first.close();
    second.close();
}

#[tokio::test]
async fn postgres_writes_go_on_after_the_database_drops_the_nodes_connections() {
    // The database ends every connection of a node (a restart, a failover,
    // an administrator's pg_terminate_backend). A write caught by it fails
    // as "database unavailable", never as an internal error; the node
    // then reconnects on its own and nothing half-written is left behind.
    let db = TestDb::new(Kind::Postgres).await;
    let name = db.config().pg_schema.unwrap();
    let mut config = db.config();
    config.url = format!("{}?application_name={name}", common::pg_url());
    let store = shepherd_store::Store::open(&config).await.unwrap();
    let mut appended = vec![
        store
            .append_events(vec![event("test.before", "T1", 0)])
            .await
            .unwrap()[0],
    ];

    let (admin, conn) = tokio_postgres::connect(&common::pg_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let killed = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .await
        .unwrap();
    assert!(!killed.is_empty(), "no connection of the node was found");

    let mut failures = 0;
    for n in 1..=20u64 {
        match store
            .append_events(vec![event("test.after", "T1", n)])
            .await
        {
            Ok(seqs) => appended.extend(seqs),
            Err(e) => {
                assert_eq!(e.code, "database_unavailable", "{e:?}");
                failures += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    assert!(
        failures <= 2,
        "the node did not reconnect: {failures} failures"
    );
    let page = store
        .read_events(0, &EventFilter::default(), 100)
        .await
        .unwrap();
    let seqs: Vec<i64> = page.events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs, appended,
        "exactly the acknowledged appends are in the log"
    );
    store.close();
}

#[tokio::test]
async fn corrupt_stored_values_are_reported_not_silently_replaced() {
    // An event whose data is not JSON is delivered with its text (and
    // logged), never as `null`; a prune mark that is not a number fails
    // reads loudly instead of turning off `cursor_expired`.
    let db = TestDb::new(Kind::Sqlite).await;
    let store = db.open().await;
    let seq = store
        .append_events(vec![event("test.corrupt", "T1", 0)])
        .await
        .unwrap()[0];
    let path = db.config().url.trim_start_matches("sqlite://").to_owned();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.execute("UPDATE events SET data = '{\"n\": 0' WHERE seq = ?1", [seq])
        .unwrap();
    let page = store
        .read_events(0, &EventFilter::default(), 10)
        .await
        .unwrap();
    let e = page.events.iter().find(|e| e.seq == seq).unwrap();
    assert_eq!(e.data, json!("{\"n\": 0"));

    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('events_pruned_through', 'twelve') \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [],
    )
    .unwrap();
    let err = store.pruned_through().await.unwrap_err();
    assert!(err.message.contains("events_pruned_through"), "{err:?}");
    store.close();
}

/// The scheduling policy (field 41 of `/proc/<pid>/task/<tid>/stat`) of
/// every thread of this process whose name starts with `prefix`.
#[cfg(target_os = "linux")]
fn thread_policies(prefix: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after the parenthesised name, which may hold spaces.
        let after_name = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
        if let Some(policy) = after_name.split(' ').nth(38).and_then(|p| p.parse().ok()) {
            out.push(policy);
        }
    }
    out
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn sqlite_writer_thread_does_not_preempt_the_runtime() {
    // The writer thread runs SCHED_BATCH (3), so its wake-ups do not cut
    // into a runtime thread writing to live streams. (Its name and the
    // checkpoint thread's share their first 15 characters, all `comm` keeps.)
    const SCHED_BATCH: u32 = 3;
    let db = TestDb::new(Kind::Sqlite).await;
    let store = db.open().await;
    store
        .append_events(vec![event("test.ping", "T-1", 0)])
        .await
        .unwrap();
    let policies = thread_policies("shepherd-sqlite");
    assert!(
        policies.contains(&SCHED_BATCH),
        "no SQLite thread runs SCHED_BATCH: {policies:?}"
    );
    store.close();
}
