//! A credential that stops working ends the connections it opened.
//!
//! REST checks its credential on every request; a long-lived connection
//! (a terminal or agent tab's WebSocket, `/api/events`, `/mcp`'s streams,
//! an input request's long poll) was checked once, when it opened. Each
//! of them therefore takes a [`Watch`] on the person's credential that
//! let it in: when the personal token is revoked or expires, the user is
//! disabled, the web session signs out, idles out or reaches its absolute
//! lifetime, the watch ends and the connection with it (WebSocket close
//! code 4401 with the reason; the SSE body ends). A demotion below the
//! role the route needs ends it with 4403; one that keeps that role (an
//! operator made a viewer, reading `/api/events`) changes nothing.
//!
//! How a node learns of a change, on every node of a cluster: each
//! change of a credential already commits an event in the same
//! transaction (`token.revoked`, `user.updated`, `user.logout`), and the
//! event log reaches every node, gap-free (`shepherd_store::hub`: at once
//! on the node that wrote it; on another within NOTIFY's delay, or the
//! pump's 500 ms safety read if a notification is lost). One task per node
//! follows those three types and bumps a generation counter; each watch
//! then checks its own credential again with one indexed lookup, by the
//! same rules as a request (`auth::personal_refused`,
//! `login::session_refused`). So an idle connection costs nothing (no
//! per-connection polling of the database), the check is the request's
//! own rule rather than a second copy of it, and no message beside the log
//! needs delivering. What no event announces (a token's `expires_at`, a
//! session's idle and absolute lifetimes) is a deadline each watch sleeps
//! until, then checks again. Extra checks are harmless, so anything the
//! follower cannot vouch for (a read error) counts as a change.
//!
//! Credentials nothing revokes at run time (the bootstrap token, no token
//! on a server without auth, worker, run and host tokens) get a watch that
//! ends only with the server.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use shepherd_core::event::{kind, EventFilter};
use shepherd_core::role::Role;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::AppState;

/// The WebSocket close code of a credential that no longer authenticates
/// (the 4000 range is the application's; 4401 reads as HTTP's 401).
pub const CLOSE_UNAUTHORIZED: u16 = 4401;
/// The close code of a credential whose role no longer reaches the route.
pub const CLOSE_FORBIDDEN: u16 = 4403;

/// How soon a check that could not read the store is tried again.
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(500);

/// The secret a person's request was let in with. Kept (in memory, as the
/// request's headers held it) so that the connection it opens can be
/// checked again; never printed.
#[derive(Clone)]
pub enum Secret {
    /// A personal access token (`spt_…`).
    Personal(String),
    /// A web session's cookie.
    Session(String),
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Secret::Personal(_) => "Personal(..)",
            Secret::Session(_) => "Session(..)",
        })
    }
}

/// A revocable credential and the least role its route needs: a request
/// extension, set by `auth::authenticate` for people's tokens and
/// sessions only.
#[derive(Debug, Clone)]
pub struct Credential {
    pub secret: Secret,
    pub needs: Option<Role>,
}

/// Why a watch ended a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    /// [`CLOSE_UNAUTHORIZED`] or [`CLOSE_FORBIDDEN`].
    pub code: u16,
    /// Short enough for a close frame (123 bytes).
    pub reason: String,
}

impl Lost {
    fn unauthorized(reason: &str) -> Lost {
        Lost {
            code: CLOSE_UNAUTHORIZED,
            reason: reason.into(),
        }
    }

    /// The WebSocket close frame that says so (its reason cut to the 123
    /// bytes a close frame holds).
    pub fn close_frame(&self) -> axum::extract::ws::CloseFrame {
        let mut end = self.reason.len().min(123);
        while !self.reason.is_char_boundary(end) {
            end -= 1;
        }
        axum::extract::ws::CloseFrame {
            code: self.code,
            reason: self.reason[..end].into(),
        }
    }

    /// The API error a request that was still waiting answers.
    pub fn to_error(&self) -> shepherd_core::Error {
        if self.code == CLOSE_FORBIDDEN {
            shepherd_core::Error::forbidden("forbidden", self.reason.clone())
        } else {
            shepherd_core::Error::new(
                shepherd_core::ErrorKind::Unauthorized,
                "unauthorized",
                self.reason.clone(),
            )
        }
    }
}

