//! Users, roles and personal access tokens end to end, on both stores: the
//! bootstrap token as the built-in admin, users made and changed by admins
//! only, tokens shown once and kept hashed, a viewer who reads everything
//! and changes nothing (no terminal either), an operator who works but
//! manages no one, and every way a token stops working (revoked, expired,
//! its user disabled) answering 401. The route → role table itself is
//! checked against the OpenAPI document in `api::roles`.

mod common;

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use shepherd_protocol as p;

use common::{task, Env, Kind, Server, OPERATOR};

fn env_with_token(kind: Kind) -> Env {
    let mut env = Env::new(kind);
    env.set("SHEPHERD_TOKEN", OPERATOR);
    env
}

async fn add_user(s: &Server, name: &str, role: &str) -> p::User {
    let (st, u) = s
        .post_as::<p::User>(
            "/api/v1/users",
            Some(OPERATOR),
            json!({ "name": name, "role": role, "email": format!("{name}@example.com") }),
        )
        .await;
    assert_eq!(st, 201);
    u
}

async fn token_for(s: &Server, as_token: &str, body: Value) -> p::CreatedToken {
    let (st, t) = s
        .post_as::<p::CreatedToken>("/api/v1/tokens", Some(as_token), body)
        .await;
    assert_eq!(st, 201);
    t
}

fn code(b: &Value) -> &str {
    b["error"]["code"].as_str().unwrap_or_default()
}

e2e!(
    the_bootstrap_token_is_the_builtin_admin,
    |kind: Kind| async move {
        let env = env_with_token(kind);
        let s = Server::start(&env).await;
        let (st, me) = s.get_as::<p::Me>("/api/v1/me", Some(OPERATOR)).await;
        assert_eq!(st, 200);
        assert_eq!(
            (me.name.as_str(), me.role, me.kind.as_str()),
            ("admin", Some(p::Role::Admin), "user")
        );
        let (_, users) = s
            .get_as::<p::UserList>("/api/v1/users", Some(OPERATOR))
            .await;
        assert_eq!(users.users.len(), 1);
        assert_eq!(users.users[0].name, "admin");
        // It stays an enabled admin: the two-command start must keep working.
        for change in [json!({ "role": "viewer" }), json!({ "disabled": true })] {
            let (st, b) = s
                .call(
                    Method::PATCH,
                    "/api/v1/users/admin",
                    Some(OPERATOR),
                    Some(change),
                )
                .await;
            assert_eq!((st, code(&b)), (409, "builtin_user"), "{b}");
        }
        s.stop().await;
    }
);

e2e!(
    users_are_made_and_changed_with_clear_refusals,
    |kind: Kind| async move {
        let env = env_with_token(kind);
        let s = Server::start(&env).await;
        let alice = add_user(&s, "alice", "operator").await;
        assert_eq!(alice.role, p::Role::Operator);
        assert!(!alice.disabled);
        let (st, b) = s
            .post(
                "/api/v1/users",
                Some(OPERATOR),
                json!({ "name": "alice", "role": "viewer" }),
            )
            .await;
        assert_eq!((st, code(&b)), (409, "user_exists"), "{b}");
        for (body, want) in [
            (
                json!({ "name": "Alice", "role": "viewer" }),
                "invalid_user_name",
            ),
            (json!({ "name": "", "role": "viewer" }), "invalid_user_name"),
            (
                json!({ "name": "a/b", "role": "viewer" }),
                "invalid_user_name",
            ),
            (
                json!({ "name": "bob", "role": "viewer", "email": "nope" }),
                "invalid_email",
            ),
            (json!({ "name": "bob", "role": "root" }), "invalid_body"),
            (json!({ "name": "bob" }), "invalid_body"),
            (
                json!({ "name": "bob", "role": "viewer", "extra": 1 }),
                "invalid_body",
            ),
        ] {
            let (st, b) = s.post("/api/v1/users", Some(OPERATOR), body.clone()).await;
            assert_eq!((st, code(&b)), (422, want), "{body} → {b}");
        }
        let (st, b) = s
            .call(
                Method::PATCH,
                "/api/v1/users/nobody",
                Some(OPERATOR),
                Some(json!({ "role": "viewer" })),
            )
            .await;
        assert_eq!((st, code(&b)), (404, "user_not_found"), "{b}");
        let (st, changed) = s
            .call_as::<p::User>(
                Method::PATCH,
                "/api/v1/users/alice",
                Some(OPERATOR),
                Some(json!({ "role": "viewer" })),
            )
            .await;
        assert_eq!((st, changed.role), (200, p::Role::Viewer));
        // Each change is in the log, naming the user and never a secret.
        let (_, page) = s
            .get(
                "/api/v1/events?types=user.created,user.updated",
                Some(OPERATOR),
            )
            .await;
        let kinds: Vec<(&str, &str)> = page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["type"].as_str().unwrap(),
                    e["data"]["role"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [("user.created", "operator"), ("user.updated", "viewer")]
        );
        s.stop().await;
    }
);

