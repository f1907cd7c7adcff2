//! The store's single sign-on operations, one unit of work each; see
//! `ops/logins.rs` for what each records.

use shepherd_core::Error;

use crate::ops::logins::{self, LoginAttempt, NewWebSession, SessionLifetimes, SignIn, WebSession};
use crate::ops::users::UserRow;
use crate::Store;

impl Store {
    /// Keeps a login under way until the provider sends the browser back.
    pub async fn begin_login(&self, state: &str, attempt: LoginAttempt) -> Result<(), Error> {
        let now = self.now();
        let state = state.to_owned();
        self.write(move |db| {
            Box::pin(async move { logins::begin_login(db, now, &state, &attempt).await })
        })
        .await
    }

    /// The login `state` began, if it is still fresh; it cannot be taken twice.
    pub async fn take_login(&self, state: &str) -> Result<Option<LoginAttempt>, Error> {
        let now = self.now();
        let state = state.to_owned();
        self.write(move |db| Box::pin(async move { logins::take_login(db, now, &state).await }))
            .await
    }

    /// Signs a verified identity in and opens a session for its browser.
    pub async fn sign_in(
        &self,
        who: SignIn,
        lifetimes: SessionLifetimes,
    ) -> Result<NewWebSession, Error> {
        let now = self.now();
        self.write(move |db| {
            Box::pin(async move { logins::sign_in(db, now, &who, lifetimes).await })
        })
        .await
    }

    /// The session a cookie opens, with its user (ended ones too: the
    /// caller judges).
    pub async fn web_session(&self, cookie: &str) -> Result<Option<(WebSession, UserRow)>, Error> {
        let cookie = cookie.to_owned();
        self.read(move |db| Box::pin(async move { logins::session_by_cookie(db, &cookie).await }))
            .await
    }

    /// Records a session's use, at most once per `granularity_ms`.
    pub async fn touch_web_session(&self, cookie: &str, granularity_ms: i64) -> Result<(), Error> {
        let now = self.now();
        let cookie = cookie.to_owned();
        self.write(move |db| {
            Box::pin(async move { logins::touch_session(db, now, &cookie, granularity_ms).await })
        })
        .await
    }

    /// Ends a session; whose it was, if it was live.
    pub async fn end_web_session(&self, cookie: &str) -> Result<Option<String>, Error> {
        let now = self.now();
        let cookie = cookie.to_owned();
        self.write(move |db| Box::pin(async move { logins::end_session(db, now, &cookie).await }))
            .await
    }
}
