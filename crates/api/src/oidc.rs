//! The OpenID provider, as a relying party sees it: discovery, the
//! authorization URL (code flow, PKCE S256, a nonce), and the code's
//! exchange, after which the ID token's signature, issuer, audience, expiry
//! and nonce are checked by `openidconnect`, never by hand.
//!
//! Discovery happens at the first login, not at start-up, and is kept for
//! an hour: a provider that is down when the server starts must not keep
//! it from serving, and a provider that rotates its keys is read again.

use std::time::{Duration, Instant};

use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreAuthenticationFlow, CoreErrorResponseType,
    CoreGenderClaim, CoreJsonWebKey, CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm,
    CoreProviderMetadata, CoreRevocableToken, CoreRevocationErrorResponse,
    CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AdditionalClaims, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EmptyExtraTokenFields,
    EndpointMaybeSet, EndpointNotSet, EndpointSet, IdTokenFields, IssuerUrl, Nonce,
    OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope,
    StandardErrorResponse, StandardTokenResponse, TokenResponse, UserInfoClaims,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use shepherd_core::role::Role;
use shepherd_core::Error;
use tokio::sync::Mutex;

/// How long a discovery document is trusted before it is read again.
const DISCOVERY_TTL: Duration = Duration::from_secs(3600);
/// A provider that does not answer in this time fails the login (a
/// browser is waiting on it).
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);

/// The `[oidc]` settings the server was started with.
#[derive(Debug, Clone, PartialEq)]
pub struct OidcSettings {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    pub redirect_url: String,
    pub scopes: Vec<String>,
    pub groups_claim: String,
    pub admin_groups: Vec<String>,
    pub operator_groups: Vec<String>,
    pub allowed_email_domains: Vec<String>,
    pub session_idle: Duration,
    pub session_max: Duration,
}

/// Every claim beyond the standard ones (the groups claim among them),
/// kept as JSON: its name is configured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct OtherClaims(Map<String, Value>);
impl AdditionalClaims for OtherClaims {}

type IdFields = IdTokenFields<
    OtherClaims,
    EmptyExtraTokenFields,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
type Tokens = StandardTokenResponse<IdFields, CoreTokenType>;
type Client = openidconnect::Client<
    OtherClaims,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    Tokens,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// A login about to start: where to send the browser, and what to keep
/// until it comes back.
pub struct Authorization {
    pub url: String,
    pub state: String,
    pub nonce: String,
    pub pkce_verifier: String,
}

/// Who the provider says signed in, verified.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// Issuer and subject: the identity's one stable key.
    pub subject: String,
    pub preferred_username: Option<String>,
    pub email: Option<String>,
    pub email_verified: bool,
    pub groups: Vec<String>,
}

/// Why a login failed, each with the code the callback page shows.
fn login_failed(message: impl Into<String>) -> Error {
    Error::bad_request("login_failed", message)
}

/// The provider, with its discovery document once read.
pub struct Provider {
    settings: OidcSettings,
    issuer: IssuerUrl,
    redirect: RedirectUrl,
    http: reqwest::Client,
    discovered: Mutex<Option<(Instant, CoreProviderMetadata)>>,
}

impl Provider {
    /// Checks the settings' URLs; reaches the provider only at the first
    /// login.
    pub fn new(settings: OidcSettings) -> Result<Provider, String> {
        let issuer = IssuerUrl::new(settings.issuer.clone())
            .map_err(|e| format!("oidc.issuer {:?}: {e}", settings.issuer))?;
        let redirect = RedirectUrl::new(settings.redirect_url.clone())
            .map_err(|e| format!("oidc.redirect_url {:?}: {e}", settings.redirect_url))?;
        let http = reqwest::Client::builder()
            // A redirect from the provider's endpoints would let whoever
            // controls one point the server's requests anywhere.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(PROVIDER_TIMEOUT)
            .build()
            .map_err(|e| format!("oidc: cannot build the HTTP client: {e}"))?;
        Ok(Provider {
            settings,
            issuer,
            redirect,
            http,
            discovered: Mutex::new(None),
        })
    }

    pub fn settings(&self) -> &OidcSettings {
        &self.settings
    }

