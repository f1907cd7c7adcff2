//! Hosts on both databases: a server node's own record, a runner's
//! registration (a new one only when the caller may make hosts; again
//! after a restart only with the host's current token or an admin's
//! replace: same host, new token, old token dead), heartbeats, the kinds kept apart, bad declarations refused with
//! nothing written, and what the list counts (sessions, running runs of the
//! host's workers).

mod common;

use shepherd_core::status::HostKind;
use shepherd_core::ErrorKind;
use shepherd_store::{
    HostClaim, HostDeclaration, HostRegistration, NewSession, NewTask, Registration, Store,
};

use common::{Kind, TestDb};

fn decl(id: &str, name: &str) -> HostDeclaration {
    HostDeclaration {
        id: id.into(),
        name: name.into(),
        address: None,
        sessions_root: Some("/srv/work".into()),
        agents: vec!["claude".into()],
        slots: Some(4),
    }
}

/// A claim that may make a new host (an admin's).
fn create() -> HostClaim {
    HostClaim {
        may_create: true,
        ..HostClaim::default()
    }
}

async fn events_of(store: &Store, kind: &str) -> Vec<serde_json::Value> {
    let page = store
        .read_events(0, &shepherd_core::event::EventFilter::default(), 1000)
        .await
        .unwrap();
    page.events
        .into_iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.data)
        .collect()
}

