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
}