/// The node's follower of credential changes.
pub struct Revocations {
    generation: watch::Sender<u64>,
    follower: OnceLock<()>,
}

impl Default for Revocations {
    fn default() -> Self {
        Revocations {
            generation: watch::Sender::new(0),
            follower: OnceLock::new(),
        }
    }
}

/// One connection's hold on its credential. `ended()` fires when the
/// server shuts down or the credential is lost ([`Watch::lost`] says
/// which). Dropping the watch (the connection is over) stops its check.
pub struct Watch {
    ended: CancellationToken,
    lost: Arc<OnceLock<Lost>>,
    /// What [`Watch::confirm`] checks; `None` for a credential nothing revokes.
    credential: Option<(AppState, Credential)>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.ended.cancel();
    }
}

impl Watch {
    /// Cancelled at shutdown or when the credential is lost.
    pub fn ended(&self) -> &CancellationToken {
        &self.ended
    }

    /// Why the connection must end, once it must for its credential.
    pub fn lost(&self) -> Option<&Lost> {
        self.lost.get()
    }

    /// Waits until the connection must end; `Some` when for its credential
    /// rather than for shutdown.
    pub async fn wait(&self) -> Option<&Lost> {
        self.ended.cancelled().await;
        self.lost()
    }

    /// Checks the credential now, before the connection acts on what its
    /// client sent (a terminal's input): the background check may be a
    /// moment behind a change, and input that arrives after a revocation
    /// has committed must not run. `Err` when it may not act: the
    /// credential is lost (the watch has ended), or the store could not
    /// say (the input is dropped, the connection stays).
    pub async fn confirm(&self) -> Result<(), Option<Lost>> {
        if let Some(lost) = self.lost() {
            return Err(Some(lost.clone()));
        }
        let Some((state, credential)) = &self.credential else {
            return Ok(());
        };
        match check(state, credential).await {
            Ok(Verdict::Good(_)) => Ok(()),
            Ok(Verdict::Lost(why)) => {
                let why = self.lost.get_or_init(|| why).clone();
                self.ended.cancel();
                Err(Some(why))
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not check a connection's credential; its input is dropped");
                Err(None)
            }
        }
    }
}

/// A watch over what let this request in: `None` (a credential nothing
/// revokes) ends only with the server.
pub fn watch(state: &AppState, credential: Option<Credential>) -> Watch {
    let ended = state.shutdown.child_token();
    let lost = Arc::new(OnceLock::new());
    if let Some(credential) = &credential {
        let credential = credential.clone();
        let revocations = &state.revocations;
        revocations.follower.get_or_init(|| {
            tokio::spawn(follow(state.clone()));
        });
        // Subscribed before the first check, so no change after it is missed.
        let generation = revocations.generation.subscribe();
        tokio::spawn(guard(
            state.clone(),
            credential,
            generation,
            ended.clone(),
            lost.clone(),
        ));
    }
    Watch {
        ended,
        lost,
        credential: credential.map(|c| (state.clone(), c)),
    }
}

/// Follows the log's credential events on this node; each one, and any
/// read error, is a new generation.
async fn follow(state: AppState) {
    let filter = EventFilter {
        kinds: vec![
            kind::TOKEN_REVOKED.into(),
            kind::USER_UPDATED.into(),
            kind::USER_LOGOUT.into(),
        ],
        ..Default::default()
    };
    let mut tail = state.store.tail(state.store.published_through(), filter);
    let bump = || state.revocations.generation.send_modify(|g| *g += 1);
    loop {
        tokio::select! {
            _ = state.shutdown.cancelled() => return,
            item = tail.next() => match item {
                Ok(_) => bump(),
                Err(e) => {
                    tracing::warn!(error = %e, "following credential changes failed; checking all again");
                    bump();
                    tokio::time::sleep(RETRY_AFTER_ERROR).await;
                }
            },
        }
    }
}

/// What one check found.
enum Verdict {
    /// Still good; check again at this deadline (or at the next change).
    Good(Option<Instant>),
    Lost(Lost),
}

