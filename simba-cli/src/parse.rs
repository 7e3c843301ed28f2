//! Value parsers the commands share.

/// An RFC 3339 instant.
pub(crate) fn instant(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| format!("{e}: give an RFC 3339 instant, e.g. 2027-01-01T00:00:00Z"))
}

/// An RFC 3339 instant, as unix milliseconds.
pub(crate) fn instant_ms(s: &str) -> Result<i64, String> {
    instant(s).map(|t| t.timestamp_millis())
}
