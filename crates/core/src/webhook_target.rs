//! Where and how a webhook subscription is delivered: the checks on its
//! URL and its format, shared by the API and the configuration file so
//! that both refuse the same things with the same codes; and which
//! addresses a delivery may connect to.
//!
//! A webhook is the server making requests where someone else said, so
//! it must not become a way into what only the server's machine reaches:
//! its own API (on a server without a token, as the operator), services on
//! loopback or the private network, or a cloud's metadata endpoint
//! (169.254.169.254). [`refused_address`] is checked on every address a
//! delivery would connect to, after DNS resolution, and the connection is
//! made to the checked address only (no second lookup to rebind).

use std::net::IpAddr;

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

/// Why a delivery may not connect to `ip`, if it may not: never to an
/// unspecified, link-local (cloud metadata included), multicast or
/// broadcast address; to loopback and private addresses (RFC 1918, shared
/// 100.64/10, IPv6 unique local) only when the subscription says
/// `allow_private`. An IPv4 address written as IPv6 (`::ffff:a.b.c.d`) is
/// judged as the IPv4 one.
pub fn refused_address(ip: IpAddr, allow_private: bool) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    let private = match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if v4.is_unspecified() || a == 0 {
                return Some("an unspecified address");
            }
            if v4.is_link_local() {
                return Some("a link-local address (cloud metadata lives there)");
            }
            if v4.is_multicast() || v4.is_broadcast() {
                return Some("not a unicast address");
            }
            if v4.is_loopback() {
                return (!allow_private).then_some("a loopback address");
            }
            v4.is_private() || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_unspecified() {
                return Some("an unspecified address");
            }
            if first & 0xffc0 == 0xfe80 {
                return Some("a link-local address (cloud metadata lives there)");
            }
            if v6.is_multicast() {
                return Some("not a unicast address");
            }
            if v6.is_loopback() {
                return (!allow_private).then_some("a loopback address");
            }
            // Unique local (fc00::/7) and the deprecated site-local (fec0::/10).
            first & 0xfe00 == 0xfc00 || first & 0xffc0 == 0xfec0
        }
    };
    (private && !allow_private).then_some("a private address")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_and_private_need_allow_private_link_local_never() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        for public in [
            "93.184.215.14",
            "2606:4700::1111",
            "100.128.0.1",
            "172.32.0.1",
        ] {
            assert_eq!(refused_address(ip(public), false), None, "{public}");
        }
        for private in [
            "127.0.0.1",
            "127.9.9.9",
            "::1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(refused_address(ip(private), false).is_some(), "{private}");
            assert_eq!(refused_address(ip(private), true), None, "{private}");
        }
        for never in [
            "169.254.169.254",
            "fe80::1",
            "0.0.0.0",
            "0.1.2.3",
            "::",
            "::ffff:169.254.169.254",
            "224.0.0.1",
            "255.255.255.255",
            "ff02::1",
        ] {
            assert!(refused_address(ip(never), true).is_some(), "{never}");
        }
    }

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