e2e!(
    a_token_is_shown_once_kept_hashed_and_listed_without_its_secret,
    |kind: Kind| async move {
        let env = env_with_token(kind);
        let s = Server::start(&env).await;
        add_user(&s, "alice", "operator").await;
        let made = token_for(
            &s,
            OPERATOR,
            json!({ "name": "laptop", "user": "alice", "expires_in": "30d" }),
        )
        .await;
        assert!(made.token.starts_with("spt_"), "{}", made.token);
        assert_eq!(made.user, "alice");
        let expires =
            shepherd_core::time::parse_iso8601(made.expires_at.as_deref().unwrap()).unwrap();
        let days = (expires - shepherd_store::now_ms()) as f64 / 86_400_000.0;
        assert!((29.9..=30.0).contains(&days), "expires in {days} days");
        // The token works and is alice's.
        let (st, me) = s.get_as::<p::Me>("/api/v1/me", Some(&made.token)).await;
        assert_eq!(
            (st, me.name.as_str(), me.role),
            (200, "alice", Some(p::Role::Operator))
        );
        // Listed without its secret, with when it was last used.
        let (_, raw) = s.get("/api/v1/tokens", Some(&made.token)).await;
        assert!(
            !raw.to_string().contains(&made.token),
            "a list shows a secret: {raw}"
        );
        let list: p::TokenList = serde_json::from_value(raw).unwrap();
        assert_eq!(list.tokens.len(), 1);
        assert_eq!(list.tokens[0].id, made.id);
        assert!(list.tokens[0].last_used_at.is_some());
        // The store holds its digest only.
        let store = shepherd_store::Store::open(&env.store_config())
            .await
            .unwrap();
        let found = store.token_by_secret(&made.token).await.unwrap();
        assert_eq!(found.map(|(t, _)| t.id), Some(made.id.clone()));
        // The event says whose token it is, never the secret.
        let (_, page) = s
            .get("/api/v1/events?types=token.created", Some(OPERATOR))
            .await;
        assert_eq!(page["events"][0]["data"]["user"], "alice");
        assert!(!page.to_string().contains(&made.token));
        for (body, st_want, want) in [
            (
                json!({ "name": "x", "expires_in": "30" }),
                422,
                "invalid_expires_in",
            ),
            (
                json!({ "name": "x", "expires_in": "400d" }),
                422,
                "invalid_expires_in",
            ),
            (
                json!({ "name": "x", "expires_in": "0s" }),
                422,
                "invalid_expires_in",
            ),
            (json!({ "name": "" }), 422, "invalid_token_name"),
            (
                json!({ "name": "x", "user": "nobody" }),
                404,
                "user_not_found",
            ),
        ] {
            let (st, b) = s.post("/api/v1/tokens", Some(OPERATOR), body.clone()).await;
            assert_eq!((st, code(&b)), (st_want, want), "{body} → {b}");
        }
        s.stop().await;
    }
);