/// Checks the credential at start, at each generation and at its deadline,
/// until the connection ends or the credential is lost.
async fn guard(
    state: AppState,
    credential: Credential,
    mut generation: watch::Receiver<u64>,
    ended: CancellationToken,
    lost: Arc<OnceLock<Lost>>,
) {
    generation.borrow_and_update();
    loop {
        let until = match check(&state, &credential).await {
            Ok(Verdict::Good(until)) => until,
            Ok(Verdict::Lost(why)) => {
                let _ = lost.set(why);
                ended.cancel();
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not check a connection's credential; trying again");
                Some(Instant::now() + RETRY_AFTER_ERROR)
            }
        };
        let deadline = async {
            match until {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = ended.cancelled() => return,
            changed = generation.changed() => if changed.is_err() { return },
            _ = deadline => {}
        }
    }
}

/// The monotonic instant of a wall-clock time in milliseconds.
fn instant_of(at_ms: i64, now_ms: i64) -> Instant {
    Instant::now() + Duration::from_millis((at_ms - now_ms).max(0) as u64)
}

/// One check of the credential, by the rules its request met.
async fn check(state: &AppState, credential: &Credential) -> Result<Verdict, shepherd_core::Error> {
    let (role, name, until) = match &credential.secret {
        Secret::Personal(secret) => {
            let refused =
                || Verdict::Lost(Lost::unauthorized("token revoked, expired or disabled"));
            let Some((token, user)) = state.store.token_by_secret(secret).await? else {
                return Ok(refused());
            };
            let now = shepherd_store::now_ms();
            if crate::auth::personal_refused(&token, &user, now) {
                return Ok(refused());
            }
            let until = token.expires_at.map(|at| instant_of(at, now));
            (user.role, user.name, until)
        }
        Secret::Session(cookie) => {
            let refused = || Verdict::Lost(Lost::unauthorized("session ended; sign in again"));
            let Some(provider) = state.oidc.as_ref() else {
                return Ok(refused());
            };
            let Some((session, user)) = state.store.web_session(cookie).await? else {
                return Ok(refused());
            };
            let now = state.store.now();
            let idle = provider.settings().session_idle;
            if crate::login::session_refused(&session, &user, now, idle) {
                return Ok(refused());
            }
            let until = crate::login::session_lasts_until(&session, idle);
            (user.role, user.name, Some(instant_of(until, now)))
        }
    };
    if let Some(needed) = credential.needs.filter(|needed| role < *needed) {
        return Ok(Verdict::Lost(Lost {
            code: CLOSE_FORBIDDEN,
            reason: format!("this needs the {needed} role; {name} is now a {role}"),
        }));
    }
    Ok(Verdict::Good(until))
}

/// A layer for `/mcp`, inside `auth::authenticate`: an answer that is a
/// stream (the session's `GET` stream of notifications, a `POST`'s answer
/// streamed as server-sent events) ends when the credential of the request
/// that opened it is lost. An MCP session holds no rights of its own: each
/// of its requests is authenticated again, and the tools' own event
/// streams (resource subscriptions) are `/api/events`, watched there.
pub async fn end_streams(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let credential = req.extensions().get::<Credential>().cloned();
    let res = next.run(req).await;
    let Some(credential) = credential else {
        return res;
    };
    let streamed = res
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !streamed {
        return res;
    }
    let watch = watch(&state, Some(credential));
    res.map(|body| {
        let chunks = body.into_data_stream();
        axum::body::Body::from_stream(futures::stream::unfold(
            (chunks, watch),
            |(mut chunks, watch)| async move {
                use futures::StreamExt;
                tokio::select! {
                    _ = watch.ended().cancelled() => None,
                    chunk = chunks.next() => chunk.map(|c| (c, (chunks, watch))),
                }
            },
        ))
    })
}

#[cfg(test)]
mod tests {
    //! The web session's side, which needs a signed-in browser: sessions
    //! are made in the store as a sign-in makes them, and `/api/events` is
    //! read over real HTTP with the cookie. (Tokens, users and the other
    //! connections are the `shepherd` crate's `tests/revocation.rs`.)

    use super::*;
    use futures::StreamExt;
    use shepherd_store::{SessionLifetimes, SignIn, Store, StoreConfig};

    /// What every wait allows; the server acts within a second.
    const WAIT: Duration = Duration::from_secs(5);

    struct Served {
        base: String,
        store: Store,
        stop: CancellationToken,
        dir: std::path::PathBuf,
    }

    impl Drop for Served {
        fn drop(&mut self) {
            self.stop.cancel();
            self.store.close();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// A server with `[oidc]` (a provider nobody serves: sign-ins are made
    /// in the store) on 127.0.0.1:0.
    async fn serve(name: &str) -> Served {
        let dir = std::env::temp_dir().join(format!(
            "shepherd-api-revocation-{name}-{}-{}",
            std::process::id(),
            shepherd_store::now_ms()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("sqlite://{}", dir.join("shepherd.db").display());
        let store = Store::open(&StoreConfig::new(url)).await.unwrap();
        let stop = CancellationToken::new();
        let provider = crate::oidc::Provider::new(crate::oidc::OidcSettings {
            issuer: "http://127.0.0.1:9".into(),
            client_id: "shepherd".into(),
            client_secret: "secret".into(),
            redirect_url: "http://127.0.0.1:9/auth/callback".into(),
            scopes: Vec::new(),
            groups_claim: "groups".into(),
            admin_groups: Vec::new(),
            operator_groups: Vec::new(),
            allowed_email_domains: Vec::new(),
            session_idle: Duration::from_secs(3600),
            session_max: Duration::from_secs(12 * 3600),
        })
        .unwrap();
        let state = AppState::new(store.clone(), crate::Settings::default(), stop.clone())
            .with_oidc(Arc::new(provider));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let until = stop.clone();
        tokio::spawn(crate::serve(listener, state, async move {
            until.cancelled().await
        }));
        Served {
            base,
            store,
            stop,
            dir,
        }
    }

    /// Signs `name` in as a viewer: the cookie and CSRF token.
    async fn sign_in(s: &Served, name: &str, max_ms: i64) -> (String, String) {
        let session = s
            .store
            .sign_in(
                SignIn {
                    subject: format!("sub-{name}"),
                    name: name.into(),
                    email: None,
                    role: Role::Viewer,
                },
                SessionLifetimes {
                    idle_ms: 3_600_000,
                    max_ms,
                },
            )
            .await
            .unwrap();
        (session.cookie, session.csrf_token)
    }

    /// The event stream, read with the session cookie.
    async fn events(
        s: &Served,
        cookie: &str,
    ) -> futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>> {
        let res = reqwest::Client::new()
            .get(format!("{}/api/events?after=now", s.base))
            .header(
                "cookie",
                format!("{}={cookie}", crate::login::SESSION_COOKIE),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        res.bytes_stream().boxed()
    }

    /// Whether the stream ends within [`WAIT`].
    async fn ends(
        mut stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    ) -> bool {
        tokio::time::timeout(WAIT, async {
            while let Some(Ok(_)) = stream.next().await {}
        })
        .await
        .is_ok()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn signing_out_ends_the_sessions_event_stream() {
        let s = serve("logout").await;
        let (cookie, csrf) = sign_in(&s, "sam", 12 * 3_600_000).await;
        let (other, _) = sign_in(&s, "tess", 12 * 3_600_000).await;
        let mut stream = events(&s, &cookie).await;
        let kept = events(&s, &other).await;
        // Open: nothing ends it before the sign-out.
        let early = tokio::time::timeout(Duration::from_millis(300), stream.next()).await;
        assert!(!matches!(early, Ok(None)), "the stream is open");
        let res = reqwest::Client::new()
            .post(format!("{}/auth/logout", s.base))
            .header(
                "cookie",
                format!("{}={cookie}", crate::login::SESSION_COOKIE),
            )
            .header(crate::auth::CSRF_HEADER, csrf)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 204);
        assert!(ends(stream).await, "the signed-out session's stream ends");
        // Another person's session is not touched by it: its stream goes
        // on, and delivers the sign-out.
        let mut kept = kept;
        let next = tokio::time::timeout(WAIT, kept.next()).await;
        assert!(
            matches!(&next, Ok(Some(Ok(b))) if String::from_utf8_lossy(b).contains("user.logout")),
            "another session's stream goes on: {next:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_past_its_lifetime_ends_its_event_stream() {
        let s = serve("expiry").await;
        // Nothing is written when a session reaches its end: the watch's
        // own deadline ends the stream.
        let (cookie, _) = sign_in(&s, "sam", 1_500).await;
        let stream = events(&s, &cookie).await;
        assert!(ends(stream).await, "the expired session's stream ends");
    }
}
