//! Secrets the database keeps, sealed with a key it does not keep.
//!
//! Some stored values are secrets Shepherd must be able to use again, not
//! only compare (so not hashes): a webhook's signing secret, the key run
//! tokens are derived from. They are kept sealed with ChaCha20-Poly1305
//! under the *secrets key*, which lives outside the database (the server's
//! `secret.key` file in its data directory, or the file `secrets_key_file`
//! names), so a copy of the database alone, a backup's or a replica's,
//! reveals none of them.
//!
//! A sealed value is text: `enc:v1:` then base64 of the 12-byte nonce and
//! the ciphertext with its tag. The associated data names what the value
//! is (its table, column and row), so a sealed value moved to another row
//! does not open there. A value without the prefix is one stored before
//! sealing existed: it is read as it is and sealed at the next start
//! ([`crate::Store::open`] seals every such row before anything else runs).
//!
//! A store opened without a key ([`crate::StoreConfig::secrets_key`]
//! `None`: tests, tools that copy rows as they are) stores new secrets in
//! clear and cannot read sealed ones (`secrets_key_missing`). The database
//! remembers a value sealed under the key it was first given, so a server
//! started with another key (a node of a cluster given its own) refuses to
//! start (`secrets_key_mismatch`) rather than fail on every webhook later.

use std::fmt;
use std::sync::Arc;

use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use shepherd_core::Error;

/// What every sealed value starts with; the version is the format's.
pub const SEALED_PREFIX: &str = "enc:v1:";

/// The first line of a secrets key file, before the key's hex.
const KEY_FILE_HEADER: &str = "shepherd-secrets-key v1";

/// The key stored secrets are sealed with (32 bytes).
#[derive(Clone)]
pub struct SecretsKey {
    key: Arc<LessSafeKey>,
}

impl fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretsKey(..)")
    }
}

impl SecretsKey {
    /// The key of these 32 bytes.
    pub fn from_bytes(bytes: &[u8; 32]) -> SecretsKey {
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, bytes)
            .expect("ChaCha20-Poly1305 takes a 32-byte key");
        SecretsKey {
            key: Arc::new(LessSafeKey::new(unbound)),
        }
    }

    /// The text of a new key file: a header line, then 32 random bytes in
    /// hex.
    pub fn new_file_text() -> Result<String, Error> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| Error::internal(format!("no randomness: {e}")))?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Ok(format!("{KEY_FILE_HEADER}\n{hex}\n"))
    }

    /// The key a key file's text holds (`what` names the file in errors).
    pub fn parse_file_text(text: &str, what: &str) -> Result<SecretsKey, String> {
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        if lines.next() != Some(KEY_FILE_HEADER) {
            return Err(format!(
                "{what}: not a Shepherd secrets key (its first line is not {KEY_FILE_HEADER:?})"
            ));
        }
        let hex = lines.next().unwrap_or_default();
        let bad = || format!("{what}: expected 64 hexadecimal digits after the first line");
        if hex.len() != 64 || lines.next().is_some() {
            return Err(bad());
        }
        let mut bytes = [0u8; 32];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16)
                .map_err(|_| bad())?;
        }
        Ok(SecretsKey::from_bytes(&bytes))
    }

    /// `plain` sealed for the place `label` names.
    fn seal(&self, label: &str, plain: &str) -> Result<String, Error> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| Error::internal(format!("no randomness: {e}")))?;
        let mut buf = plain.as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(label.as_bytes()),
                &mut buf,
            )
            .map_err(|_| Error::internal("cannot seal a secret"))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&buf);
        Ok(format!(
            "{SEALED_PREFIX}{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(out)
        ))
    }

    /// The plain text of `sealed` (without its prefix), sealed for `label`.
    fn open(&self, label: &str, sealed: &str) -> Result<String, Error> {
        let mismatch = || {
            Error::new(
                shepherd_core::error::ErrorKind::Internal,
                "secrets_key_mismatch",
                format!(
                    "the stored secret of {label} does not open with this server's secrets key \
                     (sealed under another key, or changed)"
                ),
            )
        };
        let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(sealed)
            .map_err(|_| mismatch())?;
        if bytes.len() < NONCE_LEN {
            return Err(mismatch());
        }
        let (nonce, rest) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| mismatch())?;
        let mut buf = rest.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(label.as_bytes()), &mut buf)
            .map_err(|_| mismatch())?;
        String::from_utf8(plain.to_vec()).map_err(|_| mismatch())
    }
}

/// How a store keeps its secrets: sealed under a key, or (no key) in clear.
#[derive(Debug, Clone, Default)]
pub struct Sealer {
    key: Option<SecretsKey>,
}

impl Sealer {
    pub fn new(key: Option<SecretsKey>) -> Sealer {
        Sealer { key }
    }

    /// Whether this store seals what it stores.
    pub fn has_key(&self) -> bool {
        self.key.is_some()
    }

    /// What to store for the secret `plain` of the place `label` names.
    pub fn seal(&self, label: &str, plain: &str) -> Result<String, Error> {
        match &self.key {
            Some(k) => k.seal(label, plain),
            None => Ok(plain.to_owned()),
        }
    }

    /// The secret a stored value holds: opened if sealed, as it is if it
    /// was stored before sealing existed.
    pub fn open(&self, label: &str, stored: &str) -> Result<String, Error> {
        let Some(sealed) = stored.strip_prefix(SEALED_PREFIX) else {
            return Ok(stored.to_owned());
        };
        match &self.key {
            Some(k) => k.open(label, sealed),
            None => Err(Error::new(
                shepherd_core::error::ErrorKind::Internal,
                "secrets_key_missing",
                format!("the stored secret of {label} is sealed and this store has no secrets key"),
            )),
        }
    }
}

/// Whether a stored value is sealed.
pub fn is_sealed(stored: &str) -> bool {
    stored.starts_with(SEALED_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SecretsKey {
        let text = SecretsKey::new_file_text().unwrap();
        SecretsKey::parse_file_text(&text, "test").unwrap()
    }

    #[test]
    fn a_sealed_secret_opens_only_with_its_key_and_its_label() {
        let (k, other) = (Sealer::new(Some(key())), Sealer::new(Some(key())));
        let sealed = k.seal("webhooks.secret:wh_1", "whsec_abc").unwrap();
        assert!(
            is_sealed(&sealed) && !sealed.contains("whsec_abc"),
            "{sealed}"
        );
        assert_eq!(
            k.open("webhooks.secret:wh_1", &sealed).unwrap(),
            "whsec_abc"
        );
        // Each seal has its own nonce.
        assert_ne!(k.seal("webhooks.secret:wh_1", "whsec_abc").unwrap(), sealed);
        for (sealer, label) in [
            (&other, "webhooks.secret:wh_1"),
            (&k, "webhooks.secret:wh_2"),
        ] {
            let e = sealer.open(label, &sealed).unwrap_err();
            assert_eq!(e.code, "secrets_key_mismatch");
        }
        let e = Sealer::new(None).open("x", &sealed).unwrap_err();
        assert_eq!(e.code, "secrets_key_missing");
        // A value stored in clear before sealing existed reads as it is.
        assert_eq!(k.open("x", "whsec_old").unwrap(), "whsec_old");
    }

    #[test]
    fn a_key_file_is_checked() {
        assert!(SecretsKey::parse_file_text("", "f").is_err());
        assert!(SecretsKey::parse_file_text("shepherd-secrets-key v1\nzz\n", "f").is_err());
        let text = format!("shepherd-secrets-key v1\n{}\n", "0f".repeat(32));
        assert!(SecretsKey::parse_file_text(&text, "f").is_ok());
    }
}