    async fn client(&self) -> Result<Client, Error> {
        let mut cached = self.discovered.lock().await;
        let fresh = cached
            .as_ref()
            .filter(|(at, _)| at.elapsed() < DISCOVERY_TTL)
            .map(|(_, m)| m.clone());
        let metadata = match fresh {
            Some(m) => m,
            None => {
                let m = CoreProviderMetadata::discover_async(self.issuer.clone(), &self.http)
                    .await
                    .map_err(|e| {
                        tracing::warn!(issuer = %self.settings.issuer, error = %e, "OpenID discovery failed");
                        Error::unavailable(
                            "provider_unavailable",
                            format!(
                                "the sign-in provider {} could not be reached: {e}",
                                self.settings.issuer
                            ),
                        )
                    })?;
                *cached = Some((Instant::now(), m.clone()));
                m
            }
        };
        Ok(Client::from_provider_metadata(
            metadata,
            ClientId::new(self.settings.client_id.clone()),
            Some(ClientSecret::new(self.settings.client_secret.clone())),
        )
        .set_redirect_uri(self.redirect.clone()))
    }

    /// The provider's authorization URL for a new login.
    pub async fn authorize(&self) -> Result<Authorization, Error> {
        let client = self.client().await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client.authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        );
        for scope in self.settings.scopes.iter().filter(|s| *s != "openid") {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        Ok(Authorization {
            url: url.to_string(),
            state: state.secret().clone(),
            nonce: nonce.secret().clone(),
            pkce_verifier: verifier.secret().clone(),
        })
    }

    /// Exchanges the callback's code, verifies the ID token against the
    /// login's nonce, and reads who it is (the userinfo endpoint fills in
    /// what the ID token left out).
    pub async fn finish(
        &self,
        code: &str,
        nonce: &str,
        pkce_verifier: &str,
    ) -> Result<Identity, Error> {
        let client = self.client().await?;
        let tokens = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| login_failed(format!("the provider has no token endpoint: {e}")))?
            .set_pkce_verifier(PkceCodeVerifier::new(pkce_verifier.to_owned()))
            .request_async(&self.http)
            .await
            .map_err(|e| login_failed(format!("the provider refused the code: {e}")))?;
        let id_token = tokens
            .id_token()
            .ok_or_else(|| login_failed("the provider sent no ID token"))?;
        let verifier = client.id_token_verifier();
        let claims = id_token
            .claims(&verifier, &Nonce::new(nonce.to_owned()))
            .map_err(|e| login_failed(format!("the ID token did not verify: {e}")))?;
        let mut identity = Identity {
            subject: format!("{}|{}", claims.issuer().as_str(), claims.subject().as_str()),
            preferred_username: claims.preferred_username().map(|u| u.as_str().to_owned()),
            email: claims.email().map(|e| e.as_str().to_owned()),
            email_verified: claims.email_verified().unwrap_or(false),
            groups: groups_in(&claims.additional_claims().0, &self.settings.groups_claim),
        };
        let has_groups = claims
            .additional_claims()
            .0
            .contains_key(&self.settings.groups_claim);
        let wants_more =
            identity.email.is_none() || identity.preferred_username.is_none() || !has_groups;
        if wants_more {
            if let Ok(request) = client.user_info(
                tokens.access_token().clone(),
                Some(claims.subject().clone()),
            ) {
                match request
                    .request_async::<OtherClaims, _, CoreGenderClaim>(&self.http)
                    .await
                {
                    Ok(info) => {
                        fill_from_userinfo(&mut identity, &info, &self.settings.groups_claim)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the provider's userinfo endpoint failed; using the ID token alone")
                    }
                }
            }
        }
        Ok(identity)
    }

    /// The role `identity`'s groups give, or why they may not sign in.
    pub fn role_of(&self, identity: &Identity) -> Result<Role, Error> {
        let s = &self.settings;
        if !s.allowed_email_domains.is_empty() {
            let domain = identity
                .email
                .as_deref()
                .filter(|_| identity.email_verified)
                .and_then(|e| e.rsplit_once('@'))
                .map(|(_, d)| d.to_ascii_lowercase());
            let allowed = domain.as_deref().is_some_and(|d| {
                s.allowed_email_domains
                    .iter()
                    .any(|a| a.eq_ignore_ascii_case(d))
            });
            if !allowed {
                return Err(Error::forbidden(
                    "login_not_allowed",
                    format!(
                        "this server lets in verified emails of {} only",
                        s.allowed_email_domains.join(", ")
                    ),
                ));
            }
        }
        let member = |groups: &[String]| identity.groups.iter().any(|g| groups.contains(g));
        Ok(if member(&s.admin_groups) {
            Role::Admin
        } else if member(&s.operator_groups) {
            Role::Operator
        } else {
            Role::Viewer
        })
    }
}

