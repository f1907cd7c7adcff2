//! The `Host` rule: a request is served only when its `Host` names this
//! server by a name it is known by; any other answers 421
//! `host_not_allowed`, on every route, the WebSocket and `/mcp` alike.
//!
//! Why: DNS rebinding. A page on `http://evil.example:7700` whose name the
//! attacker later points at 127.0.0.1 is, to the browser, still
//! `evil.example`: its requests reach a loopback server carrying
//! `Host: evil.example:7700` and a matching `Origin`, so the Origin rule
//! alone takes them for the server's own page. Without a token configured
//! that page would act as the operator, and a terminal is a shell. A name
//! the attacker controls is never one of ours, so checking `Host` closes
//! the hole.
//!
//! Known names: `localhost` and any IP address literal with the server's
//! own port (a rebinding attack needs a DNS name; an address is never
//! rebound, and reaching us at an address means the page is ours), the host
//! of `SHEPHERD_ADVERTISE_URL`, the hosts of `SHEPHERD_ALLOWED_ORIGINS`,
//! and the names in `SHEPHERD_ALLOWED_HOSTS` (`name` for any port,
//! `name:port` for one), for names a proxy or DNS gives the server.

use axum::extract::{Request, State};
use axum::http::header::HOST;
use axum::middleware::Next;
use axum::response::Response;
use shepherd_core::{Error, ErrorKind};

use crate::error::ApiError;
use crate::AppState;

/// One name the server answers to, with its port when only that one counts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KnownHost {
    /// Lower-case; an IPv6 address keeps its brackets.
    name: String,
    port: Option<u16>,
}

/// The names this server is known by.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostRule {
    /// The port loopback names and addresses must carry; `None`: any (a
    /// server whose port is not known yet, as in unit tests).
    own_port: Option<u16>,
    /// Whether a `Host` without a port means `own_port` (80 for http, 443
    /// for https).
    default_port: u16,
    known: Vec<KnownHost>,
}

impl HostRule {
    /// The rule for a server listening on `port` (`tls`: served as https).
    pub fn new(port: u16, tls: bool) -> Self {
        HostRule {
            own_port: Some(port),
            default_port: if tls { 443 } else { 80 },
            known: Vec::new(),
        }
    }

    /// Also accepts the host name of `url` (`http://node-2:7700`), on any
    /// port: a proxy in front may forward the name with or without the
    /// port its clients used, and the port adds nothing against rebinding,
    /// which hinges on the name.
    pub fn allow_url(&mut self, url: &str) -> Result<(), String> {
        let (_scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| format!("{url:?} is not a URL"))?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let authority = authority.rsplit('@').next().unwrap_or_default();
        let (name, _port) =
            split_authority(authority).ok_or_else(|| format!("{url:?} has no host"))?;
        self.known.push(KnownHost { name, port: None });
        Ok(())
    }

    /// Also accepts `entry`: `name` (any port) or `name:port`.
    pub fn allow_host(&mut self, entry: &str) -> Result<(), String> {
        let (name, port) = split_authority(entry.trim())
            .filter(|(n, _)| !n.contains(['/', '*', '@']))
            .ok_or_else(|| format!("{entry:?} is not a host name (expected name or name:port)"))?;
        self.known.push(KnownHost { name, port });
        Ok(())
    }

    /// Whether a request whose `Host` (or HTTP/2 `:authority`) is `host`
    /// may be served.
    pub fn allows(&self, host: &str) -> bool {
        let Some((name, port)) = split_authority(host) else {
            return false;
        };
        let port = port.unwrap_or(self.default_port);
        let own = self.own_port.is_none_or(|p| p == port);
        if own && (name == "localhost" || is_ip_literal(&name)) {
            return true;
        }
        self.known
            .iter()
            .any(|k| k.name == name && k.port.is_none_or(|p| p == port))
    }
}

/// An IPv4 address, or an IPv6 one in brackets.
fn is_ip_literal(name: &str) -> bool {
    match name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => name.parse::<std::net::Ipv4Addr>().is_ok(),
    }
}

/// `name[:port]` as a lower-case name without a trailing dot and the port;
/// `None` when it is not that shape.
fn split_authority(authority: &str) -> Option<(String, Option<u16>)> {
    let (name, port) = if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (name, rest) = authority.split_at(end + 1);
        match rest {
            "" => (name, None),
            r => (name, Some(r.strip_prefix(':')?)),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok()?),
        None => None,
    };
    // `localhost.` is `localhost` to a resolver; so it is here.
    let name = name.strip_suffix('.').unwrap_or(name);
    let valid = !name.is_empty()
        && name.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':' | b'[' | b']')
        });
    valid.then(|| (name.to_ascii_lowercase(), port))
}

/// The layer: refuses a request whose `Host` is not one of the server's.
pub async fn check_host(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    // HTTP/2 carries the host as the URI's authority; HTTP/1.1 as `Host`.
    let host = match req.headers().get(HOST) {
        Some(h) => Some(h.to_str().unwrap_or("\u{0}").to_owned()),
        None => req.uri().authority().map(|a| a.as_str().to_owned()),
    };
    // A request without any host (HTTP/1.0) cannot come from a browser,
    // and rebinding is an attack through a browser.
    if let Some(host) = host {
        if !state.settings.hosts.allows(&host) {
            return Err(Error::new(
                ErrorKind::Misdirected,
                "host_not_allowed",
                format!(
                    "this server is not known as {:?}; list the name in SHEPHERD_ALLOWED_HOSTS \
                     to serve it",
                    host.chars().take(256).collect::<String>()
                ),
            )
            .into());
        }
    }
    Ok(next.run(req).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_addresses_with_the_own_port() {
        let r = HostRule::new(7700, false);
        for ok in [
            "127.0.0.1:7700",
            "localhost:7700",
            "LOCALHOST:7700",
            "localhost.:7700",
            "[::1]:7700",
            "192.168.1.20:7700",
        ] {
            assert!(r.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example:7700",
            "localhost:7701",
            "127.0.0.1",
            "localhost.evil.example:7700",
            "127.0.0.1.nip.io:7700",
            "",
            ":7700",
            "localhost:99999",
            "localhost:7700:1",
            "[::1]x:7700",
            "local host:7700",
        ] {
            assert!(!r.allows(bad), "{bad}");
        }
        assert!(HostRule::new(80, false).allows("localhost"));
        assert!(HostRule::new(443, true).allows("127.0.0.1"));
    }

    #[test]
    fn configured_names() {
        let mut r = HostRule::new(7700, false);
        r.allow_url("http://Node-2.internal:7700/").unwrap();
        r.allow_url("https://ui.example.com").unwrap();
        r.allow_host("shepherd.example").unwrap();
        r.allow_host("proxy.example:8443").unwrap();
        assert!(r.allows("node-2.internal:7700"));
        assert!(r.allows("node-2.internal"));
        assert!(r.allows("ui.example.com:443"));
        assert!(r.allows("ui.example.com"));
        assert!(!r.allows("ui.example.com.evil:443"));
        assert!(r.allows("shepherd.example"));
        assert!(r.allows("shepherd.example:9000"));
        assert!(r.allows("proxy.example:8443"));
        assert!(!r.allows("proxy.example"));
        assert!(!r.allows("evil.example:7700"));
        assert!(r.allow_host("*.example").is_err());
        assert!(r.allow_host("http://x").is_err());
        assert!(r.allow_url("not a url").is_err());
    }
}
