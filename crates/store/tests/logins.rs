//! Single sign-on's records on both databases: a login under way is taken
//! once and only while it is fresh; a first sign-in makes the user, a later
//! one keeps it bound to the same identity and follows the provider's role;
//! a name that belongs to someone else (the built-in admin, a user made by
//! hand, a user bound to another identity) is refused, never taken over; a
//! disabled user cannot sign in; a session is found by its cookie alone,
//! records its use, and ends once; each step is an event naming the user.

mod common;

use shepherd_core::event::EventFilter;
use shepherd_core::role::Role;
use shepherd_store::{
    LoginAttempt, SessionLifetimes, SignIn, Store, UserChange, LOGIN_ATTEMPT_TTL_MS,
};

use common::{Kind, TestDb};

const T0: i64 = 1_700_000_000_000;
const LIFETIMES: SessionLifetimes = SessionLifetimes {
    idle_ms: 60_000,
    max_ms: 3_600_000,
};

fn attempt(n: &str) -> LoginAttempt {
    LoginAttempt {
        nonce: format!("nonce-{n}"),
        pkce_verifier: format!("verifier-{n}"),
        return_to: "/tasks".into(),
    }
}

fn who(subject: &str, name: &str, role: Role) -> SignIn {
    SignIn {
        subject: subject.into(),
        name: name.into(),
        email: Some(format!("{name}@example.com")),
        role,
    }
}

/// (type, actor) of every event, oldest first.
async fn log_of(store: &Store) -> Vec<(String, String)> {
    let page = store
        .read_events(0, &EventFilter::default(), 1000)
        .await
        .unwrap();
    page.events
        .into_iter()
        .map(|e| (e.kind, e.refs.actor.unwrap_or_default()))
        .collect()
}

async fn a_login_is_taken_once_while_fresh(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    store.set_clock(Some(T0));
    store.begin_login("state-a", attempt("a")).await.unwrap();
    store.begin_login("state-b", attempt("b")).await.unwrap();
    assert_eq!(store.take_login("state-x").await.unwrap(), None);
    assert_eq!(
        store.take_login("state-a").await.unwrap(),
        Some(attempt("a"))
    );
    assert_eq!(
        store.take_login("state-a").await.unwrap(),
        None,
        "a state is good for one try"
    );
    store.set_clock(Some(T0 + LOGIN_ATTEMPT_TTL_MS + 1));
    assert_eq!(
        store.take_login("state-b").await.unwrap(),
        None,
        "a login nobody came back for in time is gone"
    );
}

async fn sign_in_binds_a_user_to_one_identity(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    store.set_clock(Some(T0));

    let first = store
        .sign_in(who("iss|alice", "alice", Role::Operator), LIFETIMES)
        .await
        .unwrap();
    assert_eq!(first.user.name, "alice");
    assert_eq!(first.user.role, Role::Operator);
    assert_eq!(first.expires_at, T0 + LIFETIMES.max_ms);
    assert_ne!(first.cookie, first.csrf_token);

    // Her groups changed at the provider: the next sign-in follows them.
    let again = store
        .sign_in(who("iss|alice", "alice", Role::Admin), LIFETIMES)
        .await
        .unwrap();
    assert_eq!(again.user.role, Role::Admin);
    assert_ne!(again.cookie, first.cookie, "each sign-in its own session");
    let named_alice = store
        .users()
        .await
        .unwrap()
        .into_iter()
        .filter(|u| u.name == "alice")
        .count();
    assert_eq!(named_alice, 1);

    // Names that are someone else's.
    store.create_user("bob", Role::Viewer, None).await.unwrap();
    for (subject, name) in [
        ("iss|intruder", "alice"),
        ("iss|bob", "bob"),
        ("iss|root", "admin"),
    ] {
        let e = store
            .sign_in(who(subject, name, Role::Admin), LIFETIMES)
            .await
            .unwrap_err();
        assert_eq!(e.code, "login_name_taken", "{name}: {e:?}");
    }
    assert_eq!(
        store.user("bob").await.unwrap().role,
        Role::Viewer,
        "bob untouched"
    );
    let e = store
        .sign_in(who("iss|bad", "Not A Name!", Role::Viewer), LIFETIMES)
        .await
        .unwrap_err();
    assert_eq!(e.code, "invalid_user_name");
    // Names the audit trail uses for the server itself are nobody's: a
    // provider account called `timeout` would answer requests exactly as
    // an expiry records them.
    for name in ["timeout", "run_ended", "system", "operator"] {
        let e = store
            .sign_in(who(&format!("iss|{name}"), name, Role::Admin), LIFETIMES)
            .await
            .unwrap_err();
        assert_eq!(e.code, "reserved_user_name", "{name}: {e:?}");
        assert!(e.message.contains("reserved"), "{e:?}");
    }
    assert!(store
        .users()
        .await
        .unwrap()
        .iter()
        .all(|u| u.name != "timeout" && u.name != "run_ended"));

    // A disabled user stays out, whatever the provider says.
    store
        .update_user(
            "alice",
            UserChange {
                role: None,
                disabled: Some(true),
            },
        )
        .await
        .unwrap();
    let e = store
        .sign_in(who("iss|alice", "alice", Role::Admin), LIFETIMES)
        .await
        .unwrap_err();
    assert_eq!(e.code, "user_disabled");

    let log = log_of(&store).await;
    let alices: Vec<&str> = log
        .iter()
        .filter(|(_, actor)| actor == "alice")
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(
        alices,
        ["user.created", "user.login", "user.updated", "user.login"],
        "{log:?}"
    );
    assert!(
        !log.iter().any(|(_, a)| a == "intruder" || a == "root"),
        "a refused sign-in writes nothing: {log:?}"
    );
}

