//! Credentials at rest and in comparison: every token Shepherd keeps (a
//! worker's, a claim's, a terminal relay's) is stored as its SHA-256, and
//! every comparison of a presented token is made between digests without an
//! early exit. One place, so that the store (which keeps digests) and the
//! HTTP layer (which checks the operator token) cannot hash differently.

use sha2::{Digest, Sha256};

/// A token's SHA-256, as 64 lowercase hex digits: a database dump does not
/// hand out credentials.
pub fn hash_token(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether two digests are equal, compared without an early exit: digests
/// always have the same length, so the timing leaks neither token.
pub fn digests_equal(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The prefix of a personal access token (a user's own credential).
pub const PERSONAL_TOKEN_PREFIX: &str = "spt_";

/// The prefix of a run token: the credential an agent asks a person with
/// (`SHEPHERD_RUN_TOKEN`), good for its own run only.
pub const RUN_TOKEN_PREFIX: &str = "srt_";

fn run_token_mac(key: &str, run_id: &str) -> String {
    use hmac::{Hmac, Mac};
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("HMAC takes any key");
    mac.update(b"shepherd run token v1\0");
    mac.update(run_id.as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The run token of `run_id` under the server's `key`: derived, not stored,
/// so minting one writes nothing and every node checks it alike.
pub fn run_token(key: &str, run_id: &str) -> String {
    format!("{RUN_TOKEN_PREFIX}{run_id}.{}", run_token_mac(key, run_id))
}

/// The run a run token was made for, if it was made with `key`.
pub fn verify_run_token(key: &str, token: &str) -> Option<String> {
    let (run_id, mac) = token.strip_prefix(RUN_TOKEN_PREFIX)?.rsplit_once('.')?;
    digests_equal(&run_token_mac(key, run_id), mac).then(|| run_id.to_owned())
}

/// Whether two tokens are the same token, compared through their digests.
pub fn tokens_equal(a: &str, b: &str) -> bool {
    digests_equal(&hash_token(a), &hash_token(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_hex_sha256_and_compare_whole() {
        let h = hash_token("abc");
        assert_eq!(
            h,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(tokens_equal("abc", "abc"));
        assert!(!tokens_equal("abc", "abd"));
        assert!(!digests_equal(&h, &h[..63]));
    }

    #[test]
    fn run_tokens_name_their_run_and_need_the_key() {
        let t = run_token("k1", "r-1");
        assert!(t.starts_with("srt_r-1."));
        assert_eq!(verify_run_token("k1", &t).as_deref(), Some("r-1"));
        assert_eq!(verify_run_token("k2", &t), None);
        let forged = t.replace("srt_r-1.", "srt_r-2.");
        assert_eq!(verify_run_token("k1", &forged), None);
        assert_eq!(verify_run_token("k1", "srt_r-1"), None);
        assert_eq!(verify_run_token("k1", "swk_x"), None);
    }
}