async fn registration_and_heartbeats(kind: Kind) {
    let db = TestDb::new(kind).await;
    let clock = shepherd_store::Clock::default();
    clock.set(Some(1_000_000));
    let store = db.open_with_clock(&clock).await;

    // The server node records itself: no token, no event.
    let mut node = decl("node-a", "alpha");
    node.address = Some("http://10.0.0.1:7700".into());
    let h = store.record_server_host(node.clone()).await.unwrap();
    assert_eq!(h.kind, HostKind::Server);
    assert_eq!(h.last_seen_at, 1_000_000);
    assert_eq!(h.address.as_deref(), Some("http://10.0.0.1:7700"));

    // A runner registers; its token is its own and works.
    clock.advance(1000);
    let err = store
        .register_host(decl("host-1", "build-box"), HostClaim::default())
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind, err.code),
        (ErrorKind::Forbidden, "host_enrollment_required"),
        "a new host needs may_create"
    );
    let HostRegistration {
        host: h,
        token,
        existed,
    } = store
        .register_host(decl("host-1", "build-box"), create())
        .await
        .unwrap();
    assert!(!existed);
    assert_eq!(h.kind, HostKind::Runner);
    assert_eq!((h.registered_at, h.last_seen_at), (1_001_000, 1_001_000));
    assert_eq!(h.agents, vec!["claude".to_owned()]);
    assert_eq!(h.slots, Some(4));
    assert!(
        token.starts_with(shepherd_store::HOST_TOKEN_PREFIX),
        "{token}"
    );
    assert_eq!(
        store.host_for_token(&token).await.unwrap().as_deref(),
        Some("host-1")
    );
    // A worker token's shape is not looked up as a host's.
    assert_eq!(store.host_for_token("swk_nothing").await.unwrap(), None);

    // Heartbeats move last_seen_at, never back.
    clock.advance(5000);
    assert_eq!(
        store.host_seen("host-1").await.unwrap().last_seen_at,
        1_006_000
    );
    clock.set(Some(1_002_000));
    assert_eq!(
        store.host_seen("host-1").await.unwrap().last_seen_at,
        1_006_000
    );
    clock.set(Some(1_010_000));

    // The runner comes back with its data directory: the same host, its
    // registration time kept, a new token; the old one is dead.
    let mut again = decl("host-1", "build-box");
    again.sessions_root = None;
    // Not without proof: no token, a wrong one, even for a caller who may
    // make hosts; nothing changes.
    for claim in [
        create(),
        HostClaim {
            current_token: Some("shk_not-it".into()),
            ..create()
        },
    ] {
        let err = store.register_host(again.clone(), claim).await.unwrap_err();
        assert_eq!((err.kind, err.code), (ErrorKind::Conflict, "host_exists"));
    }
    assert_eq!(
        store.host_for_token(&token).await.unwrap().as_deref(),
        Some("host-1")
    );
    let HostRegistration {
        host: h2,
        token: token2,
        existed,
    } = store
        .register_host(
            again.clone(),
            HostClaim {
                current_token: Some(token.clone()),
                ..HostClaim::default()
            },
        )
        .await
        .unwrap();
    assert!(existed);
    assert_eq!(h2.registered_at, 1_001_000);
    assert_eq!(h2.sessions_root, None);
    assert_ne!(token, token2);
    assert_eq!(store.host_for_token(&token).await.unwrap(), None);
    assert_eq!(
        store.host_for_token(&token2).await.unwrap().as_deref(),
        Some("host-1")
    );
    // An admin's replace needs no token; the one before is void.
    let replaced = store
        .register_host(
            again,
            HostClaim {
                replace: true,
                ..HostClaim::default()
            },
        )
        .await
        .unwrap();
    assert!(replaced.existed);
    assert_eq!(store.host_for_token(&token2).await.unwrap(), None);
    let registered = events_of(&store, "host.registered").await;
    assert_eq!(registered.len(), 3, "{registered:?}");
    assert_eq!(registered[0]["re_registered"], false);
    assert_eq!(registered[1]["re_registered"], true);
    assert_eq!(registered[1]["host_id"], "host-1");

    // The kinds stay apart: a runner cannot take a node's id, nor a node a
    // runner's.
    let err = store
        .register_host(decl("node-a", "impostor"), create())
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind, err.code),
        (ErrorKind::Conflict, "host_kind_conflict")
    );
    let err = store
        .record_server_host(decl("host-1", "impostor"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind, err.code),
        (ErrorKind::Conflict, "host_kind_conflict")
    );

    // Bad declarations are refused and write nothing.
    for (bad, code) in [
        (decl("has space", "x"), "invalid_host_id"),
        (decl("host-2", "  "), "invalid_host_name"),
        (decl("host-2", "line\nbreak"), "invalid_host_name"),
        (
            HostDeclaration {
                sessions_root: Some("relative/path".into()),
                ..decl("host-2", "x")
            },
            "invalid_sessions_root",
        ),
        (
            HostDeclaration {
                agents: vec!["no spaces".into()],
                ..decl("host-2", "x")
            },
            "invalid_agent_id",
        ),
        (
            HostDeclaration {
                slots: Some(-1),
                ..decl("host-2", "x")
            },
            "invalid_slots",
        ),
    ] {
        let err = store.register_host(bad, create()).await.unwrap_err();
        assert_eq!((err.kind, err.code), (ErrorKind::Invalid, code));
    }
    let err = store.host("host-2").await.unwrap_err();
    assert_eq!(
        (err.kind, err.code),
        (ErrorKind::NotFound, "host_not_found")
    );
    let err = store.host_seen("host-2").await.unwrap_err();
    assert_eq!(err.code, "host_not_found");

    // A worker may name only a known host.
    let err = store
        .register_worker(Registration {
            worker_id: Some("w-x".into()),
            agent_id: "claude".into(),
            worker_type: "builtin".into(),
            max_concurrent: 1,
            host_id: Some("host-2".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (err.kind, err.code),
        (ErrorKind::NotFound, "host_not_found")
    );

    // The list: nodes first; sessions counted by the node that holds them,
    // running runs by the host of the worker that holds them.
    let (w, _) = store
        .register_worker(Registration {
            worker_id: Some("w-1".into()),
            agent_id: "claude".into(),
            worker_type: "builtin".into(),
            max_concurrent: 2,
            host_id: Some("host-1".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(w.host_id.as_deref(), Some("host-1"));
    store
        .create_task(NewTask {
            vtid: Some("H-1".into()),
            title: "t".into(),
            spec: "s".into(),
            workflow: Some("simple".into()),
            dispatch: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let rules = shepherd_store::LeaseRules {
        ttl_ms: 3_600_000,
        heartbeat_timeout_ms: 300_000,
        not_before: 0,
        cancel_grace_ms: 30_000,
    };
    store.claim_task("w-1", "H-1", rules).await.unwrap();
    store
        .create_session(NewSession {
            id: "s-1".into(),
            name: "one".into(),
            location_path: "/srv/work/one".into(),
            node_id: "node-a".into(),
            node_address: None,
        })
        .await
        .unwrap();
    let hosts = store.list_hosts().await.unwrap();
    let ids: Vec<&str> = hosts.iter().map(|h| h.id.as_str()).collect();
    assert_eq!(ids, ["node-a", "host-1"]);
    assert_eq!((hosts[0].sessions, hosts[0].running), (1, 0));
    assert_eq!((hosts[1].sessions, hosts[1].running), (0, 1));
}

#[tokio::test]
async fn registration_and_heartbeats_sqlite() {
    registration_and_heartbeats(Kind::Sqlite).await;
}

#[tokio::test]
async fn registration_and_heartbeats_postgres() {
    registration_and_heartbeats(Kind::Postgres).await;
}