async fn a_session_is_found_by_its_cookie_and_ends_once(kind: Kind) {
    let db = TestDb::new(kind).await;
    let store = db.open().await;
    store.set_clock(Some(T0));
    let made = store
        .sign_in(who("iss|vera", "vera", Role::Viewer), LIFETIMES)
        .await
        .unwrap();

    let (s, user) = store.web_session(&made.cookie).await.unwrap().unwrap();
    assert_eq!((s.user.as_str(), user.role), ("vera", Role::Viewer));
    assert_eq!(s.csrf_token, made.csrf_token);
    assert_eq!((s.created_at, s.last_seen_at, s.ended_at), (T0, T0, None));
    // Only the cookie opens it: not its CSRF token, not a near miss.
    let mut altered = made.cookie.clone();
    let last = altered.pop().unwrap();
    altered.push(if last == '0' { '1' } else { '0' });
    for wrong in [made.csrf_token.as_str(), altered.as_str(), ""] {
        assert!(
            store.web_session(wrong).await.unwrap().is_none(),
            "{wrong:?}"
        );
    }

    // A use is recorded, but not more often than asked.
    store.set_clock(Some(T0 + 10_000));
    store.touch_web_session(&made.cookie, 5_000).await.unwrap();
    store.set_clock(Some(T0 + 12_000));
    store.touch_web_session(&made.cookie, 5_000).await.unwrap();
    let (s, _) = store.web_session(&made.cookie).await.unwrap().unwrap();
    assert_eq!(s.last_seen_at, T0 + 10_000);

    store.set_clock(Some(T0 + 20_000));
    assert_eq!(
        store
            .end_web_session(&made.cookie)
            .await
            .unwrap()
            .as_deref(),
        Some("vera")
    );
    let (s, _) = store.web_session(&made.cookie).await.unwrap().unwrap();
    assert_eq!(s.ended_at, Some(T0 + 20_000));
    assert_eq!(store.end_web_session(&made.cookie).await.unwrap(), None);
    store.set_clock(Some(T0 + 30_000));
    store.touch_web_session(&made.cookie, 1).await.unwrap();
    let (s, _) = store.web_session(&made.cookie).await.unwrap().unwrap();
    assert_eq!(
        s.last_seen_at,
        T0 + 10_000,
        "an ended session is not revived"
    );

    let logouts: Vec<_> = log_of(&store)
        .await
        .into_iter()
        .filter(|(k, _)| k == "user.logout")
        .collect();
    assert_eq!(logouts, [("user.logout".to_owned(), "vera".to_owned())]);
}

macro_rules! both {
    ($($name:ident),*) => {$(
        mod $name {
            use super::*;
            #[tokio::test]
            async fn sqlite() {
                super::$name(Kind::Sqlite).await;
            }
            #[tokio::test]
            async fn postgres() {
                super::$name(Kind::Postgres).await;
            }
        }
    )*};
}

both!(
    a_login_is_taken_once_while_fresh,
    sign_in_binds_a_user_to_one_identity,
    a_session_is_found_by_its_cookie_and_ends_once
);