fn groups_in(claims: &Map<String, Value>, name: &str) -> Vec<String> {
    match claims.get(name) {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|g| g.as_str().map(str::to_owned))
            .collect(),
        // Some providers send a single group as a string.
        Some(Value::String(g)) => vec![g.clone()],
        _ => Vec::new(),
    }
}

fn fill_from_userinfo(
    identity: &mut Identity,
    info: &UserInfoClaims<OtherClaims, CoreGenderClaim>,
    groups_claim: &str,
) {
    if identity.preferred_username.is_none() {
        identity.preferred_username = info.preferred_username().map(|u| u.as_str().to_owned());
    }
    if identity.email.is_none() {
        identity.email = info.email().map(|e| e.as_str().to_owned());
        identity.email_verified = info.email_verified().unwrap_or(false);
    }
    if identity.groups.is_empty() {
        identity.groups = groups_in(&info.additional_claims().0, groups_claim);
    }
}

/// The Shepherd user name for an identity: its `preferred_username`, else
/// its email's local part, lowercased; `None` when neither makes a valid
/// name.
pub fn user_name_of(identity: &Identity) -> Option<String> {
    let candidate = identity
        .preferred_username
        .clone()
        .or_else(|| {
            identity
                .email
                .as_deref()
                .filter(|_| identity.email_verified)
                .and_then(|e| e.split_once('@'))
                .map(|(local, _)| local.to_owned())
        })?
        .to_ascii_lowercase();
    let valid = (1..=64).contains(&candidate.len())
        && candidate.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && candidate
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'));
    valid.then_some(candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(username: Option<&str>, email: Option<&str>, groups: &[&str]) -> Identity {
        Identity {
            subject: "https://idp|1".into(),
            preferred_username: username.map(str::to_owned),
            email: email.map(str::to_owned),
            email_verified: true,
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    fn provider(domains: &[&str]) -> Provider {
        Provider::new(OidcSettings {
            issuer: "https://idp.example.com".into(),
            client_id: "shepherd".into(),
            client_secret: "s".into(),
            redirect_url: "https://shepherd.example.com/auth/callback".into(),
            scopes: vec!["openid".into()],
            groups_claim: "groups".into(),
            admin_groups: vec!["admins".into()],
            operator_groups: vec!["ops".into()],
            allowed_email_domains: domains.iter().map(|d| d.to_string()).collect(),
            session_idle: Duration::from_secs(60),
            session_max: Duration::from_secs(600),
        })
        .unwrap()
    }

    #[test]
    fn groups_give_the_highest_role_and_everyone_else_is_a_viewer() {
        let p = provider(&[]);
        let role = |groups: &[&str]| p.role_of(&identity(Some("a"), None, groups)).unwrap();
        assert_eq!(role(&["ops", "admins"]), Role::Admin);
        assert_eq!(role(&["ops"]), Role::Operator);
        assert_eq!(role(&["other"]), Role::Viewer);
        assert_eq!(role(&[]), Role::Viewer);
    }

    #[test]
    fn only_verified_emails_of_the_allowed_domains_get_in() {
        let p = provider(&["example.com"]);
        assert!(p
            .role_of(&identity(Some("a"), Some("a@Example.COM"), &[]))
            .is_ok());
        let refused = |i: Identity| p.role_of(&i).unwrap_err().code;
        assert_eq!(
            refused(identity(Some("a"), Some("a@evil.test"), &[])),
            "login_not_allowed"
        );
        assert_eq!(refused(identity(Some("a"), None, &[])), "login_not_allowed");
        // A lookalike subdomain is another domain.
        assert_eq!(
            refused(identity(Some("a"), Some("a@example.com.evil.test"), &[])),
            "login_not_allowed"
        );
        let mut unverified = identity(Some("a"), Some("a@example.com"), &[]);
        unverified.email_verified = false;
        assert_eq!(refused(unverified), "login_not_allowed");
    }

    #[test]
    fn names_come_from_the_username_else_the_email() {
        assert_eq!(
            user_name_of(&identity(Some("Alice"), None, &[])).as_deref(),
            Some("alice")
        );
        assert_eq!(
            user_name_of(&identity(None, Some("bob.smith@example.com"), &[])).as_deref(),
            Some("bob.smith")
        );
        assert_eq!(user_name_of(&identity(Some("has space"), None, &[])), None);
        let mut unverified = identity(None, Some("carol@example.com"), &[]);
        unverified.email_verified = false;
        assert_eq!(
            user_name_of(&unverified),
            None,
            "only a verified email names a user"
        );
        assert_eq!(user_name_of(&identity(None, None, &[])), None);
    }
}