e2e!(
    a_viewer_reads_everything_and_changes_nothing,
    |kind: Kind| async move {
        let env = env_with_token(kind);
        let s = Server::start(&env).await;
        let (st, _) = s
            .post("/api/v1/tasks", Some(OPERATOR), task("V-1", "simple"))
            .await;
        assert_eq!(st, 201);
        add_user(&s, "vera", "viewer").await;
        let vera = token_for(&s, OPERATOR, json!({ "name": "ro", "user": "vera" }))
            .await
            .token;
        for path in [
            "/api/v1/tasks",
            "/api/v1/tasks/V-1",
            "/api/v1/runs",
            "/api/v1/events",
            "/api/v1/sessions",
            "/api/v1/webhooks",
        ] {
            let (st, b) = s.get(path, Some(&vera)).await;
            assert_eq!(st, 200, "{path}: {b}");
        }
        // Changes are refused, naming the role they need.
        for (method, path, body) in [
            (Method::POST, "/api/v1/tasks", Some(task("V-2", "simple"))),
            (Method::POST, "/api/v1/tasks/V-1/cancel", Some(json!({}))),
            (
                Method::POST,
                "/api/v1/sessions",
                Some(json!({ "location_path": "/tmp" })),
            ),
            (
                Method::POST,
                "/api/v1/webhooks",
                Some(json!({ "url": "http://127.0.0.1:9/" })),
            ),
            (Method::GET, "/api/v1/users", None),
            (
                Method::POST,
                "/api/v1/users",
                Some(json!({ "name": "x", "role": "admin" })),
            ),
        ] {
            let (st, b) = s.call(method.clone(), path, Some(&vera), body).await;
            assert_eq!((st, code(&b)), (403, "forbidden"), "{method} {path}: {b}");
            let msg = b["error"]["message"].as_str().unwrap();
            assert!(
                msg.contains("role") && msg.contains("vera is a viewer"),
                "{msg}"
            );
        }
        let (_, t) = s.get("/api/v1/tasks/V-1", Some(OPERATOR)).await;
        assert_eq!(t["state"], "pending", "nothing a viewer sent took effect");
        // No terminal: attaching is typing into a shell.
        let r = s
            .http
            .get(s.url("/ws/session/s/worker/w"))
            .bearer_auth(&vera)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 403);
        // A viewer may still make and revoke tokens of their own.
        let own = token_for(&s, &vera, json!({ "name": "second" })).await;
        assert_eq!(own.user, "vera");
        let (st, _) = s
            .call(
                Method::DELETE,
                &format!("/api/v1/tokens/{}", own.id),
                Some(&vera),
                None,
            )
            .await;
        assert_eq!(st, 204);
        s.stop().await;
    }
);

e2e!(
    an_operator_works_but_manages_no_one_else,
    |kind: Kind| async move {
        let env = env_with_token(kind);
        let s = Server::start(&env).await;
        add_user(&s, "olga", "operator").await;
        add_user(&s, "vera", "viewer").await;
        let olga = token_for(&s, OPERATOR, json!({ "name": "t", "user": "olga" }))
            .await
            .token;
        let veras = token_for(&s, OPERATOR, json!({ "name": "t", "user": "vera" })).await;
        let (st, b) = s
            .post("/api/v1/tasks", Some(&olga), task("O-1", "simple"))
            .await;
        assert_eq!(st, 201, "{b}");
        let (st, b) = s
            .post("/api/v1/tasks/O-1/cancel", Some(&olga), json!({}))
            .await;
        assert!(st < 300, "{st} {b}");
        // Users are an admin's.
        let (st, b) = s
            .call(
                Method::PATCH,
                "/api/v1/users/vera",
                Some(&olga),
                Some(json!({ "role": "admin" })),
            )
            .await;
        assert_eq!((st, code(&b)), (403, "forbidden"), "{b}");
        assert!(b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("admin role"));
        // Another user's tokens: cannot make one, cannot see or revoke theirs.
        let (st, b) = s
            .post(
                "/api/v1/tokens",
                Some(&olga),
                json!({ "name": "x", "user": "vera" }),
            )
            .await;
        assert_eq!((st, code(&b)), (403, "forbidden"), "{b}");
        let (_, list) = s
            .get_as::<p::TokenList>("/api/v1/tokens", Some(&olga))
            .await;
        assert!(list.tokens.iter().all(|t| t.user == "olga"), "{list:?}");
        let (st, b) = s
            .call(
                Method::DELETE,
                &format!("/api/v1/tokens/{}", veras.id),
                Some(&olga),
                None,
            )
            .await;
        assert_eq!((st, code(&b)), (404, "token_not_found"), "{b}");
        // An admin sees everyone's.
        let (_, all) = s
            .get_as::<p::TokenList>("/api/v1/tokens", Some(OPERATOR))
            .await;
        assert_eq!(all.tokens.len(), 2);
        s.stop().await;
    }
);

