//! The store's user and personal-token operations, one unit of work each;
//! see `ops/users.rs` for what each records.

use shepherd_core::role::Role;
use shepherd_core::time::Millis;
use shepherd_core::Error;

use crate::ops::users::{self, TokenRow, UserChange, UserRow};
use crate::Store;

impl Store {
    pub async fn create_user(
        &self,
        name: &str,
        role: Role,
        email: Option<String>,
    ) -> Result<UserRow, Error> {
        let now = self.now();
        let name = name.to_owned();
        self.write(move |db| {
            Box::pin(
                async move { users::create_user(db, now, &name, role, email.as_deref()).await },
            )
        })
        .await
    }

    pub async fn user(&self, name: &str) -> Result<UserRow, Error> {
        let name = name.to_owned();
        self.read(move |db| Box::pin(async move { users::get_user(db, &name).await }))
            .await
    }

    /// Every user, by name.
    pub async fn users(&self) -> Result<Vec<UserRow>, Error> {
        self.read(move |db| Box::pin(users::list_users(db))).await
    }

    pub async fn update_user(&self, name: &str, change: UserChange) -> Result<UserRow, Error> {
        let now = self.now();
        let name = name.to_owned();
        self.write(move |db| {
            Box::pin(async move { users::update_user(db, now, &name, change).await })
        })
        .await
    }

    /// A new token for `user` and its secret, which only this answer holds.
    pub async fn create_token(
        &self,
        user: &str,
        name: &str,
        expires_at: Option<Millis>,
    ) -> Result<(TokenRow, String), Error> {
        let now = self.now();
        let (user, name) = (user.to_owned(), name.to_owned());
        self.write(move |db| {
            Box::pin(async move { users::create_token(db, now, &user, &name, expires_at).await })
        })
        .await
    }

    /// A token not revoked.
    pub async fn token(&self, id: &str) -> Result<TokenRow, Error> {
        let id = id.to_owned();
        self.read(move |db| Box::pin(async move { users::get_token(db, &id).await }))
            .await
    }

    /// Tokens not revoked, oldest first: `user`'s, or everyone's.
    pub async fn tokens(&self, user: Option<String>) -> Result<Vec<TokenRow>, Error> {
        self.read(move |db| Box::pin(async move { users::list_tokens(db, user.as_deref()).await }))
            .await
    }

    pub async fn revoke_token(&self, id: &str) -> Result<TokenRow, Error> {
        let now = self.now();
        let id = id.to_owned();
        self.write(move |db| Box::pin(async move { users::revoke_token(db, now, &id).await }))
            .await
    }

    /// The token a presented secret is (revoked ones included) and its
    /// user; whether it may still be used is the caller's rule.
    pub async fn token_by_secret(
        &self,
        secret: &str,
    ) -> Result<Option<(TokenRow, UserRow)>, Error> {
        let secret = secret.to_owned();
        self.read(move |db| Box::pin(async move { users::token_by_secret(db, &secret).await }))
            .await
    }

    /// Records that a token was used now (at most once a minute per token).
    pub async fn touch_token(&self, id: &str) -> Result<(), Error> {
        let now = self.now();
        let id = id.to_owned();
        self.write(move |db| Box::pin(async move { users::touch_token(db, now, &id).await }))
            .await
    }
}
