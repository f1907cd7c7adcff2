//! Timestamps: stored as Unix milliseconds, shown as RFC 3339 (UTC, `Z`).
//!
//! Both databases store time as a plain 64-bit integer so that ordering,
//! comparisons and arithmetic behave identically on SQLite and PostgreSQL.

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

/// Formats milliseconds as an RFC 3339 UTC string, e.g. `2026-01-16T21:30:00.123Z`.
pub fn to_rfc3339(ms: Millis) -> String {
    match Utc.timestamp_millis_opt(ms).single() {
        Some(t) => t.to_rfc3339_opts(SecondsFormat::Millis, true),
        None => String::from("1970-01-01T00:00:00.000Z"),
    }
}

/// Formats an optional timestamp.
pub fn opt_rfc3339(ms: Option<Millis>) -> Option<String> {
    ms.map(to_rfc3339)
}

/// Parses an ISO 8601 / RFC 3339 timestamp (a date alone means midnight UTC).
pub fn parse_iso8601(s: &str) -> Option<Millis> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.timestamp_millis());
    }
    if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f") {
        return Some(t.and_utc().timestamp_millis());
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return d
            .and_hms_opt(0, 0, 0)
            .map(|t| t.and_utc().timestamp_millis());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let ms = parse_iso8601("2026-01-16T21:30:00Z").unwrap();
        assert_eq!(to_rfc3339(ms), "2026-01-16T21:30:00.000Z");
        assert_eq!(
            parse_iso8601("2026-01-16"),
            parse_iso8601("2026-01-16T00:00:00Z")
        );
        assert!(parse_iso8601("yesterday").is_none());
    }
}