e2e!(
    revoked_expired_and_disabled_tokens_answer_401,
    |kind: Kind| async move {
        let env = env_with_token(kind);
        let s = Server::start(&env).await;
        add_user(&s, "alice", "operator").await;
        add_user(&s, "bob", "operator").await;
        let revoked = token_for(&s, OPERATOR, json!({ "name": "r", "user": "alice" })).await;
        let expiring = token_for(
            &s,
            OPERATOR,
            json!({ "name": "e", "user": "alice", "expires_in": "1s" }),
        )
        .await;
        let bobs = token_for(&s, OPERATOR, json!({ "name": "b", "user": "bob" })).await;
        for t in [&revoked.token, &expiring.token, &bobs.token] {
            let (st, _) = s.get("/api/v1/tasks", Some(t)).await;
            assert_eq!(st, 200);
        }
        // Alice revokes her own token; an admin disables bob.
        let (st, _) = s
            .call(
                Method::DELETE,
                &format!("/api/v1/tokens/{}", revoked.id),
                Some(&revoked.token),
                None,
            )
            .await;
        assert_eq!(st, 204);
        let (st, _) = s
            .call(
                Method::PATCH,
                "/api/v1/users/bob",
                Some(OPERATOR),
                Some(json!({ "disabled": true })),
            )
            .await;
        assert_eq!(st, 200);
        common::wait_for(
            "the 1 s token to expire",
            Duration::from_secs(10),
            || async {
                (s.get("/api/v1/tasks", Some(&expiring.token)).await.0 == 401).then_some(())
            },
        )
        .await;
        for t in [
            &revoked.token,
            &expiring.token,
            &bobs.token,
            "spt_0000",
            "spt_",
        ] {
            let (st, b) = s.get("/api/v1/tasks", Some(t)).await;
            assert_eq!((st, code(&b)), (401, "unauthorized"), "{t}: {b}");
        }
        // Revoking twice, or a token that never was: 404.
        let (st, b) = s
            .call(
                Method::DELETE,
                &format!("/api/v1/tokens/{}", revoked.id),
                Some(OPERATOR),
                None,
            )
            .await;
        assert_eq!((st, code(&b)), (404, "token_not_found"), "{b}");
        // Enabled again, bob's token works again.
        s.call(
            Method::PATCH,
            "/api/v1/users/bob",
            Some(OPERATOR),
            Some(json!({ "disabled": false })),
        )
        .await;
        assert_eq!(s.get("/api/v1/tasks", Some(&bobs.token)).await.0, 200);
        // A disabled user gets no new token.
        s.call(
            Method::PATCH,
            "/api/v1/users/bob",
            Some(OPERATOR),
            Some(json!({ "disabled": true })),
        )
        .await;
        let (st, b) = s
            .post(
                "/api/v1/tokens",
                Some(OPERATOR),
                json!({ "name": "n", "user": "bob" }),
            )
            .await;
        assert_eq!((st, code(&b)), (409, "user_disabled"), "{b}");
        s.stop().await;
    }
);

