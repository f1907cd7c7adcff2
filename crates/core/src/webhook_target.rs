//! Where and how a webhook subscription is delivered: the checks on its
//! URL and its format, shared by the API and the configuration file so
//! that both refuse the same things with the same codes.

use crate::Error;

/// Longest URL a subscription may name.
const MAX_URL_LEN: usize = 2048;

/// The delivery formats.
pub const FORMATS: [&str; 2] = ["standard", "slack"];

/// Checks a delivery URL: absolute `http` or `https`, with a host, no
/// credentials (they would show in every listing) and no fragment.
pub fn validate_url(url: &str) -> Result<(), Error> {
    let bad = |why: &str| Error::invalid("invalid_webhook_url", format!("{url:?}: {why}"));
    if url.len() > MAX_URL_LEN {
        return Err(bad("longer than 2048 bytes"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("contains spaces or control characters"));
    }
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| bad("must start with http:// or https://"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(bad(
            "must not carry credentials; the signature authenticates deliveries",
        ));
    }
    let (host, port) = match authority.strip_prefix('[') {
        // An IPv6 literal: `[::1]` or `[::1]:8080`.
        Some(v6) => match v6.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, rest)) => (host, Some(rest.strip_prefix(':').unwrap_or("x"))),
            None => ("", None),
        },
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Err(bad("has no host"));
    }
    if port.is_some_and(|p| p.parse::<u16>().map_or(true, |p| p == 0)) {
        return Err(bad("has a bad port"));
    }
    if url.contains('#') {
        return Err(bad("must not have a fragment"));
    }
    Ok(())
}

/// Checks a delivery format.
pub fn validate_format(format: &str) -> Result<(), Error> {
    if FORMATS.contains(&format) {
        Ok(())
    } else {
        Err(Error::invalid(
            "invalid_webhook_format",
            format!("format is `standard` or `slack`, not {format:?}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_absolute_http_without_credentials() {
        for ok in [
            "http://127.0.0.1:8080/hook",
            "https://hooks.slack.com/services/T0/B0/x",
            "https://example.com",
            "http://[::1]:9000/x?y=1",
        ] {
            assert!(validate_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "ftp://example.com/x",
            "example.com/hook",
            "http://",
            "http:///path",
            "https://user:pw@example.com/",
            "https://example.com/a b",
            "https://example.com/#frag",
            "http://example.com:0/",
            "http://example.com:99999/",
            "http://example.com:x/",
        ] {
            let err = validate_url(bad).unwrap_err();
            assert_eq!(err.code, "invalid_webhook_url", "{bad}");
        }
        assert!(validate_url(&format!("https://e.com/{}", "a".repeat(2100))).is_err());
    }

    #[test]
    fn formats_are_standard_or_slack() {
        assert!(validate_format("standard").is_ok());
        assert!(validate_format("slack").is_ok());
        assert_eq!(
            validate_format("teams").unwrap_err().code,
            "invalid_webhook_format"
        );
    }
}
