//! Webhook signing as the Standard Webhooks specification defines it, so a
//! receiver can verify Shepherd's deliveries with any of that project's
//! libraries instead of code written for Shepherd.
//!
//! A secret is `whsec_` followed by the base64 of the key bytes; the
//! signature of a delivery is `v1,` + base64(HMAC-SHA256(key,
//! "{webhook-id}.{webhook-timestamp}.{body}")). Pure functions: the caller
//! brings the random bytes of a new secret and the clock's reading.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::{Error, Result};

/// The prefix every secret carries, as the specification spells it.
pub const SECRET_PREFIX: &str = "whsec_";

/// Fewest key bytes a given secret may have: the specification recommends
/// 24 to 64; shorter keys are too easy to guess.
pub const MIN_KEY_BYTES: usize = 24;
/// Most key bytes a given secret may have.
pub const MAX_KEY_BYTES: usize = 64;

/// A signing secret, checked: it decodes to a key of an accepted length.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret {
    key: Vec<u8>,
}

// The key never appears in logs or panics.
impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(..)")
    }
}

impl WebhookSecret {
    /// A secret made of the given key bytes (a new one: 32 random bytes).
    pub fn from_key(key: &[u8]) -> Result<Self> {
        if !(MIN_KEY_BYTES..=MAX_KEY_BYTES).contains(&key.len()) {
            return Err(bad_secret());
        }
        Ok(Self { key: key.to_vec() })
    }

    /// Reads a secret in its `whsec_<base64>` form.
    pub fn parse(text: &str) -> Result<Self> {
        let encoded = text.strip_prefix(SECRET_PREFIX).ok_or_else(bad_secret)?;
        let key = STANDARD.decode(encoded).map_err(|_| bad_secret())?;
        Self::from_key(&key)
    }

    /// The `whsec_<base64>` form, as shown to the operator once.
    pub fn to_text(&self) -> String {
        format!("{SECRET_PREFIX}{}", STANDARD.encode(&self.key))
    }

    /// The `webhook-signature` header's value for one delivery.
    pub fn sign(&self, message_id: &str, timestamp: i64, body: &[u8]) -> String {
        // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key");
        mac.update(message_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

fn bad_secret() -> Error {
    Error::invalid(
        "invalid_webhook_secret",
        format!(
            "a webhook secret is `{SECRET_PREFIX}` followed by the base64 of {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes"
        ),
    )
}

/// The `webhook-id` of a delivery: the same for every attempt at one event
/// to one subscription, so a receiver can drop the duplicates that
/// at-least-once delivery allows.
pub fn message_id(subscription_id: &str, seq: i64) -> String {
    format!("msg_{subscription_id}_{seq}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Key bytes 0..32, i.e. `whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=`.
    fn counting_key() -> Vec<u8> {
        (0u8..32).collect()
    }

    #[test]
    fn signature_matches_an_independent_hmac() {
        // Computed with `openssl dgst -sha256 -mac HMAC` over the same input,
        // not with this code.
        let secret = WebhookSecret::from_key(&counting_key()).unwrap();
        assert_eq!(
            secret.sign("msg_1", 1_700_000_000, br#"{"a":1}"#),
            "v1,AMaOha7DUT/0J0JMycRuYOBSvbx3WtwLd2khXXbaVj4="
        );
    }

    #[test]
    fn secret_round_trips_through_its_text_form() {
        let text = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        let secret = WebhookSecret::parse(text).unwrap();
        assert_eq!(secret, WebhookSecret::from_key(&counting_key()).unwrap());
        assert_eq!(secret.to_text(), text);
    }

    #[test]
    fn bad_secrets_are_refused_with_a_stable_code() {
        for text in [
            "",
            "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
            "whsec_",
            "whsec_not base64!",
            "whsec_AAECAwQ=",
        ] {
            let err = WebhookSecret::parse(text).unwrap_err();
            assert_eq!(err.code, "invalid_webhook_secret", "{text:?}");
        }
        assert!(WebhookSecret::from_key(&[0; 65]).is_err());
    }

    #[test]
    fn message_id_is_stable_per_subscription_and_event() {
        assert_eq!(message_id("wh_1", 7), message_id("wh_1", 7));
        assert_ne!(message_id("wh_1", 7), message_id("wh_1", 8));
        assert_ne!(message_id("wh_1", 7), message_id("wh_2", 7));
    }

    #[test]
    fn debug_hides_the_key() {
        let secret = WebhookSecret::from_key(&counting_key()).unwrap();
        assert_eq!(format!("{secret:?}"), "WebhookSecret(..)");
    }
}
