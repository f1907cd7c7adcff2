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

/// Serde helpers: timestamps travel as RFC 3339 strings, live as milliseconds.
pub mod serde_ms {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::to_rfc3339(*ms))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_iso8601(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("bad timestamp {s:?}")))
    }

    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(ms: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
            match ms {
                Some(ms) => s.serialize_str(&super::super::to_rfc3339(*ms)),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
            match Option::<String>::deserialize(d)? {
                None => Ok(None),
                Some(s) => super::super::parse_iso8601(&s)
                    .map(Some)
                    .ok_or_else(|| serde::de::Error::custom(format!("bad timestamp {s:?}"))),
            }
        }
    }
}

/// An age or a lifetime with its unit: `90s`, `45m`, `12h`, `30d`, `2w`. A
/// bare number is refused, since `30` could be seconds or days.
pub fn parse_age(s: &str) -> Result<std::time::Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("expected a number with a unit such as 30d, got {s:?}"))?;
    let per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        "w" => 7 * 86400,
        "" => {
            return Err(format!(
                "{s:?} has no unit; write e.g. {n}d (s, m, h, d or w)"
            ))
        }
        _ => return Err(format!("unknown unit {unit:?}; use s, m, h, d or w")),
    };
    n.checked_mul(per)
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| format!("{s:?} is too long"))
}