// Worker tokens have no user: the people routes refuse them.
e2e!(
    worker_tokens_make_no_users_or_tokens,
    |kind: Kind| async move {
        let env = env_with_token(kind);
        let s = Server::start(&env).await;
        let (st, reg) = s
            .post(
                "/api/v1/worker/orchestrator/register",
                Some(OPERATOR),
                json!({ "agent_id": "ext", "worker_type": "external", "capabilities": [] }),
            )
            .await;
        assert_eq!(st, 200, "{reg}");
        let wt = reg["worker_token"].as_str().unwrap().to_owned();
        let (st, me) = s.get_as::<p::Me>("/api/v1/me", Some(&wt)).await;
        assert_eq!((st, me.kind.as_str(), me.role), (200, "worker", None));
        let (st, b) = s
            .post("/api/v1/tokens", Some(&wt), json!({ "name": "x" }))
            .await;
        assert_eq!((st, code(&b)), (403, "operator_only"), "{b}");
        let (st, b) = s
            .post(
                "/api/v1/users",
                Some(&wt),
                json!({ "name": "x", "role": "admin" }),
            )
            .await;
        assert_eq!((st, code(&b)), (403, "operator_only"), "{b}");
        s.stop().await;
    }
);

/// The CLI: an admin adds a user and makes them a token; `tokens create`
/// prints the token alone, so a script captures it and acts as that user;
/// refusals print the server's code and exit non-zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_manages_users_and_tokens() {
    let env = env_with_token(Kind::Sqlite);
    let s = Server::start(&env).await;
    let base = s.base.clone();
    tokio::task::block_in_place(|| {
        let run = |token: &str, args: &[&str]| {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_shepherd"))
                .args(args)
                .env_remove("SHEPHERD_AUTH_TOKEN")
                .env("SHEPHERD_SERVER", &base)
                .env("SHEPHERD_TOKEN", token)
                .output()
                .unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        let (ok, out, err) = run(OPERATOR, &["users", "add", "carol", "--role", "viewer"]);
        assert!(ok, "{out}{err}");
        assert!(out.contains("added carol (viewer)"), "{out}");
        let (ok, token, err) = run(
            OPERATOR,
            &[
                "tokens",
                "create",
                "--name",
                "ci",
                "--user",
                "carol",
                "--expires",
                "7d",
            ],
        );
        assert!(ok, "{err}");
        let token = token.trim_end_matches('\n');
        assert!(
            token.starts_with("spt_") && !token.contains(char::is_whitespace),
            "stdout is the token alone: {token:?}"
        );
        assert!(
            err.contains("for carol") && err.contains("shown this once"),
            "{err}"
        );
        let (ok, out, _) = run(token, &["task", "list"]);
        assert!(ok, "{out}");
        let (ok, _, err) = run(
            token,
            &["task", "add", "nope", "--agent", "ext", "--external"],
        );
        assert!(!ok);
        assert!(
            err.contains("forbidden") && err.contains("carol is a viewer"),
            "{err}"
        );
        let (ok, out, _) = run(OPERATOR, &["users", "list"]);
        assert!(
            ok && out.contains("carol") && out.contains("viewer"),
            "{out}"
        );
        let (ok, out, _) = run(OPERATOR, &["users", "set-role", "carol", "operator"]);
        assert!(ok && out.contains("carol (operator)"), "{out}");
        let (ok, out, _) = run(token, &["tokens", "list"]);
        assert!(ok && out.contains("ci") && !out.contains(token), "{out}");
        let id = out
            .lines()
            .find_map(|l| {
                l.split_whitespace()
                    .next()
                    .filter(|w| w.starts_with("tok_"))
            })
            .unwrap()
            .to_owned();
        let (ok, out, _) = run(token, &["tokens", "revoke", &id]);
        assert!(ok && out.contains("revoked"), "{out}");
        let (ok, _, err) = run(token, &["task", "list"]);
        assert!(!ok && err.contains("unauthorized"), "{err}");
        let (ok, _, err) = run(OPERATOR, &["users", "disable", "admin"]);
        assert!(!ok && err.contains("builtin_user"), "{err}");
    });
    s.stop().await;
}
